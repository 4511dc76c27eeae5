"""The physical block pools as grids: the device pool ($\\mathcal{P}_{\\max}$ blocks) and,
below it, the host swap pool (§6).

Each cell is ``p:R`` for block $p$ with refcount $\\mathcal{R}[p]$, in the colour block $p$
wears (``tui.block_colours``; its table entries and tokens wear it too; a host block wears its
contents' colour from the device, in italics). A free block shows ``·``, or ``c`` while
the prefix cache still keeps its contents for a later prefix hit. A shared block
($\\mathcal{R}[p] > 1$) shows its R in black on white. A ``•`` glued to the front of a cell
means the step under the cursor changed that block: allocated, freed, shared, copied or
swapped. A pool too large to draw (a trace at real scale) shows its used blocks and
summarises the free ones as ranges.
"""

from __future__ import annotations

from functools import lru_cache

from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text

from minipaged.block_state import BlockState
from minipaged.events import Event
from tui.block_colours import Colouring
from tui.colours import SELECTED, SHARED, block_meta, block_style
from tui.pane import Pane, Selection
from tui.timeline import Frame

MARK = Style(color="bright_yellow", bold=True)
CACHED = Style(color="cyan", dim=True)
MAX_ROWS = 10  # per pool: a pool sized for real memory (thousands of blocks) is summarised


def changed_blocks(events: tuple[Event, ...], pool: str) -> set[int]:
    """The blocks of ``pool`` that ``events`` touched."""
    return {block for event in events for block in event.blocks_in(pool)}


def owners(state: BlockState, pool: str) -> dict[int, list[int]]:
    """Block -> the sequences whose tables in ``pool`` hold it, in id order."""
    held: dict[int, list[int]] = {}
    for seq, table in sorted(state.tables.items()):
        if table.pool == pool:
            for block in table.blocks:
                held.setdefault(block, []).append(seq)
    return held


def ranges(blocks: list[int], limit: int = 8) -> str:
    """``[0, 1, 2, 5, 7, 8]`` as ``"0–2, 5, 7–8"``; past ``limit`` ranges, how many more."""
    out: list[str] = []
    start = prev = None
    for block in [*blocks, None]:
        if block is not None and prev is not None and block == prev + 1:
            prev = block
            continue
        if start is not None:
            out.append(f"{start}" if start == prev else f"{start}–{prev}")
        start = prev = block
    more = f", … ({len(out) - limit} more ranges)" if len(out) > limit else ""
    return ", ".join(out[:limit]) + more


def pool_grid(
    state: BlockState,
    pool: str,
    changed: set[int],
    selection: Selection,
    width: int,
    gap: int = 1,
    summarise: bool = False,
    colours: Colouring | None = None,
) -> Text:
    """The cells of ``pool``, ``gap`` spaces apart, as many to a row as ``width`` allows. A
    pool with more cells than ``MAX_ROWS`` rows hold draws only the blocks in use (or changed)
    and lists the free ones as ranges; with ``summarise`` (a short terminal) any pool draws
    only those, its header counting the rest. ``colours``: the colour each live block wears
    (none: all ``NEUTRAL``)."""
    colours = colours or Colouring()
    refcounts = state.device_refcounts if pool == "device" else state.host_refcounts
    held = owners(state, pool)
    cached = set(state.cached) if pool == "device" else set()
    digits = len(str(max(len(refcounts) - 1, 0)))
    per_row = max(1, width // (digits + 3 + gap))  # a cell: the gap, the mark, the id, ':', R
    drawn = list(range(len(refcounts)))
    huge = len(refcounts) > per_row * MAX_ROWS
    if huge or summarise:
        drawn = [p for p in drawn if refcounts[p] or p in changed or p in cached]
    shown = drawn[: per_row * MAX_ROWS]
    text = Text(no_wrap=True, overflow="crop")
    for i, block in enumerate(shown):
        if i and i % per_row == 0:
            text.append("\n")
        text.append(" " * gap)
        text.append("•" if block in changed else " ", style=MARK)
        holders = held.get(block, [])
        chosen = (pool == "device" and selection.block == block) or selection.seq in holders
        r = refcounts[block]
        colour = colours.colour(block, pool)
        look, r_look = cell_look(block, pool, colour, min(r, 2), chosen, block in cached)
        if not r:
            text.append(f"{block:>{digits}}:{'c' if block in cached else '·'}", style=look)
            continue
        text.append(f"{block:>{digits}}", style=look)
        text.append(f":{r if r < 10 else '+'}", style=r_look)
    if len(shown) < len(drawn):
        rest = drawn[len(shown) :]
        text.append(f"\n… {len(rest)} more blocks in use not drawn", style="dim")
    if huge:
        free = [p for p in range(len(refcounts)) if not refcounts[p]]
        newline = "\n" if shown else ""
        text.append(f"{newline}free ({len(free)}): {ranges(free)}", style="dim")
    return text


@lru_cache(maxsize=4096)
def cell_look(
    block: int, pool: str, colour: str, refs: int, chosen: bool, cached: bool
) -> tuple[Style, Style]:
    """A cell's styles (its id, its R) for $\\mathcal{R}$ = ``refs`` (0, 1, or 2 for more)
    in ``colour``, clickable and naming the block. Built once each: a pool has many cells
    and few looks."""
    meta = block_meta(block, pool)
    if not refs:
        style = SELECTED if chosen else CACHED if cached else Style(dim=True)
        return style + meta, style + meta
    body = block_style(colour, pool) + (SELECTED if chosen else Style())
    return body + meta, (SHARED if refs > 1 else body) + meta


class PoolView(Pane):
    """Both pools of the frame. Guarantees: blocks appear once each, in id order (a pool too
    large to draw shows the used ones and the free ranges); a cell's number is exactly
    $\\mathcal{R}[p]$ of the snapshot; a used cell carries its block's colour and id."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("physical blocks", id=id)

    def show(self, frame: Frame, selection: Selection) -> None:
        full = "physical blocks (a colour is one block, the same in every pane)"
        fits = len(full) + 8 <= self.outer_size.width  # corners, padding, the ellipsis
        self.border_title = full if fits else "physical blocks"
        super().show(frame, selection)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        state = frame.step.state
        device, host = state.device_refcounts, state.host_refcounts
        gap = 3 if self.screen.has_class("-projection") else 1  # room to read from the back
        short = self.screen.has_class("-compact")
        used = sum(1 for r in device if r)
        parts: list[RenderableType] = [
            Text(f"device: {len(device)} blocks, B={state.block_size}, {used} used", style="dim"),
            pool_grid(
                state,
                "device",
                changed_blocks(frame.step.events, "device"),
                self.selection,
                width,
                gap,
                colours=frame.colours,
            ),
        ]
        if host:
            host_used = sum(1 for r in host if r)
            parts.append(Text(f"host swap pool: {len(host)} blocks, {host_used} used", style="dim"))
            grid = pool_grid(
                state,
                "host",
                changed_blocks(frame.step.events, "host"),
                self.selection,
                width,
                gap,
                summarise=short,
                colours=frame.colours,
            )
            if grid.plain:  # a short terminal's empty host pool: its header says it all
                parts.append(grid)
        return Group(*parts)
