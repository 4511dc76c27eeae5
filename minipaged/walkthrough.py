"""A narrated walk through the block manager: the source text's §3, §5 and §6 on a small pool.

``minipaged demo`` prints it. Each step runs the real ``BlockManager``, prints the events it
recorded with their narration, then draws the pools and block tables, and checks the
invariants. It needs no model: it shows the memory manager alone.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from minipaged import invariants
from minipaged.block_manager import BlockManager

SEQ_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red"]


def render_pool(manager: BlockManager, pool: str) -> Text:
    """One cell per physical block: its id, and $\\mathcal{R}[p]$ when it is in use, coloured by
    the first sequence that holds it; shared blocks (R > 1) are bold."""
    allocator = manager.device if pool == "device" else manager.host
    owner = {}
    for seq, table in sorted(manager.tables.items()):
        if table.pool == pool:
            for block in table.blocks:
                owner.setdefault(block, seq)
    text = Text(f"{pool:>6} ")
    for block, r in enumerate(allocator.refcounts()):
        if r == 0:
            text.append(f"{block:>3}:·", style="dim")
        else:
            colour = SEQ_COLOURS[owner[block] % len(SEQ_COLOURS)]
            text.append(f"{block:>3}:{r}", style=f"bold {colour}" if r > 1 else colour)
    return text


def render_tables(manager: BlockManager) -> Table:
    grid = Table(box=None, show_header=True, header_style="bold")
    grid.add_column("seq")
    grid.add_column("pool")
    grid.add_column("L")
    grid.add_column("T_r (logical j -> physical p)")
    grid.add_column("last block")
    for seq, table in sorted(manager.tables.items()):
        colour = SEQ_COLOURS[seq % len(SEQ_COLOURS)]
        blocks = "  ".join(f"{j}->{p}" for j, p in enumerate(table.blocks))
        fill = f"{table.last_block_fill}/{manager.block_size}"
        grid.add_row(Text(str(seq), style=colour), table.pool, str(table.num_tokens), blocks, fill)
    return grid


def _steps(manager: BlockManager) -> list[tuple[str, Callable[[], object]]]:
    def generate(seq: int, tokens: int) -> None:
        for _ in range(tokens):
            manager.append_slot(seq)

    return [
        (
            "§3 Allocate a 10-token prompt with B = 4: ceil(10/4) = 3 blocks, the last one "
            "half full (internal waste: 2 slots, always < B).",
            lambda: manager.allocate(0, 10),
        ),
        (
            "§5 Parallel sampling, n = 3: fork seq 0 twice. The tables are copied and every "
            "refcount rises by k - 1 = 2; no key or value is copied.",
            lambda: (manager.fork(0, 1), manager.fork(0, 2)),
        ),
        (
            "§5 Each sample writes token 10 into logical block 2, which all three share. "
            "Seq 0 and seq 1 copy it first (copy-on-write); seq 2, the last holder (R = 1), "
            "writes in place.",
            lambda: [manager.append_slot(seq) for seq in (0, 1, 2)],
        ),
        (
            "Decode 6 more tokens each: new blocks come from anywhere in the pool.",
            lambda: [generate(seq, 6) for seq in (0, 1, 2)],
        ),
        (
            "§6 Swapping: the pool is nearly full, so the latest sequence (seq 2) is preempted "
            "to host memory. Its device blocks are freed for the others.",
            lambda: manager.swap_out([2]),
        ),
        (
            "Seq 0 finishes and frees its blocks: the prompt blocks it shared stay alive for "
            "seq 1 and seq 2 (R drops), its private blocks return to the free list.",
            lambda: manager.free(0),
        ),
        (
            "§6 Room has returned: swap seq 2 back in; decoding resumes with nothing lost.",
            lambda: manager.swap_in([2]),
        ),
        (
            "Every sequence finishes: every block is free again (no leak).",
            lambda: [manager.free(seq) for seq in (1, 2)],
        ),
    ]


def run(
    console: Console | None = None,
    steps: int | None = None,
    pause: Callable[[], bool] | None = None,
) -> None:
    """Print the walkthrough, step by step: the first ``steps`` of them (all by default).
    ``pause``, when given, is called between steps; the walk stops when it returns False."""
    console = console or Console()
    manager = BlockManager(num_gpu_blocks=12, num_cpu_blocks=8, block_size=4, watermark=0.0)
    story = _steps(manager)[:steps]
    for number, (story_text, action) in enumerate(story, start=1):
        action()
        lines = [Text(story_text, style="italic"), Text("")]
        lines += [Text(f"  {event.narrate()}") for event in manager.pop_events()]
        lines += [Text("\npools, one cell per block p as p:R[p] (· = free):", style="dim")]
        lines += [render_pool(manager, "device"), render_pool(manager, "host")]
        broken = [name for name, problems in invariants.check(manager).items() if problems]
        verdict = "invariants: all hold" if not broken else f"invariants BROKEN: {broken}"
        lines.append(Text(verdict, style="green" if not broken else "bold red"))
        console.print(Panel(Text("\n").join(lines), title=f"step {number}", title_align="left"))
        if manager.tables:
            console.print(render_tables(manager))
        if pause is not None and number < len(story) and not pause():
            return
