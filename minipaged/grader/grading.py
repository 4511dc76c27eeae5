"""Grading one exercise: run its criteria, each where it can run, and collect a ``Report``.

The grader judges; a student's code only answers. Their code never runs in the grader's own
process: it runs in a child (``minipaged.grader.child``), which loads it and runs what it is
asked, and sends back what the code returned, as data (``minipaged.grader.wire``). The checks
run here, against stand-ins for the student's objects (``minipaged.grader.remote``), and decide.
Nothing the code prints, returns or does can pass a criterion whose answers are wrong: printed
text is only shown, a forged or garbled answer fails the criterion, and a child that dies or
hangs fails the criterion it was running, after which a new child takes the next one.

The child runs under ``Limits``: an address-space limit (``RLIMIT_AS``), a CPU-time limit
(``RLIMIT_CPU``) and a file-size limit, set by itself before any student code loads; each
criterion has ``check_seconds`` of wall-clock time (stretched while its code still computes on a
busy machine: ``minipaged.grader.criterion_clock``), and the whole submission
``wall_seconds`` (not counting the children's starts: Python and the library importing,
before any student code runs, are the grader's work); at either, the child and every process
its code started is ended, whatever group or session it moved to
(``minipaged.grader.process_tree``). Before the student's code loads, the library functions
the exercise grades are stubbed out (``minipaged.grader.delegation``) and, where Linux offers
Landlock, the child is confined to writing in a private temporary folder, the student's own
folder read-only (``minipaged.grader.confinement``); the report says whether it was.

The CUDA exercises' criteria run in a child with ``NUMBA_ENABLE_CUDASIM=1``: Numba picks the
simulator when it is first imported, once per process. GPU criteria run in a child without it,
and only where torch sees a CUDA GPU; elsewhere they are blocked. ``--solution`` grades the
library's own modules the same way, in a child, without the stubs.
"""

from __future__ import annotations

import itertools
import linecache
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

from minipaged.grader.child_errors import (
    Blocked,
    ChildGone,
    StudentBaseException,
    StudentExit,
    StudentStopIteration,
)
from minipaged.grader.delegation import LibraryDelegation
from minipaged.grader.drawn_sizes import drawn_size
from minipaged.grader.exercises import exercise
from minipaged.grader.judged_folder import refused_now
from minipaged.grader.proxies import Proxy, RemoteStudent
from minipaged.grader.recorded_events import events_checked_last
from minipaged.grader.remote import GradingChild
from minipaged.grader.report import (
    BLOCKED,
    CALLED,
    FAIL,
    PASS,
    CheckFailed,
    Criterion,
    Report,
    Result,
    say_each_cause_once,
    shortened,
)
from minipaged.grader.student import Student, StudentImportError
from minipaged.grader.student_folder import folder_of, graded_label, shadowed_files
from minipaged.grader.time_limit import TimeLimitExceeded, time_limit

CHECK_SECONDS = 30.0
"""A criterion still running after this long is stopped and fails (a loop that never ends)."""

CPU_PER_WALL = 1.5
"""CPU time allowed per second of wall time: more than one, since torch may compute on a
second thread while the main one waits on it."""


def cpu_seconds_for(wall_seconds: float) -> int:
    """The CPU-time limit (whole seconds, as ``RLIMIT_CPU`` takes it, at least 1) that goes
    with a wall-clock limit of ``wall_seconds``."""
    return max(1, math.ceil(CPU_PER_WALL * wall_seconds))


@dataclass(frozen=True)
class Limits:
    """What a child process grading a student's code may use: ``memory_gib`` GiB of address
    space (``RLIMIT_AS``; None for no limit; never set for the GPU, whose driver maps far more
    than it uses), ``cpu_seconds`` of CPU time (``RLIMIT_CPU``; None for no limit),
    ``wall_seconds`` of real time for the whole submission (``math.inf`` for no limit),
    ``check_seconds`` for each criterion, and ``disk_gib`` GiB of files written, in all, in
    the student's folder and the child's temporary folder (each file is also capped, by
    ``RLIMIT_FSIZE``; a student's code may not fill the disk with many)."""

    memory_gib: float | None = 8.0
    cpu_seconds: int | None = cpu_seconds_for(600.0)
    wall_seconds: float = 600.0
    check_seconds: float = CHECK_SECONDS
    disk_gib: float = 1.0


