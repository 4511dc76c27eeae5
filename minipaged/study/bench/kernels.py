"""``bench kernels``: §4's claim measured the way the source states it. "PagedAttention achieves
over 95% of the memory bandwidth saturation of monolithic, contiguous attention kernels": so
the same kernel reads the same pool of keys and values twice, once through a block table that
visits its blocks in order (a contiguous cache: $\\mathcal{T}_r = [rM, rM + 1, \\dots]$) and once
through one that visits them shuffled, as after real traffic: the same bytes at the same
addresses, so the two differ only by paging (``kernel_inputs``). Each path's GB/s is set beside the
machine's streaming-read bandwidth (``bandwidth``) measured in the same rounds.

Every path computes one layer of Llama-3-8B's decode attention ($N_Q = 32$, $N_{KV} = 8$,
$d_h = 128$, fp32): the reference written as §4's loop (``paged_attention_decode_loop``), the
vectorized reference (``paged_attention_decode``), the kernel (on a CPU run the CUDA kernel's
CPU twin, ``cuda_kernels.cpu``; with ``--device cuda`` and a GPU the CUDA kernel itself) paged,
in order and over FP8 pools, and PyTorch's ``scaled_dot_product_attention`` over the same keys
and values as one contiguous tensor. Each row states its thread count; the paths take turns
within one process, so every ratio compares like with like.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F

from minipaged import attention, backend, huge_pages
from minipaged.memory import memory_amount
from minipaged.study.bench import Options, bandwidth, cpu_clock, plot, rounds
from minipaged.study.bench.kernel_inputs import FP8_DTYPE, SHAPE, decode_inputs
from minipaged.study.report import Column, Report, View

KERNEL_LABELS = {"numba_cpu": "twin", "numba_cuda": "CUDA"}
"""How the tables name each kernel: the CPU twin, or the CUDA kernel on a GPU."""

ROW_KEYS = [
    Column("batch", "batch", "{}"),
    Column("context", "L", "{:,}"),
    Column("block_size", "B", "{}"),
    Column("threads", "threads", "{}"),
]


def numba_kernels(device: str) -> tuple[dict[str, Callable], list[str]]:
    """The Numba decode kernels that can run here (``numba_cpu``: the CPU twin, on a CPU run;
    ``numba_cuda``: the CUDA kernel, on a GPU run), and a note for each that cannot."""
    found, notes = {}, []
    if device == "cuda" and not torch.cuda.is_available():
        notes.append("Numba: not run: no GPU")
    elif device == "cuda":
        try:
            found["numba_cuda"] = backend.kernels_for("numba").paged_attention_decode
            notes.append("Numba CUDA: cuda_kernels.paged_attention_decode")
        except (ImportError, AttributeError) as error:
            notes.append(f"Numba: not run: {error}")
    else:
        notes.append(
            "Numba: not run: CPU run. On a CPU the CUDA kernels run only in Numba's CUDA "
            "simulator, which checks what they compute, not how fast (use --device cuda on a "
            "GPU machine). Their CPU twins run instead (twin)"
        )
        try:
            found["numba_cpu"] = backend.kernels_for("numba-cpu").paged_attention_decode
        except ImportError as error:
            notes.append(f"Numba CPU: not run: {error}")
    return found, notes


def measure(
    batch: int,
    context: int,
    block_size: int,
    options: Options,
    repeats: int,
    threads: int = 1,
    kernels: dict[str, Callable] | None = None,
    probe: torch.Tensor | None = None,
    max_repeats: int | None = None,
) -> dict:
    """One row: every path's median time over interleaved rounds (``rounds``), with torch (and
    so the Numba CPU twin) on ``threads`` threads: ``repeats`` rounds, or, given
    ``max_repeats``, as many more (up to it, without the slow references) as every kernel's
    paged ÷ in order and FP8 ÷ fp32 need to settle within ``rounds.PRECISION`` (``settled``
    says whether they did, or the row stopped at ``max_repeats``). ``kernels`` (default:
    ``numba_kernels``) maps a kernel's name to a function with ``paged_attention_decode``'s
    arguments: each runs paged, in order and over FP8 pools. With ``probe``
    (``bandwidth.probe_tensor``), the machine's streaming read of it is one more path of the
    same rounds. Every timed call starts from the same caches (``bandwidth.cache_evictor``;
    with ``options.quick``, from a read of ``bandwidth.QUICK_BYTES`` that a large cache holds).
    Ratios are paired, round by round (``rounds.paired_ratio``); paged ÷ in
    order and FP8 ÷ fp32 come with their spreads."""
    device = options.device
    inputs = decode_inputs(batch, context, block_size, device, options.seed)
    q, k, v = inputs.sdpa
    paths = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True).squeeze(2),
        "loop": lambda: attention.paged_attention_decode_loop(*inputs.paged),
        "vectorized": lambda: attention.paged_attention_decode(*inputs.paged),
    }
    kernels = numba_kernels(device)[0] if kernels is None else kernels
    for name, kernel in kernels.items():
        paths[name] = functools.partial(kernel, *inputs.paged)
        paths[f"{name}_in_order"] = functools.partial(kernel, *inputs.in_order)
        paths[f"{name}_fp8"] = functools.partial(kernel, *inputs.fp8, **inputs.fp8_scales)
    timed = dict(paths)
    # Each timed call starts from the same caches (in quick mode, from what a small read left).
    evict = bandwidth.cache_evictor(device, quick=options.quick)
    if probe is not None:
        timed["stream"] = bandwidth.streaming_read(probe)
    row = {"batch": batch, "context": context, "block_size": block_size, "threads": threads}
    row["huge_page_bytes"] = huge_pages.huge_page_bytes()  # while the row's inputs are alive
    load_at_start = load_average()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    paging = [(name, f"{name}_in_order") for name in kernels]
    fp8_over_fp32 = [(f"{name}_fp8", name) for name in kernels]
    try:
        settled = rounds.ratios_settled(paging + fp8_over_fp32)
        # The references are written to be read, take most of a round, and settle no ratio.
        times = rounds.time_rounds(
            timed, device, repeats, max_repeats or repeats, settled, REFERENCES, evict
        )
        row["rounds"] = len(times["sdpa"])
        row["settled"] = settled(times)
        row["load"] = "→".join(map(load_text, (load_at_start, load_average())))
        row.update({f"{name}_ms": rounds.median_ms(t) for name, t in times.items()})
        expected = paths["sdpa"]()
        in_order = F.scaled_dot_product_attention(*inputs.sdpa_in_order(), enable_gqa=True)

        def error(name: str) -> float:  # each path against SDPA over the keys it reads
            want = in_order.squeeze(2) if name.endswith("_in_order") else expected
            return float((paths[name]() - want).abs().max())

        row["max_error"] = max(error(name) for name in paths if not name.endswith("_fp8"))
        if kernels:
            row["fp8_error"] = max(
                float((paths[f"{name}_fp8"]() - expected).abs().max()) for name in kernels
            )
    finally:
        torch.set_num_threads(previous)
    # Achieved bandwidth: the keys and values every path must read once, over its time.
    kv_bytes = 2 * batch * context * SHAPE.num_kv_heads * SHAPE.head_dim * q.element_size()
    fp8_bytes = kv_bytes // q.element_size()  # one byte an element
    if probe is not None:
        row["stream_gbps"] = probe.numel() * probe.element_size() / row["stream_ms"] / 1e6
    for name in paths:
        read = fp8_bytes if name.endswith("_fp8") else kv_bytes
        row[f"{name}_gbps"] = read / (row[f"{name}_ms"] * 1e-3) / 1e9
        if probe is not None:
            row[f"{name}_of_stream"] = row[f"{name}_gbps"] / row["stream_gbps"]
        if name != "sdpa":
            row[f"{name}_ratio"] = rounds.paired_ratio(times[name], times["sdpa"])
    for (name, in_order), (fp8, fp32) in zip(paging, fp8_over_fp32, strict=True):
        row[f"{name}_paging"] = rounds.paired_ratio(times[name], times[in_order])
        row[f"{name}_paging_spread"] = rounds.spread(times[name], times[in_order])
        row[f"{name}_fp8_vs_fp32"] = rounds.paired_ratio(times[fp8], times[fp32])
        row[f"{name}_fp8_spread"] = rounds.spread(times[fp8], times[fp32])
    return row


def columns(kernels: list[str]) -> tuple[list[Column], list[View]]:
    """The columns of the rows ``measure`` makes with ``kernels``, and the three tables that
    show them within 100 terminal columns: times; ratios; bandwidth. The errors are in every
    row (``--json``) and summed up in a note."""
    times = [Column(f"{name}_ms", label, milliseconds) for name, label in PATHS.items()]
    ratios = [Column(f"{name}_ratio", f"{name} ÷ SDPA", "{:.2f}×") for name in REFERENCES]
    bandwidths = [Column("sdpa_bandwidth", "SDPA", RIGHT)]
    for name in kernels:
        label = KERNEL_LABELS.get(name, name)
        paths = {name: f"{label} paged", f"{name}_in_order": f"{label} in order"}
        paths[f"{name}_fp8"] = f"{label} FP8"
        times += [Column(f"{path}_ms", header, milliseconds) for path, header in paths.items()]
        ratios.append(Column(f"{name}_ratio", f"{label} ÷ SDPA", "{:.2f}×"))
        ratios.append(Column(f"{name}_paging_text", f"{label} paged ÷ in order", RIGHT))
        ratios.append(Column(f"{name}_fp8_text", f"{label} FP8 ÷ fp32", RIGHT))
        bandwidths += [Column(f"{path}_bandwidth", header, RIGHT) for path, header in paths.items()]
    errors = [Column("max_error", "max |Δ| vs SDPA", "{:.1e}")]
    if kernels:
        errors.append(Column("fp8_error", "FP8 max |Δ| vs SDPA", "{:.1e}"))
    stream = Column("stream_gbps", "stream read", "{:.1f}")
    counted = Column("rounds", "rounds", "{}")
    load = Column("load", "load", RIGHT)
    keys = tuple(column.key for column in ROW_KEYS)
    views = [
        View("Median time (ms)", keys + tuple(column.key for column in times)),
        View("Ratios of times in the same rounds", (*keys, "rounds", *(c.key for c in ratios))),
        View(
            "GB/s of keys and values read (share of the stream read)",
            (*keys, load.key, stream.key, *(column.key for column in bandwidths)),
        ),
    ]
    return [*ROW_KEYS, counted, load, *times, *ratios, *errors, stream, *bandwidths], views


PATHS = {"sdpa": "SDPA", "loop": "loop ref", "vectorized": "vectorized ref"}
"""The paths every row times, with their headers; the Numba kernels' come after them."""

