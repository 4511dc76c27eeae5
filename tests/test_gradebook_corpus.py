"""``minipaged exercises check N --batch DIR`` given the classes instructors really have: a
gradebook already beside ``DIR`` that is not this batch's to replace, a class folder that is one
student's folder or holds files where folders should be, and students whose folder names are
odd (a leading dash, spaces, unicode, an escape code, 255 bytes). What is refused is refused
before anyone is graded, in one line naming the file and the fix, and leaves every file as it
was; every student gets a row. The grading process itself is stood in for by one that parses
the command line the batch gave it and writes a report, so the corpus runs in seconds (the
real grading of a class: tests/test_gradebook.py)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
from exercise01_answers import answered

from minipaged import cli
from minipaged.grader import gradebook
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.gradebook import Row

USAGE = 2


def batch(root: Path, capsys, number: int = 1) -> tuple[int, str, str]:
    status = cli.main(["exercises", "check", str(number), "--batch", str(root)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err


def files_below(path: Path) -> dict[str, bytes | str]:
    """Every entry at or below ``path``: a file's content, or what else it is."""
    found: dict[str, bytes | str] = {}
    for entry in sorted(path.rglob("*")):
        if entry.is_symlink():
            found[str(entry)] = f"link to {os.readlink(entry)}"
        elif entry.is_file():
            found[str(entry)] = entry.read_bytes()
        else:
            found[str(entry)] = "folder" if entry.is_dir() else "other"
    return found


def a_class(tmp_path: Path, name: str = "class") -> Path:
    root = tmp_path / name
    answered(root / "ada")
    (root / "bob").mkdir()
    return root


def theirs(tmp_path: Path, number: int, name: str) -> None:
    """A gradebook minipaged wrote for exercise ``number`` of the class folder ``name``."""
    other = tmp_path / name
    other.mkdir(exist_ok=True)
    gradebook.write_gradebook(number, other, [Row("zoe", gradebook.MISSING, "has no files")])


def in_the_way(tmp_path: Path, case: str) -> str:
    """Put ``case``'s thing where the gradebook goes; return what the refusal must name."""
    csv_path, json_path = tmp_path / "gradebook.csv", tmp_path / "gradebook.json"
    if case == "the instructor's own spreadsheet":
        csv_path.write_text("name,grade\nada,A\n")
        return "gradebook.csv is there and is no gradebook minipaged wrote"
    if case == "a JSON file of something else":
        json_path.write_text('{"students": ["ada"]}\n')
        return "gradebook.json is there and is no gradebook minipaged wrote"
    if case == "binary junk":
        json_path.write_bytes(bytes(range(256)) * 64)
        return "gradebook.json is there and is no gradebook minipaged wrote"
    if case == "a JSON number":
        json_path.write_text("7\n")
        return "gradebook.json is there and is no gradebook minipaged wrote"
    if case == "a folder":
        csv_path.mkdir()
        return "gradebook.csv is a folder"
    if case == "a FIFO":
        os.mkfifo(json_path)
        return "gradebook.json is a FIFO"
    if case == "another exercise's gradebook":
        theirs(tmp_path, 2, "class")
        return "holds exercise 02's grades, which grading exercise 01 would replace"
    if case == "another section's gradebook":
        theirs(tmp_path, 1, "section-b")
        return f"holds the grades of {tmp_path / 'section-b'}, which grading"
    raise AssertionError(case)


IN_THE_WAY = [
    "the instructor's own spreadsheet",
    "a JSON file of something else",
    "binary junk",
    "a JSON number",
    "a folder",
    "a FIFO",
    "another exercise's gradebook",
    "another section's gradebook",
]


@pytest.mark.parametrize("case", IN_THE_WAY)
def test_a_gradebook_the_batch_must_not_replace_is_refused_before_anyone_is_graded(
    case, tmp_path, capsys
):
    root = a_class(tmp_path)
    words = in_the_way(tmp_path, case)
    before = files_below(tmp_path)
    status, out, err = batch(root, capsys)
    assert status == USAGE and len(err.strip().splitlines()) == 1, err
    assert words in err and "move it away" in err, err
    assert "grading exercise" not in out  # refused before the first student
    assert files_below(tmp_path) == before  # no report.json, no gradebook, nothing moved


def test_this_exercises_gradebook_of_this_folder_or_a_link_there_is_replaced(tmp_path, monkeypatch):
    root = a_class(tmp_path)
    gradebook.write_gradebook(1, root, [Row("ada", gradebook.MISSING, "")])
    gradebook.check_gradebook_replaceable(1, root)  # a regrade
    monkeypatch.chdir(tmp_path)  # the folder typed relatively is the same folder
    gradebook.check_gradebook_replaceable(1, Path("class"))
    (tmp_path / "gradebook.csv").unlink()
    (tmp_path / "gradebook.csv").symlink_to(tmp_path / "elsewhere.csv")
    gradebook.check_gradebook_replaceable(1, root)


