"""``bench fork``: what forking a sequence costs (§5), against prompt length and at a real
model's shape.

``BlockManager.fork`` copies the parent's block table and raises each block's refcount:
$M = \\lceil L/B \\rceil$ integer updates and no key or value moved. The source text calls this
$\\mathcal{O}(1)$; per fork it is $\\mathcal{O}(M)$ metadata, which is what the *blocks touched*
column counts (from the fork's events) and the timing shows. Beside it, a deep copy of the same
$L$ tokens' keys and values with ``KVCache.copy_blocks``, what a contiguous allocator must do
for every branch.

The fork's cost does not depend on the model: a block id is an integer whatever a block holds.
The copy's does, so the table measures it twice: in a cache shaped like the benchmark's model
(the tiny one by default), against $L$; and for a 2,048-token sequence in a cache shaped like
Llama-3-8B's (fp16), one layer and all 32.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from minipaged import memory
from minipaged.block_manager import BlockManager
from minipaged.checkpoint import load_config
from minipaged.events import CowCopy, Incref
from minipaged.kv_cache import KVCache
from minipaged.study.bench import Options, plot, rounds
from minipaged.study.report import Column, Report

BLOCK_SIZE = 16
LLAMA = memory.PRESETS["llama-3-8b"]
LLAMA_TOKENS = 2048

COLUMNS = [
    Column("cache", "KV cache copied"),
    Column("prompt_tokens", "prompt L", "{:,}"),
    Column("blocks", "blocks M", "{:,}"),
    Column("fork_us", "fork (µs)", "{:,.1f}"),
    Column("blocks_touched", "refcounts raised", "{:,}"),
    Column("fork_bytes", "KV bytes copied by fork", "{:,}"),
    Column("copy_us", "deep copy (µs)", "{:,.1f}"),
    Column("copy_bytes", "deep copy bytes", "{:,}"),
    Column("ratio", "copy / fork", "{:,.0f}×"),
    Column("how", "deep copy time"),
    Column("threads", "threads", "{}"),
]


def _interleaved_us(
    actions: dict[str, tuple[Callable[[], None], Callable[[], None] | None]], repeats: int
) -> dict[str, list[float]]:
    """Wall times in µs of each ``action``, run in turns, one call each per round, so a change
    in the machine's load touches all of them alike; ``undo`` runs after its action, untimed."""
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(repeats):
        for name, (action, undo) in actions.items():
            start = time.perf_counter()
            action()
            times[name].append((time.perf_counter() - start) * 1e6)
            if undo is not None:
                undo()
    return times


def _copy(cache: KVCache, pairs: list[tuple[int, int]]) -> None:
    cache.copy_blocks(pairs)
    if cache.device.type == "cuda":
        torch.cuda.synchronize()  # time the copy, not its launch


def measure(prompt_tokens: int, cache: KVCache, repeats: int) -> dict:
    """Fork a sequence of ``prompt_tokens`` tokens and deep-copy its keys and values in
    ``cache``, ``repeats`` times each in turns: the medians, their ratio (median of the rounds'
    ratios) and what the fork's events say it touched."""
    manager = BlockManager(cache.num_blocks, block_size=BLOCK_SIZE, watermark=0.0)
    parent = manager.allocate("parent", prompt_tokens)
    manager.pop_events()

    manager.fork("parent", "child")
    events = manager.pop_events()
    manager.free("child")
    copied = sum(e.offset for e in events if isinstance(e, CowCopy))  # rows moved: none

    # What a contiguous allocator does for every branch: copy all M blocks, every layer.
    pairs = [(block, cache.num_blocks - 1 - j) for j, block in enumerate(parent.blocks)]
    times = _interleaved_us(
        {
            "fork": (lambda: manager.fork("parent", "child"), lambda: manager.free("child")),
            "copy": (lambda: _copy(cache, pairs), None),
        },
        repeats,
    )
    token_bytes = cache.bytes_per_block // BLOCK_SIZE
    return {
        "prompt_tokens": prompt_tokens,
        "blocks": len(parent.blocks),
        "fork_us": statistics.median(times["fork"]),
        "blocks_touched": sum(isinstance(e, Incref) for e in events),
        "fork_bytes": copied * token_bytes,
        "copy_us": statistics.median(times["copy"]),
        "copy_bytes": len(parent.blocks) * cache.bytes_per_block,
        "ratio": rounds.paired_ratio(times["copy"], times["fork"]),
        "how": "measured",
        "threads": torch.get_num_threads(),
    }


