"""Selecting by mouse or keyboard: a sequence, a token of it, or a device block (``Selection``).

A click on a label or cell selects it; ``↑``/``↓`` walk the sequences, ``[``/``]`` the tokens of
the selected one, ``enter`` selects the block that holds the selected token and ``esc`` clears.
Every pane then highlights the selection, and the inspector explains it.
"""

from __future__ import annotations

from tui.pane import Selection
from tui.timeline import Timeline


class SelectionKeys:
    """The selection actions of ``PagedApp`` (a mixin: it reads the app's ``timeline`` and
    redraws with ``refresh_panes``). Guarantees: a selected token always belongs to the selected
    sequence and lies within its tokens."""

    timeline: Timeline | None
    selection: Selection
    notice: str

    def action_select_seq(self, seq: int) -> None:
        self.select(Selection(seq=seq))

    def action_select_token(self, seq: int, token: int) -> None:
        """Select token ``token`` of ``seq`` (a click on it in the token streams)."""
        self.select(Selection(seq=seq, token=token))

    def action_next_seq(self, delta: int) -> None:
        """Select the next (``delta`` = 1) or previous (-1) sequence shown, by keyboard."""
        if self.timeline is None:
            return
        seqs = [stream.seq_id for stream in self.timeline.frame().streams]
        if not seqs:
            return
        at = seqs.index(self.selection.seq) + delta if self.selection.seq in seqs else 0
        self.selection = Selection(seq=seqs[at % len(seqs)])
        self.refresh_panes()

    def action_next_token(self, delta: int) -> None:
        """Move the token selection in the selected sequence (the first sequence if none is):
        the inspector shows the token's address translation."""
        if self.timeline is None:
            return
        if self.selection.seq is None:
            self.action_next_seq(1)
        streams = {stream.seq_id: stream for stream in self.timeline.frame().streams}
        stream = streams.get(self.selection.seq)
        if stream is None or not stream.token_ids:
            return
        t = self.selection.token
        t = len(stream.token_ids) - 1 if t is None else t + delta
        t = min(max(t, 0), len(stream.token_ids) - 1)
        self.selection = Selection(seq=stream.seq_id, token=t)
        self.refresh_panes()

    def action_token_block(self) -> None:
        """Select the device block that holds the selected token: the inspector shows its slots."""
        chosen, frame = self.selection, self.timeline.frame() if self.timeline else None
        table = (
            frame.step.state.tables.get(chosen.seq) if frame and chosen.seq is not None else None
        )
        if chosen.token is None or table is None or table.pool != "device":
            self.notice = "select a token with a slot first ([ or ]); enter then selects its block"
            self.show_status()
            return
        if chosen.token < table.num_tokens:
            self.select(Selection(block=table.blocks[chosen.token // frame.step.state.block_size]))

    def action_clear_selection(self) -> None:
        self.select(Selection())

    def select(self, selection: Selection) -> None:
        """Select ``selection``, or clear it when it is already selected (a click on the same
        cell twice)."""
        self.selection = Selection() if selection == self.selection else selection
        if self.timeline is not None:
            self.refresh_panes()
