"""``minipaged tui``: its flags, and running the app live, on a trace, or headless for a
screenshot. Nothing here imports torch or Textual until the command runs, so ``minipaged``'s
other subcommands start as fast as before."""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

from minipaged import atomic_write, ending_signals
from minipaged.arguments import (
    Parser,
    add_config_flags,
    excludes,
    integer,
    named_path,
    requires,
    sampling_value,
    say,
    speculation_needs_one_sequence,
    text,
)
from minipaged.config import settings_of
from minipaged.grader.student_run import TUI_EXERCISES, listed
from minipaged.output_paths import add_force_flag, output_file
from minipaged.typed_numbers import read_integer
from tui import serve
from tui.ending import run_ending_on_signals
from tui.engine_config import TUI_CONFIG
from tui.shown_run import SCREENSHOT, what_the_app_shows

SCREENSHOT_TIMEOUT_S = 120.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    tui = sub.add_parser(
        "tui",
        help="the step-through visualizer: watch the block manager work while the model writes",
        description="Step through a run of the paged engine: block pools, block tables, token "
        "streams, events, memory gauges and invariants. Keys: n/→ step, b/← back, space play, "
        "c/w/p/h jump (C/W/P/H back), g go to step, s scenarios, ? help, q quit.",
    )
    scenario = tui.add_argument(
        "--scenario",
        type=text("a scenario"),  # checked against the scenarios before the app starts
        default=None,
        help="tour, several, parallel, beam, swap, recompute, prefix, chunked, chunked-off or "
        "speculative (default: tour, or the exercise's); --prompt makes a custom one",
    )
    exercise = tui.add_argument(
        "--exercise",
        type=exercise_number,
        metavar="N",
        help=f"run on the code you wrote for exercise N ({listed(TUI_EXERCISES)}), in a "
        "grading process: this folder's (a folder `minipaged exercises init N DIR` made) or "
        "--path's",
    )
    path = tui.add_argument(
        "--path", type=named_path("a folder"), help="with --exercise: your copy of the exercise"
    )
    solution = tui.add_argument(
        "--solution", action="store_true", help="with --exercise: the library's own solution"
    )
    trace = tui.add_argument(
        "--trace", type=named_path("a trace"), help="replay a recorded trace (no model is run)"
    )
    screenshot_flag = tui.add_argument(
        "--screenshot",
        type=output_file("an .svg file"),
        metavar="OUT.svg",
        help="write an SVG and exit",
    )
    force = add_force_flag(tui, "--screenshot's picture")
    steps = tui.add_argument(
        "--steps", type=integer(0), default=0, help="with --screenshot: the step to show"
    )
    size = tui.add_argument(
        "--size", type=parse_size, default="120x40", help="with --screenshot: WIDTHxHEIGHT"
    )
    keys = tui.add_argument(
        "--keys",
        default="",
        metavar="K1,K2",
        help="with --screenshot: keys to press at that step, by their Textual names "
        "(a,full_stop opens the attention view and reads its block 1)",
    )
    tui.add_argument(
        "--projection",
        action="store_true",
        help="projection mode: larger cells, light high-contrast theme (v toggles it)",
    )
    custom = tui.add_argument_group("custom scenario (used when --prompt is given)")
    prompt = custom.add_argument("--prompt", action="append", help="repeat for several requests")
    n = custom.add_argument(
        "--n",
        type=sampling_value("n", int),
        default=1,
        help="parallel samples per prompt; with --beam-width, the N best beams",
    )
    beam = custom.add_argument(
        "--beam-width",
        type=sampling_value("beam_width", int),
        default=None,
        help="beam search with K beams (with --n N: the N best)",
    )
    max_tokens = custom.add_argument(
        "--max-tokens", type=sampling_value("max_tokens", int), default=24, help="tokens per sample"
    )
    # Given engine flags change the scenario's config, a named scenario's or the custom one's.
    add_config_flags(tui, TUI_CONFIG)
    serve_flag = serve.add_arguments(tui)
    # Flags that would otherwise be ignored without a word: each only means something beside
    # another, or not beside a third.
    for needs_screenshot in (force, steps, size, keys):
        requires(needs_screenshot, screenshot_flag)
    for needs_exercise in (path, solution):
        requires(needs_exercise, exercise)
    for needs_prompt in (n, beam, max_tokens):
        requires(needs_prompt, prompt)
    excludes(prompt, scenario, "--prompt makes a custom scenario of its own")
    speculation_needs_one_sequence(tui, n, beam)
    engine_flags = [a for a in tui._actions if a.dest in settings_of() and a.dest != "model"]
    for replaced in (prompt, scenario, exercise, *engine_flags):
        excludes(trace, replaced, "--trace replays a recorded run; nothing new is run")
    excludes(serve_flag, screenshot_flag, "--serve runs a server; --screenshot writes one picture")


