"""A fault of the grader's own is said as the grader's, never as the student's: an exercise's
definition naming a library function the library lacks, and any other failure of a grading
child before a student's code has run (it ended, it sent what is not its greeting). Such a
child's criteria are blocked, not failed, and their message names the fault and says it is not
the student's code."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from minipaged.grader import grading
from minipaged.grader.exercises import EXERCISES, DefinitionError
from minipaged.grader.grading import Limits
from minipaged.grader.proxies import Proxy
from minipaged.grader.report import BLOCKED

NAMED = [(ex, name) for ex in EXERCISES.values() for name in ex.graded + ex.answers]


@pytest.mark.parametrize("ex, name", NAMED, ids=[f"{e.number:02d}-{n}" for e, n in NAMED])
def test_every_name_an_exercise_gives_is_the_librarys(ex, name):
    owner, attribute, value = ex.lookup(name)
    assert getattr(owner, attribute) is not None and value is not None


def _misspelt(name: str) -> list[str]:
    """``name`` wrong in each of its parts: the module, each class on the way, the function."""
    module, _, qualname = name.partition(":")
    parts = qualname.split(".")
    wrong = [f"{module}_typo:{qualname}"]
    wrong += [
        ":".join([module, ".".join(parts[:i] + [p + "_typo"] + parts[i + 1 :])])
        for i, p in enumerate(parts)
    ]
    return wrong


WRONG = [
    (ex.number, role, bad)
    for ex in EXERCISES.values()
    for role, names in (("graded functions", ex.graded), ("answers", ex.answers))
    for bad in names[:1] and _misspelt(names[0])
]


@pytest.mark.parametrize("number, role, bad", WRONG, ids=[w[2] for w in WRONG])
def test_a_name_the_library_lacks_is_the_definitions_mistake(number, role, bad):
    ex = EXERCISES[number]
    field = "answers" if role == "answers" else "graded"
    broken = dataclasses.replace(ex, **{field: (bad, *getattr(ex, field)[1:])})
    with pytest.raises(DefinitionError) as raised:
        broken.lookup(bad)
    said = str(raised.value)
    assert f"exercise {number:02d}'s definition" in said and f"{bad} among its {role}" in said
    assert "your code" not in said


def _blocked(tmp_path, monkeypatch, command) -> str:
    """The message of exercise 01's first criterion, graded by a child whose ``command``
    replaces the child's own: it must be blocked."""
    (tmp_path / "memory.py").write_text("")
    monkeypatch.setattr(grading.GradingChild, "command", command)
    child = grading.GradingChild(1, "process", tmp_path, Limits(), Proxy)
    try:
        first, second = EXERCISES[1].criteria()[:2]
        result = grading._run_in_child(first, child, Limits())
        again = grading._run_in_child(second, child, Limits())  # no second start: same words
    finally:
        child.close()
    assert result.outcome == again.outcome == BLOCKED, result.message
    assert result.message == again.message
    assert "not of your code" in result.message and "before any of your code ran" in result.message
    return result.message


def test_a_child_that_fails_as_it_prepares_blocks_its_criteria_as_the_graders_fault(
    tmp_path, monkeypatch
):
    real = grading.GradingChild.command

    def command(self, channel=(-1, -1), notices=-1):
        words = real(self, channel, notices)
        words[words.index("--") + 1] = "99"  # the exercise's number: no such exercise
        return words

    said = _blocked(tmp_path, monkeypatch, command)
    assert "ValueError: no exercise 99" in said


def test_a_child_that_ends_before_its_greeting_is_the_graders_fault(tmp_path, monkeypatch):
    def command(self, channel=(-1, -1), notices=-1):
        return [sys.executable, "-c", "print('a broken install'); raise SystemExit(3)"]

    said = _blocked(tmp_path, monkeypatch, command)
    assert "it ended, exit status 3" in said and "a broken install" in said


def test_a_child_that_babbles_before_its_greeting_is_the_graders_fault(tmp_path, monkeypatch):
    def command(self, channel=(-1, -1), notices=-1):
        junk = f"import os, time; os.write({channel[1]}, b'junk' * 8); time.sleep(5)"
        return [sys.executable, "-c", junk]

    said = _blocked(tmp_path, monkeypatch, command)
    assert "it sent something the grader cannot read" in said
