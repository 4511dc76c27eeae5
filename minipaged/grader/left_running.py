"""What a student's code left running after its call returned: a thread, a process.

Code still running between the grader's questions acts on what comes next: it can write on
the channel while the next call is answered (whose criterion then failed with "sent something
the grader cannot read", blamed for what it did not do), compute on the next criterion's time,
or change the objects the next check reads. So after every answer of a grading child the call
is asked what it left, and one that left a thread or a process fails with a reason naming it
(``LeftRunning``); the child is ended, and the next criterion starts a new one, blamed for
nothing. An honest answer leaves nothing, and pays a few small reads of ``/proc`` per call:
no restart without cause.

The grader decides, from outside the worker, where the student's code cannot talk it out of
it (code in the worker can replace ``threading.enumerate``, ``sys._current_frames`` or this
module's functions, and a thread started through ``ctypes`` has no Python thread state at
all):

- threads: the worker's threads as the OS lists them (``/proc/<worker>/task``) after the
  answer that were not there before the request (``tasks_left``);
- processes: those under the child's supervisor besides its worker (``process_tree.beside``).

The child adds only words: the Python threads the request started, named with the line of
the student's file they run (``threads_left``), which the grader shows where it has them.
Libraries' thread pools would look like the student's threads when they start or grow (numpy's
import started one, torch's first parallel operation another), so the child runs them at one
thread (``ONE_THREAD``), which starts none; and a thread a library starts anyway (the student
asked for more with ``torch.set_num_threads``, ran a Numba ``parallel=True`` function, or
first used the GPU's driver) is told from the student's by its stack and not counted
(``minipaged.grader.library_threads``). A thread counted fails the call unless it ends within
``EXITING_SECONDS``, the time a thread joined before the return takes to leave the OS's list; a
CUDA simulator's child gives its threads ``GRACE_SECONDS`` (they end just after a launch that
raised), and a process, too (a forked copy of the child ends as it answers).

What the grader guarantees: it asks its next question only once every thread and process a
call started has ended, so nothing a student's code left running acts while the grader reads,
and every read after a call sees all it did. What it cannot: see a thread that the child's look
misses (hidden from it, or started through ctypes, ``_thread`` or a C extension, with no Python
thread state the child sees) and that ends before the grader's look: within
``EXITING_SECONDS`` of it (``GRACE_SECONDS`` in a simulator's child), and on a busy machine,
where the grader may run only a while after the answer was sent, that while too. Such a
thread acts between the answer and the next question, on the student's own objects, and what
it does is what the call could have done before returning: the answer the grader holds was
copied before it, and the next read sees it.

Code that runs later with no thread of its own is watched as well: a handler for a signal
(``signal.signal``, or ``sigaction`` through ctypes, real-time signals included) and a POSIX
timer (``timer_create``) left after a call fail it (``handlers_left``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from minipaged.grader.child_errors import ChildGone
from minipaged.grader.library_threads import library_threads
from minipaged.grader.process_tree import beside

GRACE_SECONDS = 0.5
"""How long a process a call started, or a thread of the CUDA simulator, may take to end after
the call returned."""

EXITING_SECONDS = 0.05
"""How long any other thread the OS still lists after its call returned may take to end: one
joined before the return stays listed while it exits (up to 8 ms seen, two cores at a load of
9)."""

STARTING_SECONDS = 0.05
"""How long a thread the OS counts may take to show as Python's: a deadline (the look returns
once it shows), kept short because a native thread of the student's that ends meanwhile runs
unseen (the count falls back, as for a joined thread leaving the list); one that shows late is
still failed by the grader's look (``tasks_left``), as a thread that Python does not list."""

_LOOK_SECONDS = 0.005


class LeftRunning(ChildGone):
    """The student's code left a thread or a process running after its call returned: the
    call fails, and its grading child is ended (``minipaged.grader.left_running``)."""


class Threads(NamedTuple):
    tasks: int  # the process's threads as the OS counts them, native ones included
    python: frozenset[int]  # the idents of the Python threads, whatever code they run


def running_threads() -> Threads:
    """The threads running now. A thread ``_thread`` started shows among the Python threads
    only once it has begun (it waits for the interpreter's lock); the OS counts it at once."""
    try:
        tasks = len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: the Python threads alone
        tasks = 0
    return Threads(tasks, frozenset(sys._current_exceptions()))