REFERENCES = ("loop", "vectorized")
"""The paths written to be read: minipaged's PyTorch references."""

CLOCK_WORDS = {
    cpu_clock.thread_seconds: "on one thread by its CPU time (minipaged.study.bench.cpu_clock: "
    "what the call took of the core, not the time other programs held it), on more by the "
    "wall clock",
    rounds.synchronized_wall_seconds: "by the wall clock, from an idle GPU to the call's "
    "last kernel done",
}
"""How the notes say each call was timed, by the clock a row on one thread used."""

RIGHT = "{:s}"
"""The format of a column of ready-made strings that lines up on the right, as numbers do."""


def load_average() -> float:
    """The machine's load over the last minute (processes running or waiting for a core, as
    ``uptime`` prints it), NaN where the system does not say. A row prints it at its start
    and end: above the number of cores, other work shared them with the rounds, and the
    row's ratios and their spreads are to be read with care."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average
        return math.nan


def load_text(load: float) -> str:
    """A load average as the tables print it: one decimal under 10, none from 10 up, so
    that a row's two fit its column."""
    return f"{load:.1f}" if load < 9.95 else f"{load:.0f}"


def milliseconds(ms: float) -> str:
    """A time in ms, at most six characters wide below 100 s: ``0.27``, ``211.68``, ``46,030``."""
    return f"{ms:,.0f}" if ms >= 1000 else f"{ms:.2f}"


