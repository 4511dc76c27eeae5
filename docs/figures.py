"""Draw the site's figures from the project's own code, so that none can drift from it.

Each figure is a function of the code it pictures: memory math from ``minipaged.memory``, the
three allocators of §2 from ``minipaged.study.baselines``, the kernel's thread mapping from
``cuda_kernels``' constants, the radix tree from a real ``RadixCache``, the comparison chart
from the simulator. ``tests/test_docs.py`` draws them again and checks that the committed files
are the same, byte for byte.

    .venv/bin/python docs/figures.py          # rewrite docs/assets/figures/ after a change

The pictures are 5 inches wide with 11-point text, so that on a 390 px phone screen, scaled to
the column, the text is still about 10 px high.
"""

from __future__ import annotations

import io
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from minipaged import memory
from minipaged.radix_cache import RadixCache
from minipaged.study.baselines import OrcaAllocator, PagedAllocator, StaticAllocator

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS))  # docs/ is not a package: its figure modules import by name
from figure_style import RESERVED, SEQUENCES, STYLE, USED, WIDTH_IN  # noqa: E402
from figures_pools import external_fragmentation, vattention_mapping  # noqa: E402

FIGURES = DOCS / "assets" / "figures"

CONTIGUOUS_LENGTHS = (37, 90, 12, 61)
"""The four sequences ``contiguous_vs_paged`` stores, in tokens (kv-memory.md names them)."""
V2_LENGTH, V2_PARTITION_SIZE = 200, 64
"""The sequence ``v2_partitions`` splits and its partitions, in tokens (online-softmax.md)."""
TIMELINE_SLOTS, TIMELINE_MAX_LEN = 1024, 320
"""The pool ``waste_timeline`` shares between its requests, and their $L_{\\max}$ (waste.md)."""


def kv_per_layer():
    """§1: a token's keys and values, layer by layer: $2 N_{KV} d_h b$ bytes per layer, summed
    over $N_L$ layers to ``kv_bytes_per_token``. Llama-3-8B and Llama-3-70B store the same
    bytes per layer, so their lines coincide up to layer 32: the second is drawn dashed on top
    of the first, and a dot marks where each ends, so that neither hides the other."""
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.2))
    per_layer_of = {}
    for shape, color in zip(memory.PRESETS.values(), SEQUENCES, strict=False):
        per_layer = 2 * shape.num_kv_heads * shape.head_dim * shape.dtype_bytes
        layers = range(shape.num_layers + 1)
        total = shape.kv_bytes_per_token
        assert per_layer * shape.num_layers == total
        # A line that another model's line would cover goes on top, dashed.
        covered = per_layer in per_layer_of.values()
        per_layer_of[shape.name] = per_layer
        label = f"{shape.name.split(' (')[0]}: {per_layer // 2**10} KiB × {shape.num_layers}"
        ax.step(
            layers,
            [per_layer * n / 2**10 for n in layers],
            where="post",
            color=color,
            linestyle="-" if not covered else "--",
            linewidth=1.5,
            zorder=2,
            label=f"{label} = {total // 2**10:,} KiB",
        )
        ax.plot(shape.num_layers, total / 2**10, "o", color=color, zorder=3, markersize=5)
    ax.set_yscale("log")
    ax.set_xlabel("layers (a dot: the model's last layer)")
    ax.set_ylabel("KiB per token (log scale)")
    ax.legend(loc="lower right", fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


def contiguous_vs_paged():
    """§1–§3: the same four sequences stored contiguously (each reserves $L_{\\max}$) and in
    blocks of $B$ (each wastes at most $B - 1$ slots)."""
    lengths, max_len, block_size = CONTIGUOUS_LENGTHS, 128, 16
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH_IN, 3.4), sharex=True)
    static, paged = axes
    x = 0
    for length in lengths:
        static.add_patch(Rectangle((x, 0), length, 1, color=USED))
        static.add_patch(Rectangle((x + length, 0), max_len - length, 1, color=RESERVED))
        x += max_len
    wasted = sum(memory.static_internal_waste(n, max_len) for n in lengths)
    static.set_title(f"contiguous, L_max = {max_len}: {wasted} of {x} slots never written")
    x = 0
    for length in lengths:
        blocks = memory.num_logical_blocks(length, block_size)
        for j in range(blocks):
            filled = min(block_size, length - j * block_size)
            paged.add_patch(Rectangle((x, 0), filled, 1, color=USED))
            if filled < block_size:
                paged.add_patch(Rectangle((x + filled, 0), block_size - filled, 1, color=RESERVED))
            paged.add_patch(Rectangle((x, 0), block_size, 1, fill=False, edgecolor="white"))
            x += block_size
    paged_waste = sum(memory.paged_internal_waste(n, block_size) for n in lengths)
    assert all(memory.paged_internal_waste(n, block_size) < block_size for n in lengths)
    paged.set_title(f"paged, B = {block_size}: {paged_waste} of {x} slots unwritten")
    for ax in axes:
        ax.set_xlim(0, len(lengths) * max_len)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
    paged.set_xlabel("token slots (blue: written, orange: reserved, empty)")
    fig.tight_layout()
    return fig