def threads_left(before: Threads, folder: Path | None) -> str:
    """In the child, after a request, before its answer is sent: the Python threads running
    now that were not ``before`` it, each named with where it is in ``folder``'s files; ``""``
    for none. A thread of the student's code still running when the call returned fails it at
    once, however soon it would end: what it does next (a block freed 0.1 s later) would land
    after the answer was taken, on the state the grader reads for the next question, and be
    blamed on that one. Only the CUDA simulator's threads get ``GRACE_SECONDS`` to end (they
    end just after a launch that raised). A thread the OS counts that is not Python's after
    ``STARTING_SECONDS`` is a library's (torch's pool, started by the first parallel
    operation), not the student's to join. The grader decides from ``/proc`` (``tasks_left``);
    this look, which the student's code can replace, adds the thread's line."""
    start = time.monotonic()
    while True:
        now = running_threads()
        fresh = sorted(now.python - before.python)
        waited = time.monotonic() - start
        if not fresh and (now.tasks <= before.tasks or waited >= STARTING_SECONDS):
            return ""
        if waited >= GRACE_SECONDS or not all(map(_finishing, fresh)):
            break
        time.sleep(_LOOK_SECONDS)
    frames = sys._current_frames()
    names = {t.ident: f"{t.name}{_running(t)}" for t in threading.enumerate()}
    named = [
        f"{names[i]}{_where(frames.get(i), folder)}"
        if i in names
        else f"started with _thread{_where(frames.get(i), folder) or ', in native code'}"
        for i in fresh
    ]
    return f"{len(fresh)} thread{'s' * (len(fresh) > 1)} ({'; '.join(named)[:300]})"


def _running(thread: threading.Thread) -> str:
    """``", running list.append"``: what a ``threading.Timer`` (or a thread not named after its
    target, as ``Thread-1 (babble)`` is) was given to run, which names the student's code while
    the thread waits in ``threading``'s own."""
    target = getattr(thread, "_target", None) or getattr(thread, "function", None)
    name = getattr(target, "__qualname__", None)
    if not isinstance(name, str) or thread.name.endswith(f"({getattr(target, '__name__', '')})"):
        return ""
    return f", running {name}"