NOT_RUN = "not run: grading stopped at the first criterion that failed (--first-failure)"


def grade(
    number: int,
    path: Path | None = None,
    solution: bool = False,
    limits: Limits | None = None,
    first_failure: bool = False,
) -> Report:
    """Grade exercise ``number``: every criterion, each where it can run, the student's code
    (or, with ``solution``, the library's) in a child process under ``limits``. With
    ``first_failure``, the criteria after the first that fails are not run: they are
    blocked, worth nothing either way, and no child starts for them. "After" in the order
    they run: by where they run (the process, the simulator, the GPU), those graded on the
    library's (``Criterion.on_the_library``) after the others of the same place, each group
    in the exercise's order."""
    ex = exercise(number)
    limits = limits or Limits()
    criteria = ex.criteria()
    started = time.monotonic()
    label = graded_label(number, path, solution)
    folder = None if solution else folder_of(number, path).resolve()
    # Reasons no criterion can pass: native code or a copy of the library's in the folder, a
    # module not installed.
    refused = (refused_now(ex, folder) if folder is not None else "") or ex.unmet()
    wall_deadline = (
        None if math.isinf(limits.wall_seconds) else time.monotonic() + limits.wall_seconds
    )
    results: dict[Criterion, Result] = {}
    confinement = ""
    # A child apart for the criteria that grade their work on the library's: only it keeps the
    # library functions handed over (``Criterion.on_the_library``), after the others.
    for runs_in, library in itertools.product(("process", "simulator", "gpu"), (False, True)):
        group = [c for c in criteria if c.runs_in == runs_in and c.on_the_library == library]
        failed = first_failure and any(r.outcome == FAIL for r in results.values())
        if group and failed:
            results |= {c: _result(c, BLOCKED, NOT_RUN) for c in group}
            continue
        reason = _no_gpu_reason() if group and runs_in == "gpu" and not refused else ""
        if not group or refused or reason:
            results |= {
                c: _result(c, FAIL if refused else BLOCKED, refused or reason) for c in group
            }
            continue
        # Closed at the block's end, or at a signal that ends the command inside it
        with GradingChild(number, runs_in, folder, limits, Proxy, hands_over=library) as child:
            child.wall_deadline = wall_deadline
            for criterion in group:
                if first_failure and any(r.outcome == FAIL for r in results.values()):
                    results[criterion] = _result(criterion, BLOCKED, NOT_RUN)
                    continue
                results[criterion] = _run_in_child(criterion, child, limits)
            confinement = confinement or child.confinement
            wall_deadline = child.wall_deadline  # moved on by its starts, the grader's time
    given = ex.points()
    return Report(
        number,
        ex.title,
        label,
        say_each_cause_once([replace(results[c], points=given[c.name]) for c in criteria]),
        confinement,
        seconds=round(time.monotonic() - started, 3),
        notes=tuple(shadowed_files(number, folder)) if folder is not None else (),
    )


def _run_in_child(criterion: Criterion, child: GradingChild, limits: Limits) -> Result:
    """Run ``criterion``'s check here against the student's code in ``child`` (started, or
    started again after it died), within the criterion's time."""
    start = time.perf_counter()
    outcome, message = PASS, ""
    try:
        if child.blocked:
            raise child.blocked
        if child.broken:
            raise ChildGone(child.broken)
        if not child.alive:
            # The folder as this child will import it: their last child's code may have
            # written to it (``minipaged.grader.judged_folder``).
            copied = refused_now(exercise(child.number), child.folder) if child.folder else ""
            if copied:
                raise LibraryDelegation(copied)
            child.start()  # starting is not the criterion's time; importing has its own
        start = time.perf_counter()
        child.start_clock()
        with events_checked_last():
            criterion.check(RemoteStudent(child))
    except (Exception, ChildGone, LibraryDelegation, TimeLimitExceeded) as error:
        message = explained(criterion, error, RemoteStudent(child))
        outcome = BLOCKED if isinstance(error, Blocked) else FAIL
    seconds = round(time.perf_counter() - start, 3)
    finalized = _let_go(child)
    if finalized and outcome != BLOCKED:
        failed_first = f"\nBefore that, the check failed: {message}" if outcome == FAIL else ""
        outcome, message = FAIL, shortened(finalized + failed_first)
    return Result(criterion.name, criterion.statement, outcome, message, seconds)


