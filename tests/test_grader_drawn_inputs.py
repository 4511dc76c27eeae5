"""The grader's inputs are drawn anew at each grading, where a hand-in could otherwise store
the answers to them: exercise 07's cases were made from fixed seeds, and a hand-in that looked
its query up among the grader's and returned the stored output passed all ten criteria."""

from __future__ import annotations

import torch

from minipaged.attention import paged_attention_decode
from minipaged.grader.ex07_attention import compare, make_case


def test_exercise_07_draws_its_values_anew_and_keeps_the_tables_its_messages_name():
    first, second = (make_case("a batch", [5, 12, 1], seed=1) for _ in range(2))
    assert torch.equal(first.args[3], second.args[3])  # the block tables a failure names
    assert not torch.equal(first.args[0], second.args[0])
    assert not torch.equal(first.args[1].nan_to_num(), second.args[1].nan_to_num())
    for case in (first, second):  # each expected output is attention over its own values
        compare("paged_attention_decode", paged_attention_decode, case)
