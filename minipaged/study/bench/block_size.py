"""``bench block-size``: what the block size $B$ trades (§3, §4). A larger $B$ wastes more of
each sequence's last block, $(B - 1)/2$ tokens on average, and a kernel that walks the block
table one block at a time makes fewer, larger steps.

Waste is simulated (the paged allocator on the real block manager, ``minipaged.study.simulator``);
kernel times are measured (``minipaged.study.bench.kernels``), both in this run.
"""

from __future__ import annotations

import torch

from minipaged import memory
from minipaged.study.baselines import PagedAllocator
from minipaged.study.bench import Options, kernels, plot
from minipaged.study.bench.memory import kv_budget_bytes
from minipaged.study.report import Column, Report
from minipaged.study.simulator import Simulation
from minipaged.study.workloads import make_workload

SIZES = (8, 16, 32)

COLUMNS = [
    Column("block_size", "B", "{}"),
    Column("theory", "theory (B−1)/2", "{:.1f}"),
    Column("unused_per_seq", "unused tok/seq", "{:.2f}"),
    Column("waste_of_reserved", "unused / reserved", "{:.2%}"),
    Column("peak_seqs", "peak seqs", "{:,}"),
    Column("vectorized_ms", "vectorized ref (ms)", "{:.3f}"),
    Column("loop_ms", "loop ref (ms)", "{:.3f}"),
    Column("vectorized_ratio", "vectorized / SDPA", "{:.1f}×"),
    Column("loop_ratio", "loop / SDPA", "{:.1f}×"),
    Column("threads", "threads", "{}"),
]


def run(options: Options) -> Report:
    shape = memory.PRESETS["llama-3-8b"]
    hbm_gb, num_requests = (20, 40) if options.quick else (24, 300)
    batch, context, repeats = (1, 64, 3) if options.quick else (4, 1024, 3)
    budget = kv_budget_bytes(hbm_gb, 16)
    requests = make_workload("enterprise", num_requests, seed=options.seed)
    rows = []
    for block_size in SIZES:
        alloc = PagedAllocator(shape.num_blocks_for(budget, block_size), block_size)
        waste = Simulation(alloc, requests, options.seed).run()
        threads = torch.get_num_threads()  # the thread count this table reports
        timing = kernels.measure(batch, context, block_size, options, repeats, threads, {})
        rows.append(
            {
                "block_size": block_size,
                "theory": float(memory.expected_paged_waste(block_size)),
                "unused_per_seq": waste.unused_per_seq,
                "waste_of_reserved": waste.waste_of_reserved,
                "peak_seqs": waste.peak_seqs,
                **{key: timing[key] for key in timing if key.endswith(("_ms", "_ratio"))},
                "threads": threads,
            }
        )
    notes = [
        f"Waste: simulated, model-free; {num_requests} enterprise requests on {shape.name} with "
        f"{hbm_gb} GB HBM minus 16 GB weights, paged allocator on the real BlockManager.",
        f"Kernel time: measured on {options.device} with {torch.get_num_threads()} thread(s), "
        f"batch {batch} at context {context}, one layer of {shape.name}'s attention, median of "
        f"{repeats} interleaved rounds; ratios against contiguous SDPA in the same rounds. These "
        "are the PyTorch references: a CUDA kernel's trade-off differs (it parallelises over "
        "blocks).",
    ]
    report = Report("block-size", "Block size: waste against kernel time", COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (axis,) = plot.figure()
    waste = [100 * r["waste_of_reserved"] for r in rows]
    for name, marker in (("vectorized", "o"), ("loop", "s")):
        ratios = [r[f"{name}_ratio"] for r in rows]
        axis.plot(waste, ratios, marker=marker, label=f"{name} reference")
        for r, x, y in zip(rows, waste, ratios, strict=True):
            axis.annotate(f"B={r['block_size']}", (x, y), textcoords="offset points", xytext=(4, 4))
    axis.set_xlabel("unused / reserved KV slots (%, simulated)")
    axis.set_ylabel("decode time / contiguous SDPA (measured)")
    axis.legend(fontsize="small")
    return plot.save(fig, options.out, "block-size", options.force)
