"""The attention view: one query's decode (source text §4) as the engine computed it at the step
under the cursor, read from the probe's record (``minipaged.attention_probe``), never recomputed
from the cache as it stands later.

It shows, for the chosen sequence, layer and query head:

- the block-table walk: each logical block $j$, its physical block $p = \\mathcal{T}_r[j]$ in
  the identity it wears in every pane, the slots $pB + o$ read and the tokens they hold; the
  scores $s_\\tau$ as a strip (one bar per token); the running $m$ and $\\ell$ after the block,
  and the factor $e^{m_\\text{old} - m_\\text{new}}$ that rescales acc when the max moves;
- the block being read (``j``, stepped with ``.`` and ``,``) in words, with its numbers;
- the final weights (the tokens this query attended to most) and the output against the
  model's own (max |Δ|);
- v2: the positions cut into partitions, each one's $(m_k, \\ell_k)$ and weight, and the merge;
- GQA: which query heads read the same KV head.

A prompt, or a chunk of one, computes several queries in one step: the view starts on the
chunk's last query (the one a finished prompt samples from) and ``[``/``]`` choose another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text

from minipaged.attention_probe import AttentionRecord
from minipaged.attention_walk import Walk, walk
from tui.colours import block_style, seq_label
from tui.pane import Pane
from tui.timeline import Frame

BARS = "▁▂▃▄▅▆▇█"
TOP = 5  # the most attended tokens named


@dataclass(frozen=True, slots=True)
class AttentionCursor:
    """What the view shows: sequence ``seq``'s row of the step, its query number ``query``
    among the row's positions (-1: the last), ``layer``, query ``head`` and the block being
    read, ``j``."""

    seq: int
    layer: int = 0
    head: int = 0
    query: int = -1
    j: int = 0


def record_of(frame: Frame, seq: int) -> AttentionRecord | None:
    """``seq``'s row in the frame's step, if the step computed one and the probe was on."""
    records = frame.step.attention or ()
    return next((r for r in records if r.seq_id == seq), None)


def why_no_record(frame: Frame, seq: int) -> str:
    """Why the view has nothing to show for ``seq`` at this frame, and what to do."""
    if frame.index == 0:
        return "nothing has run yet: n runs step 1"
    if frame.step.attention is None:
        return (
            "no attention is recorded at this frame: a replayed trace or a student's run keeps "
            "none (run a scenario live); a speculative step keeps it on its second frame, after "
            "the verify pass (n)"
        )
    status = next((s.status for s in frame.streams if s.seq_id == seq), "gone")
    return f"s{seq} computed nothing at step {frame.index} ({status}): n/b to a step it runs in"


def the_walk(frame: Frame, cursor: AttentionCursor) -> Walk | None:
    record = record_of(frame, cursor.seq)
    if record is None:
        return None
    return walk(record, cursor.layer, cursor.head, cursor.query)


class AttentionView(Pane):
    """The view (module docstring). Hidden until the app opens it (screen class
    ``-attention``); it then takes the place of the inspector, tokens and log, beside the pools
    and tables, which highlight the block being read."""

    SCOPED_CSS = False  # its rules also hide the panes it replaces
    DEFAULT_CSS = """
    AttentionView { display: none; height: 1fr; }
    Screen.-attention AttentionView { display: block; }
    Screen.-attention #inspector, Screen.-attention #tokens, Screen.-attention #events {
        display: none;
    }
    /* A short screen gives the tables' rows to the view: the pools still show the block. */
    Screen.-attention.-compact #tables { display: none; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("attention", id=id)
        self.cursor: AttentionCursor | None = None

    def draw(self, frame: Frame, width: int) -> RenderableType:
        cursor = self.cursor
        if cursor is None:
            return Text("")
        found = the_walk(frame, cursor)
        if found is None:
            return Text(why_no_record(frame, cursor.seq), style="dim")
        stream = next(s for s in frame.streams if s.seq_id == cursor.seq)
        words = self.app.query_one("#tokens").words
        piece = lambda t: words.piece(stream.token_ids[t]).replace(" ", "·")  # noqa: E731
        rows = table(found, frame, cursor.j, width, piece)
        told = [*heading(found, piece, frame), *reading(found, cursor.j, piece)]
        told += result(found, piece)
        v2 = partitions(found)
        told_rows, v2_rows = wrapped(told, width), wrapped(v2, width)
        room = max(self.content_size.height, told_rows + 4)
        if told_rows + len(rows) + v2_rows > room:  # v2 goes first, then blocks far from j
            v2, v2_rows = (v2, v2_rows) if told_rows + 4 + v2_rows <= room else ([], 0)
            rows = rows[:1] + window(rows[1:], cursor.j, room - told_rows - v2_rows - 1)
        return Text("\n").join([*told[:2], *rows, *told[2:], *v2])


def wrapped(lines: list[Text], width: int) -> int:
    """The rows ``lines`` take in ``width`` columns (a word wrap may take one more)."""
    return sum(max(1, math.ceil(line.cell_len / max(width, 1))) for line in lines)


