"""Where a class's gradebook goes (beside the folder of submissions) and whether the one
there now may be replaced: only a gradebook minipaged wrote for this exercise and this folder
of submissions is. What else stands there (an instructor's own ``gradebook.csv``, another
exercise's or another section's grades, a folder, a FIFO) is refused before anyone is
graded, by ``minipaged exercises check N --batch DIR`` and by ``gradebook.write_gradebook``
alike. And which entries of that folder are the submissions."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from minipaged import atomic_write
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.report import printable
from minipaged.grader.student_folder import missing_files
from minipaged.json_input import loads

GRADEBOOK = "gradebook"
"""The gradebook's files, beside the folder of submissions: gradebook.csv and gradebook.json."""

COLUMNS_AFTER_CRITERIA = ["total", "max", "status", "cause", "seconds"]
"""The gradebook's columns after the student's name and the criteria's points."""

MAX_GRADEBOOK_BYTES = 64 * 2**20
"""The most of a ``gradebook.json`` read to tell whose it is: a class's reports fit many
times over; a larger file there is no gradebook of ours."""


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


def check_gradebook_replaceable(number: int, root: Path, students: list[str] | None = None) -> None:
    """Refuse, before anyone is graded, a gradebook beside ``root`` that grading exercise
    ``number`` there cannot write or must not replace: one in a folder no file can be made in,
    something other than a file (a folder, a FIFO), a file minipaged did not write (an
    instructor's own ``gradebook.csv``), or the gradebook of another exercise or of another
    folder of submissions (a sibling section's). Whose folder a gradebook is, is read from
    ``gradebook.json``'s ``submissions`` (absolute; as typed in older ones, when its name must
    be ``root``'s), which vouches for the ``gradebook.csv`` beside it; where no folder is named
    (a ``gradebook.csv`` alone, an older ``gradebook.json`` of ``.``), every student it holds
    must be one of ``students`` (by default the names of ``root``'s submissions). A symbolic
    link there is replaced, and what it points to left alone (``atomic_write``). Raises
    ``ValueError`` naming the file and the fix. ``write_gradebook`` checks it too, so a
    gradebook written from a notebook keeps the same rule."""
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
    vouched = False  # the JSON names this folder: the CSV beside it is the same batch's
    for path in reversed(gradebook_paths(root)):  # the JSON first: it names its folder
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
        exercise_number, graded, graded_students = whose
        if exercise_number not in (None, number):
            raise ValueError(
                f"{path} holds exercise {exercise_number:02d}'s grades, which grading "
                f"exercise {number:02d} would replace: {move}"
            )
        if graded is not None and graded.is_absolute():
            if graded.resolve() != here:
                raise ValueError(
                    f"{path} holds the grades of {graded}, which grading {here} would "
                    f"replace: {move}"
                )
            vouched = True
            continue
        if graded is not None and graded.name:  # as typed, before it was made absolute
            if graded.name != here.name:
                raise ValueError(
                    f"{path} holds the grades of a folder named {graded.name}, which grading "
                    f"{here} would replace: {move}"
                )
            vouched = True
            continue
        if vouched:
            continue
        if students is None:
            students = [entry.name for entry in submissions(number, root)]
        ours = set(students) | {printable(name) for name in students}  # a CSV cell's
        strangers = [name for name in graded_students if name not in ours]
        if strangers:
            raise ValueError(
                f"{path} holds the grades of {printable(', '.join(strangers[:3]))}, who "
                f"{'has' if len(strangers) == 1 else 'have'} no folder in {here}, so they may "
                f"be another class's grades, which grading {here} would replace: {move}"
            )


def _gradebook_of(path: Path) -> tuple[int | None, Path | None, list[str]] | None:
    """``(exercise, folder of submissions, students)`` of the gradebook file ``path`` (the
    exercise or folder None where it does not say; a folder as written, relative in older
    ones), or None when it is no gradebook minipaged wrote."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            if path.suffix == ".csv":
                table = list(csv.reader(io.StringIO(file.read(MAX_GRADEBOOK_BYTES))))
                header = table[0] if table else []
                if header[:1] != ["student"] or header[-5:] != COLUMNS_AFTER_CRITERIA:
                    return None
                names = header[1:-5]
                same = [n for n, ex in EXERCISES.items() if list(ex.points()) == names]
                students = [row[0] for row in table[1:] if row]
                return (same[0] if len(same) == 1 else None), None, students
            book = loads(file.read(MAX_GRADEBOOK_BYTES))
    except (OSError, UnicodeDecodeError, ValueError, csv.Error):
        return None
    if not (isinstance(book, dict) and "minipaged_version" in book):
        return None
    if type(book.get("exercise")) is not int or not isinstance(book.get("students"), list):
        return None
    folder = book.get("submissions")
    students = [s.get("student") for s in book["students"] if isinstance(s, dict)]
    return (
        book["exercise"],
        Path(folder) if isinstance(folder, str) and folder else None,
        [name for name in students if isinstance(name, str)],
    )


def gradebook_paths(root: Path) -> tuple[Path, Path]:
    """Where the gradebook of the submissions in ``root`` goes: ``gradebook.csv`` and
    ``gradebook.json`` beside ``root``."""
    beside = root.resolve().parent
    return beside / f"{GRADEBOOK}.csv", beside / f"{GRADEBOOK}.json"
