"""Stop a block of the student's code that runs too long (a loop that never ends, or hypothesis
shrinking a long program for too long).

A SIGALRM timer raises ``TimeLimitExceeded`` into whatever runs when it fires. It works on Unix in
the main thread; elsewhere the block runs without a limit. Limits nest: an inner limit that
would end after the enclosing one is not set, and the enclosing one keeps its deadline.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator


class TimeLimitExceeded(BaseException):
    """A BaseException, so that neither a student's ``except Exception`` nor hypothesis's
    failure handling swallows it."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"still running after {seconds:g} s")
        self.seconds = seconds


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[TimeLimitExceeded | None]:
    """Interrupt the block after ``seconds``. Yields the exception this limit raises (None when
    no timer is set), so that a caller can tell its own limit from an enclosing one's."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    outer_left = signal.getitimer(signal.ITIMER_REAL)[0] if usable else 0.0
    if not usable or 0 < outer_left <= seconds:
        yield None
        return
    expired = TimeLimitExceeded(seconds)

    def interrupt(signum, frame):
        # Python ignores an exception raised where it cannot propagate (a garbage-collector
        # callback, say): fire again shortly until one lands. Leaving the block disarms it.
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        raise expired

    previous = signal.signal(signal.SIGALRM, interrupt)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield expired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:
            left = outer_left - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))
