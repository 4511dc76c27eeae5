"""Grading a class at once (``minipaged exercises check N --batch DIR``), the points each
criterion is worth, the reports' provenance, and Gradescope's ``results.json``."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from exercise01_answers import ROUNDED_DOWN, answered

from minipaged import __version__, cli
from minipaged.grader import gradebook
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.report import BLOCKED, FAIL, PASS, Criterion, Report, Result, points
from minipaged.grader.student_folder import missing_files

BATCH_LIMIT_S = 15
"""The batch's --time-limit: the wall-clock seconds each submission's grading may take, its
child's start and every criterion together. It stops the endless loop, which no limit lets
finish, and must let an honest submission finish with a wide margin on a slow, shared
machine: at 3 s an honest one (graded in 3.3 to 4.2 s at a load of 10, two jobs at once)
failed every criterion once in a run of the gradebook tests under load. The loop sleeps,
so its 15 s cost no CPU, and its submission goes first, beside the others rather than after
them."""


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_every_exercise_is_worth_100_points(number):
    given = EXERCISES[number].points()
    assert sum(given.values()) == 100
    assert list(given) == [c.name for c in EXERCISES[number].criteria()]
    assert max(given.values()) - min(given.values()) <= 1  # none declares its own yet


def test_declared_points_are_kept_and_the_rest_is_shared_equally():
    def check_a(student): ...

    def check_b(student): ...

    def check_c(student): ...

    criteria = (Criterion(check_a, points=50), Criterion(check_b), Criterion(check_c))
    assert points(criteria) == [50, 25, 25]
    assert points((Criterion(check_a), Criterion(check_b), Criterion(check_c))) == [34, 33, 33]
    for bad in (
        (Criterion(check_a, points=101), Criterion(check_b)),  # more than 100
        (Criterion(check_a, points=60), Criterion(check_b, points=30)),  # 10 left to nobody
        (Criterion(check_a, points=99), Criterion(check_b), Criterion(check_c)),  # < 1 each
    ):
        with pytest.raises(ValueError, match="declare points that sum to 100"):
            points(bad)


def test_a_blocked_criterion_counts_toward_neither_score_nor_max():
    results = [
        Result("a", "A", PASS, points=40),
        Result("b", "B", FAIL, "wrong", points=40),
        Result("gpu", "G", BLOCKED, "needs a GPU", points=20),
    ]
    report = Report(11, "t", "ex11", results)
    assert (report.score, report.max_score) == (40, 80)
    results_json = gradebook.gradescope(report.to_dict())
    assert results_json["score"] == 50.0  # out of 100, over what could run
    assert [t["max_score"] for t in results_json["tests"]] == [40, 40, 0]
    assert [t["status"] for t in results_json["tests"]] == ["passed", "failed", "failed"]
    assert results_json["tests"][1]["output"] == "wrong"


def test_a_report_says_what_was_graded_when_and_by_which_minipaged(tmp_path):
    folder = answered(tmp_path / "ex01", ROUNDED_DOWN)
    gradescope = tmp_path / "results.json"
    status = cli.main(
        ["exercises", "check", "1", "--path", str(folder), "--gradescope", str(gradescope)]
    )
    assert status == 1
    report = json.loads((folder / "report.json").read_text())
    assert report["graded"] == str(folder) and report["exercise"] == 1
    assert report["minipaged_version"] == __version__
    assert time.time() - time.mktime(time.strptime(report["graded_at"], "%Y-%m-%dT%H:%M:%SZ")) < (
        86_400 + 600
    )  # UTC against local time: within a day
    assert (report["score"], report["max_score"]) == (87, 100)
    scored = {c["name"]: c["score"] for c in report["criteria"]}
    assert scored["num_logical_blocks"] == 0 and scored["logical_block"] == 13
    results = json.loads(gradescope.read_text())
    assert results["score"] == 87.0
    assert {"name", "score", "max_score", "output", "status"} <= set(results["tests"][0])
    assert results["extra_data"]["graded"] == str(folder)
    assert results["extra_data"]["minipaged_version"] == __version__


@pytest.mark.slow
def test_a_batch_gives_every_student_a_row_whatever_they_handed_in(tmp_path, capsys):
    """A correct submission, a buggy one, a misnamed file, an empty folder and an endless loop:
    five rows, each with its cause; the loop is stopped by the submission's time limit and
    costs no one else anything."""
    root = tmp_path / "submissions"
    answered(root / "alice")
    answered(root / "bob", ROUNDED_DOWN)
    (root / "carol").mkdir()
    (root / "carol" / "Memory.py").write_text("x = 1\n")
    (root / "dave").mkdir()
    endless = "import time\n    while True:\n        time.sleep(0.05)"
    answered(root / "aaron", {"return j = floor(t / B)": endless})
    (root / ".git").mkdir()  # hidden: not a student
    # A link where the gradebook goes is replaced, and what it pointed to left alone.
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("keep me\n")
    (tmp_path / "gradebook.csv").symlink_to(elsewhere)
    start = time.monotonic()
    limit = str(BATCH_LIMIT_S)
    status = cli.main(
        ["exercises", "check", "1", "--batch", str(root), "--time-limit", limit, "--jobs", "2"]
    )
    seconds = time.monotonic() - start
    assert status == 0
    printed = capsys.readouterr().out
    assert "grading exercise 01" in printed and "5/5" in printed
    assert elsewhere.read_text() == "keep me\n"
    assert not (tmp_path / "gradebook.csv").is_symlink()
    with open(tmp_path / "gradebook.csv", newline="") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    assert list(rows) == ["aaron", "alice", "bob", "carol", "dave"]
    assert {name: (row["status"], row["total"]) for name, row in rows.items()} == {
        "alice": ("passed", "100"),
        "bob": ("failed", "87"),
        "carol": ("missing", "0"),
        "dave": ("missing", "0"),
        "aaron": ("failed", "0"),
    }
    assert rows["bob"]["num_logical_blocks"] == "0" and rows["bob"]["logical_block"] == "13"
    assert rows["carol"]["cause"] == "has no memory.py (found Memory.py: rename it to memory.py)"
    assert rows["dave"]["cause"] == "has no memory.py"
    assert rows["aaron"]["cause"].startswith(
        "logical_block: the grading of this submission reached"
    )
    assert float(rows["aaron"]["seconds"]) < BATCH_LIMIT_S + 60  # its limit, and starting up
    book = json.loads((tmp_path / "gradebook.json").read_text())
    assert book["exercise"] == 1 and book["minipaged_version"] == __version__
    assert sum(book["points"].values()) == 100
    assert [s["student"] for s in book["students"]] == list(rows)
    alice, bob = (
        json.loads((root / name / "report.json").read_text()) for name in ("alice", "bob")
    )
    slowest = max(c["seconds"] for c in alice["criteria"] + bob["criteria"])
    assert alice["student"] == "alice" and alice["score"] == 100
    assert book["students"][1]["report"] == alice
    print(f"batch of 5 (1 endless loop, {limit} s, 2 jobs): {seconds:.1f} s; slowest {slowest} s")


def test_a_batch_of_no_folders_is_refused_in_one_line(tmp_path, capsys):
    assert cli.main(["exercises", "check", "1", "--batch", str(tmp_path)]) == 2
    assert "holds no sub-folders" in capsys.readouterr().err
    (tmp_path / "alice").mkdir()
    assert cli.main(["exercises", "check", "1", "--batch", str(tmp_path), "--json", "x"]) == 2
    assert "--json writes one submission's report" in capsys.readouterr().err
    assert cli.main(["exercises", "check", "1", "--solution", "--jobs", "2"]) == 2
    assert "--jobs is for --batch" in capsys.readouterr().err


def test_a_symbolic_link_among_the_submissions_is_a_row_not_a_write_elsewhere(tmp_path):
    elsewhere = answered(tmp_path / "elsewhere")
    root = tmp_path / "submissions"
    root.mkdir()
    (root / "mallory").symlink_to(elsewhere, target_is_directory=True)
    row = gradebook.grade_one(1, root / "mallory", None, tmp_path)
    assert (row.status, row.cause) == ("error", "a symbolic link: copy the submission in instead")
    assert not (elsewhere / "report.json").exists()


def test_the_gradebook_columns_are_the_criteria_in_order(tmp_path):
    root = tmp_path / "class"
    root.mkdir()
    rows = [gradebook.Row("carol", gradebook.MISSING, "has no memory.py")]
    csv_path, json_path = gradebook.write_gradebook(1, root, rows)
    assert (csv_path.parent, json_path.name) == (tmp_path, "gradebook.json")
    header = csv_path.read_text().splitlines()[0].split(",")
    names = [c.name for c in EXERCISES[1].criteria()]
    assert header == ["student", *names, "total", "max", "status", "cause", "seconds"]
    assert Path(json.loads(json_path.read_text())["submissions"]) == root


def test_a_submission_unpacked_into_a_folder_of_its_own_says_where_its_files_are(tmp_path):
    answered(tmp_path / "bob" / "ex01-main")
    assert missing_files(1, tmp_path / "bob") == (
        "has no memory.py (found ex01-main/memory.py: move it up, into bob/ itself)"
    )
