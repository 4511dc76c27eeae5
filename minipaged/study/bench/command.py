"""The ``minipaged simulate`` and ``minipaged bench`` subcommands: their flags and what they
run. Parsers are built without importing torch or matplotlib, so ``minipaged --help`` is fast."""

from __future__ import annotations

import argparse
import json
import sys

from minipaged.arguments import (
    check_best_of_beams,
    integer,
    real,
    setting_integer,
    setting_text,
    text,
)
from minipaged.config import settings_of
from minipaged.environment import MAX_THREADS
from minipaged.memory import free_memory, memory_amount
from minipaged.output_paths import add_force_flag, check_outputs_apart, output_folder
from minipaged.study.bench import SUBBENCHMARKS

PRESET_NAMES = ("llama-3-8b", "llama-3-70b", "llama-2-70b")


MAX_GB = 10**6
"""The most GB ``--hbm-gb`` and ``--weights-gb`` take: a million, past any machine whose blocks
the simulator could hold (``check_fits`` refuses what this one cannot), and far below where
the budget in bytes, (HBM - weights) x 10^9, stops being a finite number (1e300 raised an
``OverflowError``)."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser(
        "simulate",
        help="replay a workload's lengths on static, Orca, vAttention and paged allocators",
        description="Model-free simulation at a real model's scale: KV budget = HBM minus "
        "weights. Reports waste (internal / reservation / external), shared blocks, "
        "concurrency, tokens per step, stalls and preemptions for each allocator.",
    )
    sim.add_argument("--model", choices=PRESET_NAMES, default="llama-3-8b", help="shape preset")
    sim.add_argument(
        "--hbm-gb", type=real(0, MAX_GB, above=True), default=80.0, help="GPU memory, decimal GB"
    )
    sim.add_argument(
        "--weights-gb",
        type=real(0, MAX_GB),
        default=None,
        help="weights, decimal GB; None: BF16 size",
    )
    sim.add_argument(
        "--workload",
        choices=("enterprise", "chat", "alpaca"),
        default="enterprise",
        help="lengths: the source text's §2 mix, ShareGPT-like or Alpaca-like",
    )
    sim.add_argument("--requests", type=integer(1), default=1000, help="requests in the workload")
    sim.add_argument(
        "--n",
        type=integer(1, 1024),
        default=1,
        help="parallel samples per request; with --beam-width, the N best beams",
    )
    sim.add_argument(
        "--beam-width",
        type=integer(0, 1024),
        default=0,
        help="beam search with K beams; the paged path forks and drops beams every step on "
        "the real block manager (K = 4 and 1,000 requests at 80 GB take seconds)",
    )
    sim.add_argument(
        "--block-size",
        type=setting_integer("block_size"),
        default=16,
        help="B of the paged allocator",
    )
    sim.add_argument(
        "--delta", type=integer(1, 8192), default=256, help="ΔL of the Orca-style allocator"
    )
    sim.add_argument(
        "--page-kb",
        type=integer(1, 2**20),
        action="append",
        help="vAttention page size in KiB, repeatable; None: 2048, CUDA's VMM granularity",
    )
    sim.add_argument("--seed", type=setting_integer("seed"), default=0, help="workload seed")
    add_kv_cache_dtype(sim)
    sim.add_argument("--json", action="store_true", help="print JSON instead of a table")

    bench = sub.add_parser(
        "bench",
        help=f"benchmarks: {', '.join(SUBBENCHMARKS)}",
        description="Run sub-benchmarks (all by default), print their tables and write plots; "
        "a full run also writes the docs' results page, index.md, and a partial run without "
        "--quick refreshes its own sections of an existing index.md; a partial run with --quick "
        "writes only its plots. One run at a time writes into a folder, its plots as its "
        "index.md: a second is refused at its start. Files go only into --out; "
        "without it, into the project's docs/results when run from the root of the minipaged "
        "repository (the folder holding mkdocs.yml, docs/ and the minipaged package that "
        "runs), and nowhere when run from any other folder. Timings are medians of "
        "interleaved runs against their baseline in the same process, with --threads threads.",
    )
    bench.add_argument(
        "names", nargs="*", metavar="NAME", help=f"any of: {', '.join(SUBBENCHMARKS)} (all)"
    )
    bench.add_argument("--quick", action="store_true", help="tiny sizes: seconds, for tests")
    bench.add_argument(
        "--out",
        type=output_folder("a folder"),
        default=None,
        help="folder for plots and index.md; unset: docs/results when run from the repository "
        "root, no files anywhere else",
    )
    bench.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object of every report on stdout instead of tables (progress goes "
        "to stderr); the plots and index.md are written as without it",
    )
    bench.add_argument("--device", type=setting_text("device"), default="cpu", help="cpu or cuda")
    bench.add_argument(
        "--model",
        type=text("a model"),
        default="tiny",
        help="the engine and fork benchmarks' model",
    )
    bench.add_argument(
        "--backend",
        action="append",
        dest="backends",
        choices=settings_of()["backend"].choices,
        help="attention backend for the engine benchmark, repeatable; unset: torch and the "
        "device's kernel backend (numba on cuda, numba-cpu on cpu)",
    )
    bench.add_argument("--seed", type=setting_integer("seed"), default=0, help="random seed")
    add_force_flag(bench, "a plot or index.md")
    add_kv_cache_dtype(bench)
    bench.add_argument(
        "--threads",
        type=integer(1, MAX_THREADS),  # NUMBA_NUM_THREADS's bound: one rule for a thread count
        default=1,
        help="torch threads (1: stable timings on busy cores)",
    )


READERS = {
    "backends": ("--backend", ("engine",)),
    "model": ("--model", ("fork", "engine", "kv-dtype", "tui", "speculative", "chunked")),
    "device": ("--device", ("fork", "kernels", "engine", "block-size", "speculative", "chunked")),
    "kv_cache_dtype": ("--kv-cache-dtype", ("memory",)),
    "seed": ("--seed", ("memory", "sharing", "kernels", "engine", "block-size", "kv-dtype")),
    "threads": ("--threads", ("fork", "engine", "block-size", "tui", "speculative", "chunked")),
}
"""The benchmarks that read each option (its ``dest``: its flag, its readers); the others
ignore it, so an option typed beside none of its readers is refused (``check_read``).
``--threads`` is read by the benchmarks that time on torch's thread count; memory and sharing
time nothing, kv-dtype measures error, not time, and kernels times 1 and 2 threads itself."""

READ_BY_EVERY_BENCHMARK = ("names", "quick", "out", "json", "force")
"""The options every benchmark reads: which to run, their size, where files and tables go."""


def check_read(names: list[str], typed: frozenset[str]) -> None:
    """Refuse an option none of the benchmarks ``names`` reads: it would change nothing."""
    for dest, (flag, readers) in READERS.items():
        if dest in typed and not set(names) & set(readers):
            raise ValueError(
                f"{flag} changes only the {', '.join(readers)} benchmark(s), and "
                f"{', '.join(names)} read(s) none of it: add one of them, or leave {flag} out"
            )


def add_kv_cache_dtype(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kv-cache-dtype",
        choices=("auto", "float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"),
        default="auto",
        help="KV-cache dtype of the presets (b bytes per element); auto: BF16, b = 2",
    )


# What the simulator holds per paged block (the real BlockManager's refcount, free-list and
# table entries) and per sequence of the workload, measured with tracemalloc, rounded up.
BYTES_PER_BLOCK = 160
BYTES_PER_SEQUENCE = 400


def check_fits(args: argparse.Namespace) -> None:
    """Refuse, before allocating, a simulation whose block pool and workload would not fit in
    this machine's free memory (``--hbm-gb 1e9`` asks for billions of blocks)."""
    from minipaged import memory
    from minipaged.study.bench.memory import WEIGHTS_GB, kv_budget_bytes

    shape = memory.PRESETS[args.model].with_kv_dtype(args.kv_cache_dtype)
    weights_gb = WEIGHTS_GB[args.model] if args.weights_gb is None else args.weights_gb
    blocks = shape.num_blocks_for(kv_budget_bytes(args.hbm_gb, weights_gb), args.block_size)
    sequences = args.requests * max(args.n, args.beam_width)
    need = blocks * BYTES_PER_BLOCK + sequences * BYTES_PER_SEQUENCE
    free = free_memory()
    if free is not None and need > free // 2:
        raise ValueError(
            f"this simulation would hold {blocks:,} blocks of B = {args.block_size} and "
            f"{sequences:,} sequences, about {memory_amount(need)}, but {memory_amount(free)} "
            "are free (the simulator uses at most half); lower --hbm-gb or --requests, or "
            "raise --block-size"
        )


