"""Every realistic student bug of the corpus (``student_mutants.py``) fails at least one
criterion of its exercise, with a message that says why: the checks can fail on the mistakes
students make, not only on an untouched starter, and say which call broke which rule. Each
mutant is the library's solution with one small edit, graded in this process as the student's
file (the kernels in one simulating process), up to the first criterion it fails: only the
checks' power is at stake here, and the confinement and stubs of a grading child are tested
apart (one kernel mutant goes through a grading child here, too)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from student_mutants import KERNEL_MUTANTS, MUTANTS, Mutant
from test_exercises import as_written_by_a_student

from minipaged.grader.ex07_attention import UNUSED_SLOTS
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.grading import NOT_RUN, grade, run_criteria
from minipaged.grader.report import BLOCKED, FAIL, Report, say_each_cause_once, split_rule
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


def mutant_folder(mutant: Mutant, folder: Path) -> Path:
    """``folder``, holding the mutant and the library's other files of its exercise."""
    ex = EXERCISES[mutant.exercise]
    for stem, module in ex.solution.items():
        source = (
            mutated_source(mutant)
            if stem == mutant.stem
            else inspect.getsource(importlib.import_module(module))
        )
        (folder / f"{stem}.py").write_text(source)
    return folder


def failed_criteria(mutant: Mutant, folder: Path) -> dict[str, str]:
    """Grade the mutant (with the library's other files of its exercise) in this process, up
    to the first criterion it fails: that criterion, with its message, or nothing."""
    ex = EXERCISES[mutant.exercise]
    student = load_folder(mutant_folder(mutant, folder), tuple(ex.solution))
    assert not student.errors, student.errors
    results = run_criteria(list(ex.criteria()), student, first_failure=True)
    return {r.name: r.message for r in results if r.outcome == FAIL}


def operations(number: int) -> set[str]:
    """What a student's code of exercise ``number`` offers to be called: the public functions
    and classes of the modules that solve it, their public methods, and what the student
    writes (``_preempt``)."""
    names = set()
    for module in EXERCISES[number].solution.values():
        found = importlib.import_module(module)
        for name, value in vars(found).items():
            if getattr(value, "__module__", None) != found.__name__:
                continue
            names.add(name)
            if inspect.isclass(value):
                names |= {
                    n for n, v in vars(value).items() if callable(v) or isinstance(v, property)
                }
    return {name for name in names if not name.startswith("_")} | {
        name.split(":")[-1].split(".")[-1] for name in EXERCISES[number].graded
    }


def assert_says_why(number: int, criterion: str, message: str) -> None:
    """A failure's message names the operation that was checked (a call of the student's
    code, with its arguments) and, on its last line, the rule that broke: the criterion's."""
    finding, rule = split_rule(message)
    declared = next(c for c in EXERCISES[number].criteria() if c.name == criterion).rule
    assert rule == declared, f"{criterion}: no rule line, or another rule: {message!r}"
    names = "|".join(map(re.escape, sorted(operations(number))))
    called = re.compile(rf"\b({names})\(")
    assert called.search(finding), f"{criterion}: names no call of the student's code: {message!r}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutant", MUTANTS, ids=lambda m: f"{m.exercise:02d}-{m.bug[:48].replace(' ', '-')}"
)
def test_every_realistic_mutant_fails_a_criterion_that_says_why(mutant, tmp_path):
    failed = failed_criteria(mutant, tmp_path)
    assert failed, f"exercise {mutant.exercise}: {mutant.bug} passes"
    for criterion, message in failed.items():
        assert_says_why(mutant.exercise, criterion, message)


