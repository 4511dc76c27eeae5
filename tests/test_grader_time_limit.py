"""Criteria run in the grader's own process (``grading.run_criteria``: trusted code, the tests'
stand-ins for a student's work) are limited by the process's CPU time, not the wall clock: on a
loaded machine a right run of hypothesis's programs once took more than its 30 s of wall time
(exercise 12's mutants, beside two spinning processes). The limit still stops a loop that never
ends. No test here leans on how fast the machine is: a sleep takes no CPU however long it is."""

from __future__ import annotations

import time

import pytest

from minipaged.grader.grading import run_criteria
from minipaged.grader.report import FAIL, PASS, Criterion
from minipaged.grader.student import Student
from minipaged.grader.time_limit import TimeLimitExceeded, time_limit


def check_waits_on_a_busy_machine(student):
    """Waits: a right answer given no CPU for longer than its seconds."""
    time.sleep(0.6)


def check_never_ends(student):
    """Computes forever."""
    while True:
        pass


def test_a_criterion_in_this_process_has_cpu_seconds_not_wall_seconds():
    waits, spins = run_criteria(
        [Criterion(check_waits_on_a_busy_machine), Criterion(check_never_ends)],
        Student({}),
        check_seconds=0.3,
    )
    assert waits.outcome == PASS, waits.message
    assert spins.outcome == FAIL
    assert spins.message.startswith(f"your code ran past 0.3 s in {spins.name}:"), spins.message


@pytest.mark.parametrize("cpu", (False, True), ids=("wall", "cpu"))
def test_each_clock_stops_a_loop_and_an_inner_limit_of_the_same_clock_nests(cpu):
    with (
        pytest.raises(TimeLimitExceeded) as raised,
        time_limit(0.2, cpu=cpu) as outer,
        time_limit(5.0, cpu=cpu) as inner,  # ends after the outer one: not set
    ):
        assert inner is None
        while True:
            pass
    assert raised.value is outer


def test_a_cpu_limit_leaves_an_enclosing_wall_limit_its_deadline():
    with (
        pytest.raises(TimeLimitExceeded) as raised,
        time_limit(0.3) as wall,
        time_limit(5.0, cpu=True),
    ):
        time.sleep(2.0)  # no CPU: only the wall clock's limit ends it
    assert raised.value is wall
