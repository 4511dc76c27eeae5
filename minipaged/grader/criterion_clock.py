"""A criterion's time: wall-clock seconds, not counting the time its code waited for a CPU that
others held.

A criterion has ``seconds`` (``Limits.check_seconds``). On a quiet machine that is wall-clock
time. On a busy one (a class graded in parallel, a shared CI runner) a right answer is
runnable but waits its turn for a core, and takes several times as long; failing it for the
machine's load would be a false alarm. Linux counts that wait for every thread: the second
number of ``/proc/<pid>/schedstat`` is the nanoseconds the thread spent runnable on a run
queue without running. So a criterion ends at

    start + seconds + credit

where the credit is what the worker's main thread (which runs the student's code) and the
grader's own thread (which runs the checks) waited since the criterion started, and the CPU
time the grader's own thread used meanwhile: building the expected values, hypothesis drawing
its examples, Numba compiling a reference kernel, reading the child's answers are the grader's
work, never the student's (on a machine twice as slow they take twice as long, and a right
answer was once failed for them). So is the grading child's own CPU time on each answered
request, outside the student's code (decoding it, encoding the answer, looking for threads
left running: ``credit_harness``), up to what the worker's main thread ran. Linux adds a
wait to that count only when the thread next gets the CPU, so a thread starved for long shows
none of it meanwhile: one seen runnable at two looks with no CPU time between them has waited
at least the time between them (less what its other threads ran meanwhile), and that is
credited until the count catches up. Code that sleeps, is stopped or blocks on a read waits for
no CPU, so it is stopped at ``seconds`` as on a quiet machine; code that computes forever is
stopped once it has had ``seconds`` on a core.

The grader's own CPU time is always credited. The wait may be for the student's own work, not
for others':

- the CPU time the worker's other threads and its ended children used meanwhile is taken off
  the credit (spinning threads buy nothing);
- while any other process runs under the grading child (a fork bomb, a spinner in a session
  of its own), nothing is credited at all;
- nothing runs past ``STRETCH`` times ``seconds``.

Where Linux keeps no such counts (another system, a kernel without ``CONFIG_SCHED_INFO`` or
``CONFIG_PROC_CHILDREN``) nothing is credited: the clock is the wall clock. A look reads a few
small files, however many processes the student's code started.
"""

from __future__ import annotations

import os
import threading
import time
from typing import NamedTuple

from minipaged.grader.process_tree import beside

STRETCH = 10.0
"""How many times its ``seconds`` of wall-clock time a criterion may take on a busy machine."""

LOOK_SECONDS = 0.1
"""How often, at most, the clock reads the counts: from the start, so a wait in progress is
seen by two looks before the deadline it would otherwise pass."""

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Clock ticks per second, the unit of ``/proc/<pid>/stat``'s CPU times."""


