"""What ``minipaged tui`` shows, checked as its app would check it before anything runs: the
trace it replays, or the scenario it runs (a named one, or ``--prompt``'s) on the model. The
live app, a screenshot and every tab of ``--serve`` start from it, so a flag one of them would
refuse is refused by all, before a screen is taken or a server serves."""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace

from minipaged.arguments import check_sequences_fit, config_from_flags, naming
from minipaged.output_paths import check_outputs_apart, check_replaceable
from minipaged.replaceable import OutputKind
from tui.engine_config import TUI_CONFIG


def what_the_app_shows(args: argparse.Namespace) -> tuple:
    """What the app of ``args`` shows, refused before any app, screen or server starts when
    the app would refuse it: the trace it replays and its tokenizer (``(recorded,
    tokenizer)``), or the scenario it runs and the model's directory (``(scenario,
    directory)``). Nothing runs yet: an exercise's code runs in ``tui.command.exercise_replay``."""
    from minipaged.llm import check_kv_cache_fits
    from minipaged.model_context import check_context
    from minipaged.models import model_directory
    from tui.scenarios import DEFAULT_SCENARIO, EXERCISE_SCENARIOS, SCENARIOS, custom

    model = getattr(args, "model", TUI_CONFIG.model)
    if args.trace is not None:
        from minipaged.trace import TraceError
        from minipaged.transcript import load_recorded

        check_screenshot_apart(args, TUI_CONFIG.replace(model=model))
        with naming("--trace"):
            recorded, tokenizer = load_recorded(args.trace, str(model), "tui")
            if recorded.error is not None and not recorded.steps:  # nothing to show: say why
                raise TraceError(recorded.error)
        return recorded, tokenizer
    if args.exercise is not None and not args.solution:
        from minipaged.grader.student_run import folder_of

        with naming("--path") if args.path is not None else contextlib.nullcontext():
            folder_of(args.exercise, args.path)  # the student's files: refused before any work
    if args.prompt:
        config = config_from_flags(args, TUI_CONFIG)
        check_sequences_fit(args, config.max_num_seqs)
        scenario = custom(
            tuple(args.prompt),
            n=args.n,
            beam_width=args.beam_width,
            max_tokens=args.max_tokens,
            config=config,
        )
    else:
        name = args.scenario or EXERCISE_SCENARIOS.get(args.exercise, DEFAULT_SCENARIO)
        if name not in SCENARIOS:
            raise ValueError(
                f"--scenario: unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}, "
                "or give --prompt for a custom one"
            )
        scenario = SCENARIOS[name]
        scenario = replace(scenario, config=config_from_flags(args, scenario.config))
    check_screenshot_apart(args, scenario.config)
    directory = model_directory(scenario.config.model)
    if not (directory / "config.json").is_file():
        fix = ", or train it with `python -m minipaged.train`" if model == "tiny" else ""
        raise FileNotFoundError(
            f"no model at {directory} (config.json is missing); pass --model DIR for a "
            f"Hugging Face Llama directory{fix}"
        )
    check_context(directory, scenario.config.max_model_len)  # in the flag's words, before a load
    check_kv_cache_fits(scenario.config)  # before any pool is allocated
    scenario.check()  # a request the run would refuse is refused before the screen is taken
    return scenario, directory


def check_screenshot_apart(args: argparse.Namespace, config) -> None:
    """Refuse, before the run, a ``--screenshot`` that would take the place of a file the run
    reads: the trace it replays, the code of the exercise it runs (``graded_code``: the
    student's, or the library's modules with ``--solution``), a file of the model or draft
    model of ``config`` (``files_read``); and one over a file that is no screenshot, unless
    ``--force`` (``output_paths.check_replaceable``)."""
    if args.screenshot is None:
        return
    from minipaged.grader.student_run import graded_code
    from minipaged.models import files_read

    shown = files_read(config)
    if args.trace is not None:
        shown.append(("the trace --trace replays", args.trace))
    elif args.exercise is not None:
        shown += graded_code(args.exercise, args.path, args.solution)
    check_outputs_apart([("--screenshot", args.screenshot)], shown)
    forced = getattr(args, "force", False)
    check_replaceable(
        "--screenshot", args.screenshot, SCREENSHOT.name, SCREENSHOT.recognizes, forced
    )


def is_screenshot(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, starts an SVG screenshot of a terminal app
    (Rich's, which Textual exports): a file ``--screenshot`` may replace without ``--force``."""
    start = head[:4096]
    return b"<svg " in start and b'class="rich-terminal"' in start


SCREENSHOT = OutputKind("a screenshot minipaged wrote (an SVG of a terminal)", is_screenshot)
"""What ``--screenshot`` may replace without ``--force``."""