FINALIZER = (
    "when the grader let go of this check's objects, code run by a finalizer or callback your "
    "code set up (a __del__, a weakref.finalize or a weak reference's callback)"
)
"""What ran, where a criterion's objects were let go of (``_let_go``)."""


def _let_go(child: GradingChild) -> str:
    """After a criterion: let ``child`` forget its objects, running the student's finalizers
    of them within a criterion's time. Where they do not end in it, or do what a call may not
    (leave a process, end or break the child, compile a copy), the child is ended, the next
    criterion starts a new one, and this criterion's failure is returned ("" where none)."""
    if not child.alive:
        return ""
    child.start_clock()
    try:
        child.reset()
    except TimeLimitExceeded as error:
        child.stop()
        return f"{FINALIZER} ran past {error.seconds:g} s: does it loop, sleep or wait?"
    except (Exception, ChildGone, LibraryDelegation) as error:
        child.stop()
        return f"{FINALIZER} failed the check: {error}"
    return ""


def run_criteria(
    criteria: list[Criterion],
    student: Student,
    check_seconds: float | None = None,
    first_failure: bool = False,
) -> list[Result]:
    """Run ``criteria`` in this process on ``student``'s modules (trusted code: the tests'
    stand-ins for a student's work); with ``first_failure``, only up to the first that fails.
    Each criterion has ``check_seconds`` of this process's CPU time, the checks' and the
    code's together, however busy the machine is."""
    results = []
    for criterion in criteria:
        results.append(_run_one(criterion, student, check_seconds or CHECK_SECONDS))
        if first_failure and results[-1].outcome == FAIL:
            break
    return results


def _run_one(criterion: Criterion, student: Student, check_seconds: float) -> Result:
    start = time.perf_counter()
    outcome, message = PASS, ""
    try:
        with time_limit(check_seconds, cpu=True), events_checked_last():  # not the machine's load
            criterion.check(student)
    except (Exception, SystemExit, TimeLimitExceeded) as error:  # not a KeyboardInterrupt
        outcome, message = FAIL, explained(criterion, error, student)
    seconds = round(time.perf_counter() - start, 3)
    return Result(criterion.name, criterion.statement, outcome, message, seconds)


def explained(criterion: Criterion, error: BaseException, student: Student) -> str:
    """The message of ``criterion`` failing with ``error``: ``failure_message``, then the rule
    the work broke (``Criterion.broken``) where the student's code ran and answered wrongly or
    raised; not where it could not be judged at all (a file that does not import, a grading
    process gone, a loop stopped by the clock, a copy of the library's code)."""
    message = shortened(failure_message(error, student, _call_of(error), criterion.name))
    unjudged = StudentImportError | ChildGone | LibraryDelegation | TimeLimitExceeded | MemoryError
    return message if isinstance(error, unjudged) else criterion.broken(message)


