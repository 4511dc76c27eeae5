"""Grading one exercise: run its criteria, each where it can run, and collect a ``Report``.

A student's code never runs in the grader's own process. It runs in a child process (``python
-m minipaged.grader``) under ``Limits``: an address-space limit (``RLIMIT_AS``) and a CPU-time
limit (``RLIMIT_CPU``), both set by the child itself before it loads any student code, and a
wall-clock limit after which the parent kills it; each criterion also has its own time limit
inside the child. The
child reports each criterion as it finishes, so a child that is killed still reports the
criteria it finished, and the rest fail with what happened. This is resource isolation, not a
security sandbox: the child runs as the same user, with the same files and network.

The CUDA exercises' criteria run in a child with ``NUMBA_ENABLE_CUDASIM=1``: Numba picks the
simulator when it is first imported, once per process. GPU criteria run in a child without it,
and only where torch sees a CUDA GPU; elsewhere they are blocked. The library's own modules
(``--solution``) are trusted and run in this process, except where the simulator or a GPU is
needed. A criterion that raises fails, with a message built from the error.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from minipaged.grader.exercises import exercise, graded_label, load, load_check
from minipaged.grader.report import BLOCKED, FAIL, PASS, CheckFailed, Criterion, Report, Result
from minipaged.grader.student import Student, StudentImportError
from minipaged.grader.time_limit import TimeLimitExceeded, time_limit

CHECK_SECONDS = 30.0
"""A criterion still running after this long is stopped and fails (a loop that never ends)."""

RESULT_MARK = "minipaged-grader-result "
"""Starts each line a grading child prints for a criterion (student code may print too)."""


@dataclass(frozen=True)
class Limits:
    """What a child process grading a student's code may use: ``memory_gib`` GiB of address
    space (``RLIMIT_AS``; None for no limit; never set for the GPU, whose driver maps far more
    than it uses), ``cpu_seconds`` of CPU time (``RLIMIT_CPU``), ``wall_seconds`` of real time
    before it is killed, and ``check_seconds`` for each criterion."""

    memory_gib: float | None = 8.0
    cpu_seconds: int | None = 900
    wall_seconds: float = 600.0
    check_seconds: float = CHECK_SECONDS


def grade(
    number: int, path: Path | None = None, solution: bool = False, limits: Limits | None = None
) -> Report:
    """Grade exercise ``number``: every criterion, each where it can run; a student's code in
    a child process under ``limits``."""
    ex = exercise(number)
    criteria = ex.criteria()
    load_check(number, path, solution)
    results: dict[Criterion, Result] = {}
    for runs_in in ("process", "simulator", "gpu"):
        group = [c for c in criteria if c.runs_in == runs_in]
        if not group:
            continue
        if runs_in == "process" and solution:
            done = run_criteria(group, load(number, path, solution))
        else:
            done = _run_elsewhere(number, runs_in, group, path, solution, limits or Limits())
        results.update(zip(group, done, strict=True))
    return Report(
        number, ex.title, graded_label(number, path, solution), [results[c] for c in criteria]
    )


def grade_here(
    number: int, runs_in: str, path: Path | None, solution: bool, check_seconds: float
) -> None:
    """Grade only the criteria that run in ``runs_in``, in this process (a child the grader
    started with the right environment and limits), printing each result as it finishes."""
    group = [c for c in exercise(number).criteria() if c.runs_in == runs_in]
    student = load(number, path, solution)
    for criterion in group:
        result = _run_one(criterion, student, check_seconds)
        # On a line of its own, even after a student's print(..., end="") or input() prompt.
        print("\n" + RESULT_MARK + json.dumps(asdict(result)), flush=True)


def run_criteria(
    criteria: list[Criterion], student: Student, check_seconds: float | None = None
) -> list[Result]:
    return [_run_one(c, student, check_seconds or CHECK_SECONDS) for c in criteria]


def _run_one(criterion: Criterion, student: Student, check_seconds: float) -> Result:
    start = time.perf_counter()
    outcome, message = PASS, ""
    try:
        with time_limit(check_seconds):
            criterion.check(student)
    except (Exception, SystemExit, TimeLimitExceeded) as error:  # not a KeyboardInterrupt
        outcome, message = FAIL, failure_message(error, student)
    seconds = round(time.perf_counter() - start, 3)
    return Result(criterion.name, criterion.statement, outcome, message, seconds)


def failure_message(error: BaseException, student: Student) -> str:
    """What a criterion that raised ``error`` tells the student: the check's own words, or
    the student's error with the line it came from and, where it is telling, its likely cause."""
    where = student.where(error)
    if isinstance(error, TimeLimitExceeded):
        return f"{error}: is there a loop that never ends?"
    if isinstance(error, MemoryError):
        return f"ran out of memory (MemoryError){where}"
    if isinstance(error, StudentImportError | CheckFailed):
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
    if isinstance(error, SystemExit):
        return (
            f"your code called sys.exit({error.code!r}){where}: return a value or raise an "
            "exception instead, so the grader can go on to the next check"
        )
    message = f"{type(error).__name__}: {error}{where}"
    if isinstance(error, IndexError) and str(error).startswith("tid="):  # in the simulator
        message += (
            ": a thread indexed past an array's end, which on a GPU reads or writes memory "
            "that is not the array's. Check each thread's index against the size (or the "
            "sequence's length) before using it"
        )
    return message


