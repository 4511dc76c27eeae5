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
minipaged (``check_gradebook_replaceable``); anything else there (the instructor's own
spreadsheet, another exercise's or another section's grades, a folder) is refused before
anyone is graded.
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
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from minipaged import __version__, atomic_write
from minipaged.grader.exercises import EXERCISES, exercise
from minipaged.grader.grading import Limits
from minipaged.grader.process_tree import end_descendants
from minipaged.grader.report import BLOCKED, FAIL, PASS, now, printable
from minipaged.grader.student_folder import missing_files

GRADEBOOK = "gradebook"
"""The gradebook's files, beside the folder of submissions: gradebook.csv and gradebook.json."""

STARTUP_SECONDS = 300.0
"""Time a grading process may take beyond the submission's own limit (starting Python, torch,
and its grading children, whose starts ``--time-limit`` does not count: one per place its
criteria run, and one more after each criterion that ends its child) before it is ended and
its row says so."""

COLUMNS_AFTER_CRITERIA = ["total", "max", "status", "cause", "seconds"]
"""The gradebook's columns after the student's name and the criteria's points."""

MAX_GRADEBOOK_BYTES = 64 * 2**20
"""The most of a ``gradebook.json`` read to tell whose it is: a class's reports fit many
times over; a larger file there is no gradebook of ours."""

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


def submissions(number: int, root: Path) -> list[Path]:
    """What ``root`` holds to grade for exercise ``number``, by name: one entry per student,
    a folder or a file that should have been one (each a row); hidden ones (``.git``) and a
    gradebook (of a section graded in a sub-folder) are left out. Raises ``ValueError``
    naming ``root`` when it is not a folder of submissions: not a folder, empty, or one
    student's folder itself (it holds the exercise's files)."""
    if not root.is_dir():
        raise ValueError(
            f"--batch {root}: not a folder; give the folder holding one folder per student"
        )
    if not missing_files(number, root):
        raise ValueError(
            f"--batch {root} holds exercise {number:02d}'s files itself, so it is one "
            f"student's folder: grade it with --path {root}, or give --batch the folder that "
            "holds one folder per student"
        )
    ours = {path.name for path in gradebook_paths(root)}  # a section's, graded in a sub-folder
    entries = sorted(
        p
        for p in root.iterdir()
        if not p.name.startswith(".") and not (p.name in ours and p.is_file())
    )
    if not any(p.is_dir() for p in entries):
        held = f" (it holds {', '.join(p.name for p in entries[:3])})" if entries else ""
        raise ValueError(
            f"--batch {root} holds no sub-folders{held}: put each student's files in a folder "
            "of its own, named for the student"
        )
    return entries


def check_gradebook_replaceable(number: int, root: Path) -> None:
    """Refuse, before anyone is graded, a gradebook beside ``root`` that grading exercise
    ``number`` there cannot write or must not replace: one in a folder no file can be made in,
    something other than a file (a folder, a FIFO), a file minipaged did not write (an
    instructor's own ``gradebook.csv``), or the gradebook of another exercise or of another
    folder of submissions (a sibling section's). A symbolic link there is replaced, and what
    it points to left alone (``atomic_write``). Raises ``ValueError`` naming the file and the
    fix."""
    here = root.resolve()  # `--batch .` named by where it is
    move = f"move it away, or {here} into a folder of its own (the gradebook goes beside it)"
    beside = gradebook_paths(root)[0].parent
    try:  # the class graded, and then no gradebook: refused first
        atomic_write.check_can_make_files(beside)
    except OSError as error:
        raise ValueError(
            f"no gradebook can be written beside {here}, in {beside} ({error.strerror}): "
            f"move {here} into a folder you can write"
        ) from None
    for path in gradebook_paths(root):
        kind = atomic_write.not_a_file(path)
        if kind:
            raise ValueError(f"{path} is {kind}, where the gradebook goes: {move}")
        if path.is_symlink() or not path.exists():
            continue
        whose = _gradebook_of(path)
        if whose is None:
            raise ValueError(
                f"{path} is there and is no gradebook minipaged wrote, so grading would "
                f"replace it: {move}"
            )
        exercise_number, graded = whose
        if exercise_number not in (None, number):
            raise ValueError(
                f"{path} holds exercise {exercise_number:02d}'s grades, which grading "
                f"exercise {number:02d} would replace: {move}"
            )
        if graded is not None and graded.resolve() != here:
            raise ValueError(
                f"{path} holds the grades of {graded}, which grading {here} would replace: {move}"
            )