def waste_timeline():
    """§2 on one timeline: two requests share a 1,024-slot pool, request 1 ends at step 100
    and request 2 takes its place. Static reservation holds $L_{\\max}$ per request from the
    start (internal and reservation waste), Orca grows by $\\Delta L$ (reservation waste
    only), paging by blocks of $B$ (at most $B - 1$ per sequence). Every number comes from the
    study's allocators."""
    capacity, max_len, delta, block_size = TIMELINE_SLOTS, TIMELINE_MAX_LEN, 128, 16
    prompts = {0: 40, 1: 100, 2: 60}
    steps = 200
    kinds = {
        "static": StaticAllocator(capacity),
        f"Orca, ΔL = {delta}": OrcaAllocator(capacity, delta=delta),
        f"paged, B = {block_size}": PagedAllocator(capacity // block_size, block_size),
    }
    fig, axes = plt.subplots(len(kinds), 1, figsize=(WIDTH_IN, 5.6), sharex=True)
    for ax, (name, alloc) in zip(axes, kinds.items(), strict=True):
        used, reserved = [], []
        lengths = {}
        for seq in (0, 1):
            assert alloc.admit(seq, prompts[seq], max_len)
            lengths[seq] = prompts[seq]
        for t in range(steps):
            for seq in list(lengths):
                if lengths[seq] < max_len and alloc.grow(seq):
                    lengths[seq] += 1
            if t == steps // 2:  # request 1 ends; request 2 arrives
                alloc.release(1)
                del lengths[1]
                if alloc.admit(2, prompts[2], max_len):
                    lengths[2] = prompts[2]
            used.append(sum(lengths.values()))
            reserved.append(alloc.reserved)
        ax.fill_between(range(steps), 0, used, color=USED, step="post", label="tokens")
        ax.fill_between(
            range(steps), used, reserved, color=RESERVED, step="post", label="reserved, empty"
        )
        ax.set_ylim(0, capacity)
        ax.set_ylabel("slots")
        ax.set_title(name)
    axes[0].legend(loc="upper right", fontsize=9, frameon=False)
    axes[-1].set_xlabel("decode step (request 1 ends at step 100)")
    fig.tight_layout()
    return fig


def kernel_threads():
    """§4: which thread and warp of one thread block reads which token. Thread $t$ reads token
    ``first + t`` of each round of $T$ tokens, through the block table; a warp is 32 threads."""
    num_threads, warp, block_size = 128, 32, 16
    table = [7, 2, 9, 4, 0, 5, 11, 3, 8, 1, 6, 10, 12]
    length = 200
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.9))
    colors = SEQUENCES[:4]
    for tau in range(length):
        thread = tau % num_threads
        ax.add_patch(Rectangle((tau, 1.1), 1, 0.8, color=colors[thread // warp], linewidth=0))
    for j in range(memory.num_logical_blocks(length, block_size)):
        ax.add_patch(
            Rectangle((j * block_size, 0), block_size, 0.8, fill=False, edgecolor="#555555")
        )
        ax.text(j * block_size + block_size / 2, 0.4, f"{table[j]}", ha="center", va="center")
    for r in range(math.ceil(length / num_threads)):
        ax.axvline(r * num_threads, color="black", linestyle="--", linewidth=1)
        ax.text(r * num_threads + 2, 2.05, f"round {r + 1}", fontsize=9)
    ax.set_title(f"thread t reads token first + t (T = {num_threads})")
    for w in range(num_threads // warp):
        ax.text(
            w * warp + warp / 2,
            1.5,
            f"warp {w}",
            ha="center",
            va="center",
            color="white",
            fontsize=9,
        )
    ax.set_xlim(0, length)
    ax.set_ylim(0, 2.5)
    ax.set_yticks([0.4, 1.5], ["block T_r[j]", "thread's warp"])
    ax.set_xlabel(f"token τ (L = {length}, B = {block_size})")
    fig.tight_layout()
    return fig


def v2_partitions():
    """§4: v2 splits a sequence into partitions of ``partition_size`` tokens (whole blocks);
    each thread block reduces one partition to $(m_k, l_k, O_k)$, and a second kernel
    combines them with weights $l_k e^{m_k - m}$ (``attention.combine_partitions``)."""
    import torch

    from minipaged import attention

    torch.manual_seed(0)
    length, partition_size = V2_LENGTH, V2_PARTITION_SIZE
    block_size, head_dim = 16, 8
    blocks = memory.num_logical_blocks(length, block_size)
    keys = torch.randn(blocks, 1, block_size, head_dim)
    values = torch.randn(blocks, 1, block_size, head_dim)
    query = torch.randn(1, 1, head_dim) * 2
    table = torch.arange(blocks, dtype=torch.int32)[None]
    seq_lens = torch.tensor([length])
    scale = head_dim**-0.5
    m_k, l_k, _ = attention.paged_attention_decode_partitions(
        query, keys, values, table, seq_lens, scale, block_size, partition_size
    )
    m_k, l_k = m_k[0, 0], l_k[0, 0]  # [num_partitions]
    parts = math.ceil(length / partition_size)
    weights = (l_k[:parts] * torch.exp(m_k[:parts] - m_k[:parts].max())).tolist()
    # Rounded: the last digits of a float32 softmax differ between CPUs (their SIMD paths),
    # and the committed SVG must be the same bytes on every machine.
    share = [round(w / sum(weights), 4) for w in weights]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.6))
    for k in range(parts):
        start, end = k * partition_size, min(length, (k + 1) * partition_size)
        ax.add_patch(Rectangle((start, 0), end - start, share[k], color=USED, alpha=0.85))
        ax.text((start + end) / 2, share[k] + 0.02, f"k = {k}\n{share[k]:.0%}", ha="center")
        ax.axvline(start, color="#555555", linewidth=1)
    ax.set_xlim(0, length)
    ax.set_ylim(0, max(share) + 0.2)
    ax.set_xlabel(
        f"token τ, partitions of {partition_size} (= {partition_size // block_size} "
        f"blocks of B = {block_size})"
    )
    ax.set_ylabel("share of the output")
    ax.set_title("v2: each partition's weight l_k·exp(m_k − m)")
    fig.tight_layout()
    return fig


def allocator_comparison():
    """§7: the source text's comparison table as measurements. The simulator replays one
    seeded workload (300 requests, the §2 "enterprise" mix) on each allocator with Llama-3-8B's
    KV budget on a 24 GB GPU (minus 16 GB of weights)."""
    from minipaged.study.bench.memory import kv_budget_bytes, make_allocators
    from minipaged.study.simulator import simulate
    from minipaged.study.workloads import make_workload

    shape = memory.PRESETS["llama-3-8b"]
    allocators = make_allocators(shape, kv_budget_bytes(24, 16), page_kb=(64, 2048))
    results = simulate(allocators, make_workload("enterprise", 300, seed=0), show_progress=False)
    fig, (waste, seqs) = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.4), sharey=True)
    names = [r.allocator.replace("vattention ", "vAttn\n").replace(" pages", "") for r in results]
    y = range(len(results))
    waste.barh(y, [100 * r.waste_of_reserved for r in results], color=RESERVED)
    seqs.barh(y, [r.mean_seqs for r in results], color=USED)
    for i, r in enumerate(results):
        waste.text(100 * r.waste_of_reserved + 2, i, f"{r.waste_of_reserved:.0%}", va="center")
        seqs.text(r.mean_seqs + 1, i, f"{r.mean_seqs:.0f}", va="center")
    waste.set_yticks(list(y), names)
    waste.invert_yaxis()
    waste.set_xlim(0, 120)
    seqs.set_xlim(0, max(r.mean_seqs for r in results) * 1.3)
    waste.set_xlabel("reserved but empty (%)")
    seqs.set_xlabel("sequences at once")
    fig.tight_layout()
    return fig


