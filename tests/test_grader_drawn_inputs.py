"""The grader's inputs are drawn anew at each grading, where a hand-in could otherwise store
the answers to them: exercise 07's cases were made from fixed seeds, and a hand-in that looked
its query up among the grader's and returned the stored output passed all ten criteria;
exercise 12's random program had a fixed seed, and a tree replaying the library's answers to
it passed that criterion; exercise 13's generated runs were derandomized, and a hand-in
answering from the library's series stored for them passed its four part-2 criteria."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from minipaged import radix_cache
from minipaged.attention import paged_attention_decode
from minipaged.grader import ex12_prefix_cache as ex12
from minipaged.grader import ex13_runs
from minipaged.grader import ex13_three_wastes as ex13
from minipaged.grader.ex07_attention import compare, make_case
from minipaged.grader.ex12_prefix_cache import random_program
from minipaged.grader.ex13_runs import generated_runs
from minipaged.grader.report import CheckFailed
from minipaged.grader.student import Student
from minipaged.study import recorded_waste


def test_exercise_07_draws_its_values_anew_and_keeps_the_tables_its_messages_name():
    first, second = (make_case("a batch", [5, 12, 1], seed=1) for _ in range(2))
    assert torch.equal(first.args[3], second.args[3])  # the block tables a failure names
    assert not torch.equal(first.args[0], second.args[0])
    assert not torch.equal(first.args[1].nan_to_num(), second.args[1].nan_to_num())
    for case in (first, second):  # each expected output is attention over its own values
        compare("paged_attention_decode", paged_attention_decode, case)


def test_exercise_07_large_scores_always_make_the_running_max_rise_in_a_later_block():
    """Drawn anew, the large-scores case held each head's highest score in the first block
    about one grading in five (158 of 200 draws caught acc_not_rescaled): a loop that rescales
    l but not acc then passed. Each head's highest score is now the last token's."""
    spec = importlib.util.spec_from_file_location(
        "acc_not_rescaled",
        Path(__file__).parent / "student_answers/ex07/acc_not_rescaled/attention.py",
    )
    answer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(answer)
    for _ in range(20):
        case = make_case("large scores", [9, 4], score_scale=12.0, seed=3)
        query, key_pool, _, tables = case.args[:4]
        keys = key_pool[tables[0].long()].transpose(0, 1).flatten(1, 2)[:, :9]  # [N_KV, L, d]
        assert torch.einsum("hd,htd->ht", query[0], keys).argmax(dim=1).tolist() == [8, 8]
        wrong = r"on large scores: sequence 0 \(L=9\), head \d: expected \[.*\], got \[.*\]"
        with pytest.raises(CheckFailed, match=wrong):  # its values, not a shape or a NaN
            compare("paged_attention_decode_loop", answer.paged_attention_decode_loop, case)


class _FollowsTheFixedProgram(radix_cache.RadixCache):
    """The library's tree while the operations are exercise 12's fixed program's, and an empty
    answer once they leave it: what a tree replaying answers stored for that program gives."""

    def __init__(self, block_size: int) -> None:
        super().__init__(block_size)
        self.ahead = [(op[0], *op[1:]) for op in random_program(ex12.SEED)]

    def _follow(self, *op):
        if not self.ahead or self.ahead.pop(0) != op:
            self.ahead = []
            return []
        return getattr(super(), op[0])(*op[1:])

    def match(self, token_ids):
        return self._follow("match", list(token_ids))

    def insert(self, token_ids, blocks):
        return self._follow("insert", list(token_ids), list(blocks))

    def forget(self, block):
        return self._follow("forget", block)


def test_exercise_12_runs_a_program_drawn_anew_after_the_fixed_one(monkeypatch):
    """Seed 9's program alone was public: a tree answering only it passed. A second program,
    its seed drawn from the system's random source at each grading and printed when it fails,
    now fails it; the fixed program still runs first, so a tree's bug is reported the same way
    at every grading."""
    assert isinstance(ex12._DRAWS, random.SystemRandom)
    check = ex12.check_random_operations_match_the_contract
    follower = Student({"radix_cache": SimpleNamespace(RadixCache=_FollowsTheFixedProgram)})
    monkeypatch.setattr(ex12, "_DRAWS", random.Random(1))
    seed = random.Random(1).randrange(2**32)
    with pytest.raises(
        CheckFailed,
        match=rf"random_program\(seed={seed}, block_size=[345], token_ids=\(\d+, \d+\)\), drawn",
    ):
        check(follower)
    check(Student({"radix_cache": radix_cache}))  # the library's tree, on both programs


def test_exercise_13_checks_runs_drawn_anew_after_the_fixed_ones(monkeypatch):
    """Exercise 13's generated runs were derandomized and its other runs ship with the
    package: a hand-in answering from the library's series stored for them passed. Runs drawn
    from the system's random source at each grading, named so that a failure can be made
    again, now fail it; the fixed runs still come first."""
    assert isinstance(ex13_runs._DRAWS, random.SystemRandom)
    fixed = {repr(run) for run in generated_runs(ex13_runs.SEED)}

    def only_the_fixed_runs(run):
        if run.block_size != 4 and repr(run) not in fixed:  # the shipped runs all have B = 4
            return [0] * len(run.lengths)
        return recorded_waste.paged_waste(run)

    monkeypatch.setattr(ex13_runs, "_DRAWS", random.Random(1))
    seed = random.Random(1).randrange(2**32)
    stored = SimpleNamespace(paged_waste=only_the_fixed_runs)
    with pytest.raises(
        CheckFailed, match=rf"generated_runs\(seed={seed}\)\[\d+\] of .*, drawn for this grading"
    ):
        ex13.check_paged_waste_of_a_recorded_run(Student({"recorded_waste": stored}))
    ex13.check_paged_waste_of_a_recorded_run(Student({"recorded_waste": recorded_waste}))
