"""The selection, explained: a token's address translation (§3) or a block's slots.

- A token $t$ of sequence $r$: $j = \\lfloor t/B \\rfloor$, $o = t \\bmod B$,
  $p = \\mathcal{T}_r[j]$, slot $= p \\cdot B + o$ — the worked example of §3, with the
  frame's numbers.
- A block $p$: its refcount, which tables hold it at which $j$, and its $B$ slots, filled or
  empty, so internal fragmentation (§3) is visible.
- A sequence: its request, its queue, $L$ and $M = \\lceil L/B \\rceil$.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.markup import escape
from rich.style import Style
from rich.text import Text

from tui.colours import SHARED, block_meta, block_style, block_tag, seq_label
from tui.pane import Pane, Selection
from tui.timeline import Frame

FILLED, EMPTY = "■", "□"


def translate(frame: Frame, seq: int, t: int, words) -> Text:
    """Token ``t`` of ``seq`` through its block table, step by step."""
    state = frame.step.state
    block_size = state.block_size
    stream = next((s for s in frame.streams if s.seq_id == seq), None)
    text = Text()
    text.append(f"s{seq}", style=seq_label(seq))
    if stream is None or not 0 <= t < len(stream.token_ids):
        return text.append(f" has no token {t}", style="dim")
    text.append(f" token t={t} {words.piece(stream.token_ids[t])!r}: ")
    j, o = divmod(t, block_size)
    text.append(f"j=⌊{t}/{block_size}⌋={j}, o={t} mod {block_size}={o}")
    table = state.tables.get(seq)
    if table is None or stream.status == "finished":
        return text.append(f" → s{seq} holds no block table now", style="dim")
    if t >= table.num_tokens:
        return text.append(" → no slot yet: the next step writes its key and value", style="dim")
    p = table.blocks[j]
    pool = "host " if table.pool == "host" else ""
    text.append(f" → p=T_{seq}[{j}]={pool}")
    look = block_style(frame.colours.colour(p, table.pool), table.pool)
    text.append(str(p), style=look + block_meta(p, table.pool))
    text.append(f" → slot p·B+o = {p}·{block_size}+{o} = {p * block_size + o}", style="bold")
    return text


def block_slots(frame: Frame, block: int) -> Text:
    """Device block ``block``: refcount, holders and its ``B`` slots."""
    state = frame.step.state
    block_size = state.block_size
    r = state.device_refcounts[block] if block < len(state.device_refcounts) else 0
    text = Text()
    look = block_style(frame.colours.colour(block))
    text.append(f"block {block}{block_tag(block)}", style=look + block_meta(block))
    text.append(f" R={r}", style=SHARED if r > 1 else Style())
    holders = [
        (seq, j, table)
        for seq, table in sorted(state.tables.items())
        if table.pool == "device"
        for j, p in enumerate(table.blocks)
        if p == block
    ]
    if not holders:
        cached = " (its contents kept in the prefix cache)" if block in state.cached else ""
        return text.append(f": free{cached}", style="dim")
    text.append(": held by ")
    for n, (seq, j, _) in enumerate(holders):
        text.append(", " if n else "")
        text.append(f"s{seq}", style=seq_label(seq))
        text.append(f" as j={j}")
    filled = max(min(block_size, table.num_tokens - j * block_size) for _, j, table in holders)
    text.append("\nslots ")
    for o in range(block_size):
        text.append(FILLED if o < filled else EMPTY, style="bold" if o < filled else "dim")
    text.append(f" {block * block_size}–{block * block_size + block_size - 1}: ")
    text.append(f"{filled} of B={block_size} filled")
    if filled < block_size:
        text.append(f", {block_size - filled} empty (internal fragmentation)", style="yellow")
    return text


class Inspector(Pane):
    """What is selected, explained. Guarantees: a token's ``slot`` is $p \\cdot B + o$ with
    $p = \\mathcal{T}_r[\\lfloor t/B \\rfloor]$ of the frame's snapshot; a block's filled
    slots are the most any holder of it has written."""

    DEFAULT_CSS = """
    Inspector { display: none; }
    Inspector.-active { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("selection", id=id)
        self.words = None

    def show(self, frame: Frame, selection: Selection) -> None:
        full = "selection (↑/↓ sequence, [/] token, enter: block, esc)"
        fits = len(full) + 8 <= self.outer_size.width  # corners, padding, the ellipsis
        # A border title is Rich markup: "[/]" must be escaped to show as text.
        self.border_title = escape(full if fits else "selection (↑↓ [ ] enter esc)")
        super().show(frame, selection)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        chosen = self.selection
        if chosen.token is not None and chosen.seq is not None and self.words is not None:
            return translate(frame, chosen.seq, chosen.token, self.words)
        if chosen.block is not None:
            return block_slots(frame, chosen.block)
        if chosen.seq is not None:
            stream = next((s for s in frame.streams if s.seq_id == chosen.seq), None)
            if stream is None:
                return Text(f"s{chosen.seq} is not in this step", style="dim")
            text = Text()
            text.append(f"s{chosen.seq}", style=seq_label(chosen.seq))
            text.append(
                f" of request {stream.request_id}, {stream.status}, "
                f"{len(stream.token_ids)} tokens ({stream.prompt_len} prompt); "
                "[ and ] pick a token"
            )
            return text
        return Text("")