RADIX_PROMPTS = {
    "system prompt + question A": [1] * 32 + [2] * 16,
    "system prompt + question B": [1] * 32 + [3] * 16,
    "system prompt + question B, longer": [1] * 32 + [3] * 16 + [4] * 16,
    "another system prompt": [5] * 16,
}


def radix_tree_mermaid() -> str:
    """§7: a real ``RadixCache`` after four prompts (B = 16), drawn as a mermaid flowchart:
    one node per edge of the tree, labelled with its blocks."""
    cache = RadixCache(block_size=16)
    next_block = 0
    for tokens in RADIX_PROMPTS.values():
        matched = cache.match(tokens)
        fresh = len(tokens) // 16 - len(matched)
        cache.insert(tokens, matched + list(range(next_block, next_block + fresh)))
        next_block += fresh
    lines = ["flowchart TB", '    n0(["root"])']
    order = {id(cache.root): 0}

    def visit(node) -> None:
        for child in node.children.values():
            order[id(child)] = len(order)
            tokens = sum(len(chunk) for chunk in child.chunks)
            blocks = ", ".join(str(b) for b in child.blocks)
            lines.append(
                f'    n{order[id(node)]} --> n{order[id(child)]}["blocks {blocks}<br/>'
                f'{tokens} tokens"]'
            )
            visit(child)

    visit(cache.root)
    return "\n".join(lines) + "\n"


