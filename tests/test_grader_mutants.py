"""Every realistic student bug of the corpus (``student_mutants.py``) fails at least one
criterion of its exercise: the checks can fail on the mistakes students make, not only on an
untouched starter. Each mutant is the library's solution with one small edit, graded in this
process as the student's file (the confinement and stubs of a grading child are tested apart:
here only the checks' power is at stake)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from student_mutants import KERNEL_MUTANTS, MUTANTS, Mutant
from test_exercises import as_written_by_a_student

from minipaged.grader.ex07_attention import UNUSED_SLOTS
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.grading import grade, run_criteria
from minipaged.grader.report import FAIL, say_each_cause_once
from minipaged.grader.student import load_folder

# The library's code handed in as a student's: the copy check that would refuse it is off.
pytestmark = pytest.mark.usefixtures("library_code_allowed")


def mutated_source(mutant: Mutant) -> str:
    """The library file that solves ``mutant``'s exercise, with its one edit made."""
    module = importlib.import_module(EXERCISES[mutant.exercise].solution[mutant.stem])
    source = inspect.getsource(module)
    start = source.index(mutant.within) if mutant.within else 0
    at = source.find(mutant.old, start)
    assert at >= 0, f"{mutant.bug}: {mutant.old!r} is not in {module.__name__}"
    if not mutant.within:
        assert source.count(mutant.old) == 1, f"{mutant.bug}: {mutant.old!r} is not unique"
    source = source[:at] + mutant.new + source[at + len(mutant.old) :]
    for old, new in mutant.also:
        assert source.count(old) == 1, f"{mutant.bug}: {old!r} is not there once"
        source = source.replace(old, new)
    return source


def failed_criteria(mutant: Mutant, folder: Path) -> dict[str, str]:
    """Grade the mutant (with the library's other files of its exercise) in this process: the
    criteria it fails, with their messages."""
    ex = EXERCISES[mutant.exercise]
    for stem, module in ex.solution.items():
        source = (
            mutated_source(mutant)
            if stem == mutant.stem
            else inspect.getsource(importlib.import_module(module))
        )
        (folder / f"{stem}.py").write_text(source)
    student = load_folder(folder, tuple(ex.solution))
    assert not student.errors, student.errors
    results = run_criteria(list(ex.criteria()), student)
    return {r.name: r.message for r in results if r.outcome == FAIL}


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutant", MUTANTS, ids=lambda m: f"{m.exercise:02d}-{m.bug[:48].replace(' ', '-')}"
)
def test_every_realistic_mutant_fails_a_criterion(mutant, tmp_path):
    assert failed_criteria(mutant, tmp_path), f"exercise {mutant.exercise}: {mutant.bug} passes"


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutant", KERNEL_MUTANTS, ids=lambda m: f"{m.exercise:02d}-{m.bug[:48].replace(' ', '-')}"
)
def test_every_kernel_mutant_fails_a_criterion_in_the_simulator(mutant, tmp_path):
    """Graded as a student's kernel is, in a simulating child whose shared memory starts as
    garbage; with docstrings of the student's own, since a verbatim copy is refused."""
    source = as_written_by_a_student(mutated_source(mutant))
    (tmp_path / f"{mutant.stem}.py").write_text(source)
    report = grade(mutant.exercise, tmp_path)
    failed = {r.name: r.message for r in report.results if r.outcome == FAIL}
    assert failed, f"exercise {mutant.exercise}: {mutant.bug} passes"


SMALL_KERNELS = {8: 5, 9: 5, 10: 5}
"""Exercises 08-10 are one small kernel each, whose every mutant costs a simulator child: five
mutants each. Exercise 06's corpus is the answers of ``test_exercises.student_properties``."""


def test_the_corpus_holds_ten_mutants_per_exercise_five_per_small_kernel():
    every = MUTANTS + KERNEL_MUTANTS
    counts = {n: sum(m.exercise == n for m in every) for n in sorted(EXERCISES) if n != 6}
    assert all(count >= SMALL_KERNELS.get(n, 10) for n, count in counts.items()), counts


def test_one_cause_under_several_criteria_is_explained_once(tmp_path):
    """Exercise 07's loop reading all B slots of a partly filled block fails most criteria
    with one cause: the report explains it under the first and points there from the rest."""
    mutant = next(m for m in MUTANTS if m.bug == "all B slots of a partly filled block read")
    ex = EXERCISES[7]
    (tmp_path / "attention.py").write_text(mutated_source(mutant))
    results = run_criteria(list(ex.criteria()), load_folder(tmp_path, ("attention",)))
    said = say_each_cause_once(results)
    failed = [r for r in said if r.outcome == FAIL]
    explained = [r.name for r in failed if UNUSED_SLOTS in r.message]
    pointing = [r.name for r in failed if f"Same cause as {explained[0]}" in r.message]
    assert len(explained) == 1 and len(pointing) >= 3
    assert all(r.message.startswith("paged_attention_decode") for r in failed)  # what broke
