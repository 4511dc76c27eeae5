"""The ``minipaged`` command line: ``tui`` (the main job), ``demo``, ``generate``, ``trace``,
``simulate``, ``bench`` and ``exercises``.

Every error is one line on stderr that names the problem and the way out, never a traceback.
Exit status: 0 done, 2 bad usage (a flag, a value, a pair of settings that cannot run together,
a path that is not there), 1 a failure (a corrupt file, a request the engine refused or
aborted, a run that could not finish), 130 interrupted by Ctrl-C, and 128 + N for another
signal that ends it (``ending_signals``: 143 for ``kill``). Nothing heavy (torch, Textual) is
imported before the command runs, so Ctrl-C during start-up is caught too.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from minipaged import ending_signals, output_paths
from minipaged.arguments import (
    FAILURE,
    INTERRUPTED,
    USAGE_ERROR,
    Parser,
    add_config_flags,
    check_sequences_fit,
    config_from_flags,
    excludes,
    in_flags,
    integer,
    sampling_value,
    say,
    speculation_needs_one_sequence,
    text,
)
from minipaged.config import EngineConfig
from minipaged.environment import check_environment

FILE_ERRORS = (
    ("minipaged.checkpoint", "CheckpointError"),
    ("minipaged.tokenizer", "TokenizerError"),
    ("minipaged.trace", "TraceError"),
)
"""ValueErrors that mean a file exists but is broken: a failure (1), not bad usage (2)."""
OUTPUT_CLOSED = 1
"""The status when whoever read the output closed it: 1, as rich's console exits then."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="minipaged",
        description="PagedAttention's paged KV-cache memory manager, to read, run and teach.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = sub.add_parser(
        "demo",
        help="a narrated walk through the block manager: allocate, fork, copy-on-write, swap",
        description="Eight narrated steps on a 12-block pool, no model needed. In a terminal "
        "it waits for Enter between steps.",
    )
    demo.add_argument("--steps", type=integer(1), default=None, help="stop after N steps (all)")
    demo.add_argument(
        "--no-pause", action="store_true", help="print every step at once, even in a terminal"
    )
    _add_generate(sub)
    _add_tui(sub)
    _add_trace(sub)
    _add_exercises(sub)
    _add_simulate_and_bench(sub)
    return parser


def _add_generate(sub: argparse._SubParsersAction) -> None:
    gen = sub.add_parser(
        "generate",
        help="generate text with the paged engine and print a memory summary",
        description="Generate from one or more prompts; print the texts, then what the block "
        "manager did: blocks used and shared, copy-on-write copies, swaps, preemptions, prefix "
        "cache hits. With --prefix-caching, prompts that start with the same whole blocks of B "
        "tokens share them, even when admitted in the same step.",
    )
    _add_workload_args(gen)


def _add_trace(sub: argparse._SubParsersAction) -> None:
    trace = sub.add_parser("trace", help="record a run's events to JSONL, or replay one")
    actions = trace.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    record = actions.add_parser(
        "record", help="generate like `minipaged generate` and save every step to FILE"
    )
    record.add_argument(
        "file", type=output_paths.output_file("the trace to write"), help="the trace (JSON Lines)"
    )
    _add_workload_args(record)
    output_paths.add_force_flag(record, "the trace")
    replay = actions.add_parser(
        "replay", help="print a recorded run step by step, without the model"
    )
    replay.add_argument(
        "file", type=text("a trace"), help="a trace written by `minipaged trace record`"
    )


def _add_workload_args(gen: argparse.ArgumentParser) -> None:
    gen.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    gen.add_argument(
        "--max-tokens", type=sampling_value("max_tokens", int), default=48, help="tokens per sample"
    )
    temperature = gen.add_argument(
        "--temperature", type=sampling_value("temperature", float), default=0.8, help="0: greedy"
    )
    sampled = (
        gen.add_argument(
            "--top-p", type=sampling_value("top_p", float), default=1.0, help="nucleus mass"
        ),
        gen.add_argument(
            "--top-k", type=sampling_value("top_k", int), default=40, help="0: no top-k cut"
        ),
    )
    n = gen.add_argument(
        "--n",
        type=sampling_value("n", int),
        default=1,
        help="parallel samples per prompt; with --beam-width, the N best beams",
    )
    beam = gen.add_argument(
        "--beam-width",
        type=sampling_value("beam_width", int),
        help="beam search with K beams (with --n N: the N best)",
    )
    gen.add_argument("--ignore-eos", action="store_true", help="always write --max-tokens")
    add_config_flags(gen, EngineConfig())
    # Flags that would otherwise be ignored without a word (arguments.excludes)
    for sampling in (temperature, *sampled):
        excludes(beam, sampling, "beam search ranks by log-probability and samples nothing")
        if sampling is not temperature:
            why = "greedy decoding takes the most likely token; nothing is cut"
            excludes(sampling, temperature, why, when=lambda value: value == 0)
    speculation_needs_one_sequence(gen, n, beam)