def run(args: argparse.Namespace) -> int:
    """Errors before the app starts (a bad flag, a missing or corrupt trace or model) propagate
    to ``minipaged.cli.main``, which prints them as one line with the right exit status."""
    keys = screenshot_keys(args.keys)
    if args.serve:  # each tab's app would refuse it: refused before the server starts
        what_the_app_shows(args)
        return serve.serve(args, tui_parser())
    app = build_app(args)
    if args.screenshot is None:
        ended_by = run_ending_on_signals(app)  # the terminal given back first (tui.ending)
        if ended_by is not None:
            with contextlib.suppress(OSError):  # the terminal it would tell may be gone (SIGHUP)
                say("tui", ending_signals.ENDING[ended_by])
            return 128 + ended_by
        return failed(app)
    return screenshot(app, args.screenshot, args.steps, args.size, keys, force=args.force)


def screenshot_keys(keys: str) -> list[str]:
    """``--keys`` as a list, each a key of the key map; ``ValueError`` names one that is not."""
    from tui.keymap import KEYMAP

    known = [name for key in KEYMAP for name in key.keys]
    pressed = [key.strip() for key in keys.split(",") if key.strip()]
    for key in pressed:
        if key not in known:
            raise ValueError(
                f"--keys: {key!r} is no key of the TUI; use the key map's names, comma-separated: "
                f"{', '.join(known)}"
            )
    return pressed


def exercise_number(text: str) -> int:
    """An argparse type: the number of an exercise the TUI runs (``Exercise.tui``)."""
    number = integer(1)(text)
    if number not in TUI_EXERCISES:
        raise argparse.ArgumentTypeError(
            f"the TUI runs the code of exercises {listed(TUI_EXERCISES)}, got {number}: the "
            "others build no part of a block manager"
        )
    return number


def tui_parser() -> argparse.ArgumentParser:
    """The parser of ``minipaged tui`` alone, as the command line builds it."""
    commands = Parser(prog="minipaged").add_subparsers()
    add_parser(commands)
    return commands.choices["tui"]


def failed(app) -> int:
    """1 with the app's error on stderr if its run could not start (a corrupt model or
    tokenizer), or if the trace it replayed ends early at a damaged line (shown up to it, and
    said, as ``trace replay`` shows it and exits 1); else 0."""
    if app.return_code:
        say("tui", str(app.error))
        return 1
    damaged = app.trace.error if app.trace is not None else None
    if damaged:
        say("tui", f"the trace ends early: {damaged}")
        return 1
    return 0


def build_app(args: argparse.Namespace):
    """The app ``args`` ask for, checked first (``tui.shown_run.what_the_app_shows``)."""
    from tui.app import PagedApp

    shown = what_the_app_shows(args)
    if args.trace is not None:
        recorded, tokenizer = shown
        return PagedApp(
            trace=recorded,
            tokenizer=tokenizer,
            model=getattr(args, "model", TUI_CONFIG.model),
            projection=args.projection,
        )
    scenario, directory = shown
    if args.exercise is not None:
        return exercise_replay(scenario, args, directory)
    return PagedApp(scenario, model=scenario.config.model, projection=args.projection)


def exercise_replay(scenario, args: argparse.Namespace, directory: Path):
    """The student's code (the library's, with ``--solution``) runs ``scenario`` in a grading
    process, which records the run (``minipaged.grader.student_run``); the app replays it and
    shows what stopped it, if anything, until it is dismissed."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from minipaged.grader import student_run
    from minipaged.tokenizer import Tokenizer
    from tui.app import PagedApp

    whose = "the solution" if args.solution else f"exercise {args.exercise:02d}"
    title = f"{scenario.title} [{whose}]"
    requests = [(request.prompt, request.params) for request in scenario.requests]
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"running {title} in a grading process", total=None)

        def stepped(step: int) -> None:
            progress.update(task, description=f"running {title}: step {step}")

        recorded = student_run.record(
            args.exercise,
            args.path,
            args.solution,
            title,
            scenario.config,
            requests,
            progress=stepped,
        )
    tokenizer = Tokenizer(directory) if (directory / "tokenizer.json").is_file() else None
    return PagedApp(
        trace=recorded.trace,
        tokenizer=tokenizer,
        model=scenario.config.model,
        projection=args.projection,
        stopped=recorded,
    )


MAX_SIZE = (1000, 500)
"""The largest ``--size``, in cells: past any real terminal, and a screen of 100,000 by
100,000 cells would take the headless run's memory and time without end."""