def _fields(path: str) -> list[bytes]:
    """The whitespace-separated fields of a ``/proc`` file, after the command name where it has
    one (``stat``: the name may hold spaces); ``[]`` where the file cannot be read."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return []
    return text[text.rfind(b")") + 1 :].split()


def _cpu(fields: list[bytes], first: int) -> float:
    """Seconds from the clock-tick fields of ``stat`` from ``first`` on: state is field 0 here,
    utime stime cutime cstime (fields 14-17 of proc(5)) are 11-14."""
    return sum(int(tick) for tick in fields[first:15]) / TICK


def waited(path: str) -> float:
    """Seconds the thread whose ``schedstat`` is at ``path`` has spent waiting for a CPU (0 where
    it cannot be read)."""
    fields = _fields(path)
    return int(fields[1]) / 1e9 if len(fields) > 1 else 0.0


def ran_or_waited(path: str) -> float:
    """Seconds the thread whose ``schedstat`` is at ``path`` has spent running or waiting for a
    CPU (0 where it cannot be read)."""
    fields = _fields(path)
    return (int(fields[0]) + int(fields[1])) / 1e9 if len(fields) > 1 else 0.0


class Counts(NamedTuple):
    grader: float  # the checks' thread: running (the grader's own work) or waiting for a CPU
    waited: float  # the worker's main thread, waiting for a CPU
    others: float  # CPU seconds of the worker's other threads and ended children
    ran: int = -1  # nanoseconds the worker's main thread has run (-1: unknown)
    runnable: bool = False  # whether the worker's main thread is running or waiting for a CPU


class CriterionClock:
    """The time of one criterion (or one step of a student's TUI run). ``worker``: the process
    running the student's code; ``supervisor``: the grading child's first process, under which
    every process the code starts stays (``process_tree.supervise``). Without them only the
    checks' thread counts."""

    def __init__(self, seconds: float, worker: int | None = None, supervisor: int | None = None):
        self.seconds, self.worker, self.supervisor = seconds, worker, supervisor
        self.checks = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self.start = time.monotonic()
        self.deadline = self.start + seconds
        self.last_moment = self.start + STRETCH * seconds
        self.credit = 0.0
        self.last = self._counts()
        self.ran_at_start = self.last.ran  # the worker's main thread's CPU (ns; -1: unknown)
        self.harness = 0.0  # seconds of the grading child's own work credited so far
        self.starved_since: tuple[float, float] | None = None  # (look, others) not run since
        self.next_look = self.start + LOOK_SECONDS

    def _counts(self) -> Counts:
        grader = ran_or_waited(self.checks)
        if self.worker is None:
            return Counts(grader, 0.0, 0.0)
        main = _fields(f"/proc/{self.worker}/schedstat")  # run, wait (ns), timeslices
        process = _fields(f"/proc/{self.worker}/stat")
        if len(main) < 2 or len(process) < 15:
            return Counts(grader, 0.0, 0.0)
        whole = _cpu(process, 11)  # every thread's, and the children's it reaped
        if self.supervisor not in (None, self.worker):  # and the orphans the supervisor reaped
            whole += _cpu(_fields(f"/proc/{self.supervisor}/stat"), 13)
        return Counts(
            grader,
            int(main[1]) / 1e9,
            max(whole - int(main[0]) / 1e9, 0.0),
            ran=int(main[0]),
            runnable=process[0] == b"R",
        )

    def credit_harness(self, seconds: float) -> None:
        """Credit ``seconds`` that the grading child's harness says it spent on an answered
        request outside the student's code (``minipaged.grader.harness_time``). The child's
        word is the student's process's: no more is credited, in all, than its main thread has
        run since the criterion started (nothing where that cannot be read)."""
        fields = _fields(f"/proc/{self.worker}/schedstat") if self.worker is not None else []
        if self.ran_at_start < 0 or len(fields) < 2:
            return
        ran = (int(fields[0]) - self.ran_at_start) / 1e9
        credited = min(max(seconds, 0.0), max(ran - self.harness, 0.0))
        self.harness += credited
        self.credit += credited
        self.deadline += credited

    def _alone(self) -> bool:
        """Whether the worker is the only process running under the supervisor (unknown:
        no)."""
        supervisor = self.worker if self.supervisor is None else self.supervisor
        return beside(supervisor, self.worker) == []

    def expired(self) -> bool:
        """Whether the criterion's time is spent. The counts are read at most every
        ``LOOK_SECONDS``, and whenever the deadline as last computed has passed."""
        now = time.monotonic()
        if now >= self.last_moment:
            return True
        if now < min(self.deadline, self.next_look):
            return False
        counts = self._counts()
        self.credit += counts.grader - self.last.grader  # the grader's work is never the student's
        starved = 0.0  # a wait in progress, not yet in the counts
        if self.worker is None or self._alone():
            gained = (counts.waited - self.last.waited) - (counts.others - self.last.others)
            self.credit += max(gained, 0.0)
            not_run = counts.runnable and counts.ran == self.last.ran and counts.ran >= 0
            if not_run and self.starved_since is not None:
                since, others = self.starved_since  # its own threads' CPU buys nothing here either
                starved = max((now - since) - (counts.others - others), 0.0)
            else:
                self.starved_since = (now, counts.others) if counts.runnable else None
        else:
            self.starved_since = None
        self.last = counts
        self.deadline = self.start + self.seconds + self.credit + starved
        self.next_look = now + LOOK_SECONDS
        return now >= self.deadline
