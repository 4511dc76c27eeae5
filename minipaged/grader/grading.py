"""Grading one exercise: run its criteria, each where it can run, and collect a ``Report``.

Most criteria run in this process. Exercise 07's run in a fresh process with
``NUMBA_ENABLE_CUDASIM=1``: Numba picks the simulator when it is first imported, once per
process. GPU criteria run in a fresh process without it, and only where torch sees a CUDA GPU;
elsewhere they are blocked. A criterion that raises fails, with a message built from the error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from minipaged.grader.exercises import exercise, graded_label, load, load_check
from minipaged.grader.report import (
    BLOCKED,
    FAIL,
    PASS,
    CheckFailed,
    Criterion,
    Report,
    Result,
    report_from_dict,
)
from minipaged.grader.student import Student, StudentImportError
from minipaged.grader.time_limit import TimeLimitExceeded, time_limit

CHECK_SECONDS = 30.0
"""A criterion still running after this long is stopped and fails (a loop that never ends)."""

SUBPROCESS_SECONDS = 180.0


def grade(number: int, path: Path | None = None, solution: bool = False) -> Report:
    """Grade exercise ``number``: every criterion, each where it can run."""
    ex = exercise(number)
    criteria = ex.criteria()
    here = [c for c in criteria if c.runs_in == "process"]
    results: dict[Criterion, Result] = {}
    if here:  # a student's files may import numba: load them only where they run
        results.update(zip(here, run_criteria(here, load(number, path, solution)), strict=True))
    else:
        load_check(number, path, solution)
    for runs_in in ("simulator", "gpu"):
        group = [c for c in criteria if c.runs_in == runs_in]
        if group:
            elsewhere = _run_elsewhere(number, runs_in, group, path, solution)
            results.update(zip(group, elsewhere, strict=True))
    return Report(
        number, ex.title, graded_label(number, path, solution), [results[c] for c in criteria]
    )


def grade_here(number: int, runs_in: str, path: Path | None, solution: bool) -> Report:
    """Grade only the criteria that run in ``runs_in``, in this process (which the caller
    started with the right environment)."""
    ex = exercise(number)
    group = [c for c in ex.criteria() if c.runs_in == runs_in]
    results = run_criteria(group, load(number, path, solution))
    return Report(number, ex.title, graded_label(number, path, solution), results)


def run_criteria(criteria: list[Criterion], student: Student) -> list[Result]:
    return [_run_one(c, student) for c in criteria]


def _run_one(criterion: Criterion, student: Student) -> Result:
    start = time.perf_counter()
    outcome, message = PASS, ""
    try:
        with time_limit(CHECK_SECONDS):
            criterion.check(student)
    except TimeLimitExceeded as error:
        outcome, message = FAIL, f"{error}: is there a loop that never ends?"
    except (StudentImportError, CheckFailed) as error:
        outcome, message = FAIL, str(error)
    except AssertionError as error:
        outcome, message = FAIL, (str(error) or "an assertion failed") + student.where(error)
    except NotImplementedError as error:
        outcome, message = FAIL, f"not written yet: {error}{student.where(error)}"
    except Exception as error:
        outcome, message = FAIL, f"{type(error).__name__}: {error}{student.where(error)}"
    seconds = round(time.perf_counter() - start, 3)
    return Result(criterion.name, criterion.statement, outcome, message, seconds)


def _run_elsewhere(
    number: int, runs_in: str, group: list[Criterion], path: Path | None, solution: bool
) -> list[Result]:
    """Run ``group`` in a fresh Python process: the simulator, or a real GPU."""
    env = dict(os.environ)
    if runs_in == "simulator":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        reason = _no_gpu_reason()
        if reason:
            return [_result(c, BLOCKED, reason) for c in group]
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    command = [sys.executable, "-m", "minipaged.grader", str(number), "--runs-in", runs_in]
    command += ["--solution"] if solution else ["--path", str(path or exercise(number).starter)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=SUBPROCESS_SECONDS
        )
        report = report_from_dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except subprocess.TimeoutExpired:
        why = f"the {runs_in} process was still running after {SUBPROCESS_SECONDS:.0f} s"
        return [_result(c, FAIL, why) for c in group]
    except (json.JSONDecodeError, IndexError, KeyError):
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        return [_result(c, FAIL, f"the {runs_in} process failed:\n{tail}") for c in group]
    return report.results


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
