"""A criterion's time: wall-clock seconds, stretched for code that is still computing on a busy
machine.

A criterion has ``seconds`` (``Limits.check_seconds``). On a quiet machine that is wall-clock
time. On a busy one (a class graded in parallel, a shared CI runner) a right answer gets a
fraction of a core and takes several times as long, and failing it for the machine's load
would be a false alarm. So past ``seconds`` the criterion runs on while it is still computing:
some process of the grading child is runnable, and the checks here and the student's code
there have used less than ``seconds`` of CPU time together. Code that waits instead (a sleep, a
stopped process, a read that never returns) is stopped at ``seconds`` as on a quiet machine,
code that computes forever at ``seconds`` of CPU time, and nothing runs past ``STRETCH`` times
``seconds``.
"""

from __future__ import annotations

import time

from minipaged.grader.process_tree import tree_usage

STRETCH = 10.0
"""How many times its ``seconds`` of wall-clock time a criterion may take on a busy machine."""

LOOK_SECONDS = 0.5
"""How often, past ``seconds``, the clock looks at the child's processes: a look reads every
``/proc/*/stat``, and a check that asks the child many small questions must not spend its CPU
time looking."""


class CriterionClock:
    """The time of one criterion (or one step of a student's TUI run) against the grading
    child whose pid is ``root``."""

    def __init__(self, seconds: float, root: int | None) -> None:
        self.seconds, self.root = seconds, root
        start = time.monotonic()
        self.deadline = start + seconds  # the wall clock's share
        self.last_moment = start + STRETCH * seconds
        self.cpu_at_start = self._usage()[0]
        self.next_look = self.deadline

    def _usage(self) -> tuple[float, bool]:
        """CPU seconds used here and in the child's tree, and whether the tree is runnable."""
        cpu, runnable = tree_usage(self.root) if self.root is not None else (0.0, False)
        return time.process_time() + cpu, runnable

    def expired(self, computing_here: bool = False) -> bool:
        """Whether the criterion's time is spent. ``computing_here``: the checks in this
        process are running (between two questions to the child), so they count as runnable."""
        now = time.monotonic()
        if now >= self.last_moment:
            return True
        if now < self.next_look:
            return False
        self.next_look = now + LOOK_SECONDS
        cpu, runnable = self._usage()
        return cpu - self.cpu_at_start >= self.seconds or not (runnable or computing_here)
