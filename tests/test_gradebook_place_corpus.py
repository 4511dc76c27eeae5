"""Gradebooks whose folder of submissions the gradebook does not name absolutely: a
``gradebook.csv`` alone (a CSV has no room for it) and a ``gradebook.json`` written before
the folder was made absolute (as typed: ``section-b``, ``.``). Before
``gradebook_place.check_gradebook_replaceable`` read their folder's name and their students,
only the exercise number was compared, so another section's grades of the same exercise
were replaced without a word. And ``write_gradebook``, the function a notebook calls, did
not check at all. Each refusal names the file and says to move it away, in one line, before
anyone is graded, and leaves every file as it was; this class's own gradebook, in either
form, is still replaced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from exercise01_answers import answered
from test_gradebook_corpus import stand_in_grader  # noqa: F401 (a fixture)

from minipaged import cli
from minipaged.grader import gradebook
from minipaged.grader.command import UNSAVED
from minipaged.grader.gradebook import Row

USAGE = 2


def a_class(tmp_path: Path) -> Path:
    root = tmp_path / "class"
    answered(root / "ada")
    (root / "bob").mkdir()
    return root


def written_for(tmp_path: Path, folder: str, students: list[str], number: int = 1) -> None:
    """A gradebook minipaged wrote for exercise ``number`` of the sibling folder ``folder``."""
    other = tmp_path / folder
    other.mkdir(exist_ok=True)
    rows = [Row(name, gradebook.MISSING, "has no files") for name in students]
    gradebook.write_gradebook(number, other, rows)


def as_typed(tmp_path: Path, submissions: str) -> None:
    """Make the gradebook.json beside ``tmp_path``'s folders an older one: its folder of
    submissions as it was typed."""
    path = tmp_path / "gradebook.json"
    book = json.loads(path.read_text())
    book["submissions"] = submissions
    path.write_text(json.dumps(book))


def the_csv_alone(tmp_path: Path) -> None:
    (tmp_path / "gradebook.json").unlink()


def another_sections_csv(tmp_path: Path) -> str:
    written_for(tmp_path, "section-b", ["zoe", "yan"])
    the_csv_alone(tmp_path)
    return "gradebook.csv holds the grades of zoe, yan, who have no folder in"


def an_old_json_of_a_folder_named_otherwise(tmp_path: Path) -> str:
    written_for(tmp_path, "section-b", ["ada"])
    as_typed(tmp_path, "section-b")
    return "gradebook.json holds the grades of a folder named section-b"


def an_old_json_of_the_folder_it_was_run_in(tmp_path: Path) -> str:
    written_for(tmp_path, "section-b", ["zoe"])
    as_typed(tmp_path, ".")
    return "gradebook.json holds the grades of zoe, who has no folder in"


def a_csv_of_a_student_whose_name_is_an_escape_code(tmp_path: Path) -> str:
    written_for(tmp_path, "section-b", ["\x1b[2Jeve"])
    the_csv_alone(tmp_path)
    return "holds the grades of \\x1b[2Jeve, who has no folder"


NOT_OURS = {
    "another section's gradebook.csv alone": another_sections_csv,
    "an old gradebook.json of a folder named otherwise": an_old_json_of_a_folder_named_otherwise,
    "an old gradebook.json of the folder it was run in": an_old_json_of_the_folder_it_was_run_in,
    "a lone csv whose student's name is an escape code": (
        a_csv_of_a_student_whose_name_is_an_escape_code
    ),
}


def files_below(path: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(NOT_OURS))
def test_a_batch_refuses_a_gradebook_of_another_class_that_names_no_absolute_folder(
    case, tmp_path, capsys
):
    root = a_class(tmp_path)
    words = NOT_OURS[case](tmp_path)
    before = files_below(tmp_path)
    status = cli.main(["exercises", "check", "1", "--batch", str(root)])
    out, err = capsys.readouterr()
    assert status == USAGE and len(err.strip().splitlines()) == 1, err
    assert words in err and "move it away" in err and "\x1b" not in err, err
    assert "grading exercise" not in out  # refused before the first student
    assert files_below(tmp_path) == before


@pytest.mark.parametrize("case", list(NOT_OURS))
def test_write_gradebook_refuses_what_the_command_refuses_and_writes_neither_file(case, tmp_path):
    root = a_class(tmp_path)
    words = NOT_OURS[case](tmp_path)
    before = files_below(tmp_path)
    with pytest.raises(ValueError, match="move it away") as refused:
        gradebook.write_gradebook(1, root, [Row("ada", gradebook.PASSED), Row("bob", "missing")])
    assert words in str(refused.value)
    assert files_below(tmp_path) == before


def instructors_spreadsheet(tmp_path: Path) -> str:
    (tmp_path / "gradebook.csv").write_text("name,grade\nada,A\n")
    return "gradebook.csv is there and is no gradebook minipaged wrote"


def another_exercises(tmp_path: Path) -> str:
    written_for(tmp_path, "class", ["ada"], number=2)
    return "holds exercise 02's grades, which grading exercise 01 would replace"


def another_sections_json(tmp_path: Path) -> str:
    written_for(tmp_path, "section-b", ["ada"])
    return f"holds the grades of {tmp_path / 'section-b'}, which grading"


def a_fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "gradebook.json")
    return "gradebook.json is a FIFO"


@pytest.mark.parametrize(
    "in_the_way", [instructors_spreadsheet, another_exercises, another_sections_json, a_fifo]
)
def test_write_gradebook_keeps_the_commands_other_refusals(in_the_way, tmp_path):
    root = a_class(tmp_path)
    words = in_the_way(tmp_path)
    before = files_below(tmp_path)
    with pytest.raises(ValueError, match="move it away") as refused:
        gradebook.write_gradebook(1, root, [Row("ada", gradebook.PASSED)])
    assert words in str(refused.value)
    assert files_below(tmp_path) == before


OURS = {
    "this class's gradebook.csv alone": lambda tmp_path: (
        written_for(tmp_path, "class", ["ada"]),
        the_csv_alone(tmp_path),
    ),
    "an old gradebook.json of this folder, as typed": lambda tmp_path: (
        written_for(tmp_path, "class", ["ada", "bob"]),
        as_typed(tmp_path, "class"),
    ),
    "an old gradebook.json typed as the folder itself": lambda tmp_path: (
        written_for(tmp_path, "class", ["ada"]),
        as_typed(tmp_path, "."),
    ),
}


@pytest.mark.parametrize("case", list(OURS))
def test_this_classs_gradebook_in_an_older_or_csv_form_is_replaced(case, tmp_path):
    root = a_class(tmp_path)
    OURS[case](tmp_path)
    gradebook.check_gradebook_replaceable(1, root)
    rows = [Row("ada", gradebook.PASSED), Row("bob", gradebook.MISSING)]
    csv_path, json_path = gradebook.write_gradebook(1, root, rows)
    assert csv_path.read_text().count("\n") == 3
    assert Path(json.loads(json_path.read_text())["submissions"]) == root


def test_a_class_with_an_escape_code_in_a_name_regrades_over_its_own_csv(tmp_path):
    root = a_class(tmp_path)
    (root / "\x1b[2Jeve").mkdir()
    rows = [Row(p.name, gradebook.MISSING) for p in sorted(root.iterdir())]
    gradebook.write_gradebook(1, root, rows)
    the_csv_alone(tmp_path)  # its cell is the name made printable
    gradebook.check_gradebook_replaceable(1, root)
    gradebook.write_gradebook(1, root, rows)


@pytest.mark.usefixtures("stand_in_grader")
def test_a_file_put_where_the_gradebook_goes_during_the_grading_is_left_and_said(
    tmp_path, capsys, monkeypatch
):
    """Checked before anyone is graded and again when the gradebook is written: a file put
    there meanwhile (an unconfined student's code writing ``../../gradebook.csv``, another
    program) is left, the grades are printed and in each report.json, and the batch exits
    ``UNSAVED`` saying why, never 0."""
    root = a_class(tmp_path)
    grade_batch = gradebook.grade_batch

    def grading_meanwhile(*args, **kwargs):
        rows = grade_batch(*args, **kwargs)
        (tmp_path / "gradebook.csv").write_text("owned\n")
        return rows

    monkeypatch.setattr(gradebook, "grade_batch", grading_meanwhile)
    status = cli.main(["exercises", "check", "1", "--batch", str(root)])
    out = capsys.readouterr().out
    assert status == UNSAVED, out
    assert "not written: the gradebook" in out and "no gradebook minipaged wrote" in out
    assert (tmp_path / "gradebook.csv").read_text() == "owned\n"
    assert not (tmp_path / "gradebook.json").exists()
    assert json.loads((root / "ada" / "report.json").read_text())["score"] == 100


@pytest.mark.parametrize("form", ["both files", "an old gradebook.json as typed"])
def test_a_regrade_after_a_student_left_replaces_the_gradebook_that_names_this_folder(
    form, tmp_path
):
    """The JSON names this folder, so its students need not all be there still, and it
    vouches for the CSV beside it: a student who dropped the course is no sign of another
    class."""
    root = a_class(tmp_path)
    (root / "carol").mkdir()
    written_for(tmp_path, "class", ["ada", "bob", "carol"])
    if form != "both files":
        as_typed(tmp_path, "class")
    (root / "carol").rmdir()
    gradebook.check_gradebook_replaceable(1, root)
    gradebook.write_gradebook(1, root, [Row("ada", gradebook.PASSED), Row("bob", "missing")])
    assert "carol" not in (tmp_path / "gradebook.csv").read_text()


def test_a_lone_csv_of_a_student_who_left_is_refused_as_it_cannot_be_told_apart(tmp_path):
    root = a_class(tmp_path)
    written_for(tmp_path, "class", ["ada", "carol"])
    the_csv_alone(tmp_path)
    with pytest.raises(ValueError, match=r"carol, who has no folder in .*may be another class"):
        gradebook.check_gradebook_replaceable(1, root)
