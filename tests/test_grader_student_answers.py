"""Whole answers written as students write them, from the README and the starter alone
(``student_answers/exNN/NAME/``): for each exercise a right answer in a shape of its own and
wrong ones, each with a misconception students have. A right answer passes every criterion
(a right answer that fails is as bad as a wrong one that passes); a wrong one fails the
criterion its docstring names (``Fails: ...``), with a message that names the call and the
rule. Unlike ``student_mutants.py``, which edits the library's solution once, these answers
are written apart from it: their own names, structure and order of events.

An answer folder holds only the files it changes; the others are its exercise's ``right``
answer's. The answers are graded in this process, criterion by criterion (the kernels in one
simulating process), as ``test_grader_mutants.py`` grades mutants; the right answers also go
through a grading child, where a value that cannot cross the channel would fail them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_grader_mutants import assert_says_why

from minipaged.grader import wire
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.frames import ProtocolError
from minipaged.grader.grading import grade, run_criteria
from minipaged.grader.report import FAIL, PASS
from minipaged.grader.student import load_folder

ANSWERS = Path(__file__).parent / "student_answers"

PATIENCE = 600.0
"""Seconds a criterion may run here: the checks' own 30 s limit is for a student's machine,
and two loaded cores can take longer over a right answer's random programs."""


@dataclass(frozen=True)
class Answer:
    exercise: int
    name: str
    fails: str | None
    """The criterion the answer must fail; None for a right answer."""

    def __str__(self) -> str:
        return f"{self.exercise:02d}-{self.name}"

    @property
    def simulated(self) -> bool:
        return any(c.runs_in == "simulator" for c in EXERCISES[self.exercise].criteria())

    def folder(self, into: Path) -> Path:
        """``into``, holding the answer's files and its exercise's right answer's others."""
        exercise = ANSWERS / f"ex{self.exercise:02d}"
        for source in (exercise / "right", exercise / self.name):
            for file in source.glob("*.py"):
                shutil.copyfile(file, into / file.name)
        return into


def _answers() -> list[Answer]:
    found = []
    for folder in sorted(ANSWERS.glob("ex[0-9][0-9]/*/")):
        said = {re.search(r"^Fails: (\w+)$", f.read_text(), re.M) for f in folder.glob("*.py")}
        (fails,) = {m.group(1) for m in said if m}  # one file says what the answer fails
        found.append(Answer(int(folder.parent.name[2:]), folder.name, fails))
        assert (fails == "nothing") == folder.name.startswith("right"), folder
    return [a if a.fails != "nothing" else Answer(a.exercise, a.name, None) for a in found]


ALL = _answers()
IN_PROCESS = [a for a in ALL if not a.simulated]
SIMULATED = [a for a in ALL if a.simulated]
THROUGH_A_CHILD = [
    next(a for a in IN_PROCESS if a.exercise == number and a.fails is None)
    for number in (2, 12, 13)
]
"""Right answers whose values the checks read must cross the channel from the child: its
exception classes (02), a tree's shape (12), a recorded run (13). They are graded there only:
the child runs every criterion the in-process grading would."""


def test_every_exercise_has_a_right_answer_and_three_wrong_ones():
    right = {a.exercise for a in ALL if a.fails is None}
    wrong = {n: sum(a.exercise == n and a.fails is not None for a in ALL) for n in EXERCISES}
    assert right == set(EXERCISES), f"no right answer for {set(EXERCISES) - right}"
    assert all(wrong[n] >= 3 for n in right), wrong
    criteria = {n: {c.name for c in ex.criteria()} for n, ex in EXERCISES.items()}
    assert all(a.fails in criteria[a.exercise] for a in ALL if a.fails), (
        "a Fails: names no criterion"
    )