def _workload(
    args: argparse.Namespace,
    writes: tuple[str, Path, str, Callable[[bytes], bool]] | None = None,
):
    """The LLM and sampling parameters the workload flags describe. ``writes``: a file of
    theirs (what it is, its path, the kind of file it may replace and how that is known:
    ``output_paths.check_replaceable``, unless ``--force``)."""
    from minipaged.device import check_device
    from minipaged.llm import LLM
    from minipaged.model_context import check_context
    from minipaged.models import check_model_directory, files_read
    from minipaged.sampling import SamplingParams

    config = config_from_flags(args, EngineConfig())
    check_sequences_fit(args, config.max_num_seqs)
    check_context(check_model_directory(config.model), config.max_model_len)
    if writes is not None:  # a trace put in place of model.safetensors would replace it
        output_paths.check_outputs_apart([writes[:2]], files_read(config))
        output_paths.check_replaceable(*writes, force=args.force)
    check_device(config.device)  # LLM checks that the pools fit, before any is allocated
    beam = args.beam_width is not None
    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=0.0 if beam else args.temperature,
        top_p=1.0 if beam else args.top_p,
        top_k=0 if beam else args.top_k,
        n=args.n,
        use_beam_search=beam,
        beam_width=args.beam_width or 1,
        ignore_eos=args.ignore_eos,
        seed=config.seed,
    )
    return LLM(config=config), params


def _refused(command: str, outputs: list) -> int:
    """0 when every request ran; else FAILURE, with one line on stderr saying how many did not
    and why the first did not (each is also printed with its output)."""
    refused = [output for output in outputs if output.error is not None]
    if not refused:
        return 0
    first = refused[0]
    say(
        command,
        f"{len(refused)} of {len(outputs)} request(s) did not run to the end; request "
        f"{first.request_id}: {first.error}",
    )
    return FAILURE


def _add_exercises(sub: argparse._SubParsersAction) -> None:
    from minipaged.grader import command

    command.add_parser(sub)


def _exercises(args: argparse.Namespace) -> int:
    from minipaged.grader import command

    return command.run(args)


def _add_simulate_and_bench(sub: argparse._SubParsersAction) -> None:
    from minipaged.study.bench import command

    command.add_parsers(sub)


def _simulate(args: argparse.Namespace) -> int:
    from minipaged.study.bench import command

    return command.simulate(args)


def _bench(args: argparse.Namespace) -> int:
    from minipaged.study.bench import command

    return command.bench(args)


def _add_tui(sub: argparse._SubParsersAction) -> None:
    from tui import command

    command.add_parser(sub)


def _tui(args: argparse.Namespace) -> int:
    from tui import command

    return command.run(args)


def _demo(args: argparse.Namespace) -> int:
    from minipaged import walkthrough

    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not args.no_pause
    walkthrough.run(steps=args.steps, pause=_wait_for_enter if interactive else None)
    return 0


def _wait_for_enter() -> bool:
    """True to go on to the next step; False when the reader typed q."""
    return input("Enter: next step, q: quit ").strip().lower() != "q"


def _generate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from minipaged import transcript
    from minipaged.backend import attention_paths
    from minipaged.stats import RunStats

    llm, params = _workload(args)
    stats = RunStats(
        num_gpu_blocks=llm.engine.block_manager.device.num_blocks,
        kv_cache=llm.engine.kv_cache.describe(),
        backend=attention_paths(llm.engine.backend),
    )
    outputs = llm.generate(args.prompt, params, on_step=stats.update)
    console = Console()
    transcript.print_outputs(console, outputs)
    transcript.print_summary(console, stats, llm.config.prefix_caching)
    return _refused("generate", outputs)