FIGURES_SVG: dict[str, Callable] = {
    "kv-per-layer.svg": kv_per_layer,
    "contiguous-vs-paged.svg": contiguous_vs_paged,
    "waste-timeline.svg": waste_timeline,
    "kernel-threads.svg": kernel_threads,
    "v2-partitions.svg": v2_partitions,
    "allocator-comparison.svg": allocator_comparison,
    "external-fragmentation.svg": external_fragmentation,
    "vattention-mapping.svg": vattention_mapping,
}
RADIX_PAGE = DOCS / "explanation" / "comparison.md"
RADIX_MARKER = "<!-- figure: docs/figures.py radix_tree_mermaid -->"


def render(name: str) -> bytes:
    with plt.rc_context(STYLE):
        fig = FIGURES_SVG[name]()
        out = io.BytesIO()
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return out.getvalue()


def radix_block(page_text: str) -> re.Match[str] | None:
    """The mermaid fence right after RADIX_MARKER on the comparison page."""
    body = r"((?:(?!```)[^\n]*\n)*?)"  # whole lines, none of them a fence
    return re.search(re.escape(RADIX_MARKER) + r"\n```mermaid\n" + body + "```", page_text)


def write_all() -> None:
    FIGURES.mkdir(parents=True, exist_ok=True)
    for name in FIGURES_SVG:
        (FIGURES / name).write_bytes(render(name))
        print(f"docs/assets/figures/{name}")
    text = RADIX_PAGE.read_text(encoding="utf-8")
    block = radix_block(text)
    if block is None:
        sys.exit(f"{RADIX_PAGE.name} has no mermaid fence after {RADIX_MARKER}")
    RADIX_PAGE.write_text(text[: block.start(1)] + radix_tree_mermaid() + text[block.end(1) :])
    print(f"docs/explanation/{RADIX_PAGE.name}: radix tree")


if __name__ == "__main__":
    write_all()
