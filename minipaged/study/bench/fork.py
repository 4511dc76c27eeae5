"""``bench fork``: what forking a sequence costs (§5), against prompt length.

``BlockManager.fork`` copies the parent's block table and raises
each block's refcount: $M = \\lceil L/B \\rceil$ integer updates and no key or value moved. The
source text calls this $\\mathcal{O}(1)$; per fork it is $\\mathcal{O}(M)$ metadata, which is
what the *blocks touched* column counts (from the fork's events) and the timing shows. Beside
it, a deep copy of the same $L$ tokens' keys and values with
``KVCache.copy_blocks``, what a contiguous allocator must do for every
branch.
"""

from __future__ import annotations

import time

import torch

from minipaged import memory
from minipaged.block_manager import BlockManager
from minipaged.checkpoint import load_config
from minipaged.events import CowCopy, Incref
from minipaged.kv_cache import KVCache
from minipaged.study.bench import Options, plot
from minipaged.study.report import Column, Report

BLOCK_SIZE = 16

COLUMNS = [
    Column("prompt_tokens", "prompt L", "{:,}"),
    Column("blocks", "blocks M", "{:,}"),
    Column("fork_us", "fork (µs)", "{:,.1f}"),
    Column("blocks_touched", "refcounts raised", "{:,}"),
    Column("fork_bytes", "KV bytes copied by fork", "{:,}"),
    Column("copy_us", "deep copy (µs)", "{:,.1f}"),
    Column("copy_bytes", "deep copy bytes", "{:,}"),
    Column("ratio", "copy / fork", "{:,.0f}×"),
    Column("llama_bytes", "deep copy at Llama-3-8B", "{:,}"),
]


def _median_us(action, repeats: int, undo=None) -> float:
    """Median wall time of ``action()`` in µs; ``undo()`` runs after each, untimed."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
        if undo is not None:
            undo()
    return sorted(times)[len(times) // 2] * 1e6


def _copy(cache: KVCache, pairs: list[tuple[int, int]]) -> None:
    cache.copy_blocks(pairs)
    if cache.device.type == "cuda":
        torch.cuda.synchronize()  # time the copy, not its launch


def measure(prompt_tokens: int, cache: KVCache, repeats: int) -> dict:
    """Fork a sequence of ``prompt_tokens`` tokens ``repeats`` times (median time, events
    counted once), and time a deep copy of its keys and values in ``cache``."""
    manager = BlockManager(cache.num_blocks, block_size=BLOCK_SIZE, watermark=0.0)
    parent = manager.allocate("parent", prompt_tokens)
    manager.pop_events()

    manager.fork("parent", "child")
    events = manager.pop_events()
    manager.free("child")
    fork_us = _median_us(
        lambda: manager.fork("parent", "child"), repeats, lambda: manager.free("child")
    )
    copied = sum(e.offset for e in events if isinstance(e, CowCopy))  # rows moved: none

    # What a contiguous allocator does for every branch: copy all M blocks, every layer.
    pairs = [(block, cache.num_blocks - 1 - j) for j, block in enumerate(parent.blocks)]
    copy_us = _median_us(lambda: _copy(cache, pairs), repeats)
    token_bytes = cache.bytes_per_block // BLOCK_SIZE
    return {
        "prompt_tokens": prompt_tokens,
        "blocks": len(parent.blocks),
        "fork_us": fork_us,
        "blocks_touched": sum(isinstance(e, Incref) for e in events),
        "fork_bytes": copied * token_bytes,
        "copy_us": copy_us,
        "copy_bytes": len(parent.blocks) * cache.bytes_per_block,
        "ratio": copy_us / fork_us,
        "llama_bytes": memory.PRESETS["llama-3-8b"].kv_bytes(prompt_tokens),
    }


def run(options: Options) -> Report:
    lengths = (16, 256) if options.quick else (16, 64, 256, 1024, 4096)
    config = load_config(options.model)
    most = memory.num_logical_blocks(max(lengths), BLOCK_SIZE)
    cache = KVCache(
        config.num_hidden_layers,
        2 * most,  # the parent's blocks and a disjoint region for the deep copy
        config.num_key_value_heads,
        BLOCK_SIZE,
        config.head_dim,
        device=options.device,
    )
    repeats = 5 if options.quick else 21
    rows = [measure(length, cache, repeats) for length in lengths]
    notes = [
        f"Measured on {options.device}, median of {repeats}. fork is the real "
        "BlockManager.fork; 'refcounts raised' and 'KV bytes copied' are counted from its "
        "events (Incref, CowCopy).",
        f"Deep copy: the same blocks of a KV cache shaped like the {options.model} model "
        f"({config.num_hidden_layers} layers, {config.num_key_value_heads} KV heads, "
        f"d_h = {config.head_dim}, fp32), every layer's keys and values, B = {BLOCK_SIZE}.",
        "Deep copy at Llama-3-8B: the bytes the same copy would move there, M_KV(L) (§1), "
        "computed, not measured.",
    ]
    report = Report("fork", "Fork cost against prompt length (§5)", COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (axis,) = plot.figure()
    lengths = [r["prompt_tokens"] for r in rows]
    axis.loglog(lengths, [r["fork_us"] for r in rows], marker="o", label="fork (metadata)")
    axis.loglog(lengths, [r["copy_us"] for r in rows], marker="s", label="deep copy of the KV")
    axis.set_xlabel("prompt length L (tokens)")
    axis.set_ylabel("time (µs)")
    axis.legend(fontsize="small")
    return plot.save(fig, options.out, "fork")