PINNED = {
    "no check first, and the decref before the allocation: a refusal changes R": (
        "out_of_blocks_changes_nothing",
        "append_slot(1) into shared block 1 with no free block for its copy raised OutOfBlocks "
        "as it should, but had already changed the block state (device_refcounts[1]: expected "
        "2, got 1). A refusal must come before any change: check everything (a free block, the "
        "sequences) first, then decref, allocate or rewrite a table\n"
        "Rule: with no free block, an append that needs one raises OutOfBlocks and changes "
        "nothing",
    ),
    "decref frees a block still held once": (
        "incref_and_decref_count_tables",
        "free_blocks() after allocate(), incref(0), decref(0): R[0]=1: expected (1,), got "
        "(1, 0)\nRule: incref and decref move R[p] by one and return it; a block with R[p] > 0 "
        "stays in use",
    ),
    # It records the incref it made and leaves out the one it did not. The criterion's own
    # checks (the child's table) pass, so the event mismatch they held is what it says
    # (recorded_events.events_checked_last): what was done shows R[0] = 1 after the fork.
    "fork increfs only the last block": (
        "fork_copies_the_table",
        "fork(0, 1) recorded the incref events [Incref(seq=1, logical_index=1, block=1, "
        "refcount=2, pool='device')], but what it did (its block tables, refcounts and returned "
        "value) records [Incref(seq=1, logical_index=0, block=0, refcount=1, pool='device'), "
        "Incref(seq=1, logical_index=1, block=1, refcount=2, pool='device')]. The TUI draws the "
        "events your code records as what happened: record what the call did, or record "
        "nothing\nRule: fork gives the child its own copy of T_parent (the same blocks and "
        "length, another list) and returns it",
    ),
    "all B slots of a partly filled block read": (
        "loop_one_block",
        "paged_attention_decode_loop(query [1, 2, 8], pools [4, 2, 4, 8], block_tables=[[3]], "
        "seq_lens=[3], scale=0.354, block_size=4) on one sequence in one partly filled block "
        "(L=3, B=4): sequence 0, head 0 has NaN or inf: [nan, nan, nan, nan, ...]. "
        f"{UNUSED_SLOTS}\n"
        "Rule: the output for head h is the sum over τ < L of softmax(s)_τ v_τ, with "
        "s_τ = scale * q_h · k_τ; token τ is read at block T[floor(τ/B)], offset τ mod B",
    ),
}
"""What a student reads for a few mutants, whole: the issue's decref before the allocation
among them (it read "device_refcounts: expected (2, 2), got (2, 1)")."""


@pytest.mark.parametrize("bug", PINNED)
def test_what_a_student_reads_names_the_call_and_the_rule(bug, tmp_path):
    mutant = next(m for m in MUTANTS if m.bug == bug)
    assert failed_criteria(mutant, tmp_path) == dict([PINNED[bug]])


def test_the_printed_report_gives_a_rule_once(tmp_path):
    """The rule line is printed under the finding unless the criterion's line above already
    says it (its statement is its rule)."""
    printed = {}
    for bug in ("fork raises no refcount", "all B slots of a partly filled block read"):
        mutant = next(m for m in MUTANTS if m.bug == bug)
        ex = EXERCISES[mutant.exercise]
        folder = tmp_path / str(mutant.exercise)
        folder.mkdir()
        mutant_folder(mutant, folder)
        student = load_folder(folder, tuple(ex.solution))
        results = run_criteria(list(ex.criteria()), student, first_failure=True)
        console = Console(record=True, width=200)
        Report(mutant.exercise, ex.title, str(folder), results).render(console)
        printed[mutant.exercise] = console.export_text()
    assert printed[3].count("fork raises R[p] by one") == 1 and "Rule:" not in printed[3]
    assert printed[7].count("Rule: the output for head h") == 1


CAUGHT_BY = {
    "running max started at 0": "decode_scores_far_below_zero",
    "softmax without the max": "decode_large_scores_stay_finite",
    "a token's block found as if a round of T tokens started on a block boundary": (
        "decode_block_size_that_does_not_divide_the_threads"
    ),
    "one round of threads only (L <= T assumed)": "decode_scores_far_below_zero",
    "GQA by modulo (head h reads KV head h mod N_KV)": "decode_batch_with_gqa",
    "running sum not rescaled": "decode_block_size_that_does_not_divide_the_threads",
    "every thread writes its value to scratch[0]": "max_and_reuse",
    "no barrier after reading the result: the next reduction overwrites it early": (
        "max_and_reuse"
    ),
}
"""The criterion that catches each of the slowest kernel mutants, tried first: the cheapest of
those that fail it, each criterion timed on each mutant in the simulator (GQA by modulo fails
only ``decode_batch_with_gqa``, 1.2 s; the others fail one that costs a third to a half of
it). In the simulator a criterion is a few launches at about 0.1 s a thread block, and these
mutants passed one to five criteria before the one that fails them; tried first, the
simulating process took 10.8 s of CPU instead of 17.0. Only the order changes: where the named
criterion passes, the others run after it as before, so a pin gone stale costs time, never
proof."""


