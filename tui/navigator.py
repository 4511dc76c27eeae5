"""The cursor's rules: what step forward, step back, a jump and a seek do, when the step they
need may not be recorded yet.

A request that needs a step the model has not computed yet waits (one at a time: a new request
replaces it) and is finished by ``Navigator.recorded`` when steps arrive; the model thread
computes the whole run ahead from the start, so waits are short. Plain logic, no widgets: the
app turns each ``Move`` into a redraw and a notice.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.feed import EVERYTHING, StepFeed
from tui.timeline import Timeline

JUMPS = {  # jump name -> (what the user looks for, the event kinds that are one, a run with it)
    "cow": ("copy-on-write", frozenset({"cow-copy"}), "parallel"),
    "swap": ("swap", frozenset({"swap-out", "swap-in"}), "swap"),
    "preempt": ("preemption", frozenset({"preempt"}), "recompute"),
    "prefix": ("prefix hit", frozenset({"prefix-hit"}), "prefix"),
}


@dataclass(frozen=True, slots=True)
class Move:
    """What a request did: whether the cursor moved, and what to tell the user."""

    moved: bool
    notice: str = ""
    at_end: bool = False  # a step forward found the run over: playing stops


class Navigator:
    """Moves ``timeline.cursor``. ``feed`` is the live run's (None for a trace, where every
    step is recorded already). Guarantees: the cursor only ever lands on recorded frames; a
    waiting request is resolved, as found or as not found, once the run has finished."""

    def __init__(self, timeline: Timeline, feed: StepFeed | None) -> None:
        self.timeline = timeline
        self.feed = feed
        self.waiting: tuple[str, object] | None = None  # ("jump", name) or ("seek", step)

    def forward(self) -> Move:
        """One step past the cursor, or past the step a forward already waits for: pressing
        n three times before the model catches up goes three steps."""
        waiting_for = self.waiting[1] if self.waiting and self.waiting[0] == "seek" else None
        target = (self.timeline.cursor if waiting_for is None else waiting_for) + 1
        if self.timeline.finished and target > self.timeline.recorded:
            self.waiting = None
            end = self.timeline.recorded
            return Move(False, f"the run ended at step {end}: b steps back, r restarts", True)
        return self.seek(target)

    def back(self) -> Move:
        self.waiting = None
        if self.timeline.move(self.timeline.cursor - 1):
            return self.moved()
        return Move(False, "this is step 0, before the first step")

    def jump(self, name: str, direction: int = 1) -> Move:
        """To the next step with an event of kind ``JUMPS[name]`` (``direction`` 1), or back to
        the previous one (-1), which is recorded already, so never waits."""
        self.waiting = None
        found = self.timeline.next_with(JUMPS[name][1], direction)
        if found is not None:
            self.timeline.move(found)
            return self.moved()
        if direction < 0:
            return Move(False, f"no {JUMPS[name][0]} before step {self.timeline.cursor}")
        if self.timeline.finished:
            return Move(False, self.not_found(name))
        return self.wait(("jump", name))

    def seek(self, index: int) -> Move:
        """To step ``index``, or to the last step if the run is shorter."""
        self.waiting = None
        if index <= self.timeline.recorded or self.timeline.finished:
            self.timeline.move(min(index, self.timeline.recorded))
            return self.moved()
        return self.wait(("seek", index))

    def recorded(self) -> Move:
        """Steps arrived, or the run finished: retry the waiting request, if any (it waits
        again if its step is still missing)."""
        if self.waiting is None:
            return Move(False)
        kind, arg = self.waiting
        return self.jump(arg) if kind == "jump" else self.seek(arg)

    def wait(self, request: tuple[str, object]) -> Move:
        self.waiting = request
        if self.feed is not None:
            self.feed.want(EVERYTHING)
        what = f"step {request[1]}" if request[0] == "seek" else f"the next {JUMPS[request[1]][0]}"
        return Move(False, f"computing {what}…")

    def moved(self) -> Move:
        return Move(True)

    def not_found(self, name: str) -> str:
        what, kinds, scenario = JUMPS[name]
        whole_run = self.timeline.frame(self.timeline.recorded).counts
        if not any(whole_run[kind] for kind in kinds):
            return f"no {what}s in this run; the {scenario!r} and 'tour' scenarios have them (s)"
        return f"no {what} after step {self.timeline.cursor} in this run"
