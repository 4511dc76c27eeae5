"""The ``minipaged simulate`` and ``minipaged bench`` subcommands: their flags and what they
run. Parsers are built without importing torch or matplotlib, so ``minipaged --help`` is fast."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from minipaged.study.bench import SUBBENCHMARKS

PRESET_NAMES = ("llama-3-8b", "llama-3-70b", "llama-2-70b")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser(
        "simulate",
        help="replay a workload's lengths on static, Orca, vAttention and paged allocators",
        description="Model-free simulation at a real model's scale: KV budget = HBM minus "
        "weights. Reports waste (internal / reservation / external), shared blocks, "
        "concurrency, tokens per step, stalls and preemptions for each allocator.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sim.add_argument("--model", choices=PRESET_NAMES, default="llama-3-8b", help="shape preset")
    sim.add_argument("--hbm-gb", type=float, default=80.0, help="GPU memory, decimal GB")
    sim.add_argument(
        "--weights-gb", type=float, default=None, help="weights, decimal GB; None: BF16 size"
    )
    sim.add_argument(
        "--workload",
        choices=("enterprise", "chat", "alpaca"),
        default="enterprise",
        help="lengths: the source text's §2 mix, ShareGPT-like or Alpaca-like",
    )
    sim.add_argument("--requests", type=int, default=1000, help="requests in the workload")
    sim.add_argument("--n", type=int, default=1, help="parallel samples per request")
    sim.add_argument(
        "--beam-width",
        type=int,
        default=0,
        help="beam search with K beams; the paged path forks every step on the real block "
        "manager, so keep it small (--hbm-gb 24 --requests 50 runs in seconds)",
    )
    sim.add_argument("--block-size", type=int, default=16, help="B of the paged allocator")
    sim.add_argument("--delta", type=int, default=256, help="ΔL of the Orca-style allocator")
    sim.add_argument(
        "--page-kb",
        type=int,
        action="append",
        help="vAttention page size in KiB, repeatable; None: 2048, CUDA's VMM granularity",
    )
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--json", action="store_true", help="print JSON instead of a table")

    bench = sub.add_parser(
        "bench",
        help="benchmarks: memory, sharing, fork, kernels, engine, block-size",
        description="Run sub-benchmarks (all by default), print their tables and write plots; "
        "a full run also writes the docs' results page, index.md. Files go only into --out; "
        "without it, into the project's docs/results when run from the root of the minipaged "
        "repository (the folder holding mkdocs.yml, docs/ and the minipaged package that "
        "runs), and nowhere when run from any other folder. Timings are medians of "
        "interleaved runs against their baseline in the same process, with --threads threads.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    bench.add_argument(
        "names", nargs="*", metavar="NAME", help=f"any of: {', '.join(SUBBENCHMARKS)} (all)"
    )
    bench.add_argument("--quick", action="store_true", help="tiny sizes: seconds, for tests")
    bench.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for plots and index.md; unset: docs/results when run from the repository "
        "root, no files anywhere else",
    )
    bench.add_argument("--json", action="store_true", help="print JSON instead of tables")
    bench.add_argument("--device", default="cpu", help="cpu or cuda")
    bench.add_argument("--model", default="tiny", help="the engine and fork benchmarks' model")
    bench.add_argument(
        "--backend",
        action="append",
        dest="backends",
        metavar="NAME",
        help="attention backend for the engine benchmark, repeatable; unset: torch and the "
        "device's kernel backend (numba on cuda, numba-cpu on cpu)",
    )
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: stable timings on busy cores)"
    )


def simulate(args: argparse.Namespace) -> int:
    from minipaged.study.bench.memory import simulate_report
    from minipaged.study.report import console

    report = simulate_report(
        args.model,
        hbm_gb=args.hbm_gb,
        weights_gb=args.weights_gb,
        lengths=args.workload,
        num_requests=args.requests,
        n=args.n,
        beam_width=args.beam_width,
        block_size=args.block_size,
        delta=args.delta,
        page_kb=tuple(args.page_kb or (2048,)),
        seed=args.seed,
    )
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        console().print(report.rich_table())
    return 0


def bench(args: argparse.Namespace) -> int:
    import torch

    from minipaged.study.bench import Options, default_out, run_many

    if args.threads <= 0:
        raise ValueError(f"--threads must be positive, got {args.threads}")
    unknown = [name for name in args.names if name not in SUBBENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {', '.join(SUBBENCHMARKS)}")
    torch.set_num_threads(args.threads)
    options = Options(
        out=default_out() if args.out is None else args.out,
        quick=args.quick,
        device=args.device,
        model=args.model,
        seed=args.seed,
        backends=tuple(args.backends or ()),
    )
    run_many(args.names or list(SUBBENCHMARKS), options, as_json=args.json)
    return 0
