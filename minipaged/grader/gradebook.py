"""A class's submissions graded in one command, and the gradebook they make.

``minipaged exercises check N --batch DIR`` grades every sub-folder of ``DIR`` (one per student)
as ``minipaged exercises check N --path DIR/student`` would, several at a time, each in a
grading process of its own under the same ``Limits``: one submission that crashes the grader,
hangs past every limit or fills its memory costs its own row, never another student's. Each
student's ``report.json`` is written into their folder, and beside ``DIR``:

- ``gradebook.csv``: one row per sub-folder (student, each criterion's points, total, max,
  status, cause: the first failure or what is missing, seconds), a spreadsheet's view;
- ``gradebook.json``: the same rows, each with its whole report.

A sub-folder without the exercise's files is a row with status ``missing`` and what it holds
instead (``found Block_Manager.py: rename it to block_manager.py``), and so is a file where a
student's folder should be (``bob.zip``, not unpacked): never a missing row. A gradebook already
beside ``DIR`` is replaced only when it is this exercise's, of this folder, written by
minipaged (``gradebook_place.check_gradebook_replaceable``); anything else there (the
instructor's own spreadsheet, another exercise's or another section's grades, a folder) is
refused before anyone is graded, and by ``write_gradebook`` itself.
Gradescope's autograder grades one submission at a time: ``gradescope`` turns one report into
its ``results.json``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from minipaged import __version__, atomic_write, ending_signals
from minipaged.grader.exercises import exercise
from minipaged.grader.gradebook_place import (
    COLUMNS_AFTER_CRITERIA,
    check_gradebook_replaceable,
    gradebook_paths,
    submissions,
)
from minipaged.grader.grading import Limits
from minipaged.grader.process_tree import end_descendants
from minipaged.grader.report import BLOCKED, FAIL, PASS, now, printable
from minipaged.grader.student_folder import missing_files
from minipaged.json_input import loads
from minipaged.replaceable import ANY_FILE

STARTUP_SECONDS = 300.0
"""Time a grading process may take beyond the submission's own limit (starting Python, torch,
and its grading children, whose starts ``--time-limit`` does not count: one per place its
criteria run, and one more after each criterion that ends its child) before it is ended and
its row says so."""

PASSED, FAILED, MISSING, ERROR = "passed", "failed", "missing", "error"
"""A row's status: every criterion met; some failed; the files are not there; the grading
itself did not finish (its cause says why)."""


@dataclass
class Row:
    """One student's line of the gradebook: their folder's name, the status, why (for
    ``missing`` and ``error``), the seconds their grading took, their report, and why it could
    not be written into their folder, if it could not (the batch then exits ``UNSAVED``)."""

    student: str
    status: str
    cause: str = ""
    seconds: float = 0.0
    report: dict = field(default_factory=dict)
    unsaved: str = ""  # why their report.json could not be written, and its path

    @property
    def total(self) -> int:
        return self.report.get("score", 0)


def grade_batch(
    number: int,
    root: Path,
    limits: Limits,
    jobs: int,
    done: Callable[[Row], None] = lambda row: None,
) -> list[Row]:
    """Grade exercise ``number`` in every sub-folder of ``root``, ``jobs`` at a time; call
    ``done(row)`` as each finishes; return the rows in the folders' order."""
    folders = submissions(number, root)
    with (
        tempfile.TemporaryDirectory(prefix="minipaged-batch-") as reports,
        ending_signals.undone_at_an_end(lambda: shutil.rmtree(reports, ignore_errors=True)),
        concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool,
    ):
        futures = {
            pool.submit(_row_of, number, folder, limits, Path(reports)): folder
            for folder in folders
        }
        for future in concurrent.futures.as_completed(futures):
            done(future.result())
        return [future.result() for future in futures]  # in the folders' order


def _row_of(number: int, folder: Path, limits: Limits, reports: Path) -> Row:
    """``grade_one``, whose failure (a folder that cannot be read, say) is that student's row
    with the cause, never the end of the class's grading."""
    try:
        return grade_one(number, folder, limits, reports)
    except Exception as error:
        return Row(
            folder.name, ERROR, f"the grading did not finish: {type(error).__name__}: {error}"
        )