def _finishing(ident: int) -> bool:
    """Whether the Python thread ``ident`` is one the CUDA simulator started for a block of a
    launch, which may still be ending as the launch returns (or raised)."""
    thread = threading._active.get(ident)
    return type(thread).__module__ == "numba.cuda.simulator.kernel"


ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""In the grading child's environment: torch's and numpy's pools at one thread, which start no
thread of their own (on two cores, numpy's import and torch's first parallel operation each
started one)."""


def tasks(pid: int) -> frozenset[int] | None:
    """In the grader: the ids of ``pid``'s threads as the OS lists them, native ones included;
    None where they cannot be read (no ``/proc``, the process gone)."""
    try:
        return frozenset(int(task) for task in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return None


def tasks_left(
    worker: int, before: frozenset[int] | None, kind: str = "", why: str = "", grace: float = 0.0
) -> str:
    """In the grader, after an answer: the worker's threads running now that were not
    ``before`` the request (after ``grace`` seconds for them to end, ``EXITING_SECONDS`` at
    least), each with its name and state, ``kind`` after their count and ``why`` after their
    names (``UNLISTED``); ``""`` for none, or where the OS does not list them."""

    pools: set[int] = set()  # a parked pool thread is a library's for good: never run Python

    def fresh() -> list[int]:
        now = tasks(worker)
        if now is None or before is None:
            return []
        found = [t for t in now - before - pools if _state(worker, t) not in "ZX"]
        pools.update(library_threads(worker, found))
        return sorted(set(found) - pools)

    found = _waited(fresh, max(grace, EXITING_SECONDS))
    found = [t for t in found if _state(worker, t) not in "ZX"]  # ended as the wait did
    if not found:
        return ""
    named = "; ".join(f"{_thread_name(worker, t)}, {_state_word(worker, t)}" for t in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"{len(found)} thread{'s' * (len(found) > 1)}{kind} ({named}{more}{why})"


UNLISTED = (
    " that Python does not list",
    "; started through ctypes or a C library, or hidden from the grading process's own look "
    "(a library's own pool, grown by torch.set_num_threads, is not counted where the grader "
    "can read what its threads run)",
)
"""How ``tasks_left`` names the threads it found where the child named none."""


def processes_left(supervisor: int, worker: int) -> str:
    """In the grader, after an answer: the processes running under the child besides its
    worker (after ``GRACE_SECONDS`` for them to end), each with its command; ``""`` for none."""
    found = _waited(lambda: beside(supervisor, worker) or [], GRACE_SECONDS)
    if not found:
        return ""
    named = [f"pid {pid}: {_command(pid, worker)}" for pid in found[:3]]
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"{len(found)} process{'es' * (len(found) > 1)} ({'; '.join(named)}{more})"


def left_running(doer: str, left: str) -> LeftRunning:
    """The failure of a call after which ``left`` (``threads_left``, ``processes_left``) was
    still running; ``doer``: "your code", "importing your files"."""
    return LeftRunning(
        f"{doer} left {left} running after it returned: join every thread and wait for every "
        "process your code starts before it returns (the grading process was ended, so the "
        "next criterion starts a new one)"
    )


_NOT_LATER = {
    signal.SIGSEGV,  # faults: raised by the code running, when it runs (faulthandler's)
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGTRAP,
    signal.SIGSYS,
    signal.SIGABRT,
    signal.SIGKILL,  # never caught
    signal.SIGSTOP,
    signal.SIGWINCH,  # Numba's CUDA module catches it as it loads
}
LATER_SIGNALS = tuple(
    n
    for n in range(1, signal.SIGRTMAX + 1)
    if n not in _NOT_LATER and not 32 <= n < signal.SIGRTMIN
)
"""The signals that come later, from a timer (``signal.setitimer``, ``timer_create``, which
sends any signal) or from another process: a handler for one runs the student's code after its
call returned, in the middle of whatever the grading process does next (a freed block put back
on the free list while the next question is read). Every signal but the faults the running
code raises itself, glibc's own below ``SIGRTMIN`` (its threads') and ``SIGWINCH``, which
Numba's CUDA module catches as it loads; the real-time signals included."""


class Later(NamedTuple):
    """What can run a process's code later with no thread of its own."""

    caught: int  # the signals it catches with a handler, bit n - 1 for signal n
    timers: frozenset[str]  # its POSIX timers, each "timer 0, sending SIGRTMIN+2"