def simulate(args: argparse.Namespace) -> int:
    from minipaged.study.bench.memory import simulate_report
    from minipaged.study.report import console

    if args.beam_width:  # as generate reads the pair: the N best of the K beams
        check_best_of_beams(args.n, args.beam_width, "n" in args.typed)
    check_fits(args)
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
        kv_cache_dtype=args.kv_cache_dtype,
    )
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        console().print(report.rich_table())
    return 0


def bench(args: argparse.Namespace) -> int:
    import torch

    from minipaged.config import EngineConfig
    from minipaged.device import check_device
    from minipaged.models import check_model_directory, files_read
    from minipaged.study.bench import Options, check_replaceable, default_out, outputs, run_many

    # Every setting is checked before the first benchmark runs: a run takes minutes.
    check_device(args.device)
    check_model_directory(args.model)
    unknown = [name for name in args.names if name not in SUBBENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {', '.join(SUBBENCHMARKS)}")
    twice = sorted({name for name in args.names if args.names.count(name) > 1})
    if twice:  # it would run, and print its table, twice
        raise ValueError(f"{', '.join(twice)} named more than once: name each benchmark once")
    names = args.names or list(SUBBENCHMARKS)
    check_read(names, getattr(args, "typed", frozenset()))
    options = Options(
        out=default_out() if args.out is None else args.out,
        quick=args.quick,
        device=args.device,
        model=args.model,
        seed=args.seed,
        backends=tuple(args.backends or ()),
        kv_cache_dtype=args.kv_cache_dtype,
        force=args.force,
    )
    # Its page and plots go in place of none of the model's files (--out the model's folder)
    written = [(what, path) for what, path, _ in outputs(names, options)]
    check_outputs_apart(written, files_read(EngineConfig(model=args.model)))
    check_replaceable(names, options, way="give --force")
    torch.set_num_threads(args.threads)
    run_many(names, options, as_json=args.json)
    return 0