def grade_one(number: int, folder: Path, limits: Limits, reports: Path) -> Row:
    """One student's row: their folder graded by a grading process of its own, whose report
    comes back through a file of ours and is then written into their folder."""
    start = time.monotonic()
    if folder.is_symlink():
        return Row(folder.name, ERROR, "a symbolic link: copy the submission in instead")
    if not folder.is_dir():
        return Row(
            folder.name,
            MISSING,
            "a file, not a folder: unpack it into a folder of its own, named for the student",
        )
    missing = missing_files(number, folder)
    if missing:
        return Row(folder.name, MISSING, missing)
    # Ours, named by no student (a name of 255 bytes has no room for a suffix)
    reports = Path(tempfile.mkdtemp(dir=reports))
    target, output = reports / "report.json", reports / "output.txt"
    memory = "inf" if limits.memory_gib is None else str(limits.memory_gib)
    command = [sys.executable, "-m", "minipaged.cli", "exercises", "check", str(number)]
    # path=value: a folder named -bob is no flag
    command += [f"--path={folder}", f"--json={target}"]
    command += ["--time-limit", str(limits.wall_seconds), "--memory-limit", memory]
    # Its own temporary folders go in ours too: removed with it, even where it was killed
    env = {**os.environ, "TMPDIR": str(reports)}
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            env=env,
            start_new_session=True,
        )
    allowed = limits.wall_seconds + STARTUP_SECONDS
    why = ""
    # In a session of its own, it is reached by no Ctrl-C: ended here, or it grades on alone
    with ending_signals.undone_at_an_end(lambda: _end(process)):
        try:
            process.wait(timeout=None if math.isinf(allowed) else allowed)
        except subprocess.TimeoutExpired:
            why = f"still running after {allowed:g} s, so it was ended"
        finally:
            _end(process)
            process.wait()
    seconds = round(time.monotonic() - start, 1)
    try:
        report = loads(target.read_bytes())
    except (OSError, ValueError):
        tail = output.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        cause = f"the grading did not finish: {why or tail[0][:300]}"
        return Row(folder.name, ERROR, cause, seconds)
    report["student"] = folder.name
    failed = [c for c in report["criteria"] if c["outcome"] == FAIL]
    cause = f"{failed[0]['name']}: {failed[0]['message']}".splitlines()[0][:200] if failed else ""
    unsaved = ""
    try:
        text = json.dumps(report, indent=2) + "\n"
        # The graded folder's report.json is the grader's, whatever a student planted there
        atomic_write.write_text(folder / "report.json", text, replaces=ANY_FILE)
    except OSError as error:  # a folder named report.json, a read-only folder: the grade stands
        cause = f"{cause}; " if cause else ""
        cause += f"report.json not written into the folder ({error.strerror or error})"
        unsaved = f"{error.strerror or error}: {folder / 'report.json'}"
    return Row(folder.name, FAILED if failed else PASSED, cause, seconds, report, unsaved)


def _end(process: subprocess.Popen) -> None:
    """End a student's grading process, and what it started."""
    end_descendants(process.pid)  # its grading children, wherever they moved
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # it, and any child it left


def write_gradebook(number: int, root: Path, rows: list[Row]) -> tuple[Path, Path]:
    """Write ``gradebook.csv`` and ``gradebook.json`` beside ``root``, each whole or not at
    all, replacing (never following) a symbolic link there; return their paths. Raises
    ``OSError`` naming each that could not be written, and why, after trying both, and
    ``ValueError`` before writing either when what is there is not theirs to replace
    (``check_gradebook_replaceable``, with the rows' students)."""
    check_gradebook_replaceable(number, root, [row.student for row in rows])
    ex = exercise(number)
    points = ex.points()
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["student", *points, *COLUMNS_AFTER_CRITERIA])
    for row in rows:
        earned = {c["name"]: _cell(c) for c in row.report.get("criteria", [])}
        writer.writerow(
            [printable(row.student)]
            + [earned.get(name, 0) for name in points]
            + [row.total, row.report.get("max_score", sum(points.values()))]
            + [row.status, printable(row.cause), row.seconds]  # cat-able: no escape codes
        )
    book = {
        "exercise": number,
        "title": ex.title,
        "submissions": str(root.absolute()),  # what check_gradebook_replaceable compares
        "graded_at": now(),
        "minipaged_version": __version__,
        "points": points,
        "students": [
            {
                "student": r.student,
                "status": r.status,
                "cause": r.cause,
                "total": r.total,
                "seconds": r.seconds,
                "report": r.report,
            }
            for r in rows
        ],
    }
    csv_path, json_path = gradebook_paths(root)
    unsaved = []
    for path, content in ((csv_path, text.getvalue()), (json_path, json.dumps(book, indent=2))):
        try:  # each file tried, whatever became of the other
            content += "\n" if path == json_path else ""
            # Whose it is was asked above, by a finer rule than a kind's (which class, which
            # exercise): check_gradebook_replaceable
            atomic_write.write_text(path, content, replaces=ANY_FILE)
        except OSError as error:
            unsaved.append(f"{error.strerror or error}: {path}")
    if unsaved:
        raise OSError("; ".join(unsaved))
    return csv_path, json_path


def _cell(criterion: dict) -> int | str:
    """A criterion's cell: the points it earned, or ``blocked`` (it needs a GPU)."""
    return "blocked" if criterion["outcome"] == BLOCKED else criterion["score"]


def gradescope(report: dict) -> dict:
    """Gradescope's ``results.json`` for one report: one test per criterion (its name, score,
    max_score, status and output), and the report's notes in its own output. The submission's
    ``score`` is out of 100 over the criteria that could run, so a criterion blocked for want
    of a GPU costs nothing; ``extra_data`` keeps what was graded, when, and by which
    minipaged."""
    at_stake = report["max_score"]
    tests = [
        {
            "name": c["statement"],
            "number": str(i),
            "score": c["score"],
            "max_score": 0 if c["outcome"] == BLOCKED else c["points"],
            "status": "passed" if c["outcome"] == PASS else "failed",
            "output": c["message"] or c["outcome"],
        }
        for i, c in enumerate(report["criteria"], start=1)
    ]
    return {
        "score": round(100 * report["score"] / at_stake, 2) if at_stake else 0.0,
        "execution_time": round(report["seconds"]),
        "output": f"exercise {report['exercise']:02d}: {report['title']}; your code ran "
        f"{report['confinement'] or 'in a grading process'}"
        + "".join(f"\nnote: {note}" for note in report.get("notes", ())),
        "tests": tests,
        "extra_data": {
            key: report[key] for key in ("graded", "graded_at", "minipaged_version", "max_score")
        },
    }
