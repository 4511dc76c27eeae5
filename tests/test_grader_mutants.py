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
from student_mutants import MUTANTS, Mutant

from minipaged.grader.exercises import EXERCISES
from minipaged.grader.grading import run_criteria
from minipaged.grader.report import FAIL
from minipaged.grader.student import load_folder


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


def test_the_corpus_holds_at_least_ten_mutants_per_exercise_it_covers():
    counts = {n: sum(m.exercise == n for m in MUTANTS) for n in {m.exercise for m in MUTANTS}}
    assert all(count >= 10 for count in counts.values()), counts
