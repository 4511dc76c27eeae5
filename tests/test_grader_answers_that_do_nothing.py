"""Answers that do nothing score nothing: each starter with ``return []`` or ``pass`` for every
body once passed a criterion whose check held vacuously (exercise 06's no false alarm, 10
points; exercise 12's empty tree, 15; exercise 05's swap-in, 6, and its random programs, 5;
exercise 10's dot product, 34, whose NaN outputs compared as close; the race criteria of
exercises 10 and 11, 33 and 12, which a kernel that shares nothing passes). Each such
criterion now also asks for the work that makes its check mean something."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis.stateful import invariant

from minipaged import radix_cache
from minipaged.block_manager import BlockManager
from minipaged.grader import ex05_preemption, ex06_invariants, ex10_block_reduce, ex12_prefix_cache
from minipaged.grader.exercises import EXERCISES, TUTORIALS
from minipaged.grader.grading import grade, run_criteria
from minipaged.grader.properties import BlockManagerMachine, BlockManagerProgram
from minipaged.grader.report import FAIL, PASS, CheckFailed
from minipaged.grader.student import Student


def _result(check, **modules):
    """The result of the one criterion whose check is ``check``, on ``modules``."""
    criteria = [
        c
        for module in (ex05_preemption, ex06_invariants, ex12_prefix_cache)
        for c in module.CRITERIA
        if c.check is check
    ]
    (result,) = run_criteria(criteria, Student(modules))
    return result


def test_properties_that_never_fail_raise_no_false_alarm_and_score_nothing_for_it():
    """They hold on the library's programs, and on every broken state too."""
    never = SimpleNamespace(BlockManagerMachine=BlockManagerProgram)
    result = _result(ex06_invariants.check_no_false_alarm, properties=never)
    assert result.outcome == FAIL
    assert "properties that never fail raise no false alarm, and check nothing" in result.message
    right = SimpleNamespace(BlockManagerMachine=BlockManagerMachine)
    assert _result(ex06_invariants.check_no_false_alarm, properties=right).outcome == PASS


def test_one_rule_checked_is_enough_to_raise_no_false_alarm():
    class RuleFiveOnly(BlockManagerProgram):
        after_all_freed = BlockManagerMachine.after_all_freed

    class RuleOneOnly(BlockManagerProgram):
        @invariant()
        def refcounts(self):
            BlockManagerMachine.block_state_invariants_hold(self)

    for machine in (RuleFiveOnly, RuleOneOnly):
        properties = SimpleNamespace(BlockManagerMachine=machine)
        result = _result(ex06_invariants.check_no_false_alarm, properties=properties)
        assert result.outcome == PASS, result.message


class _CachesNothing(radix_cache.RadixCache):
    def match(self, token_ids):
        return []

    def insert(self, token_ids, blocks):
        return []


def test_a_tree_that_caches_nothing_is_not_an_empty_tree_done_right():
    check = ex12_prefix_cache.check_empty_cache_matches_nothing
    nothing = SimpleNamespace(RadixCache=_CachesNothing)
    result = _result(check, radix_cache=nothing)
    assert result.outcome == FAIL
    assert "match([1, 2, 3, 4]) after insert([1, 2, 3, 4], [5, 6]): expected [5, 6]" in (
        result.message
    )
    assert _result(check, radix_cache=radix_cache).outcome == PASS


class _SwapsNothing(BlockManager):
    def swap_out(self, seqs):
        return []

    def swap_in(self, seqs):
        return []


def test_a_swap_that_moves_nothing_does_not_restore_the_contents():
    """Nothing moved, nothing was overwritten: the tokens read back, and the check held."""
    check = ex05_preemption.check_swap_in_restores_the_contents
    result = _result(check, block_manager=SimpleNamespace(BlockManager=_SwapsNothing))
    assert result.outcome == FAIL
    assert "T_1.pool after swap_out([1]): expected 'host', got 'device'" in result.message
    library = SimpleNamespace(BlockManager=BlockManager)
    assert _result(check, block_manager=library).outcome == PASS


def test_random_programs_whose_swaps_move_nothing_break_a_rule():
    """A swap that moves nothing breaks no invariant of the state: the programs held, and the
    reference properties now check that a swap's tables are in the pool it moved them to."""
    check = ex05_preemption.check_random_programs_keep_every_invariant
    result = _result(check, block_manager=SimpleNamespace(BlockManager=_SwapsNothing))
    assert result.outcome == FAIL
    assert "the swap returned, but the tables of [" in result.message
    assert "are not in the host pool (§6)" in result.message
    library = SimpleNamespace(BlockManager=BlockManager)
    assert _result(check, block_manager=library).outcome == PASS


def test_a_reduction_that_returns_nothing_does_not_compare_as_right():
    """A ``reduce`` whose body is ``pass`` returns None, which the kernel stores as NaN: every
    difference with NaN is NaN, never above the tolerance, so exercise 10's dot product passed
    (34 points) on a reduction that did nothing. NaN is now close to nothing."""
    nothing = np.full((1, 32), np.nan, np.float32)
    said = r"token 0: thread 0 got nan, expected 2\.00000 \(and 31 other threads\)"
    with pytest.raises(CheckFailed, match=said):
        ex10_block_reduce._compare(nothing, np.array([2.0], np.float32), "a sum")
    ex10_block_reduce._compare(np.full((1, 32), 2.0, np.float32), np.array([2.0]), "a sum")


def _starter_with(number: int, body: str, folder):
    """Exercise ``number``'s starter with ``body`` for every ``raise NotImplementedError``."""
    ex = EXERCISES[number]
    for name in ex.files:
        source = (TUTORIALS / ex.folder / "starter" / name).read_text()
        (folder / name).write_text(re.sub(r"raise NotImplementedError\(.*\)", body, source))
    return folder


@pytest.mark.parametrize(
    ("number", "body", "criterion", "said"),
    [
        (10, "return value", "no_shared_memory_race", "q . k, head_dim 32, watched, token 0"),
        (11, "pass", "decode_has_no_shared_memory_race", "(L=37, B=8): sequence 0"),
    ],
    ids=("10-returns-its-value", "11-launches-nothing"),
)
def test_a_kernel_that_shares_nothing_has_no_race_and_no_result_either(
    number, body, criterion, said, tmp_path
):
    """No shared memory, no race: the race criteria passed a reduction that returns each
    thread's own value (33 points) and a decode kernel that computes nothing (12). The watched
    launch's output must now be right too."""
    pytest.importorskip("numba")
    results = {r.name: r for r in grade(number, _starter_with(number, body, tmp_path)).results}
    assert results[criterion].outcome == FAIL and said in results[criterion].message
    assert {r.outcome for r in results.values()} <= {FAIL, "blocked"}
