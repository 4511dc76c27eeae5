"""Every sequence's block table $\\mathcal{T}_r$: logical block $j$ -> physical block $p$, as a
before/after diff of the step under the cursor.

One row per sequence: its label, $L$ (tokens with a cache slot; ``L=7→8`` when the step
changed it), the entries ``j→p`` and how full the last block is ($L - (M-1)B$ of $B$ slots,
$M = \\lceil L/B \\rceil$). Each $p$ wears its block's colour; a shared block
($\\mathcal{R}[p] > 1$) is followed by ``×R`` in black on white. An entry the step changed is
underlined, and one that moved shows the old block struck through: ``1→1̶›2``. A swapped-out
table maps to host blocks and says so. Sequences without a table say why they have none.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text

from minipaged.block_state import TableState
from tui.block_colours import Colouring
from tui.colours import CHANGED, SELECTED, SHARED, block_meta, block_style, seq_label
from tui.pane import Pane, Selection
from tui.timeline import Frame, Stream

OLD = Style(dim=True, strike=True)


def table_row(
    seq: int,
    table: TableState,
    before: TableState | None,
    refcounts: tuple[int, ...],
    block_size: int,
    selection: Selection,
    colours: Colouring,
) -> Text:
    row = Text()
    row.append(f"s{seq:<2}", style=seq_label(seq) + (SELECTED if selection.seq == seq else Style()))
    where = " host" if table.pool == "host" else ""
    row.append(f"{where} L=", style="dim")
    if before is not None and before.num_tokens != table.num_tokens:
        row.append(f"{before.num_tokens}→", style="dim")
    row.append(f"{table.num_tokens}  ", style="dim")
    moved = before is None or before.pool != table.pool  # just made, or changed pools
    for j, p in enumerate(table.blocks):
        old = None if moved or j >= len(before.blocks) else before.blocks[j]
        style = block_style(colours.colour(p, table.pool), table.pool)
        if moved or old != p:
            style += CHANGED
        if table.pool == "device" and selection.block == p:
            style += SELECTED
        row.append(f"{j}→", style="dim")
        if old is not None and old != p:
            row.append(str(old), style=OLD)
            row.append("›", style="dim")
        row.append(str(p), style=style + block_meta(p, table.pool))
        if refcounts[p] > 1:
            row.append(f"×{refcounts[p]}", style=SHARED)
        row.append(" ")
    fill = table.num_tokens - (len(table.blocks) - 1) * block_size if table.blocks else 0
    row.append(f"[{fill}/{block_size}]", style="dim")
    return row


def why_no_table(stream: Stream, frame: Frame) -> str:
    """Why a live sequence holds no blocks: never admitted yet, or preempted by recomputation
    (its blocks were dropped; all its tokens will be prefilled again)."""
    block_size = frame.step.state.block_size
    length = len(stream.token_ids)
    need = -(-length // block_size)
    if length > stream.prompt_len:
        # With a prefix cache some of them may still be cached when it returns.
        upto = "up to " if frame.step.state.cached else ""
        return (
            f"{stream.status}: recompute dropped its blocks; {upto}{length} tokens "
            f"prefill again ({need} blocks)"
        )
    return f"{stream.status}: not admitted yet; its {length}-token prompt needs {need} blocks"


class TablesView(Pane):
    """Block tables of the frame. Guarantees: one row per sequence that holds a table, in id
    order, whose entries are exactly its snapshot $\\mathcal{T}_r$; then one line per live
    sequence without a table, saying why it has none."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("block tables T_r  (j→p, old›new)", id=id)

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
                    frame.colours,
                )
            )
        for stream in frame.streams:
            if stream.status != "finished" and stream.seq_id not in state.tables:
                line = Text()
                line.append(f"s{stream.seq_id}", style=seq_label(stream.seq_id))
                line.append(f" {why_no_table(stream, frame)}", style="dim")
                lines.append(line)
        if not lines:
            return Text("no sequence holds blocks", style="dim")
        return Text("\n").join(lines)