def later(pid: int) -> Later | None:
    """In the grader: the signals ``pid`` catches with a handler (``SigCgt`` in
    ``/proc/<pid>/status``) and its POSIX timers (``/proc/<pid>/timers``), which the student's
    code cannot hide, however it set them; None where they cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            line = next(line for line in f if line.startswith(b"SigCgt:"))
        with open(f"/proc/{pid}/timers", "rb") as f:
            listed = f.read().decode(errors="replace")
        caught = int(line.split()[1], 16)
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return Later(caught, frozenset(_timers(listed)))


def _timers(listed: str):
    """``"timer 0, sending SIGRTMIN+2"``: each timer of a ``/proc/<pid>/timers`` listing, its
    lines ``ID: 0``, ``signal: 36/...``, ``notify: ...``, ``ClockID: 1``."""
    fields: dict[str, str] = {}
    for line in [*listed.splitlines(), "ID: end"]:
        key, _, value = line.partition(": ")
        if key == "ID" and fields:
            number = fields.get("signal", "").partition("/")[0]
            sends = signal_name(int(number)) if number.isdigit() else "no signal"
            yield f"timer {fields['ID']}, sending {sends}"
            fields = {}
        fields[key] = value


def signal_name(number: int) -> str:
    """``"SIGALRM"``; ``"SIGRTMIN+2"`` for a real-time signal Python has no name for."""
    if number in signal.Signals._value2member_map_:
        return signal.Signals(number).name
    return f"SIGRTMIN+{number - signal.SIGRTMIN}"


def handlers_left(worker: int, before: Later | None) -> str:
    """In the grader, after an answer: ``"a handler for SIGALRM"``, the ``LATER_SIGNALS`` the
    worker catches now that it did not ``before`` the request, and ``"a timer set with
    timer_create (timer 0, sending SIGRTMIN+2)"`` for the POSIX timers it has now that it had
    not; ``""`` for none, or where ``/proc`` does not tell."""
    now = later(worker)
    if now is None or before is None:
        return ""
    new = [signal_name(n) for n in LATER_SIGNALS if now.caught & ~before.caught & (1 << (n - 1))]
    timers = sorted(now.timers - before.timers)
    left = [f"a handler for {' and '.join(new)}"] if new else []
    left += [f"a timer set with timer_create ({'; '.join(timers)[:120]})"] if timers else []
    return " and ".join(left)


ITIMERS = {"ITIMER_REAL": 0, "ITIMER_VIRTUAL": 1, "ITIMER_PROF": 2}
"""The interval timers of ``signal.setitimer`` (``signal.alarm`` sets ITIMER_REAL), by the
numbers of setitimer(2): /proc lists none of them."""


def itimers_left() -> str:
    """In the child, after a request: ``"a timer set with signal.setitimer or signal.alarm
    (ITIMER_VIRTUAL)"`` for each interval timer still armed; ``""`` for none. Left armed, its
    signal comes during a later criterion, whose code it then stops (SIGVTALRM and SIGPROF end
    a process that does not catch them): that criterion was blamed, this one passed."""
    armed = [name for name, which in ITIMERS.items() if signal.getitimer(which)[0] > 0]
    named = ", ".join(armed)
    return f"a timer set with signal.setitimer or signal.alarm ({named})" if armed else ""


def handler_left(doer: str, left: str) -> LeftRunning:
    """The failure of a call after which ``left`` (``handlers_left``) was still installed."""
    return LeftRunning(
        f"{doer} left {left} installed after it returned: it runs whenever its signal comes "
        "(a timer's: signal.setitimer, signal.alarm, timer_create), between the grader's "
        "questions, on what they read. Put back the handler your code replaced "
        "(signal.signal(number, previous)) and stop and delete its timer before returning "
        "(the grading process was ended, so the next criterion starts a new one)"
    )


def _waited(find: Callable[[], set[int] | list[int]], seconds: float):
    found = find()
    stop = time.monotonic() + seconds
    while found and time.monotonic() < stop:
        time.sleep(_LOOK_SECONDS)
        found = find()
    return found


def _stat(worker: int, task: int) -> bytes:
    try:
        with open(f"/proc/{worker}/task/{task}/stat", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _state(worker: int, task: int) -> str:
    """``task``'s state letter (``R``, ``S``, ``Z`` ...); ``X`` where it is gone."""
    stat = _stat(worker, task)
    return stat[stat.rfind(b")") + 2 :][:1].decode() or "X"


_STATES = {"R": "running", "S": "sleeping", "D": "waiting on a device", "T": "stopped"}


def _state_word(worker: int, task: int) -> str:
    state = _state(worker, task)
    return _STATES.get(state, f"state {state}")


def _thread_name(worker: int, task: int) -> str:
    """``"thread 1234 ('python')"``: the OS's id and name of the thread (the name as its code
    set it, else the program's)."""
    stat = _stat(worker, task)
    name = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode(errors="replace")[:20]
    return f"thread {task} ({name!r})"


def _where(frame, folder: Path | None) -> str:
    """``", at memory.py, line 12"``: the innermost line of ``folder``'s files the thread is
    running, else its innermost line anywhere."""
    innermost = frame
    while frame is not None:
        if folder is not None and frame.f_code.co_filename.startswith(f"{folder}{os.sep}"):
            return f", at {Path(frame.f_code.co_filename).name}, line {frame.f_lineno}"
        frame = frame.f_back
    if innermost is None:
        return ""
    return f", at {Path(innermost.f_code.co_filename).name}, line {innermost.f_lineno}"


def _command(pid: int, worker: int) -> str:
    """``pid``'s command line, cut short; a forked copy of the worker said as such."""
    words = _cmdline(pid)
    if words and words == _cmdline(worker):
        return "a copy of the grading process, forked by your code"
    return " ".join(w.decode(errors="replace") for w in words)[:80] or "gone"


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(4000).rstrip(b"\0").split(b"\0")
    except OSError:
        return []