def test_every_pinned_criterion_is_one_of_its_mutants_exercise():
    bugs = {m.bug: m for m in KERNEL_MUTANTS}
    for bug, criterion in CAUGHT_BY.items():
        assert bug in bugs, f"CAUGHT_BY names {bug!r}, no kernel mutant of the corpus"
        names = [c.name for c in EXERCISES[bugs[bug].exercise].criteria()]
        assert criterion in names, f"{bug!r}: {criterion!r} is not one of {names}"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict[Mutant, dict[str, str]]:
    """Every kernel mutant graded in one simulating process (``simulated_mutants.py``), up to
    the first criterion it fails (its CAUGHT_BY criterion tried first): by mutant, the failed
    criterion and its message."""
    folders = {
        mutant: mutant_folder(mutant, tmp_path_factory.mktemp(f"kernel{i}"))
        for i, mutant in enumerate(KERNEL_MUTANTS)
    }
    arguments = [
        f"{m.exercise}:{folder}:{CAUGHT_BY.get(m.bug, '')}" for m, folder in folders.items()
    ]
    runner = Path(__file__).parent / "simulated_mutants.py"
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run(
        [sys.executable, str(runner), *arguments], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout)
    return {m: failed[argument] for m, argument in zip(folders, arguments, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutant", KERNEL_MUTANTS, ids=lambda m: f"{m.exercise:02d}-{m.bug[:48].replace(' ', '-')}"
)
def test_every_kernel_mutant_fails_a_criterion_in_the_simulator(mutant, simulated):
    failed = simulated[mutant]
    assert failed, f"exercise {mutant.exercise}: {mutant.bug} passes"
    for criterion, message in failed.items():
        assert_says_why(mutant.exercise, criterion, message)


@pytest.mark.slow
def test_a_kernel_mutant_fails_as_a_student_kernel_is_graded(tmp_path):
    """The same through the grader: a simulating child whose shared memory starts as garbage
    (an accumulator never cleared reads it), with docstrings of the student's own, since a
    verbatim copy is refused."""
    mutant = next(m for m in KERNEL_MUTANTS if m.bug == "the accumulator never cleared")
    source = as_written_by_a_student(mutated_source(mutant))
    (tmp_path / f"{mutant.stem}.py").write_text(source)
    report = grade(mutant.exercise, tmp_path, first_failure=True)
    failed = [r for r in report.results if r.outcome == FAIL]
    assert len(failed) == 1, report.results
    assert_says_why(mutant.exercise, failed[0].name, failed[0].message)
    assert all(r.message == NOT_RUN for r in report.results if r.outcome == BLOCKED)


def test_the_corpus_holds_ten_mutants_per_exercise():
    """Exercise 06's corpus is the answers of ``test_exercises.student_properties``."""
    every = MUTANTS + KERNEL_MUTANTS
    counts = {n: sum(m.exercise == n for m in every) for n in sorted(EXERCISES) if n != 6}
    assert all(count >= 10 for count in counts.values()), counts


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


SHARED = [m for m in MUTANTS if "shared by every" in m.bug and m.exercise in (2, 3, 12)]
"""The mutants that keep an allocator's or a tree's state on the class or in a default
argument: a second object starts with what the first did."""


@pytest.mark.parametrize("mutant", SHARED, ids=lambda m: f"{m.exercise:02d}-{m.bug[:40]}")
def test_state_shared_between_objects_is_named_as_such(mutant, tmp_path):
    """Such a bug read as a wrong value of a later call (``cached_blocks(): expected (0, 1),
    got (0, 1, 2, 5, 7, 8)``); the first criterion now says the objects share their state
    (``shared_state.expect_own_state``)."""
    failed = failed_criteria(mutant, tmp_path)
    assert any("The two share their state" in m for m in failed.values()), failed
