"""Realistic student bugs that only show at a size the fixed cases did not reach: a block size
other than the examples' B = 4. Each passed every criterion of its
exercise; each now fails the criterion written for it, with the size named (the other
realistic bugs: test_grader_student_bugs.py, ..._attention.py, ..._prefix_cache.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_exercises import failures_of

from minipaged.block_manager import AppendResult, BlockManager
from minipaged.grader import drawn_sizes
from minipaged.grader import ex04_copy_on_write as ex04
from minipaged.grader.report import split_rule

# The library's code handed in as a student's: the copy check that would refuse it is off.
pytestmark = pytest.mark.usefixtures("library_code_allowed")


def draw(monkeypatch, size) -> None:
    """Make every size drawn for this grading ``size``."""
    monkeypatch.setattr(drawn_sizes.DRAWS, "choice", lambda sizes: size)


class _BlockOfFour(BlockManager):
    """append_slot written with the README's B = 4 for the manager's B: j, o = divmod(t, 4)
    and slot = T_r[j] * 4 + o."""

    def append_slot(self, seq, token_ids=None):
        t = self.table(seq).num_tokens
        result = super().append_slot(seq, token_ids)
        j, o = divmod(t, 4)
        return AppendResult(self.table(seq).blocks[j] * 4 + o, result.cow)


@pytest.mark.parametrize("block_size", ex04.DRAWN_BLOCK_SIZES)
def test_an_append_written_for_a_block_of_four_is_caught_at_the_drawn_b(monkeypatch, block_size):
    """Every case of exercise 04 was at B = 4, so an append computing with 4 passed them all.
    The cases run again at a B drawn for the grading, with tables that do not start at block
    0 (there, T_r[j] * B + o is t whatever B); the message names the B drawn."""
    draw(monkeypatch, block_size)
    name = "append_writes_in_place_when_the_block_has_room"
    failed = failures_of(4, [name], block_manager=SimpleNamespace(BlockManager=_BlockOfFour))
    drawn = (
        f"with B={block_size}, drawn for this grading (the same case passed with B=4: is a "
        "number that holds only there written where B belongs?)"
    )
    assert drawn in failed[name]
    if block_size == 5:  # t = 6: j = 1, o = 2 read as B = 4, where j = 1, o = 1 at B = 5
        assert split_rule(failed[name])[0] == (
            f"{drawn}: append_slot(0) at t=6 with T_0=[1, 2], B=5: slot T_0[1]*B + o: "
            "expected 11, got 10"
        )
