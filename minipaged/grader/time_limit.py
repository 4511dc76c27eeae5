"""Stop a block of the student's code that runs too long (a loop that never ends, or hypothesis
shrinking a long program for too long).

A SIGALRM timer raises ``TimeLimitExceeded`` into whatever runs when it fires. It works on Unix in
the main thread; elsewhere the block runs without a limit. Limits nest: an inner limit that
would end after the enclosing one (of the same clock) is not set, and the enclosing one keeps
its deadline.

A limit counts wall-clock time, or with ``cpu`` the process's CPU time (a SIGPROF timer), which
a busy machine does not eat: for trusted code run in the grader's own process
(``grading.run_criteria``), where the checks' work and the code under test share one process
and a loaded machine once stretched a right run of hypothesis's programs past 30 s of wall time.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator


class TimeLimitExceeded(BaseException):
    """A BaseException, so that neither a student's ``except Exception`` nor hypothesis's
    failure handling swallows it. Its text is the time-out as the student reads it: "your code
    ran past 3 s", to which the grader adds the criterion (``grading.failure_message``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"your code ran past {seconds:g} s")
        self.seconds = seconds


@contextlib.contextmanager
def time_limit(seconds: float, cpu: bool = False) -> Iterator[TimeLimitExceeded | None]:
    """Interrupt the block after ``seconds`` (of the process's CPU time, with ``cpu``). Yields the
    exception this limit raises (None when no timer is set), so that a caller can tell its own
    limit from an enclosing one's."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield None
        return
    timer, number = (
        (signal.ITIMER_PROF, signal.SIGPROF) if cpu else (signal.ITIMER_REAL, signal.SIGALRM)
    )
    outer_left = signal.getitimer(timer)[0]
    if 0 < outer_left <= seconds:
        yield None
        return
    expired = TimeLimitExceeded(seconds)

    def interrupt(signum, frame):
        # Python ignores an exception raised where it cannot propagate (a garbage-collector
        # callback, say): fire again shortly until one lands. Leaving the block disarms it.
        signal.setitimer(timer, 0.05)
        raise expired

    previous = signal.signal(number, interrupt)
    clock = time.process_time if cpu else time.monotonic
    start = clock()
    signal.setitimer(timer, seconds)
    try:
        yield expired
    finally:
        signal.setitimer(timer, 0)
        signal.signal(number, previous)
        if outer_left:
            left = outer_left - (clock() - start)
            signal.setitimer(timer, max(left, 0.001))
