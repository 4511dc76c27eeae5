"""How long a test waits for something before it calls it stuck.

One allowance for every wait on the suite's own work (an app that loads a model, a server
that starts, a browser that renders, a thread that stops), so that no test holds a shorter one
that a busy machine can run out: CI's machine is slower than ours and shared, and a wait that
gives up early fails working code. A wait returns as soon as its condition holds, so the
allowance costs nothing when the code works; code that is stuck fails all the same, later.
A limit the code under test must meet is another matter: the test gives that code one it
cannot meet at any speed (an endless loop) or one with a wide margin, and keeps its own work
out of it.
"""

import time

STUCK_AFTER_S = 120.0


def eventually(condition, what: str) -> None:
    """Return once ``condition()`` holds; fail naming ``what`` after ``STUCK_AFTER_S``. For a
    state the code under test reaches soon but not at once (a killed process leaving
    ``/proc``), where a fixed pause would pass on an idle machine and fail on a busy one."""
    give_up = time.monotonic() + STUCK_AFTER_S
    while not condition():
        assert time.monotonic() < give_up, f"{what} after {STUCK_AFTER_S:g} s"
        time.sleep(0.02)
