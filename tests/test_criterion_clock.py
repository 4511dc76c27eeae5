"""A criterion's time: a busy machine slows a right answer without failing it, while code that
waits or computes forever is still stopped (``minipaged.grader.criterion_clock``).

A busy machine is made the same way everywhere: competitors that spin on one CPU, and the code
under test pinned to that CPU at the lowest priority (``nice 19``), so it gets a few per cent of
a core while it stays runnable. The grading child runs in a session of its own, and Linux may
share a CPU between sessions before it looks at niceness (autogroup scheduling), so against the
grader the competitors each take a session of their own too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minipaged.grader import criterion_clock
from minipaged.grader.criterion_clock import CriterionClock
from minipaged.grader.grading import Limits, grade
from minipaged.grader.process_tree import tree_usage
from minipaged.grader.report import FAIL, PASS
from tests.test_grader_integrity import submission

CPU = min(os.sched_getaffinity(0))
SPIN = "import os, sys; os.sched_setaffinity(0, {%d}); os.nice(%d); sys.stdout.write('on\\n'); sys.stdout.flush()\nwhile True: pass"  # noqa: E501

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or not Path("/proc/self/stat").exists(),
    reason="needs Linux's /proc and CPU affinity",
)


def spinner(nice: int, session: bool = False) -> subprocess.Popen:
    """A process spinning on ``CPU`` at niceness ``nice`` (in a new session: ``session``),
    once it is spinning."""
    command = [sys.executable, "-c", SPIN % (CPU, nice)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, start_new_session=session
    )
    assert process.stdout.readline() == "on\n"
    return process


def ended(*processes: subprocess.Popen) -> None:
    for process in processes:
        process.kill()
        process.wait()


def test_tree_usage_tells_a_sleeper_from_a_spinner():
    sleeper = subprocess.Popen(["sleep", "60"])
    spinning = spinner(0)
    try:
        time.sleep(0.3)
        assert tree_usage(sleeper.pid) == (0.0, False)
        cpu, runnable = tree_usage(spinning.pid)
        assert runnable and cpu > 0.1
    finally:
        ended(sleeper, spinning)


def test_code_that_waits_is_stopped_at_its_seconds():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        clock = CriterionClock(0.2, sleeper.pid)
        assert not clock.expired()
        time.sleep(0.3)
        assert clock.expired()
    finally:
        ended(sleeper)


def test_starved_code_runs_on_until_it_has_used_its_seconds_of_cpu():
    competitor, starved = spinner(0), spinner(19)
    try:
        clock = CriterionClock(0.3, starved.pid)
        time.sleep(0.6)  # twice its seconds of wall-clock time, a few per cent of one CPU
        assert not clock.expired(), "a runnable process that got little CPU was stopped"
        ended(competitor)  # the machine is quiet again: the CPU it is owed runs out
        time.sleep(0.5)
        assert clock.expired()
    finally:
        ended(competitor, starved)


def test_nothing_runs_past_the_stretch(monkeypatch):
    monkeypatch.setattr(criterion_clock, "STRETCH", 2.0)
    competitor, starved = spinner(0), spinner(19)
    try:
        clock = CriterionClock(0.2, starved.pid)
        time.sleep(0.25)
        assert not clock.expired()
        time.sleep(0.2)
        assert clock.expired()
    finally:
        ended(competitor, starved)


SLOW_ONCE = (
    "global SLOW\n"
    "    if 'SLOW' not in globals():\n"
    "        SLOW = 1; import os; ALL = os.sched_getaffinity(0)\n"
    "        os.sched_setaffinity(0, {%d}); os.nice(19)\n"
    "        sum(range(6_000_000))  # about 0.2 s of CPU, seconds of wall time when starved\n"
    "        os.sched_setaffinity(0, ALL)  # the other criteria run at full speed\n"
    "    return t // block_size"
)


def test_a_right_answer_on_a_busy_machine_passes_and_a_loop_still_fails(tmp_path):
    """With its 1 s spent waiting for a CPU the competitors hold, the right answer passes (its
    seconds are CPU time while it is runnable); an endless loop beside it still fails."""
    folder = submission(
        tmp_path / "busy", logical_block=SLOW_ONCE % CPU, block_offset="while True: pass"
    )
    competitors = [spinner(0, session=True) for _ in range(12)]
    try:
        start = time.monotonic()
        report = grade(1, folder, limits=Limits(check_seconds=1.0))
    finally:
        ended(*competitors)
    outcomes = {r.name: (r.outcome, r.message) for r in report.results}
    assert outcomes["logical_block"] == (PASS, ""), outcomes["logical_block"]
    assert outcomes["block_offset"][0] == FAIL
    assert outcomes["block_offset"][1].startswith("still running after 1 s")
    assert time.monotonic() - start < 60