def _gradebook_of(path: Path) -> tuple[int | None, Path | None] | None:
    """``(exercise, folder of submissions)`` of the gradebook file ``path`` (either None where
    it does not say), or None when it is no gradebook minipaged wrote."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            if path.suffix == ".csv":
                header = next(csv.reader([file.readline(MAX_GRADEBOOK_BYTES)]), [])
                if header[:1] != ["student"] or header[-5:] != COLUMNS_AFTER_CRITERIA:
                    return None
                names = header[1:-5]
                same = [n for n, ex in EXERCISES.items() if list(ex.points()) == names]
                return (same[0] if len(same) == 1 else None), None
            book = json.loads(file.read(MAX_GRADEBOOK_BYTES))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not (isinstance(book, dict) and "minipaged_version" in book):
        return None
    if type(book.get("exercise")) is not int:
        return None
    folder = book.get("submissions")
    absolute = isinstance(folder, str) and Path(folder).is_absolute()  # older ones: as typed
    return book["exercise"], Path(folder) if absolute else None


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
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True
        )
    allowed = limits.wall_seconds + STARTUP_SECONDS
    why = ""
    try:
        process.wait(timeout=None if math.isinf(allowed) else allowed)
    except subprocess.TimeoutExpired:
        why = f"still running after {allowed:g} s, so it was ended"
    finally:
        end_descendants(process.pid)  # its grading children, wherever they moved
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # it, and any child it left
        process.wait()
    seconds = round(time.monotonic() - start, 1)
    try:
        report = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = output.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        cause = f"the grading did not finish: {why or tail[0][:300]}"
        return Row(folder.name, ERROR, cause, seconds)
    report["student"] = folder.name
    failed = [c for c in report["criteria"] if c["outcome"] == FAIL]
    cause = f"{failed[0]['name']}: {failed[0]['message']}".splitlines()[0][:200] if failed else ""
    unsaved = ""
    try:
        atomic_write.write_text(folder / "report.json", json.dumps(report, indent=2) + "\n")
    except OSError as error:  # a folder named report.json, a read-only folder: the grade stands
        cause = f"{cause}; " if cause else ""
        cause += f"report.json not written into the folder ({error.strerror or error})"
        unsaved = f"{error.strerror or error}: {folder / 'report.json'}"
    return Row(folder.name, FAILED if failed else PASSED, cause, seconds, report, unsaved)


def write_gradebook(number: int, root: Path, rows: list[Row]) -> tuple[Path, Path]:
    """Write ``gradebook.csv`` and ``gradebook.json`` beside ``root``, each whole or not at
    all, replacing (never following) a symbolic link there; return their paths. Raises
    ``OSError`` naming each that could not be written, and why, after trying both."""
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
            atomic_write.write_text(path, content + ("\n" if path == json_path else ""))
        except OSError as error:
            unsaved.append(f"{error.strerror or error}: {path}")
    if unsaved:
        raise OSError("; ".join(unsaved))
    return csv_path, json_path


def gradebook_paths(root: Path) -> tuple[Path, Path]:
    """Where the gradebook of the submissions in ``root`` goes: ``gradebook.csv`` and
    ``gradebook.json`` beside ``root``."""
    beside = root.resolve().parent
    return beside / f"{GRADEBOOK}.csv", beside / f"{GRADEBOOK}.json"


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