def run(options: Options) -> Report:
    if options.quick:
        grid, thread_counts, repeats, max_repeats = [(1, 64, 16)], (1,), 3, 3
    else:
        grid = [
            (4, 1024, 16),
            (4, 4096, 16),
            (1, 8192, 16),  # the three Llama-3-8B rows issue 32 names
            (1, 1024, 16),
            (4, 1024, 8),
            (4, 1024, 32),
        ]
        max_repeats = rounds.MAX_ROUNDS
        thread_counts, repeats = (1, 2), rounds.MIN_ROUNDS
    kernels, numba_notes = numba_kernels(options.device)
    probe = bandwidth.probe_tensor(options.device, quick=options.quick)
    rows = [
        measure(b, c, bs, options, repeats, threads, kernels, probe, max_repeats)
        for threads in thread_counts
        for b, c, bs in grid
    ]
    del probe  # hundreds of MiB
    for row in rows:
        for name in ["sdpa", *(f"{k}{s}" for k in kernels for s in SUFFIXES)]:
            row[f"{name}_bandwidth"] = bandwidth_text(row[f"{name}_gbps"], row[f"{name}_of_stream"])
        for name in kernels:
            row[f"{name}_paging_text"] = ratio_text(
                row[f"{name}_paging"], row[f"{name}_paging_spread"]
            )
            row[f"{name}_fp8_text"] = ratio_text(
                row[f"{name}_fp8_vs_fp32"], row[f"{name}_fp8_spread"]
            )
    every, views = columns(list(kernels))
    report = Report("kernels", "Paged decode attention vs contiguous (§4)", every, rows)
    report.views = views
    report.notes = notes(options, thread_counts, (repeats, max_repeats), list(kernels), numba_notes)
    if kernels and max_repeats > repeats:
        report.notes.append(settling_note(rows, max_repeats))
    if options.device == "cpu":
        report.notes.append(huge_pages.note([row["huge_page_bytes"] for row in rows]))
    worst = max(row["max_error"] for row in rows)
    report.notes.append(
        f"Every path computes the same attention: the largest |Δ| against SDPA over all rows is "
        f"{worst:.1e} in fp32"
        + (f" and {max(row['fp8_error'] for row in rows):.1e} over FP8 pools" if kernels else "")
        + " (column max_error, fp8_error in --json)."
    )
    report.plots.append(_plot(rows, list(kernels), options))
    return report


