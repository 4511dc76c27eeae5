"""The ``minipaged`` command line: ``tui`` (the main job), ``demo``, ``generate``, ``trace``,
``simulate``, ``bench`` and ``exercises``. Bad input exits with status 2 and a message that
names the problem, never a traceback."""

from __future__ import annotations

import argparse
import dataclasses
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minipaged",
        description="PagedAttention's paged KV-cache memory manager, to read, run and teach.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser(
        "demo",
        help="a narrated walk through the block manager: allocate, fork, copy-on-write, swap",
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
        "manager did: blocks used and shared, copy-on-write copies, swaps, preemptions.",
    )
    _add_workload_args(gen)


def _add_trace(sub: argparse._SubParsersAction) -> None:
    trace = sub.add_parser("trace", help="record a run's events to JSONL, or replay one")
    actions = trace.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    record = actions.add_parser(
        "record", help="generate like `minipaged generate` and save every step to FILE"
    )
    record.add_argument("file", help="the trace to write (JSON Lines)")
    _add_workload_args(record)
    replay = actions.add_parser(
        "replay", help="print a recorded run step by step, without the model"
    )
    replay.add_argument("file", help="a trace written by `minipaged trace record`")


def _add_workload_args(gen: argparse.ArgumentParser) -> None:
    gen.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    gen.add_argument("--model", default="tiny", help='"tiny" or a Hugging Face Llama directory')
    gen.add_argument("--max-tokens", type=int, default=48)
    gen.add_argument("--temperature", type=float, default=0.8)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=40)
    gen.add_argument("--n", type=int, default=1, help="parallel samples per prompt")
    gen.add_argument("--beam-width", type=int, default=None, help="beam search with K beams")
    gen.add_argument("--ignore-eos", action="store_true")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--block-size", type=int, default=16)
    gen.add_argument("--num-gpu-blocks", type=int, default=None)
    gen.add_argument("--num-cpu-blocks", type=int, default=None)
    gen.add_argument("--preemption", choices=["recompute", "swap"], default="recompute")
    gen.add_argument("--prefix-caching", choices=["hash", "radix"], default=None)
    gen.add_argument("--device", default="cpu")


def _workload(args: argparse.Namespace):
    """The LLM and sampling parameters the workload flags describe."""
    from minipaged.llm import LLM
    from minipaged.sampling import SamplingParams

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
        seed=args.seed,
    )
    llm = LLM(
        args.model,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        num_cpu_blocks=args.num_cpu_blocks,
        preemption=args.preemption,
        prefix_caching=args.prefix_caching,
        seed=args.seed,
        device=args.device,
    )
    return llm, params


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


def _generate(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from minipaged.stats import RunStats

    llm, params = _workload(args)
    stats = RunStats()
    outputs = llm.generate(args.prompt, params, on_step=stats.update)
    console = Console()
    for output in outputs:
        console.rule(f"request {output.request_id}")
        console.print(output.prompt, style="bold", end="")
        if output.error:
            console.print(f"\n[red]rejected:[/red] {output.error}")
        for completion in output.outputs:
            label = f"[dim]\n[{completion.index}] [/dim]" if len(output.outputs) > 1 else ""
            console.print(label + completion.text, highlight=False, markup=False)
        console.print()
    table = Table(title="memory", show_header=False)
    for label, value in stats.rows():
        table.add_row(label, value)
    console.print(table)
    return 0


def _trace(args: argparse.Namespace) -> int:
    from minipaged import trace

    if args.trace_command == "record":
        llm, params = _workload(args)
        steps = []
        llm.generate(args.prompt, params, on_step=steps.append)
        header = {
            "model": args.model,
            "prompts": args.prompt,
            "sampling": dataclasses.asdict(params),
            "engine": {
                "block_size": args.block_size,
                "num_gpu_blocks": llm.engine.block_manager.device.num_blocks,
                "num_cpu_blocks": llm.engine.kv_cache.num_host_blocks,
                "preemption": args.preemption,
                "prefix_caching": args.prefix_caching,
                "seed": args.seed,
            },
        }
        trace.save(args.file, header, steps)
        print(f"recorded {len(steps)} steps to {args.file}")
        return 0
    recorded = trace.load(args.file)
    print(f"trace of {recorded.header.get('model', '?')}: {len(recorded.steps)} steps")
    for step in recorded.steps:
        tokens = ", ".join(f"seq {s}: {t}" for s, t in step.new_tokens.items())
        print(f"step {step.step}: {tokens or 'no tokens'}")
        for event in step.events:
            print(f"  {event.narrate()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from minipaged import walkthrough

        walkthrough.run()
        return 0
    commands = {
        "generate": _generate,
        "trace": _trace,
        "tui": _tui,
        "exercises": _exercises,
        "simulate": _simulate,
        "bench": _bench,
    }
    try:
        return commands[args.command](args)
    except (ValueError, FileNotFoundError) as error:
        print(f"minipaged {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
