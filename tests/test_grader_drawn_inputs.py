"""The grader's inputs are drawn anew at each grading, where a hand-in could otherwise store
the answers to them: exercise 07's cases were made from fixed seeds, and a hand-in that looked
its query up among the grader's and returned the stored output passed all ten criteria."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from minipaged.attention import paged_attention_decode
from minipaged.grader.ex07_attention import compare, make_case
from minipaged.grader.report import CheckFailed


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