def bandwidth_text(gbps: float, share: float) -> str:
    """A GB/s figure with its share of the stream read, ``13.2 (34%)``: three digits at most
    before the share, so that a GPU's thousands fit the column as a CPU's tens do."""
    return f"{gbps:.0f} ({share:.0%})" if gbps >= 100 else f"{gbps:.1f} ({share:.0%})"


def ratio_text(ratio: float, spread: float) -> str:
    """A paired ratio with its spread (``rounds.spread``): ``1.021 ±0.012``."""
    return f"{ratio:.3f} ±{spread:.3f}"


def settling_note(rows: list[dict], cap: int) -> str:
    """Which rows stopped at the cap of ``cap`` rounds with a ratio not yet known to
    ``rounds.PRECISION`` (its ± is wider): read those ratios with their ±."""
    unsettled = [
        f"{row['batch']}×{row['context']:,} B={row['block_size']} at {row['threads']} thread(s)"
        for row in rows
        if not row["settled"]
    ]
    if not unsettled:
        return f"Every row settled both ratios within ±{rounds.PRECISION:.0%} before the cap."
    return (
        f"Stopped at the cap of {cap} rounds with paged ÷ in order or FP8 ÷ fp32 not yet known "
        f"to ±{rounds.PRECISION:.0%} (column 'settled' in --json): " + ", ".join(unsettled)
    )


SUFFIXES = ("", "_in_order", "_fp8")
"""A kernel's three paths: paged (blocks shuffled), in order, and paged over FP8 pools."""