def parse_size(size: str) -> tuple[int, int]:
    """An argparse type for ``--size``: ``WIDTHxHEIGHT`` in cells, each from 1 to ``MAX_SIZE``,
    refused where it is typed."""
    parts = size.lower().partition("x")[::2]
    try:  # each side by the one rule for a typed integer
        width, height = (read_integer(part) for part in parts)
    except ValueError:
        width = height = 0
    if not (width > 0 and height > 0):
        raise argparse.ArgumentTypeError(f"must look like 120x40 (WIDTHxHEIGHT), got {size!r:.60}")
    if width > MAX_SIZE[0] or height > MAX_SIZE[1]:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_SIZE[0]}x{MAX_SIZE[1]} cells (WIDTHxHEIGHT, a "
            f"terminal's), got {size!r:.60}; 120x40 is a laptop's terminal"
        )
    return width, height


parse_size.__name__ = "size"


def keep_spaces(svg: str) -> str:
    """Mark the SVG's text as space-preserving: converters such as rsvg-convert otherwise
    collapse the runs of spaces that lay out a terminal screen ("It is" becomes "Itis")."""
    if "xml:space" in svg:
        return svg
    return svg.replace("<svg ", '<svg xml:space="preserve" ', 1)


def screenshot(
    app, path: Path, steps: int, size: tuple[int, int], keys: list[str], force: bool = False
) -> int:
    """Run ``app`` headless at ``size``, record the whole run, move to step ``steps`` (or the
    last one, if the run is shorter), press ``keys``, write the screen as SVG to ``path`` and
    exit. The same flags give the same picture every time. A file at ``path`` that is no
    screenshot is replaced only with ``force`` (``minipaged.replaceable``)."""
    failure: list[str] = []

    def save() -> None:
        # Whole or not at all, and never through a symbolic link (minipaged.atomic_write).
        svg = keep_spaces(app.export_screenshot())
        try:  # a file that is no screenshot, put there since the flags were checked
            atomic_write.write_text(path, svg, replaces=SCREENSHOT, force=force)
        except ValueError as error:
            failure.append(str(error))

    async def shoot(pilot) -> None:
        deadline = time.monotonic() + SCREENSHOT_TIMEOUT_S
        while app.navigator is None and app.error is None and time.monotonic() < deadline:
            if app.stopped is not None and not app.trace.steps:  # the dialog is all there is
                break
            await pilot.pause(0.05)
        if app.navigator is not None:
            app.record_everything()  # so the status line reads "step k/N" with the final N
            while app.error is None and not app.timeline.finished:
                if time.monotonic() > deadline:
                    break
                await pilot.pause(0.05)
            app.seek_step(steps)
            while app.navigator.waiting is not None and time.monotonic() < deadline:
                await pilot.pause(0.05)
            await pilot.press(*keys)
        if app.error is not None:
            failure.append(app.error)
        elif app.navigator is None and app.stopped is not None:
            await pilot.pause(0.1)
            save()
        elif app.navigator is None or app.navigator.waiting is not None:
            failure.append(app.notice or f"step {steps} was not reached in time")
        else:
            await pilot.pause(0.1)  # the log scrolls to the step once its new size is laid out
            await pilot.pause()
            save()
        app.exit()

    app.animation_level = "none"
    app.run(headless=True, size=size, auto_pilot=shoot)
    if app.return_code:
        return failed(app)
    if failure:
        say("tui", f"no screenshot: {failure[0]}")
        return 1
    step = app.timeline.cursor if app.timeline is not None else 0
    print(f"wrote {path} (step {step}, {size[0]}x{size[1]})")
    if app.stopped is not None:
        say("tui", str(app.stopped.error))
    return failed(app)
