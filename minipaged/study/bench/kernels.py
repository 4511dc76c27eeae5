"""``bench kernels``: decode attention through block tables (§4) against contiguous attention.

Every path computes the same thing for one layer of Llama-3-8B's shape ($N_Q = 32$,
$N_{KV} = 8$, $d_h = 128$, fp32): the reference written as §4's loop
(``paged_attention_decode_loop``), the vectorized reference (``paged_attention_decode``), the
kernels (on a CPU run the CUDA kernel's CPU twin, ``cuda_kernels.cpu``; with ``--device cuda``
and a GPU the CUDA kernel itself), and PyTorch's ``scaled_dot_product_attention`` over the same
keys and values laid out contiguously, the baseline every ratio divides by. Block tables are
shuffled, so physical blocks are scattered as after real traffic. Each row states its thread
count; the paths take turns within one process, so every ratio compares like with like.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from minipaged import attention, backend, memory
from minipaged.study.bench import Options, plot
from minipaged.study.report import Column, Report

SHAPE = memory.PRESETS["llama-3-8b"]

COLUMNS = [
    Column("batch", "batch", "{}"),
    Column("context", "context", "{:,}"),
    Column("block_size", "B", "{}"),
    Column("threads", "threads", "{}"),
    Column("sdpa_ms", "contiguous SDPA (ms)", "{:.3f}"),
    Column("loop_ms", "loop ref (ms)", "{:.3f}"),
    Column("vectorized_ms", "vectorized ref (ms)", "{:.3f}"),
    Column("numba_cpu_ms", "Numba CPU (ms)", "{:.3f}"),
    Column("numba_cuda_ms", "Numba CUDA (ms)", "{:.3f}"),
    Column("loop_ratio", "loop / SDPA", "{:.2f}×"),
    Column("vectorized_ratio", "vectorized / SDPA", "{:.2f}×"),
    Column("numba_cpu_ratio", "Numba CPU / SDPA", "{:.2f}×"),
    Column("numba_cuda_ratio", "Numba CUDA / SDPA", "{:.2f}×"),
    Column("sdpa_gbps", "SDPA GB/s", "{:.1f}"),
    Column("vectorized_gbps", "vectorized GB/s", "{:.1f}"),
    Column("numba_cpu_gbps", "Numba CPU GB/s", "{:.1f}"),
    Column("numba_cuda_gbps", "Numba CUDA GB/s", "{:.1f}"),
    Column("max_error", "max |Δ| vs SDPA", "{:.1e}"),
]


def decode_inputs(batch: int, context: int, block_size: int, device: str, seed: int = 0):
    """Random decode inputs: ``(paged_args, (q, k, v))``, the same keys and values once in
    shuffled blocks and once contiguous ``[batch, N_KV, context, d_h]`` for SDPA."""
    generator = torch.Generator().manual_seed(seed)
    heads, kv_heads, d_h = SHAPE.num_q_heads, SHAPE.num_kv_heads, SHAPE.head_dim
    per_seq = memory.num_logical_blocks(context, block_size)
    num_blocks = batch * per_seq
    pool_shape = (num_blocks, kv_heads, block_size, d_h)
    key_pool = torch.randn(pool_shape, generator=generator).to(device)
    value_pool = torch.randn(pool_shape, generator=generator).to(device)
    query = torch.randn(batch, heads, d_h, generator=generator).to(device)
    tables = torch.randperm(num_blocks, generator=generator).view(batch, per_seq)
    seq_lens = torch.full((batch,), context, dtype=torch.int32)

    def contiguous(pool: torch.Tensor) -> torch.Tensor:
        # [batch, per_seq, N_KV, B, d_h] -> [batch, N_KV, per_seq * B, d_h], cut to the context
        blocks = pool[tables.to(device)].transpose(1, 2)
        return blocks.reshape(batch, kv_heads, per_seq * block_size, d_h)[:, :, :context]

    paged = (
        query,
        key_pool,
        value_pool,
        tables.to(torch.int32).to(device),
        seq_lens.to(device),
        d_h**-0.5,
        block_size,
    )
    sdpa = (query.unsqueeze(2), contiguous(key_pool), contiguous(value_pool))
    return paged, sdpa


def _median_ms(paths: dict[str, Callable[[], torch.Tensor]], repeats: int, device: str) -> dict:
    """Median wall time of each path in ms. The paths take turns, one call each per round, so
    a change in the machine's load during the run touches all of them alike."""
    for fn in paths.values():
        fn()  # warm-up: first-call allocation and, on a GPU, compilation
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, fn in paths.items():
            start = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: sorted(t)[len(t) // 2] * 1e3 for name, t in times.items()}


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
            "GPU machine). Their CPU twins run instead (Numba CPU)"
        )
        try:
            found["numba_cpu"] = backend.kernels_for("numba-cpu").paged_attention_decode
        except ImportError as error:
            notes.append(f"Numba CPU: not run: {error}")
    return found, notes


