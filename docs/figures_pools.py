"""Two pictures of where a pool's memory goes, drawn by ``docs/figures.py`` from the project's
own allocators: §2's external fragmentation (holes that add up to enough but fit nothing) and
§7's vAttention (contiguous virtual ranges, physical pages mapped under them on demand)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from figure_style import FREE, RESERVED, SEQUENCES, WIDTH_IN
from matplotlib.patches import Rectangle

from minipaged import memory
from minipaged.block_manager import BlockManager
from minipaged.study.baselines import VAttentionAllocator
from minipaged.study.orca_baselines import OrcaReservationAllocator

# §2's example: five requests fill most of a 1,024-slot pool, the second and fourth finish,
# and a new request of C_req slots arrives.
POOL, BLOCK = 1024, 16
BUFFERS = {"A": 200, "B": 150, "C": 250, "D": 120, "E": 180}
FINISHED = ("B", "D")
REQUEST = 300


def _bar(ax, start: float, size: float, color: str, label: str = "", **style) -> None:
    ax.add_patch(Rectangle((start, 0), size, 1, facecolor=color, edgecolor="white", **style))
    if label:
        ax.text(start + size / 2, 0.5, label, ha="center", va="center", fontsize=9)


def external_fragmentation():
    """§2's inequality $\\max_j c(m_j) < C_{req} \\le \\sum_j c(m_j)$ as a picture: the holes a
    contiguous allocator (Orca, each buffer its exact size) leaves, which add up to more than
    the request but none of which holds it; and the real block manager placing the same
    request in blocks taken from all three holes."""
    contiguous = OrcaReservationAllocator(POOL, "oracle")
    paged = BlockManager(num_gpu_blocks=POOL // BLOCK, block_size=BLOCK)
    for seq, size in enumerate(BUFFERS.values()):
        assert contiguous.admit(seq, size, POOL, final_len=size)
        paged.allocate(seq, size)
    for name in FINISHED:
        seq = list(BUFFERS).index(name)
        contiguous.release(seq)
        paged.free(seq)
    holes = contiguous.heap.holes
    sizes = [size for _, size in holes]
    assert memory.external_fragmentation_stalls(sizes, REQUEST)
    assert not contiguous.admit("new", REQUEST, POOL, final_len=REQUEST)
    table = paged.allocate("new", REQUEST).blocks

    fig, (top, sums, bottom) = plt.subplots(
        3, 1, figsize=(WIDTH_IN, 3.6), gridspec_kw={"height_ratios": [1, 0.55, 1]}
    )
    colors = dict(zip(BUFFERS, SEQUENCES, strict=False))
    for seq, name in enumerate(BUFFERS):
        if name not in FINISHED:
            start, size = contiguous._buffers[seq]
            _bar(top, start, size, colors[name], name)
    for start, size in holes:
        _bar(top, start, size, FREE, f"{size}", hatch="//")
    top.set_title(
        f"contiguous: {len(holes)} holes, {sum(sizes)} slots free; largest {max(sizes)}",
        fontsize=10,
    )
    x = 0
    for size in sizes:
        _bar(sums, x, size, FREE, hatch="//")
        x += size
    sums.add_patch(Rectangle((0, 0), REQUEST, 1, fill=False, edgecolor=RESERVED, linewidth=2))
    sums.text(
        sum(sizes) + 12, 0.5, f"new request: {REQUEST} ≤ {sum(sizes)}, but > {max(sizes)}",
        va="center", fontsize=9,
    )
    for seq, name in enumerate(BUFFERS):
        if name not in FINISHED:
            for block in paged.table(seq).blocks:
                _bar(bottom, block * BLOCK, BLOCK, colors[name], linewidth=0.3)
    for block in table:
        _bar(bottom, block * BLOCK, BLOCK, RESERVED, linewidth=0.3)
    for block in paged.device.free_blocks():
        _bar(bottom, block * BLOCK, BLOCK, FREE, linewidth=0.3)
    bottom.set_title(
        f"paged, B = {BLOCK}: the request's {len(table)} blocks (orange) fill all three holes",
        fontsize=10,
    )
    for ax in (top, sums, bottom):
        ax.set_xlim(0, POOL)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
    sums.set_xticks([])
    sums.spines["bottom"].set_visible(False)
    bottom.set_xlabel("slots of one pool")
    fig.tight_layout()
    return fig


def vattention_mapping():
    """§7: vAttention gives each sequence a contiguous virtual range of $L_{\\max}$ tokens and
    maps physical pages under it only as tokens arrive. Drawn from ``VAttentionAllocator``'s
    page tables: two sequences, pages of 32 tokens, a pool of 12 physical pages."""
    page, pool_pages, max_len = 32, 12, 256
    alloc = VAttentionAllocator(pool_pages * page, page_size=page)
    lengths = {"a": 100, "b": 50}
    assert alloc.admit("a", 70, max_len) and alloc.admit("b", 50, max_len)
    for _ in range(lengths["a"] - 70):  # a grows after b arrived: its 4th page comes later
        assert alloc.grow("a")
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.4))
    virtual = alloc.virtual_pages("a")
    rows = {"a": 3.2, "b": 2.0}
    for (seq, y), color in zip(rows.items(), SEQUENCES, strict=False):
        table = alloc.page_table(seq)
        for k in range(virtual):
            mapped = k < len(table)
            filled = min(page, max(0, lengths[seq] - k * page))
            ax.add_patch(
                Rectangle(
                    (k, y), 1, 0.7, facecolor=color if mapped else "white",
                    edgecolor="#555555", hatch=None if mapped else "..", alpha=0.9,
                )
            )
            if mapped:
                ax.text(k + 0.5, y + 0.35, f"{filled}", ha="center", va="center", color="white",
                        fontsize=9)
                target = table[k] * virtual / pool_pages + 0.5 * virtual / pool_pages
                ax.annotate("", xy=(target, 0.75), xytext=(k + 0.5, y),
                            arrowprops={"arrowstyle": "->", "color": color, "lw": 1})
        ax.text(-0.15, y + 0.35, f"seq {seq}", ha="right", va="center")
    owner = {p: seq for seq in rows for p in alloc.page_table(seq)}
    width = virtual / pool_pages
    for p in range(pool_pages):
        color = SEQUENCES[list(rows).index(owner[p])] if p in owner else FREE
        ax.add_patch(Rectangle((p * width, 0), width, 0.7, facecolor=color, edgecolor="white"))
        ax.text((p + 0.5) * width, 0.35, f"{p}", ha="center", va="center", fontsize=9,
                color="white" if p in owner else "#555555")
    ax.text(-0.15, 0.35, "physical", ha="right", va="center")
    ax.set_xlim(-1.3, virtual)
    ax.set_ylim(-0.1, 4.2)
    ax.axis("off")
    ax.set_title(
        f"each sequence: a virtual range of L_max = {max_len} tokens, {virtual} pages of {page}\n"
        "physical pages mapped as tokens arrive; dotted: reserved, no memory",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