def failure_message(
    error: BaseException, student: Student, call: str = "", criterion: str = ""
) -> str:
    """What a criterion that raised ``error`` tells the student: the check's own words, or
    the student's error with the line it came from, the check's ``call`` that reached it
    (``", in the check's call bm.fork(7, 8)"``) and, where it is telling, its likely cause.
    A time-out is told as one, naming ``criterion`` where given ("your code ran past 3 s in
    block_offset"): where the clock stopped it says nothing of the code's fault."""
    where = student.where(error) + call + drawn_size(error)
    if isinstance(error, TimeLimitExceeded):
        within = f" in {criterion}" if criterion else ""
        return f"{error}{within}: is there a loop that never ends, a sleep or a wait?"
    if isinstance(error, MemoryError):
        return f"ran out of memory (MemoryError){where}"
    if isinstance(error, StudentImportError | CheckFailed | ChildGone | LibraryDelegation):
        return str(error)
    if isinstance(error, AssertionError):
        return (str(error) or "an assertion failed") + where
    if isinstance(error, NotImplementedError):
        return f"not written yet: {error}{where}"
    if isinstance(error, EOFError):
        return (
            f"your code read input (input() or sys.stdin){where}; the grader gives it none: "
            "take what you need from the arguments"
        )
    if isinstance(error, StudentBaseException):
        return (
            f"your code raised {type(error).__name__}: {error}{where}, which is not an "
            "Exception: a program raising it "
            "stops. Raise an Exception (ValueError, say), or return a value"
        )
    if isinstance(error, StudentStopIteration):
        return (
            f"your code raised {type(error).__name__}: {error}{where}, which ends the loop "
            "that called it as if it were done, not as an error: return a value, or raise an "
            "exception that says what went wrong (ValueError, say)"
        )
    if isinstance(error, SystemExit | StudentExit):
        return (
            f"your code called sys.exit({error.code!r}){where}: return a value or raise an "
            "exception instead, so the grader can go on to the next check"
        )
    message = f"{type(error).__name__}: {error}{where}"
    if isinstance(error, PermissionError):  # Landlock's refusal, of a write most often
        message += (
            ": while it is graded your code may write only in its temporary folder "
            "(tempfile.gettempdir()), not in your folder, and may not read the library's "
            "solution"
        )
    if isinstance(error, IndexError) and str(error).startswith("tid="):  # in the simulator
        message += (
            ": a thread indexed past an array's end, which on a GPU reads or writes memory "
            "that is not the array's. Check each thread's index against the size (or the "
            "sequence's length) before using it"
        )
    return message


MACHINERY = frozenset(
    f"{Path(__file__).parent / name}.py"
    for name in (
        "frames",
        "grading",
        "proxies",
        "recorded_events",
        "remote",
        "report",
        "student",
        "time_limit",
        "wire",
    )
)
"""The grader's files that carry a check's call to the student's code without making it: the
call a failure names is the last one a check (or a helper of the checks) made."""


def _call_of(error: BaseException) -> str:
    """``", in the check's call bm.fork(7, 8)"``: what the check was calling when ``error``
    was raised in the student's code: the call the check named in a note on the error
    (``report.note_call``), else the expression of the grader's checks that called into the
    student's code, or ``""`` when no check's line made it."""
    named = [n for n in getattr(error, "__notes__", ()) if n.startswith(CALLED)]
    if named:  # the first, made nearest the student's code
        return f", in {named[0]}"
    grader = str(Path(__file__).parent)
    found = ""
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.startswith(grader) and code.co_filename not in MACHINERY:
            found = _expression(code, tb.tb_lasti) or found
        tb = tb.tb_next
    return f", in {CALLED}{found}" if found else ""


def _expression(code, instruction: int) -> str:
    """The source text, on one line, of the expression ``code`` was running at byte offset
    ``instruction`` (a call that spans lines, whole)."""
    start, end, column, end_column = list(code.co_positions())[instruction // 2]
    if start is None or end is None or column is None or end_column is None:
        return ""
    lines = [linecache.getline(code.co_filename, n) for n in range(start, end + 1)]
    lines[-1] = lines[-1][:end_column]
    lines[0] = lines[0][column:]
    return " ".join(" ".join(lines).split()).replace("( ", "(").replace(", )", ")")


def _result(criterion: Criterion, outcome: str, message: str) -> Result:
    return Result(criterion.name, criterion.statement, outcome, message)


def platform_problem() -> str:
    """``""`` where a student's code can be graded here, else why not and what to do: the
    grading child limits itself with the ``resource`` module and is ended as a process group,
    which only Unix offers."""
    try:
        import resource  # noqa: F401
    except ImportError:
        return (
            "grading runs your code in a child process under memory and CPU-time limits, which "
            "this system cannot set (Python has no resource module here, as on Windows): run "
            "minipaged on Linux or macOS, or in WSL on Windows"
        )
    return ""


def _no_gpu_reason() -> str:
    """Why the GPU criteria cannot run here, or ``""`` when they can."""
    import torch

    if torch.cuda.is_available():
        return ""
    return (
        "needs a CUDA GPU, and torch sees none here (torch.cuda.is_available() is False); "
        "run the same command on a machine with one"
    )
