"""Every process a student's code starts, found and ended wherever it moved.

The grader cannot end a grading child's work by its process group alone: ``os.setsid()``,
``os.setpgid()``, ``subprocess.Popen(..., start_new_session=True)`` leave the group, and a
double fork (the middle process exits) leaves the child's family too, its grandchild
re-parented to ``init``. Parenthood is what a process cannot shed if orphans cannot leave the
tree, so the grading child starts as two processes (``supervise``):

- the *supervisor*, which runs no student code: a subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``,
  Linux 3.4 and later), so every orphan below it re-parents to it, not to ``init``. It waits
  for the worker, then ends every descendant left (``end_descendants``) and exits as the worker
  did (the same status, or the same signal), so the grader reads the worker's end;
- the *worker*, which answers the grader and runs the student's code.

The grader ends a child by ending the supervisor's descendants first (a walk of
``/proc/*/stat`` for the processes whose parent chain reaches it, killed, again until a walk
finds none: a process may fork during the sweep), then the supervisor. Landlock's signal
scope (ABI 6) keeps the worker from killing the supervisor; where it is missing a student's
code could, and what it started would then escape the sweep (the report says the code ran
unconfined). Off Linux there is no subreaper and no ``/proc``: the grader ends the process
group only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from pathlib import Path

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36

SWEEP_SECONDS = 5.0
"""How long ``end_descendants`` keeps walking while it still finds processes (a fork bomb)."""

FORK_HEADROOM = 512
"""RLIMIT_NPROC: how many more processes than the user already runs a worker may start (the
limit counts every process of the user, and root is not held to it)."""


def _parents() -> dict[int, tuple[int, str]]:
    """Every live process's parent and state (``R``, ``S``, ``Z`` ...), by pid, from
    ``/proc/*/stat``. A process that ends while it is read is left out."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after
        # the last ")".
        fields = stat[stat.rfind(b")") + 2 :].split()
        found[int(entry.name)] = (int(fields[1]), fields[0].decode())
    return found


def descendants(root: int) -> list[int]:
    """The pids of ``root``'s live descendants (zombies left out: they hold no resources and
    a signal cannot end them), parents before their children."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        below = [c for p in frontier for c in children.get(p, ())]
        found += [pid for pid in below if parents[pid][1] not in "ZX"]
        frontier = below
    return found


def worker_of(supervisor: int) -> int:
    """The worker ``supervise`` forked under ``supervisor``: its one child, read when the worker
    greets the grader, before any student code runs. ``supervisor`` itself where there was no
    split (off Linux, no subreaper) or Linux does not list a process's children."""
    try:
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    except OSError:
        return supervisor
    return int(children[0]) if len(children) == 1 else supervisor


def beside(supervisor: int, worker: int) -> list[int] | None:
    """The processes running under ``supervisor`` besides ``worker``: the worker's children
    (of any of its threads) and the orphans re-parented to the supervisor, zombies left out
    (they run nothing). Read from the tasks' ``children`` files, a few small reads however
    many processes the machine runs; None where Linux does not list a task's children."""
    try:
        below = []
        if supervisor != worker:
            path = f"/proc/{supervisor}/task/{supervisor}/children"
            below += [p for p in _children(path) if p != worker]
        for task in os.listdir(f"/proc/{worker}/task"):
            below += _children(f"/proc/{worker}/task/{task}/children")
    except OSError:
        return None
    return [pid for pid in below if _state(pid) not in "ZX"]


def _children(path: str) -> list[int]:
    with open(path, "rb") as f:
        return [int(pid) for pid in f.read().split()]


def _state(pid: int) -> str:
    """``pid``'s state letter (``R``, ``S``, ``Z`` ...); ``X`` where it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return "X"
    return stat[stat.rfind(b")") + 2 :][:1].decode() or "X"


def end_descendants(root: int, seconds: float = SWEEP_SECONDS) -> int:
    """SIGKILL every descendant of ``root``, walking again until a walk finds none (or
    ``seconds`` pass); return how many were signalled. Off Linux, 0."""
    if not Path("/proc/self/stat").exists():
        return 0
    ended, stop = 0, time.monotonic() + seconds
    while time.monotonic() < stop:
        found = descendants(root)
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                ended += 1
        time.sleep(0.001)  # let the killed die, and their orphans re-parent to the subreaper
    return ended


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc prctl: not Linux
        return False


def supervise(channel: tuple[int, ...]) -> bool:
    """Split this process into a supervisor and a worker (see the module's docstring); return
    in the worker only, with whether the split was made (``False`` off Linux: then there is one
    process, as before). The supervisor closes the ``channel`` file descriptors, so only the
    worker holds the grader's pipes, and never returns."""
    if not Path("/proc/self/stat").exists() or not _prctl(_PR_SET_CHILD_SUBREAPER, 1):
        return False
    grader = os.getppid()
    worker = os.fork()
    if worker == 0:
        _limit_forks()
        return True
    for fd in channel:
        os.close(fd)
    # If the grader itself dies (killed, crashed), end the worker's tree rather than leave it.
    # The kernel sends this when the grader's *thread* that started us ends: every grader
    # starts and stops its children within one call on one thread (grading, a TUI run).
    signal.signal(signal.SIGUSR1, lambda *_: os._exit(_ended(128 + signal.SIGUSR1)))
    _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != grader:  # it died before the line above
        os._exit(_ended(128 + signal.SIGUSR1))
    _, status = os.waitpid(worker, 0)
    _ended(status)
    if os.WIFSIGNALED(status):  # end as the worker did, so the grader reads why
        number = os.WTERMSIG(status)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.waitstatus_to_exitcode(status))


def _ended(status: int) -> int:
    """In the supervisor: end what the worker left; ``status`` passes through."""
    end_descendants(os.getpid())
    return status


def _limit_forks() -> None:
    """In the worker: cap the processes it may start (a fork bomb), where the OS counts them."""
    import resource

    if os.getuid() == 0:  # root is not held to RLIMIT_NPROC
        return
    mine = sum(1 for p in Path("/proc").glob("[0-9]*") if _owner(p) == os.getuid())
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    wanted = mine + FORK_HEADROOM
    if hard == resource.RLIM_INFINITY or wanted < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NPROC, (wanted, hard))


def _owner(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None