def _trace(args: argparse.Namespace) -> int:
    from rich.console import Console

    from minipaged import trace, transcript

    console = Console()
    if args.trace_command == "record":
        writes = ("the trace", args.file, trace.TRACE.name, trace.TRACE.recognizes)
        llm, params = _workload(args, writes)
        config = llm.config
        header = {
            "model": str(config.model),
            "prompts": args.prompt,
            "sampling": dataclasses.asdict(params),
            "engine": {  # every setting, with the pool sizes None stood for worked out
                **config.as_json(),
                "num_gpu_blocks": llm.engine.block_manager.device.num_blocks,
                "num_cpu_blocks": llm.engine.kv_cache.num_cpu_blocks,
                "kv_cache": llm.engine.kv_cache.summary(),
            },
        }
        with trace.Recorder(args.file, header, force=args.force) as recorder:
            outputs = llm.generate(args.prompt, params, on_step=recorder.write)
        transcript.print_outputs(console, outputs)
        print(f"recorded {recorder.num_steps} steps to {args.file}")
        return _refused("trace record", outputs)
    recorded, tokenizer = transcript.load_recorded(args.file)
    transcript.replay(recorded, tokenizer)
    transcript.print_outputs(console, [out for step in recorded.steps for out in step.finished])
    if recorded.error is not None:
        say("trace replay", recorded.error)
        return FAILURE
    return 0


COMMANDS = {
    "demo": _demo,
    "generate": _generate,
    "trace": _trace,
    "tui": _tui,
    "exercises": _exercises,
    "simulate": _simulate,
    "bench": _bench,
}


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand and return its exit status; never raises, never prints a
    traceback (set ``MINIPAGED_TRACEBACK=1`` to see one while debugging)."""
    command, previous, args = "", None, None
    try:
        show_traceback = _traceback_wanted()  # a bad value is refused before any work
        check_environment()
    except ValueError as error:
        say("", str(error))
        return USAGE_ERROR
    try:
        previous = ending_signals.end_on_signals(lambda: command)
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help, or a usage error argparse has printed
            return done.code if isinstance(done.code, int) else USAGE_ERROR
        action = getattr(args, "trace_command", None) or getattr(args, "exercises_command", None)
        command = " ".join(name for name in (args.command, action) if name is not None)
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        say(command, "interrupted (Ctrl-C)")
        return INTERRUPTED
    except BrokenPipeError:  # the reader closed stdout (`| head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return OUTPUT_CLOSED
    except Exception as error:
        if show_traceback:
            raise
        say(command, in_flags(_message(error), args))
        return _status(error)
    finally:
        ending_signals.restore(previous)


def _traceback_wanted() -> bool:
    """Whether ``MINIPAGED_TRACEBACK`` asks for tracebacks: ``1`` yes, ``0`` or unset no. Any
    other value is refused rather than guessed (``0`` once turned them on, as any value did)."""
    value = os.environ.get("MINIPAGED_TRACEBACK", "")
    if value not in ("", "0", "1"):
        raise ValueError(
            f"MINIPAGED_TRACEBACK must be 1 (show tracebacks) or 0, got {value!r:.40}; "
            "set it to 1 or 0, or unset it"
        )
    return value == "1"


def _status(error: Exception) -> int:
    # Looked up in sys.modules: a class is raised only once loaded, and torch stays unloaded
    broken_file = tuple(
        getattr(sys.modules[module], name) for module, name in FILE_ERRORS if module in sys.modules
    )
    if isinstance(error, broken_file):
        return FAILURE
    if isinstance(error, ValueError | FileNotFoundError | NotADirectoryError | IsADirectoryError):
        return USAGE_ERROR
    return FAILURE


def _message(error: Exception) -> str:
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror}; check the path and its permissions"
    if isinstance(error, ValueError | OSError):
        return str(error) or type(error).__name__
    if isinstance(error, RuntimeError):  # torch's: the first line says what failed
        return f"{str(error).strip().splitlines()[0] if str(error).strip() else error!r}"
    if isinstance(error, MemoryError):
        return "out of memory; try smaller sizes (fewer blocks, requests or tokens)"
    return (
        f"unexpected {type(error).__name__}: {error}. This is a bug in minipaged; please report "
        "it with the command you ran (MINIPAGED_TRACEBACK=1 shows the traceback)"
    )


def run() -> NoReturn:
    """The console script and ``python -m minipaged.cli`` (each ``tui --serve`` tab): ``main``,
    then exit. Objects left are frozen (``gc.freeze``) so the interpreter's last collection
    skips the model's, torch's and Textual's: a served tab's quit took 0.9 s here, now 0.3 s."""
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    run()
