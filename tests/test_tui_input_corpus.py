"""Bad text typed into the TUI's go-to-step box (``g``): every value is either a step of the
run or a refusal the box shows, asking again; none raises, since an exception in a Textual
handler ends the whole session. ``int`` raised on a superscript digit ("²" is a digit to
``str.isdigit``) and on more than 4,300 digits (a paste)."""

from __future__ import annotations

import pytest

from minipaged.python_numbers import MAX_COUNT
from tui.go_to_step import step_asked

NOT_A_STEP = ["", " ", "-1", "+3", "3.0", "1e3", "three", "²", "٣", "3 4", "0x10", "1_0"]
NOT_A_STEP += ["9" * 5000, str(MAX_COUNT + 1), "\x00", "3\n", " 3"]


@pytest.mark.parametrize("finished", [True, False])
@pytest.mark.parametrize("text", NOT_A_STEP, ids=lambda text: repr(text[:12]))
def test_text_that_names_no_step_is_refused_without_raising(text, finished):
    assert step_asked(text, last=40, finished=finished) is None


@pytest.mark.parametrize(("text", "step"), [("0", 0), ("7", 7), ("40", 40), ("007", 7)])
def test_a_step_of_the_run_is_taken(text, step):
    assert step_asked(text, last=40, finished=True) == step


def test_a_step_past_a_finished_run_is_refused_and_a_live_run_takes_it():
    """A live run records on: step 41 of a run recorded to 40 comes when it is recorded."""
    assert step_asked("41", last=40, finished=True) is None
    assert step_asked("41", last=40, finished=False) == 41
    assert step_asked(str(MAX_COUNT), last=40, finished=False) == MAX_COUNT
