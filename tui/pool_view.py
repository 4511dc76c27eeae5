"""The physical block pools as grids: the device pool ($\\mathcal{P}_{\\max}$ blocks) and,
below it, the host swap pool (§6).

Each cell is ``p:R`` for block $p$ with refcount $\\mathcal{R}[p]$, painted in the colour of
the sequence that owns it (the lowest sequence id among its holders). A free block shows ``·``,
or ``c`` while the prefix cache still keeps its contents for a later prefix hit. A shared
block ($\\mathcal{R}[p] > 1$) shows its R in black on white. A ``•`` before a cell means the
step under the cursor changed that block: allocated, freed, shared, copied or swapped.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text

from minipaged.block_manager import BlockState
from minipaged.events import Event
from tui.colours import SELECTED, seq_colour
from tui.event_log import touched_blocks
from tui.pane import Pane, Selection
from tui.timeline import Frame

SHARED = Style(color="black", bgcolor="white", bold=True)
MARK = Style(color="bright_yellow", bold=True)
CACHED = Style(color="cyan", dim=True)
MAX_ROWS = 10  # per pool: a pool sized for real memory (thousands of blocks) is summarised


def changed_blocks(events: tuple[Event, ...], pool: str) -> set[int]:
    """The blocks of ``pool`` that ``events`` touched."""
    return {block for event in events for block in touched_blocks(event, pool)}


def owners(state: BlockState, pool: str) -> dict[int, list[int]]:
    """Block -> the sequences whose tables in ``pool`` hold it, in id order."""
    held: dict[int, list[int]] = {}
    for seq, table in sorted(state.tables.items()):
        if table.pool == pool:
            for block in table.blocks:
                held.setdefault(block, []).append(seq)
    return held


def pool_grid(
    state: BlockState,
    pool: str,
    changed: set[int],
    selection: Selection,
    width: int,
) -> Text:
    """The cells of ``pool``, as many to a row as ``width`` allows, for at most
    ``MAX_ROWS`` rows; a pool too large for that ends with a line counting the rest."""
    refcounts = state.device_refcounts if pool == "device" else state.host_refcounts
    held = owners(state, pool)
    cached = set(state.cached) if pool == "device" else set()
    digits = len(str(max(len(refcounts) - 1, 0)))
    per_row = max(1, width // (digits + 3))  # a cell is the mark, the id, ':' and R
    shown = min(len(refcounts), per_row * MAX_ROWS)
    text = Text(no_wrap=True, overflow="crop")
    for block in range(shown):
        if block and block % per_row == 0:
            text.append("\n")
        text.append("•" if block in changed else " ", style=MARK)
        holders = held.get(block, [])
        chosen = (pool == "device" and selection.block == block) or selection.seq in holders
        if pool == "device":
            click = Style.from_meta({"@click": f"app.select_block({block})"})
        elif holders:
            click = Style.from_meta({"@click": f"app.select_seq({holders[0]})"})
        else:
            click = Style()
        if not holders:
            style = SELECTED if chosen else CACHED if block in cached else Style(dim=True)
            text.append(f"{block:>{digits}}:{'c' if block in cached else '·'}", style=style + click)
            continue
        body = Style(color="black", bgcolor=seq_colour(holders[0]))
        if chosen:
            body += SELECTED
        text.append(f"{block:>{digits}}", style=body + click)
        r = refcounts[block]
        text.append(f":{r if r < 10 else '+'}", style=(SHARED if r > 1 else body) + click)
    if shown < len(refcounts):
        rest = refcounts[shown:]
        text.append(
            f"\n… {len(rest)} more blocks not drawn, {sum(1 for r in rest if r)} of them in use",
            style="dim",
        )
    return text


class PoolView(Pane):
    """Both pools of the frame. Guarantees: blocks appear once each, in id order (past
    ``MAX_ROWS`` rows, a line counts the rest and how many of them are in use); a cell's
    number is exactly $\\mathcal{R}[p]$ of the snapshot; a cell is coloured iff some table in
    that pool holds the block."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("physical blocks", id=id)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        state = frame.step.state
        device, host = state.device_refcounts, state.host_refcounts
        used = sum(1 for r in device if r)
        parts: list[RenderableType] = [
            Text(f"device: {len(device)} blocks, B={state.block_size}, {used} used", style="dim"),
            pool_grid(
                state,
                "device",
                changed_blocks(frame.step.events, "device"),
                self.selection,
                width,
            ),
        ]
        if host:
            host_used = sum(1 for r in host if r)
            parts += [
                Text(f"host swap pool: {len(host)} blocks, {host_used} used", style="dim"),
                pool_grid(
                    state, "host", changed_blocks(frame.step.events, "host"), self.selection, width
                ),
            ]
        return Group(*parts)