def window(rows: list[Text], at: int, keep: int) -> list[Text]:
    """``keep`` of ``rows`` (one per block), around row ``at``."""
    start = min(max(at - keep // 2, 0), max(len(rows) - keep, 0))
    return rows[start : start + keep]


def heading(w: Walk, piece, frame: Frame) -> list[Text]:
    """Which query, layer and head; which query heads share its KV head."""
    line = Text()
    line.append(f"s{w.seq_id}", style=seq_label(w.seq_id))
    line.append(f" t={w.position} {piece(w.position)!r}", style="bold")
    line.append(f" layer {w.layer} (l) head {w.head} (k)")
    share = ", ".join(str(h) for h in w.sharing)
    gqa = Text(f"KV head {w.kv_head} read by query heads {share} (GQA)", style="dim")
    return [line, gqa]


def table(w: Walk, frame: Frame, at: int, width: int, piece) -> list[Text]:
    """One row per logical block: j, p (its identity), slots, the score strip, m, ℓ, rescale."""
    scores = [s for block in w.blocks for s in block.scores]
    low, high = min(scores), max(scores)
    span = (high - low) or 1.0
    rows = [Text(" j   p  slots   s_τ      m       ℓ    e^Δm", style="bold")]
    words = width >= 70  # room for the tokens themselves
    for block in w.blocks:
        row = Text("▶" if block.j == at else " ", style="bold")
        row.append(f"{block.j:>2} ")
        colour = frame.colours.colour(block.block)
        row.append(f"{block.block:>3} ", style=block_style(colour))
        row.append(f" {block.slots[0]:>3}–{block.slots[-1]:<3} ")
        strip = "".join(BARS[int((s - low) / span * (len(BARS) - 1))] for s in block.scores)
        row.append(f"{strip:<4} ", style="cyan")
        rescale = "  —  " if block.j == 0 else f"{block.rescale:5.3f}"
        row.append(f"{block.m:6.2f} {block.l:7.2f}  ")
        row.append(rescale, style="bold yellow" if block.max_moved and block.j else "dim")
        if words:
            row.append("  " + " ".join(piece(t) for t in block.positions), style="dim")
        if block.j > at:
            row.stylize("dim")
        rows.append(row)
    return rows


def reading(w: Walk, at: int, piece) -> list[Text]:
    """The block being read, in words: what it holds, its scores, what happened to m and ℓ."""
    block = w.blocks[min(at, len(w.blocks) - 1)]
    held = " ".join(
        f"{piece(t)}={s:.2f}" for t, s in zip(block.positions, block.scores, strict=True)
    )
    text = Text(f"reading j={block.j} → p={block.block}: ", style="bold")
    text.append(f"s_τ {held}")
    if block.j == 0:
        moved = f"m = {block.m:.2f}, ℓ = {block.l:.2f}: the first block sets them"
    elif block.max_moved:
        moved = (
            f"max moved {block.m_old:.2f} → {block.m:.2f}: acc and ℓ × e^({block.m_old:.2f}"
            f"−{block.m:.2f}) = {block.rescale:.3f}; ℓ = {block.l:.2f}"
        )
    else:
        moved = f"m stays {block.m:.2f}: nothing rescaled; ℓ = {block.l:.2f}"
    return [text, Text(moved, style="yellow")]


ROUNDING_EXPONENT = -6
"""Differences under $10^{-6}$ are float32 rounding, and the view says so rather than show
their digits: those depend on the order in which a CPU's SIMD lanes add (the same step's
max|Δ| was 1.5e-08 on the machine the view's snapshots were first made on, 4.5e-08 on
another), and the view must read the same on every machine."""


def max_difference(delta: float) -> str:
    """``max|Δ|`` as the view shows a difference ``delta``: ``max|Δ|<1e-6`` when float32
    rounding explains it, else ``max|Δ|=`` and its value. No spaces, so that a narrow pane
    wraps it whole and never leaves the ``<`` at the end of one line and its bound on the
    next."""
    if delta < 10.0**ROUNDING_EXPONENT:
        return f"max|Δ|<1e{ROUNDING_EXPONENT}"
    return f"max|Δ|={delta:.1e}"


def result(w: Walk, piece) -> list[Text]:
    """The weights the query ended with, and its output against the model's."""
    ranked = sorted(range(len(w.weights)), key=lambda t: -w.weights[t])[:TOP]
    most = Text("attends most to: ", style="bold")
    most.append("  ".join(f"{piece(t)} {w.weights[t]:.2f}" for t in ranked))
    ok = w.max_delta < 1e-4
    check = Text("O = acc/ℓ vs the model's output: ")
    check.append(
        f"{max_difference(w.max_delta)} {'✓' if ok else '✗'}",
        style="bold green" if ok else "bold red",
    )
    return [most, check]


def partitions(w: Walk) -> list[Text]:
    """v2: the partitions' $(m_k, \\ell_k)$, each one's share of the merge, and the merge."""
    lines = [Text(f"v2, {w.partition_size} tokens a partition: k τ m_k ℓ_k w_k", style="bold")]
    for part in w.partitions:
        span = f"{part.positions.start}–{part.positions.stop - 1}"
        lines.append(Text(f" {part.k} {span:>7} {part.m:6.2f} {part.l:6.2f}  {part.weight:.3f}"))
    m = max(part.m for part in w.partitions)
    delta = float((w.merged - w.output).abs().max())
    lines.append(
        Text(
            f"m = max m_k = {m:.2f}; ℓ = Σ ℓ_k e^(m_k−m) = {w.l:.2f}; O = Σ w_k O_k: "
            f"{max_difference(delta)} against acc/ℓ",
            style="dim",
        )
    )
    return lines