def measure(
    batch: int, context: int, block_size: int, options: Options, repeats: int, threads: int = 1
) -> dict:
    """One row: every path's median time over ``repeats`` interleaved rounds, with torch (and
    so the Numba CPU twin) on ``threads`` threads."""
    device = options.device
    paged, (q, k, v) = decode_inputs(batch, context, block_size, device, options.seed)
    paths = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True).squeeze(2),
        "loop": lambda: attention.paged_attention_decode_loop(*paged),
        "vectorized": lambda: attention.paged_attention_decode(*paged),
    }
    kernels, _ = numba_kernels(device)
    for name, kernel in kernels.items():
        paths[name] = functools.partial(kernel, *paged)
    row = {"batch": batch, "context": context, "block_size": block_size, "threads": threads}
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        row.update({f"{name}_ms": ms for name, ms in _median_ms(paths, repeats, device).items()})
        expected = paths["sdpa"]()
        row["max_error"] = max(float((fn() - expected).abs().max()) for fn in paths.values())
    finally:
        torch.set_num_threads(previous)
    # Achieved bandwidth: the keys and values every path must read once, over its time.
    kv_bytes = 2 * batch * context * SHAPE.num_kv_heads * SHAPE.head_dim * q.element_size()
    for name in paths:
        row[f"{name}_gbps"] = kv_bytes / (row[f"{name}_ms"] * 1e-3) / 1e9
        if name != "sdpa":
            row[f"{name}_ratio"] = row[f"{name}_ms"] / row["sdpa_ms"]
    return row


def run(options: Options) -> Report:
    if options.quick:
        grid, thread_counts, repeats = [(1, 64, 16)], (1,), 3
    else:
        grid = [(1, 1024, 16), (4, 1024, 8), (4, 1024, 16), (4, 1024, 32), (4, 4096, 16)]
        thread_counts, repeats = (1, 2), 9  # 5 left the SDPA baseline drifting 20% row to row
    rows = [
        measure(b, c, bs, options, repeats, threads)
        for threads in thread_counts
        for b, c, bs in grid
    ]
    _, numba_notes = numba_kernels(options.device)
    notes = [
        f"Measured on {options.device} with {' and '.join(map(str, thread_counts))} thread(s) "
        f"(column 'threads'), median of {repeats} interleaved rounds after a warm-up: each "
        "round calls every path once, so a change in the machine's load touches all of them "
        f"alike. One layer of {SHAPE.name}'s attention (N_Q = {SHAPE.num_q_heads}, N_KV = "
        f"{SHAPE.num_kv_heads}, d_h = {SHAPE.head_dim}), fp32, every sequence at the full "
        "context, blocks shuffled.",
        "Ratios divide by contiguous scaled_dot_product_attention measured in the same rounds. "
        "The loop and vectorized references are written to be read; the Numba CPU twin "
        "(cuda_kernels.cpu, backend 'numba-cpu') is the CUDA kernel's loop nest compiled for "
        "the CPU, one parallel iteration per (sequence, KV head).",
        "GB/s: the keys and values each path must read (2 · batch · context · N_KV · d_h · b "
        "bytes) over its median time; §4's claim is a paged kernel's GB/s near SDPA's.",
        *(f"{note}." for note in numba_notes),
    ]
    report = Report("kernels", "Paged decode attention vs contiguous (§4)", COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (axis,) = plot.figure()
    labels = [f"b={r['batch']} L={r['context']} B={r['block_size']} t={r['threads']}" for r in rows]
    x = range(len(rows))
    markers = {"loop": "s", "vectorized": "o", "numba_cpu": "^", "numba_cuda": "v"}
    for name, marker in markers.items():
        if f"{name}_ratio" in rows[0]:
            axis.plot(x, [r[f"{name}_ratio"] for r in rows], marker, label=name.replace("_", " "))
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.set_yscale("log")
    axis.set_xticks(list(x), labels, rotation=60, ha="right", fontsize="x-small")
    axis.set_ylabel("time / contiguous SDPA")
    axis.legend(fontsize="small")
    return plot.save(fig, options.out, "kernels")
