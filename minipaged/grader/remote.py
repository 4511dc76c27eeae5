"""The grader's side of a grading child: start it, ask it, time it (its process, pipes and end:
``minipaged.grader.child_process``). The checks of a criterion
run here, in the grader, unchanged, against stand-ins for the objects the child keeps
(``minipaged.grader.proxies``): ``student.block_manager`` is a proxy of the module in the
child, and every attribute, call or ``repr`` on a proxy is one request
(``minipaged.grader.child``). Values come back as data (``minipaged.grader.wire``);
objects stay in the child and come back as proxies; what the student's code raised is raised
here again, as the same built-in or library exception or as a stand-in class of the same name
(``minipaged.grader.student_exceptions``).
A proxy claims the library class it derives from (``isinstance(bm, BlockManager)``), and
arrays passed to a call are written back after it, as the student's code left them.

Nothing the child sends is run or trusted: a check compares it, and decides. The child may
die, hang or babble; each request then raises ``ChildGone`` (or ``TimeLimitExceeded`` at the
criterion's deadline) after ending the child and all it started, and the next criterion
starts a new child.

What a child holds that the student's code can read or change, and why no criterion turns on
it. The checks, what they expect, each criterion's result and the report are here, in the
grader; none of them is in the child to read or replace. The child holds:

- the channel (its two file descriptors are on its command line) and the harness answering
  on it: the student's code can write an answer itself, or rebind the harness and change one
  before it is sent. A value so answered is taken as one their code returned, which it could
  have returned itself; anything else fails the call (a ``PASS`` written on the channel, an
  answer with a field no answer has: ``ask``, ``_stray``);
- what an answer tells besides its value: ``own``, the harness's time, credited no further
  than the worker's main thread ran (``CriterionClock.credit_harness``), the one claim taken
  on the child's word, worth at most the student's own CPU time again, as time, never a
  value; ``left`` and ``later``, what the code left running: ``/proc`` is read for threads and
  processes, and only an interval timer is the child's word alone (kept quiet, its signal
  fails a later criterion of the same student);
- the guards' pipe of notices: what is told cannot be taken back, a notice the student's code
  forges only fails it, the pipe closed or replaced is seen in ``/proc``
  (``minipaged.grader.notices``);
- the guards' audit hooks, a tripwire that code writing raw memory can remove
  (``minipaged.grader.delegation``): their silence is the one thing the grader cannot tell
  from outside, and what it then misses is code compiled at run time from what the student
  brought (their folder is judged before it runs, ``minipaged.grader.library_copies``);
- the checks' module and the helpers a ``run`` request calls next to the student's code
  (rebound, ``minipaged.grader.tampering`` refuses to run them): a helper observes the
  student's own objects, and what it reports of them is what those objects could have shown.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minipaged.grader import child_errors, frames, wire
from minipaged.grader.child_errors import ChildGone, DeviceUnusable, WallClockSpent
from minipaged.grader.child_process import ChildProcess
from minipaged.grader.compiled_copies import Judge
from minipaged.grader.criterion_clock import CriterionClock
from minipaged.grader.delegation import LibraryDelegation
from minipaged.grader.left_running import (
    GRACE_SECONDS,
    UNLISTED,
    Later,
    LeftRunning,
    handler_left,
    handlers_left,
    later,
    left_running,
    processes_left,
    tasks,
    tasks_left,
)
from minipaged.grader.process_tree import worker_of
from minipaged.grader.student_exceptions import StudentExceptions
from minipaged.grader.time_limit import TimeLimitExceeded

STARTUP_SECONDS = 300.0
"""How long a child may take to start (import the library, before any student code runs)."""


class GradingChild(ChildProcess):
    """One child process that runs one exercise's student code for the criteria that run in
    one place (``runs_in``): started, and started again after it dies, on demand."""

    def __init__(
        self,
        number: int,
        runs_in: str,
        folder: Path | None,
        limits,
        stand_in: Callable,
        hands_over: bool = False,
    ) -> None:
        """``stand_in(child, handle, classes)`` makes the grader's stand-in for an object the
        child keeps (``minipaged.grader.proxies.Proxy``); ``hands_over``: ``ChildProcess``'s."""
        super().__init__(number, runs_in, folder, limits, hands_over)
        self.stand_in = stand_in
        self.clock: CriterionClock | None = None  # the running criterion's time
        self._clocks: list[CriterionClock] = []  # it, and the clocks running within it
        self.worker: int | None = None  # the process that runs the student's code
        self.confinement = ""
        self.loaded: dict | None = None
        self.broken = ""  # why this code cannot be loaded at all: every criterion fails so
        self.blocked: child_errors.Blocked | None = None  # why its criteria cannot run at all
        self.wall_deadline: float | None = None  # the submission's, moved on by each start
        self._proxies: dict = {}  # handle -> its Proxy, one per object
        self.exceptions = StudentExceptions(self.proxy)  # what the student's code raised
        self._next = 0
        self.arrays: list = []  # the arrays the last call sent, as the child sent them back
        self._before: frozenset[int] | None = None  # the worker's threads before a request
        self._later: Later | None = None  # and its handlers and timers then (``later``)
        self.judge = Judge(number)  # of what the student's code compiles at run time
        self.copied = ""  # why this child was stopped: its student's code compiled a copy

    # -- the process ---------------------------------------------------------------------

    def start(self) -> None:
        """Start a child and load the student's code in it, within the current deadline."""
        self.copied = ""
        launched = time.monotonic()
        self.launch()
        self.clock, self._clocks = None, []  # starting has its own time
        hello = self._receive(time.monotonic() + STARTUP_SECONDS, "starting")
        if not isinstance(hello, dict) or not isinstance(hello.get("hello"), str):
            self._fault("it sent a first message that is not its greeting")
        if hello.get("fault"):
            self._fault(str(hello["fault"])[:600])
        self.confinement = hello["hello"][:300]
        self.worker = worker_of(self.process.pid)  # read before any student code runs
        problem = hello.get("gpu")
        if self.runs_in == "gpu" and problem:
            self.stop()
            self.blocked = DeviceUnusable(
                f"needs a CUDA GPU that the grading process can use, and it cannot here "
                f"({str(problem)[:300]}); run the same command on a machine with one"
            )
            raise self.blocked
        if self.wall_deadline is not None:  # starting is the grader's work, not the submission's
            self.wall_deadline += time.monotonic() - launched
        self.start_clock()
        try:
            self.loaded = self.ask({"op": "load", "solution": self.folder is None})
        except (TimeLimitExceeded, WallClockSpent) as error:
            self.broken = (
                f"importing your files ran past {self.limits.check_seconds:g} s"
                if isinstance(error, TimeLimitExceeded)
                else f"importing your files was still running when {error}"
            ) + ": is there a loop that never ends at import time (outside any function)?"
            raise ChildGone(self.broken) from None
        except LeftRunning as left:
            self.broken = str(left).replace("your code", "importing your files", 1)
            raise ChildGone(self.broken) from None
        except ChildGone as gone:
            self.broken = f"importing your files ended the grading process: {gone}"
            raise ChildGone(self.broken) from None
        except LibraryDelegation as copied:  # compiled while their files were imported
            self.broken = str(copied)
            raise

    def stop(self) -> None:
        """End the child (``ChildProcess.stop``), and forget every object it kept."""
        super().stop()
        self.loaded = None
        self._proxies = {}
        self.exceptions.forget()

    # -- requests ------------------------------------------------------------------------

    def ask(self, request: dict) -> Any:
        """Send ``request``; return the decoded answer, or raise what the student's code raised
        (or ``ChildGone``, ``TimeLimitExceeded``)."""
        if self.process is None:
            gone = ChildGone("the grading process is gone")
            raise LibraryDelegation(self.copied) if self.copied else gone
        self._next += 1
        ident = self._next
        if self.clock is not None and self.clock.expired():
            self._timed_out()
        ends = (self.wall_deadline, self.clock and self.clock.last_moment)
        deadline = min((end for end in ends if end is not None), default=None)
        try:
            self._before = tasks(self.worker) if self.worker is not None else None
            self._later = later(self.worker) if self.worker is not None else None
            self._send({"id": ident, **request}, deadline)
            answer = self._receive(deadline, "answering")
        except BaseException:
            # Interrupted between question and answer (a time limit of the checks' own, a
            # Ctrl-C): the channel is out of step, so this child answers no more.
            self.stop()  # if it is not stopped already
            raise
        self._hear(loading=request.get("op") == "load")
        self._left(answer)
        if not isinstance(answer, dict) or answer.get("id") != ident:
            self._fail("answered a question it was not asked")
        own = answer.pop("own", None)
        if type(own) not in (int, float) or not 0 <= own < float("inf"):
            self._fail("sent an answer without the time it took (or not a number of seconds)")
        for clock in self._clocks:  # the child's own work, never the student's time
            clock.credit_harness(own)
        try:
            if "raised" in answer and len(answer) == 2:
                raise self.exceptions.exception(answer["raised"])
            if "v" not in answer or not set(answer) <= {"id", "v", "a"}:
                raise frames.ProtocolError("an answer without a value")
            arrays = answer.get("a", [])
            self.arrays = wire.decode(arrays, self.proxy, self.exceptions.class_of)
            return wire.decode(answer["v"], self.proxy, self.exceptions.class_of)
        except frames.ProtocolError as error:
            self._fail(f"sent something the grader cannot read ({error})")

    def _hear(self, loading: bool) -> None:
        """After an answer: what the child's guards told while the student's code ran
        (``Notices.verdict``), whatever the answer says. A copy compiled, or the pipe cut,
        ends the child, which keeps the copy or cannot tell: the next criterion starts anew."""
        try:
            ended, refused = self.notices.verdict(self.judge, self.worker, loading)
        except frames.ProtocolError as error:
            self._fail(f"sent notices the grader cannot read ({error})")
        self.copied = ended
        if ended:
            self.stop()
        if ended or refused:
            raise LibraryDelegation(ended or refused)

    def _left(self, answer: Any) -> None:
        """After an answer: fail the call, and end the child, if the student's code left a
        thread or a process running, as ``/proc`` shows (the child's words name a Python
        thread's line, where it tells of one), or an interval timer armed (the child's words)."""
        told = answer.get("left") if isinstance(answer, dict) else None
        left = str(told)[:400] if told else ""
        try:
            if not left and self.worker is not None and self.process is not None:
                grace = GRACE_SECONDS if self.runs_in == "simulator" else 0.0
                left = tasks_left(self.worker, self._before, *UNLISTED, grace)
                left = left or processes_left(self.process.pid, self.worker)
        except BaseException:  # interrupted while it waits: what it waited for is not seen
            self.stop()
            raise
        if left:
            self.stop()
            raise left_running("your code", left)
        installed = handlers_left(self.worker, self._later) if self.worker is not None else ""
        timer = answer.get("later") if isinstance(answer, dict) else None
        if timer:  # an interval timer, which /proc does not list: the child's word alone
            installed = " and ".join(filter(None, (installed, str(timer)[:200])))
        if installed:
            self.stop()
            raise handler_left("your code", installed)

    def _send(self, document: dict, deadline: float | None) -> None:
        view = memoryview(frames.frame(document))
        while view:
            try:
                view = view[os.write(self._requests, view) :]
                continue
            except BlockingIOError:  # the pipe is full: wait until the child reads
                pass
            except BrokenPipeError:
                self._ended()
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            _, ready, _ = select.select([], [self._requests], [], wait)
            if not ready:
                self._timed_out()

    def _receive(self, deadline: float | None, doing: str) -> Any:
        try:
            return frames.read_frame(
                self._answers, deadline, self._pidfd, self._watch, self.notices
            )
        except TimeoutError:
            self._timed_out()
        except EOFError:
            self._ended(starting=doing == "starting")
        except frames.ProtocolError as error:
            if doing == "starting":
                self._fault(f"it sent something the grader cannot read: {error}")
            self._stray(error)

    def _stray(self, error: frames.ProtocolError):
        """Bytes that are not a message where the child's answer belongs: only the student's
        code writes anything else on the channel (the child writes whole messages, its prints
        go to a file), from a thread or to a file descriptor it did not open."""
        threads = tasks_left(self.worker, self._before) if self.worker is not None else ""
        still = f"; {threads} still running" if threads else ""
        self.stop()
        raise ChildGone(
            "something other than the grading process's answer was written on its channel to "
            f"the grader while your code ran ({error}{still}): your code, or a thread or process "
            "it started, wrote to a file descriptor it did not open (print(file=...), "
            "os.write). Write only to files your code opens, and join every thread before "
            "returning"
        )

    def start_clock(self, seconds: float | None = None) -> None:
        """A criterion (or a step of a TUI run) starts: it has ``seconds`` (by default
        ``check_seconds``), stretched while it computes on a busy machine (``CriterionClock``)."""
        self.clock = self._new_clock(self.limits.check_seconds if seconds is None else seconds)
        self._clocks = [self.clock]

    def side_clock(self, seconds: float) -> CriterionClock:
        """A clock of ``seconds`` within the running criterion (hypothesis's shrinking), credited
        as the criterion's is."""
        clock = self._new_clock(seconds)
        self._clocks.append(clock)
        return clock

    def _new_clock(self, seconds: float) -> CriterionClock:
        if self.process is None:
            return CriterionClock(seconds)
        return CriterionClock(seconds, self.worker, self.process.pid)

    def _watch(self) -> None:
        """While waiting for an answer: the disk quota, and the criterion's time."""
        if over := self.quota.exceeded():
            self.stop()
            raise ChildGone(f"{over}, and the grading process was ended: write less, or not at all")
        if self.clock is not None and self.clock.expired():
            self._timed_out()

    def _timed_out(self):
        self.stop()
        if self.wall_deadline is not None and time.monotonic() >= self.wall_deadline:
            raise WallClockSpent(
                f"the grading of this submission reached its {self.limits.wall_seconds:g} s "
                "limit in all"
            )
        raise TimeLimitExceeded(self.clock.seconds if self.clock else self.limits.check_seconds)

    def reset(self) -> None:
        """Between criteria: the child forgets every object but the modules; so do we."""
        self.ask({"op": "reset"})
        self._proxies = {h: p for h, p in self._proxies.items() if p in self._modules()}
        self.exceptions.forget()

    def _modules(self) -> list:
        modules = (self.loaded or {}).get("modules") or {}
        return list(modules.values()) if isinstance(modules, dict) else []

    # -- values --------------------------------------------------------------------------

    def proxy(self, handle: int, classes: list[str]):
        """The stand-in for the child's object ``handle``."""
        return self.stand_in(self, handle, classes)
