"""The recorded history of one run: every ``StepOutput``, and a cursor into it.

Time travel is reading this list. Stepping back shows an earlier recorded step; nothing is
recomputed, so stepping forward k times and back k times shows exactly what was shown before.
Frame 0 is the moment before the first step: requests queued, every block free (the engine's
``report()`` before it runs, or for a trace ``opening_step_of_trace``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from minipaged.block_state import BlockState
from minipaged.events import Finish
from minipaged.outputs import StepOutput
from tui.block_colours import Colouring


@dataclass(frozen=True, slots=True)
class Stream:
    """One sequence's tokens as the token-stream pane shows them. Live sequences come from the
    step's ``SeqView``; a finished one keeps its final tokens (status ``"finished"``)."""

    seq_id: int
    request_id: str
    token_ids: tuple[int, ...]
    prompt_len: int
    status: str


@dataclass(frozen=True)
class Frame:
    """What every pane draws at one cursor position: the step, the step before it (to see what
    changed), the streams so far, the event kinds counted from step 1 through this one and the
    colour each live block wears (``tui.block_colours``: it depends on the frames before)."""

    index: int
    step: StepOutput
    previous: StepOutput
    streams: tuple[Stream, ...]
    counts: Counter[str]
    colours: Colouring


def opening_step_of_trace(first: StepOutput) -> StepOutput:
    """Frame 0 of a recorded trace: the pools of its first step, all free. The trace does not
    record the queued prompts, so no sequence is shown before step 1."""
    state = first.state
    num_device, num_host = len(state.device_refcounts), len(state.host_refcounts)
    empty = BlockState(
        block_size=state.block_size,
        tables={},
        device_refcounts=(0,) * num_device,
        host_refcounts=(0,) * num_host,
        device_free=tuple(range(num_device)),
        host_free=tuple(range(num_host)),
    )
    return StepOutput.empty(empty)


class Timeline:
    """Recorded frames ``0..recorded`` and a ``cursor`` among them.

    Guarantees: ``frame(i)`` is the same object however often and in whatever order frames are
    visited; ``cursor`` always names a recorded frame; ``finished`` is set once the run has no
    more steps, and then ``recorded`` is final.
    """

    def __init__(self, opening: StepOutput) -> None:
        colours = Colouring().after(opening)
        self._frames = [Frame(0, opening, opening, _streams((), opening), Counter(), colours)]
        self.used = [_used(opening)]
        """Device blocks in use ($\\mathcal{R}[p] > 0$) at each frame, for the timeline strip."""
        self.cursor = 0
        self.finished = False

    @property
    def recorded(self) -> int:
        """How many steps are recorded (frame 0 is not a step)."""
        return len(self._frames) - 1

    def record(self, steps: Iterable[StepOutput]) -> None:
        for step in steps:
            last = self._frames[-1]
            counts = last.counts + Counter(event.kind for event in step.events)
            streams = _streams(last.streams, step)
            colours = last.colours.after(step)
            index = len(self._frames)
            self._frames.append(Frame(index, step, last.step, streams, counts, colours))
            self.used.append(_used(step))

    def frame(self, index: int | None = None) -> Frame:
        """Frame ``index`` (default: the cursor's)."""
        return self._frames[self.cursor if index is None else index]

    def move(self, index: int) -> bool:
        """Put the cursor on frame ``index`` if it is recorded; say whether it moved there."""
        if not 0 <= index <= self.recorded:
            return False
        self.cursor = index
        return True

    def next_with(self, kinds: frozenset[str], direction: int = 1) -> int | None:
        """The first recorded frame after the cursor (``direction`` 1) or the last one before
        it (-1) with an event of one of ``kinds``."""
        frames = (
            self._frames[self.cursor + 1 :] if direction > 0 else self._frames[: self.cursor][::-1]
        )
        for frame in frames:
            if any(event.kind in kinds for event in frame.step.events):
                return frame.index
        return None


def _used(step: StepOutput) -> int:
    return sum(1 for r in step.state.device_refcounts if r)


def _streams(before: tuple[Stream, ...], step: StepOutput) -> tuple[Stream, ...]:
    """Live and finished sequences, in id order, so a row keeps its place when a sequence
    finishes. A sequence that leaves without a finish event (a beam that fell out of the top
    K) is gone."""
    done = [s for s in before if s.status == "finished"]
    previous = {s.seq_id: s for s in before}
    for event in step.events:
        if isinstance(event, Finish) and event.seq in previous:
            last = previous[event.seq]
            # The finishing token was sampled this step; the sequence is no longer in the view.
            new = (step.new_tokens[event.seq],) if event.seq in step.new_tokens else ()
            tokens = last.token_ids + new
            done.append(Stream(last.seq_id, last.request_id, tokens, last.prompt_len, "finished"))
    live = [
        Stream(view.seq_id, view.request_id, view.token_ids, view.prompt_len, view.status)
        for _, view in sorted(step.sequences.items())
    ]
    return tuple(sorted((*live, *done), key=lambda stream: stream.seq_id))