@pytest.mark.parametrize(
    ("holds", "words"),
    [
        ("one student's files", "holds exercise 01's files itself, so it is one student's"),
        ("only zips", "holds no sub-folders (it holds ada.zip, bob.zip)"),
        ("nothing but hidden folders", "holds no sub-folders: put each student's files"),
    ],
)
def test_a_class_folder_that_is_none_is_refused_naming_what_it_holds(
    holds, words, tmp_path, capsys
):
    root = tmp_path / "class"
    if holds == "one student's files":
        answered(root)
        (root / "__pycache__").mkdir()  # a sub-folder, which made it look like a class
    elif holds == "only zips":
        root.mkdir()
        for name in ("ada.zip", "bob.zip"):
            (root / name).write_bytes(b"PK\x03\x04")
    else:
        (root / ".git").mkdir(parents=True)
    before = files_below(tmp_path)
    status, _, err = batch(root, capsys)
    assert status == USAGE and words in err, err
    assert files_below(tmp_path) == before


ODD_NAMES = [
    "-bob",
    "--path",
    "Ada Lovelace",
    "Ελίζαβετ",
    "ada",  # beside "Ada": names that differ only by case
    "Ada",
    "evil\x1b[2Jname",
    "é" * 127,  # 254 bytes: with a suffix, past the 255 a name may have
]


@pytest.fixture
def stand_in_grader(monkeypatch):
    """Each student's grading process replaced by one that parses the command line the batch
    built, as the real one would, and writes a passing report for the folder it names."""
    parser = cli.build_parser()
    graded = []

    class Process:
        pid = os.getpid()

        def __init__(self, command, **kwargs):
            try:
                args = parser.parse_args(command[3:])  # after python -m minipaged.cli
            except SystemExit:  # the real one would have said so, and written no report
                return
            graded.append(args.path)
            report = {"criteria": [], "score": 100, "max_score": 100, "graded": str(args.path)}
            args.json.write_text(json.dumps(report))

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(subprocess, "Popen", Process)
    monkeypatch.setattr(gradebook, "end_descendants", lambda pid: None)
    monkeypatch.setattr(gradebook.os, "killpg", lambda pid, sig: None)
    return graded


def test_every_student_gets_a_row_whatever_their_folder_is_named(
    tmp_path, capsys, stand_in_grader, monkeypatch
):
    """Graded from inside the class folder (``--batch .``), as an instructor does after
    unpacking a download: each folder is then named by its name alone, and ``-bob`` was
    passed to the grading process as a flag."""
    root = tmp_path / "class"
    for name in ODD_NAMES:
        answered(root / name)
    (root / "carol.zip").write_bytes(b"PK\x03\x04")  # handed in, never unpacked
    (root / "gradebook.csv").write_text("student,total\n")  # of a section in a sub-folder
    monkeypatch.chdir(root)
    status, out, err = batch(Path("."), capsys)
    assert status == 0, err
    assert sorted(stand_in_grader) == sorted(Path(name) for name in ODD_NAMES)
    with open(tmp_path / "gradebook.csv", newline="", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    assert len(rows) == len(ODD_NAMES) + 1
    shown = {name.replace("\x1b", "\\x1b") for name in ODD_NAMES}
    assert {name for name, row in rows.items() if row["status"] == "passed"} == shown
    assert rows["carol.zip"]["status"] == "missing"
    assert "a file, not a folder: unpack it" in rows["carol.zip"]["cause"]
    assert "\x1b" not in (tmp_path / "gradebook.csv").read_text() + out
    for name in ODD_NAMES:
        assert json.loads((root / name / "report.json").read_text())["student"] == name
    book = json.loads((tmp_path / "gradebook.json").read_text())
    assert Path(book["submissions"]) == root and book["exercise"] == 1


def test_the_batchs_gradebook_names_the_criteria_of_its_exercise_only():
    """The check of whose gradebook.csv it is tells exercises apart by their criteria."""
    names = [tuple(ex.points()) for ex in EXERCISES.values()]
    assert len(set(names)) == len(names)


def test_a_gradebook_that_cannot_be_written_is_refused_before_anyone_is_graded(
    tmp_path, capsys, monkeypatch
):
    """Root writes anywhere ``chmod`` forbids, so the folder's refusal is stood in for."""
    from minipaged import atomic_write

    root = a_class(tmp_path)
    before = files_below(tmp_path)

    def read_only(folder):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(atomic_write, "check_can_make_files", read_only)
    status, out, err = batch(root, capsys)
    assert status == USAGE and f"no gradebook can be written beside {root}" in err, err
    assert "Permission denied" in err and "grading exercise" not in out
    assert files_below(tmp_path) == before


@pytest.mark.parametrize("flag", [[], ["--path"]])
def test_a_class_folder_checked_without_batch_says_to_give_batch(flag, tmp_path, capsys):
    """It said "has no memory.py (found ada/memory.py: move it up, into class/ itself)": a
    fix that would put one student's file over the class."""
    root = tmp_path / "class"
    for name in ("ada", "bob"):
        answered(root / name)
    before = files_below(tmp_path)
    status = cli.main(["exercises", "check", "1", *flag, str(root)])
    err = capsys.readouterr().err
    assert status == USAGE and len(err.strip().splitlines()) == 1, err
    assert (
        f"2 folders in it do (ada, bob): to grade each as a student's, give --batch {root}" in err
    )
    assert "move it up" not in err
    assert files_below(tmp_path) == before