def _run_elsewhere(
    number: int,
    runs_in: str,
    group: list[Criterion],
    path: Path | None,
    solution: bool,
    limits: Limits,
) -> list[Result]:
    """Run ``group`` in a child process under ``limits``: here, in the simulator, or on a GPU."""
    env = dict(os.environ)
    if runs_in == "simulator":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    elif runs_in == "gpu":
        reason = _no_gpu_reason()
        if reason:
            return [_result(c, BLOCKED, reason) for c in group]
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    command = [sys.executable, "-m", "minipaged.grader", str(number), "--runs-in", runs_in]
    memory = None if runs_in == "gpu" else limits.memory_gib
    command += ["--check-seconds", str(limits.check_seconds)] + limit_arguments(
        memory, limits.cpu_seconds
    )
    command += ["--solution"] if solution else ["--path", str(path or exercise(number).starter)]
    child = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,  # a student's input() fails at once instead of waiting
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate(timeout=limits.wall_seconds)
        why = _why_it_stopped(child.returncode, err, limits, memory)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        why = f"the grading process was still running after {limits.wall_seconds:g} s: stopped"
    done = {}
    for line in out.splitlines():
        if line.startswith(RESULT_MARK):
            result = Result(**json.loads(line.removeprefix(RESULT_MARK)))
            done[result.name] = result
    return [done.get(c.name) or _result(c, FAIL, why) for c in group]


def limit_arguments(memory_gib: float | None, cpu_seconds: int | None) -> list[str]:
    """The command-line options that make a grading child call ``limit_resources``."""
    return (["--memory-gib", str(memory_gib)] if memory_gib is not None else []) + (
        ["--cpu-seconds", str(cpu_seconds)] if cpu_seconds is not None else []
    )


def limit_resources(memory_gib: float | None, cpu_seconds: int | None) -> None:
    """In a grading child, first thing, before any student code loads: cap its address space
    and its CPU time. The limits hold for the rest of the process's life."""
    if memory_gib is not None:
        size = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))


def _why_it_stopped(status: int, stderr: str, limits: Limits, memory: float | None) -> str:
    """Why a child ended before reporting every criterion, in words a student can act on."""
    tail = "\n".join(stderr.strip().splitlines()[-8:])
    if status in (-signal.SIGXCPU, -signal.SIGKILL) and "MemoryError" not in stderr:
        used = f"its {limits.cpu_seconds} s of CPU time" if status == -signal.SIGXCPU else ""
        if used:
            return f"the grading process used {used} and was stopped: a loop that never ends?"
    if "MemoryError" in stderr or "can't start new thread" in stderr or status == -signal.SIGKILL:
        cap = f" of {memory:g} GiB" if memory else ""
        return (
            f"the grading process ran out of its memory{cap} and stopped: does your code "
            f"allocate without bound?\n{tail}"
        )
    return f"the grading process failed (exit status {status}):\n{tail}"


def _result(criterion: Criterion, outcome: str, message: str) -> Result:
    return Result(criterion.name, criterion.statement, outcome, message)


def _no_gpu_reason() -> str:
    """Why the GPU criteria cannot run here, or ``""`` when they can."""
    import torch

    if torch.cuda.is_available():
        return ""
    return (
        "needs a CUDA GPU, and torch sees none here (torch.cuda.is_available() is False); "
        "run the same command on a machine with one"
    )
