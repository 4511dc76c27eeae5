"""Every sequence's block table $\\mathcal{T}_r$: logical block $j$ -> physical block $p$.

One row per sequence: its label, $L$ (tokens with a cache slot), the entries ``j→p`` and how
full the last block is ($L - (M-1)B$ of $B$ slots, $M = \\lceil L/B \\rceil$). Entries whose
block is shared ($\\mathcal{R}[p] > 1$) are black on white, like the pool; entries the step
under the cursor changed are underlined. A swapped-out table maps to host blocks and says so.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text

from minipaged.block_manager import TableState
from tui.colours import CHANGED, SELECTED, seq_label
from tui.pane import Pane, Selection
from tui.pool_view import SHARED
from tui.timeline import Frame


def table_row(
    seq: int,
    table: TableState,
    before: TableState | None,
    refcounts: tuple[int, ...],
    block_size: int,
    selection: Selection,
) -> Text:
    row = Text()
    row.append(f"s{seq:<2}", style=seq_label(seq) + (SELECTED if selection.seq == seq else Style()))
    where = " host" if table.pool == "host" else ""
    row.append(f"{where} L={table.num_tokens}  ", style="dim")
    for j, p in enumerate(table.blocks):
        style = SHARED if refcounts[p] > 1 else Style()
        # New in this step: the table was just made, moved pools, grew, or its entry changed.
        moved = before is None or before.pool != table.pool
        if moved or j >= len(before.blocks) or before.blocks[j] != p:
            style += CHANGED
        if table.pool == "device" and selection.block == p:
            style += SELECTED
        row.append(f"{j}→", style="dim")
        row.append(str(p), style=style)
        row.append(" ")
    fill = table.num_tokens - (len(table.blocks) - 1) * block_size if table.blocks else 0
    row.append(f"[{fill}/{block_size}]", style="dim")
    return row


class TablesView(Pane):
    """Block tables of the frame. Guarantees: one row per sequence that holds a table, in id
    order, whose entries are exactly its snapshot $\\mathcal{T}_r$; then one line per live
    sequence without a table (waiting, or preempted by recomputation)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("block tables T_r  (j→p)", id=id)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        state, before = frame.step.state, frame.previous.state
        lines = []
        for seq, table in sorted(state.tables.items()):
            refcounts = state.device_refcounts if table.pool == "device" else state.host_refcounts
            lines.append(
                table_row(
                    seq,
                    table,
                    before.tables.get(seq),
                    refcounts,
                    state.block_size,
                    self.selection,
                )
            )
        for seq, view in sorted(frame.step.sequences.items()):
            if seq not in state.tables:
                line = Text()
                line.append(f"s{seq}", style=seq_label(seq))
                line.append(f" {view.status}: no blocks yet", style="dim")
                lines.append(line)
        if not lines:
            return Text("no sequence holds blocks", style="dim")
        return Text("\n").join(lines)
