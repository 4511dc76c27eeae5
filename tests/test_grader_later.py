"""What a call leaves to act after it returned, read from ``/proc`` as the grader reads a
grading child's (here, this process's): a handler for any signal that can come later, however
it was set, a POSIX timer, and a thread that is still listed once the short time a joined
thread takes to exit is over (``minipaged.grader.left_running``). The hostile corpus's
``later-by-other-routes`` hand-in grades the same routes in a real grading child."""

from __future__ import annotations

import ctypes
import os
import signal
import threading

import pytest

from minipaged.grader.left_running import (
    EXITING_SECONDS,
    GRACE_SECONDS,
    handlers_left,
    later,
    signal_name,
    tasks,
    tasks_left,
)

LIBC = ctypes.CDLL(None)


NOT_LATER = {
    getattr(signal, f"SIG{n}")
    for n in ["SEGV", "BUS", "FPE", "ILL", "TRAP", "SYS", "ABRT", "WINCH"]
}
"""The signals a handler may be left for: the faults, which the running code raises itself, and
SIGWINCH, which Numba's CUDA module catches as it loads."""

CATCHABLE = [
    n for n in range(1, signal.SIGRTMAX + 1) if n not in (signal.SIGKILL, signal.SIGSTOP, 32, 33)
]
"""32 and 33 are glibc's own, for its threads: no one else may catch them."""


@pytest.mark.parametrize("number", CATCHABLE, ids=signal_name)
def test_a_handler_for_any_signal_that_comes_later_is_named(number):
    previous = signal.signal(number, signal.SIG_IGN)  # not caught (Python catches SIGINT)
    try:
        before = later(os.getpid())
        signal.signal(number, lambda *_: None)
        named = f"a handler for {signal_name(number)}"
        assert handlers_left(os.getpid(), before) == ("" if number in NOT_LATER else named)
        signal.signal(number, signal.SIG_IGN)
        assert handlers_left(os.getpid(), before) == ""
    finally:
        signal.signal(number, previous)


def test_a_handler_set_through_libc_is_named_as_one_set_through_python():
    number = signal.SIGRTMIN + 5
    before = later(os.getpid())
    LIBC.signal.restype = ctypes.c_void_p
    previous = LIBC.signal(number, ctypes.cast(LIBC.getpid, ctypes.c_void_p))
    try:
        assert handlers_left(os.getpid(), before) == "a handler for SIGRTMIN+5"
    finally:
        LIBC.signal(number, ctypes.c_void_p(previous))


def test_a_posix_timer_is_named_with_the_signal_it_sends():
    before = later(os.getpid())
    timer = ctypes.c_void_p()
    event = (ctypes.c_int * 16)(0, 0, signal.SIGRTMIN + 1, 1)  # SIGEV_NONE: sends nothing
    assert LIBC.timer_create(1, event, ctypes.byref(timer)) == 0
    try:
        assert handlers_left(os.getpid(), before).startswith(
            "a timer set with timer_create (timer "
        )
        assert handlers_left(os.getpid(), before).endswith(", sending SIGRTMIN+1)")
    finally:
        LIBC.timer_delete(timer)
    assert handlers_left(os.getpid(), before) == ""


def _native_thread(seconds: float) -> None:
    handle = ctypes.c_ulong()
    nap = ctypes.cast(LIBC.usleep, ctypes.c_void_p)
    LIBC.pthread_create(ctypes.byref(handle), None, nap, ctypes.c_void_p(int(seconds * 1e6)))
    LIBC.pthread_detach(handle)


def test_a_native_thread_still_listed_after_a_joined_thread_would_have_exited_is_left():
    before = tasks(os.getpid())
    # it sleeps 40 times the wait, not 4: a loaded machine (the whole suite on two cores)
    # can hold this process longer than 0.15 s between the start and the look, and a thread
    # that has ended by then is rightly not reported (one failure in a suite run)
    _native_thread(40 * EXITING_SECONDS)
    assert tasks_left(os.getpid(), before).startswith("1 thread (thread ")


def test_a_simulators_child_gives_its_threads_the_grace():
    before = tasks(os.getpid())
    _native_thread(GRACE_SECONDS / 5)
    assert tasks_left(os.getpid(), before, grace=GRACE_SECONDS) == ""


def test_a_thread_joined_before_the_return_is_not_left():
    before = tasks(os.getpid())
    for _ in range(20):
        thread = threading.Thread(target=sum, args=(range(1000),))
        thread.start()
        thread.join()
        assert tasks_left(os.getpid(), before) == ""
