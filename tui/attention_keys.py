"""Opening the attention view (``tui.attention_view``) and walking it: ``a`` opens it on the
selected sequence (on the step that computed the selected token, when one is selected) and
closes it; ``.`` and ``,`` read the next or previous block; ``l`` and ``k`` change the layer and
the query head; ``↑``/``↓`` the sequence and ``[``/``]`` the query of a prompt chunk. ``n`` and
``b`` still step through the run: the view follows the step.

While it is open the app's selection is the block being read, so every other pane highlights
it (its pool cell, its table entries, the tokens it holds).
"""

from __future__ import annotations

import math
from dataclasses import replace

from textual.screen import Screen

from tui.attention_view import AttentionCursor, AttentionView, record_of
from tui.pane import Selection
from tui.timeline import Timeline

TITLE = "attention  ,/. block  l layer  k head  ↑↓ seq  [ ] query  a close"


class AttentionKeys:
    """The attention view's actions of ``PagedApp`` (a mixin, before ``SelectionKeys``: with
    the view open, ``↑``/``↓`` and ``[``/``]`` move the view's sequence and query).
    Guarantees: while ``attention`` is set, it names a layer, head, query and block the
    frame's record has, whenever the frame has a record for its sequence."""

    timeline: Timeline | None
    selection: Selection
    notice: str
    base: Screen
    attention: AttentionCursor | None = None  # None: the view is closed
    opened_on: Timeline | None = None  # the run it was opened on

    def action_attention(self) -> None:
        if self.timeline is None:
            return
        if self.attention is not None:
            seq, self.attention = self.attention.seq, None
            self.base.set_class(False, "-attention")
            self.selection = Selection(seq=seq)
            self.refresh_panes()
            return
        frame = self.timeline.frame()
        seq, token = self.selection.seq, self.selection.token
        if seq is None:  # the first sequence this step computed, if any
            records = frame.step.attention or ()
            seq = records[0].seq_id if records else None
        if seq is None:
            self.notice = "select a sequence (↑/↓) at a step that runs it, then press a"
            self.show_status()
            return
        self.attention = AttentionCursor(seq, query=self.query_step(seq, token))
        self.opened_on = self.timeline
        self.base.set_class(True, "-attention")
        self.refresh_panes()

    def query_step(self, seq: int, token: int | None) -> int:
        """Move to the step that computed token ``token`` of ``seq`` as a query (if one is
        selected and it is not this step) and return its number among that step's queries;
        -1 (the last query) otherwise."""
        if token is None:
            return -1
        here = self.timeline.cursor
        order = [here, *range(self.timeline.recorded, -1, -1)]  # this step first
        for index in order:
            record = record_of(self.timeline.frame(index), seq)
            if record is not None and token in record.positions:
                if index != here:
                    self.seek_step(index)
                return record.positions.index(token)
        self.notice = f"no recorded step computed token {token} of s{seq}: showing this step's"
        return -1

    def action_walk(self, delta: int) -> None:
        """Read the next (1) or previous (-1) block of the walk."""
        if self.attention is not None:
            self.move_attention(j=max(self.attention.j + delta, 0))

    def action_layer(self) -> None:
        if self.attention is not None:
            self.move_attention(layer=self.attention.layer + 1)

    def action_head(self) -> None:
        if self.attention is not None:
            self.move_attention(head=self.attention.head + 1)

    def action_next_seq(self, delta: int) -> None:
        if self.attention is None:
            super().action_next_seq(delta)  # the selection's own keys
            return
        seqs = [r.seq_id for r in self.timeline.frame().step.attention or ()]
        if seqs:
            at = seqs.index(self.attention.seq) + delta if self.attention.seq in seqs else 0
            self.attention = AttentionCursor(seqs[at % len(seqs)])
            self.refresh_panes()

    def action_next_token(self, delta: int) -> None:
        if self.attention is None:
            super().action_next_token(delta)
            return
        record = record_of(self.timeline.frame(), self.attention.seq)
        if record is not None:
            count = len(record.positions)
            query = min(max(self.attention.query % count + delta, 0), count - 1)
            self.move_attention(query=query, j=0)

    def move_attention(self, **changes: int) -> None:
        self.attention = replace(self.attention, **changes)
        self.refresh_panes()

    def follow_walk(self) -> None:
        """Before the panes draw: keep the cursor within the frame's record (layers and heads
        wrap around; the block stays within the query's blocks) and select the block being
        read, so the other panes highlight it."""
        view = self.base.query_one(AttentionView)
        if self.attention is not None and self.timeline is not self.opened_on:
            self.attention = None  # another run started: its sequences are other sequences
            self.base.set_class(False, "-attention")
        cursor = self.attention
        record = record_of(self.timeline.frame(), cursor.seq) if cursor else None
        if record is not None:
            layers, queries, heads, _ = record.query.shape
            query = cursor.query if -queries <= cursor.query < queries else -1
            blocks = math.ceil((record.positions[query] + 1) / record.block_size)
            cursor = replace(
                cursor,
                layer=cursor.layer % layers,
                head=cursor.head % heads,
                query=query,
                j=min(cursor.j, blocks - 1),
            )
            self.attention = cursor
            self.selection = Selection(block=record.block_table[cursor.j])
        view.cursor, view.drawn = cursor, None
        view.border_title = TITLE