@pytest.mark.parametrize("answer", [a for a in IN_PROCESS if a.fails], ids=str)
def test_a_wrong_answer_fails_its_criterion_saying_which_call_broke_which_rule(answer, tmp_path):
    ex = EXERCISES[answer.exercise]
    student = load_folder(answer.folder(tmp_path), tuple(ex.solution))
    assert not student.errors, student.errors
    criterion = [c for c in ex.criteria() if c.name == answer.fails]
    (result,) = run_criteria(criterion, student, check_seconds=PATIENCE)
    assert result.outcome == FAIL, f"{answer}: passes {answer.fails}"
    assert_says_why(answer.exercise, result.name, result.message)


@pytest.mark.slow
@pytest.mark.parametrize(
    "answer", [a for a in IN_PROCESS if not a.fails and a not in THROUGH_A_CHILD], ids=str
)
def test_a_right_answer_passes_every_criterion(answer, tmp_path):
    ex = EXERCISES[answer.exercise]
    student = load_folder(answer.folder(tmp_path), tuple(ex.solution))
    results = run_criteria(list(ex.criteria()), student, check_seconds=PATIENCE)
    failed = {r.name: r.message for r in results if r.outcome != PASS}
    assert not failed, f"{answer}: a right answer fails {failed}"


@pytest.mark.slow
@pytest.mark.parametrize("answer", THROUGH_A_CHILD, ids=str)
def test_a_right_answer_passes_through_a_grading_child(answer, tmp_path):
    report = grade(answer.exercise, answer.folder(tmp_path))
    assert {r.name for r in report.results} == {
        c.name for c in EXERCISES[answer.exercise].criteria()
    }
    failed = {r.name: r.message for r in report.results if r.outcome != PASS}
    assert not failed, f"{answer}: a right answer fails through the child {failed}"


def test_an_exception_class_of_the_childs_crosses_the_channel_as_a_value():
    """What exercise 02's check reads as ``allocator.OutOfBlocks``: three keys, where every
    other value has one or two (a check once refused it, failing every right answer)."""
    document = {"X": 7, "q": "OutOfBlocks", "b": [{"N": "builtins:RuntimeError"}]}
    got = wire.decode(document, lambda handle, classes: None, lambda d: (d["q"], d["X"]))
    assert got == ("OutOfBlocks", 7)
    with pytest.raises(ProtocolError, match=r"^not a value: "):  # a tuple's tag, with keys more
        wire.decode({"T": [], "q": 1, "b": 2}, lambda handle, classes: None, lambda d: None)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict[Answer, dict[str, str]]:
    """Every kernel answer graded in one simulating process (``simulated_mutants.py``), up to
    the first criterion it fails, the one its docstring names tried first: by answer, that
    criterion and its message. The test below asks for a failure at or before the named
    criterion; where the named one fails, a failure comes no later than it in the exercise's
    order too, and where it passes the others run in order as they would have, so trying it
    first changes no verdict, only the time: a simulated criterion is a few launches."""
    folders = {a: a.folder(tmp_path_factory.mktemp(str(a))) for a in SIMULATED}
    arguments = [f"{a.exercise}:{folder}:{a.fails or ''}" for a, folder in folders.items()]
    runner = Path(__file__).parent / "simulated_mutants.py"
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run(
        [sys.executable, str(runner), *arguments], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout)
    return {a: failed[argument] for a, argument in zip(folders, arguments, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("answer", SIMULATED, ids=str)
def test_a_kernel_answer_is_graded_right_in_the_simulator(answer, simulated):
    """Up to its first failure: the criterion its docstring names, or one before it."""
    failed = simulated[answer]
    if answer.fails is None:
        assert not failed, f"{answer}: a right answer fails {failed}"
        return
    # A race the simulator's thread order happens to show may fail an earlier criterion first.
    order = [c.name for c in EXERCISES[answer.exercise].criteria()]
    (first,) = failed or [None]
    assert first is not None, f"{answer}: passes every criterion"
    assert order.index(first) <= order.index(answer.fails), f"{answer}: fails {first} first"
    assert_says_why(answer.exercise, first, failed[first])