def llama_cache(num_layers: int, device: str) -> KVCache:
    """A Llama-3-8B-shaped fp16 cache of ``num_layers`` layers, with room for a 2,048-token
    sequence and a disjoint copy of it."""
    blocks = memory.num_logical_blocks(LLAMA_TOKENS, BLOCK_SIZE)
    shape = (num_layers, 2 * blocks, LLAMA.num_kv_heads, BLOCK_SIZE, LLAMA.head_dim)
    return KVCache(*shape, dtype=torch.float16, device=device)


def llama_rows(options: Options, repeats: int) -> list[dict]:
    """Fork against deep copy for 2,048 tokens at Llama-3-8B's shape: one layer measured; all
    layers measured, or in quick mode computed as $N_L$ times the one layer's copy time (the
    copy moves $N_L$ times the bytes at the same bandwidth)."""
    one = measure(LLAMA_TOKENS, llama_cache(1, options.device), repeats)
    one["cache"] = f"{LLAMA.name}, 1 of {LLAMA.num_layers} layers, fp16"
    if options.quick:
        every = dict(one, how=f"computed: {LLAMA.num_layers} × the 1-layer copy")
        every["copy_us"] = LLAMA.num_layers * one["copy_us"]
        every["copy_bytes"] = LLAMA.num_layers * one["copy_bytes"]
        every["ratio"] = every["copy_us"] / every["fork_us"]
    else:
        every = measure(LLAMA_TOKENS, llama_cache(LLAMA.num_layers, options.device), repeats)
    every["cache"] = f"{LLAMA.name}, all {LLAMA.num_layers} layers, fp16"
    if every["copy_bytes"] != LLAMA.kv_bytes(LLAMA_TOKENS):
        raise AssertionError("the deep copy must move M_KV(L) bytes (§1)")
    return [one, every]


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
    rows = []
    for length in lengths:
        rows.append(measure(length, cache, repeats))
        rows[-1]["cache"] = f"{options.model} ({config.num_hidden_layers} layers, fp32)"
    rows += llama_rows(options, repeats)
    notes = [
        f"Measured on {options.device} with {torch.get_num_threads()} thread(s): medians of "
        f"{repeats} rounds, each round one fork and one deep copy; copy / fork is the median "
        "of the rounds' ratios. fork is the real BlockManager.fork; 'refcounts raised' and "
        "'KV bytes copied' are counted from its events (Incref, CowCopy).",
        f"Deep copy: KVCache.copy_blocks of the sequence's M blocks (B = {BLOCK_SIZE}), keys "
        f"and values of every layer, in a cache shaped like the {options.model} model "
        f"({config.num_hidden_layers} layers, {config.num_key_value_heads} KV heads, "
        f"d_h = {config.head_dim}, fp32) or like {LLAMA.name} ({LLAMA.num_kv_heads} KV heads, "
        f"d_h = {LLAMA.head_dim}, fp16). Its bytes at {LLAMA.name} are M_KV(L) (§1).",
    ]
    report = Report("fork", "Fork cost against prompt length (§5)", COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (axis,) = plot.figure()
    own = [r for r in rows if r["cache"].startswith(options.model)]
    lengths = [r["prompt_tokens"] for r in own]
    axis.loglog(lengths, [r["fork_us"] for r in own], marker="o", label="fork (metadata)")
    axis.loglog(lengths, [r["copy_us"] for r in own], marker="s", label="deep copy, own model")
    for row, marker in zip(rows[len(own) :], ("^", "v"), strict=True):
        label = f"deep copy, {row['cache']} ({row['how']})"
        axis.loglog([row["prompt_tokens"]], [row["copy_us"]], marker=marker, ls="", label=label)
    axis.set_xlabel("prompt length L (tokens)")
    axis.set_ylabel("time (µs)")
    axis.legend(fontsize="small")
    return plot.save(fig, options.out, "fork", options.force)
