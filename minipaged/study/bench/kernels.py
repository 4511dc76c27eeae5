"""``bench kernels``: decode attention through block tables (§4) against contiguous attention.

Three paths compute the same thing for one layer of Llama-3-8B's shape ($N_Q = 32$,
$N_{KV} = 8$, $d_h = 128$, fp32): the reference written as §4's loop
(``paged_attention_decode_loop``), the vectorized reference
(``paged_attention_decode``), and PyTorch's
``scaled_dot_product_attention`` over the same keys and values laid out contiguously, the
baseline every ratio divides by. Block tables are shuffled, so physical blocks are scattered
as after real traffic. With ``--device cuda`` and a GPU, the Numba kernel
(``cuda_kernels.paged_attention_decode``) joins them.
"""

from __future__ import annotations

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
    Column("sdpa_ms", "contiguous SDPA (ms)", "{:.3f}"),
    Column("vectorized_ms", "vectorized ref (ms)", "{:.3f}"),
    Column("loop_ms", "loop ref (ms)", "{:.3f}"),
    Column("numba_ms", "Numba kernel (ms)", "{:.3f}"),
    Column("vectorized_ratio", "vectorized / SDPA", "{:.1f}×"),
    Column("loop_ratio", "loop / SDPA", "{:.1f}×"),
    Column("numba_ratio", "Numba / SDPA", "{:.2f}×"),
    Column("sdpa_gbps", "SDPA GB/s", "{:.1f}"),
    Column("vectorized_gbps", "vectorized GB/s", "{:.1f}"),
    Column("numba_gbps", "Numba GB/s", "{:.1f}"),
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


def numba_kernel(device: str) -> tuple[Callable | None, str]:
    """The Numba decode kernel when it can run here, else None and the reason."""
    if device != "cuda":
        return None, (
            "not run: CPU run. On a CPU the kernels run only in Numba's CUDA simulator, which "
            "checks what they compute, not how fast (use --device cuda on a GPU machine)"
        )
    if not torch.cuda.is_available():
        return None, "not run: no GPU"
    try:
        kernel = backend.kernels_for("numba").paged_attention_decode
    except (ImportError, AttributeError) as error:
        return None, f"not run: {error}"
    return kernel, "Numba kernel: cuda_kernels.paged_attention_decode"


def measure(batch: int, context: int, block_size: int, options: Options, repeats: int) -> dict:
    device = options.device
    paged, (q, k, v) = decode_inputs(batch, context, block_size, device, options.seed)
    paths = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True).squeeze(2),
        "vectorized": lambda: attention.paged_attention_decode(*paged),
        "loop": lambda: attention.paged_attention_decode_loop(*paged),
    }
    kernel, _ = numba_kernel(device)
    if kernel is not None:
        paths["numba"] = lambda: kernel(*paged)
    row = {"batch": batch, "context": context, "block_size": block_size}
    row.update({f"{name}_ms": ms for name, ms in _median_ms(paths, repeats, device).items()})
    # Achieved bandwidth: the keys and values every path must read once, over its time.
    kv_bytes = 2 * batch * context * SHAPE.num_kv_heads * SHAPE.head_dim * q.element_size()
    for name in paths.keys() - {"loop"}:
        row[f"{name}_gbps"] = kv_bytes / (row[f"{name}_ms"] * 1e-3) / 1e9
    expected = paths["sdpa"]()
    for name in paths.keys() - {"sdpa"}:
        row[f"{name}_ratio"] = row[f"{name}_ms"] / row["sdpa_ms"]
    row["max_error"] = max(float((paths[name]() - expected).abs().max()) for name in paths)
    return row


def run(options: Options) -> Report:
    if options.quick:
        grid, repeats = [(1, 64, 16)], 3
    else:
        grid = [(b, c, bs) for b in (1, 4) for c in (256, 1024) for bs in (8, 16, 32)]
        repeats = 3
    rows = [measure(b, c, bs, options, repeats) for b, c, bs in grid]
    _, numba_note = numba_kernel(options.device)
    notes = [
        f"Measured on {options.device} with {torch.get_num_threads()} thread(s), median of "
        f"{repeats} rounds after a warm-up: one layer of {SHAPE.name}'s attention (N_Q = "
        f"{SHAPE.num_q_heads}, N_KV = {SHAPE.num_kv_heads}, d_h = {SHAPE.head_dim}), fp32, "
        "every sequence at the full context.",
        "Ratios divide by contiguous scaled_dot_product_attention measured in the same run. "
        "The references are written to be read, not to be fast.",
        "GB/s: the keys and values each path must read (2 · batch · context · N_KV · d_h · b "
        "bytes) over its median time; §4's claim is the Numba kernel's GB/s near SDPA's.",
        f"Numba: {numba_note}.",
    ]
    report = Report("kernels", "Paged decode attention vs contiguous (§4)", COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (axis,) = plot.figure()
    labels = [f"b={r['batch']} L={r['context']} B={r['block_size']}" for r in rows]
    x = range(len(rows))
    for name, marker in (("vectorized", "o"), ("loop", "s"), ("numba", "^")):
        if f"{name}_ratio" in rows[0]:
            axis.plot(x, [r[f"{name}_ratio"] for r in rows], marker, label=name)
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.set_yscale("log")
    axis.set_xticks(list(x), labels, rotation=60, ha="right", fontsize="x-small")
    axis.set_ylabel("time / contiguous SDPA")
    axis.legend(fontsize="small")
    return plot.save(fig, options.out, "kernels")