def notes(options: Options, thread_counts, repeats: tuple[int, int], kernels, numba_notes) -> list:
    labels = [KERNEL_LABELS.get(name, name) for name in kernels]
    fewest, most = repeats
    counts = f"{fewest}" if fewest == most else f"{fewest} to {most}"
    return [
        f"Measured on {options.device} with {' and '.join(map(str, thread_counts))} thread(s) "
        f"(column 'threads'), medians of {counts} interleaved rounds after a warm-up (column "
        f"'rounds'), each call timed {CLOCK_WORDS[rounds.device_clock(options.device, 1)]}: "
        "each round calls every path once, in the reverse of the last round's "
        "order, so a change in the machine's load touches all of them alike and each of two "
        "paths runs second as often as first, and each ratio is the median of the rounds' own "
        "ratios. "
        f"Before each call, untimed, a read of {bandwidth.EVICT_MULTIPLE} × the last-level "
        "cache: every path starts from the same caches, whichever path ran before it. "
        + (
            f"A row takes rounds until paged ÷ in order and FP8 ÷ fp32 are each known to "
            f"±{rounds.PRECISION:.0%} or the cap of {most} is reached (the loop and vectorized "
            f"references, which take most of a round, only the first {fewest}); each"
            if fewest < most
            else "Each"
        )
        + " ratio's ± is half its 95% bootstrap interval over the rounds. "
        f"One layer of {SHAPE.name}'s attention (N_Q = {SHAPE.num_q_heads}, N_KV = "
        f"{SHAPE.num_kv_heads}, d_h = {SHAPE.head_dim}), fp32, every sequence at the full "
        "context L.",
        "paged and in order: the same kernel over the same pool tensors, every block read once, "
        "through a shuffled block table (as after real traffic) and through the identity "
        "(sequence r reads blocks r·M to r·M + M - 1: a contiguous cache); the same bytes at "
        "the same addresses, so only the order of the reads differs. paged ÷ in order is §4's "
        "claim made measurable: 1.05 or less means paging costs at most 5%.",
        f"FP8: the paged pools in {FP8_DTYPE} with one scale per KV head; the kernel reads a "
        "quarter of the bytes, and its GB/s counts the bytes it reads. FP8 max |Δ| is its "
        "quantization error against fp32 SDPA.",
        "stream read: torch.sum over a float32 tensor many times the last-level cache, in the "
        "same rounds on the same threads: what this machine's memory delivers to a kernel that "
        "does nothing but read (minipaged.study.bench.bandwidth). Each GB/s is the keys and "
        "values a path must read (2 · batch · L · N_KV · d_h · b bytes) over its median time, "
        "with its share of the stream read.",
        "The loop and vectorized references are written to be read; "
        + (
            f"the {' and '.join(labels)} column(s) are the Numba kernel "
            "(twin: cuda_kernels.cpu, backend 'numba-cpu', the CUDA kernel's loop nest compiled "
            "for the CPU, one parallel iteration per (sequence, KV head))."
            if kernels
            else "no Numba kernel ran."
        ),
        *(f"{note}." for note in numba_notes),
        *([QUICK_NOTE] if options.quick else []),
    ]


QUICK_NOTE = (
    f"Quick mode: the stream read and the read before each call are of "
    f"{memory_amount(bandwidth.QUICK_BYTES)}, not of many last-level caches, so a cache may serve "
    "both: the stream read is not memory's rate and no path starts from cold caches. Run "
    "without --quick to measure."
)
"""What a quick run's notes add: its GB/s and shares are computed as a full run's are, over
reads a cache may hold (``bandwidth.QUICK_BYTES``)."""


def _plot(rows: list[dict], kernels: list[str], options: Options):
    fig, (axis,) = plot.figure()
    labels = [f"b={r['batch']} L={r['context']} B={r['block_size']} t={r['threads']}" for r in rows]
    x = range(len(rows))
    axis.plot(x, [1.0] * len(rows), "-", color="gray", linewidth=0.8, label="streaming read")
    markers = {"sdpa": "D", "vectorized": "o"}
    markers.update({name: "^" for name in kernels})
    markers.update({f"{name}_in_order": "v" for name in kernels})
    for name, marker in markers.items():
        label = KERNEL_LABELS.get(name.removesuffix("_in_order"), name)
        label = f"{label} in order" if name.endswith("_in_order") else label
        axis.plot(x, [r[f"{name}_of_stream"] for r in rows], marker, label=label)
    axis.set_ylim(0, 1.1)
    axis.set_xticks(list(x), labels, rotation=60, ha="right", fontsize="x-small")
    axis.set_ylabel("GB/s read / streaming read")
    axis.legend(fontsize="small")
    return plot.save(fig, options.out, "kernels", options.force)
