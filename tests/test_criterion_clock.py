"""A criterion's time: a busy machine slows a right answer without failing it, while code that
waits or computes forever is still stopped (``minipaged.grader.criterion_clock``).

A busy machine is made with competitors that spin on one CPU, the code under test pinned to that
CPU. Linux counts a thread's wait when the thread next gets the CPU, so in the unit tests the
code under test shares the CPU evenly (a quarter of it, against three competitors) rather than
at the lowest priority, where its count could lag by a whole fraction of a second. Against the
grader, the grading child runs in a session of its own, and Linux may share a CPU between
sessions before it looks at niceness (autogroup scheduling), so the competitors each take a
session of their own too. There the code under test keeps niceness 0: a session's share of a CPU
is divided by the recent load of all its processes, on every CPU, so a niceness-19 thread whose
session had just run a process elsewhere was left a share so small (about 15 / 1,039 of its
session's) that it went half a second without running, and without its wait being counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minipaged.grader import criterion_clock
from minipaged.grader.criterion_clock import CriterionClock, waited
from minipaged.grader.grading import Limits, grade
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


def test_waited_counts_a_starved_thread_s_wait_and_not_a_sleeper_s():
    """Linux updates a thread's count when the thread next gets a CPU, so the starved one gets
    a quarter of a CPU (not a few per cent): it is counted within a few milliseconds."""
    sleeper = subprocess.Popen(["sleep", "60"])
    *competitors, starved = (spinner(0) for _ in range(4))
    try:
        before = waited(f"/proc/{starved.pid}/schedstat"), waited(f"/proc/{sleeper.pid}/schedstat")
        time.sleep(0.5)
        assert waited(f"/proc/{starved.pid}/schedstat") - before[0] > 0.25
        assert waited(f"/proc/{sleeper.pid}/schedstat") - before[1] < 0.05
        assert waited("/proc/no-such-process/schedstat") == 0.0
    finally:
        ended(sleeper, *competitors, starved)


def test_code_that_waits_is_stopped_at_its_seconds():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        clock = CriterionClock(0.2, sleeper.pid)
        assert not clock.expired()
        time.sleep(0.3)
        assert clock.expired()
    finally:
        ended(sleeper)


def test_starved_code_runs_on_until_it_has_had_its_seconds_on_a_cpu(monkeypatch):
    """Once the competitors end, it is stopped when it has had its seconds on the CPU, however
    long the rest of a loaded machine makes that take (the stretch lifted: not what is tested)."""
    monkeypatch.setattr(criterion_clock, "STRETCH", 100.0)
    *competitors, starved = (spinner(0) for _ in range(4))  # a quarter of one CPU each
    try:
        clock = CriterionClock(0.3, starved.pid)
        time.sleep(0.45)  # 1.5 times its seconds of wall-clock time, about 0.11 s on the CPU
        assert not clock.expired(), "a runnable process that got little CPU was stopped"
        ended(*competitors)  # the CPU it is owed runs out
        while not clock.expired():
            time.sleep(0.02)
        assert time.monotonic() < clock.last_moment
    finally:
        ended(*competitors, starved)


def test_a_wait_not_yet_counted_is_credited_while_it_lasts(monkeypatch):
    """Linux adds a wait to a thread's count only when the thread next runs, so one kept off its
    CPU for long (here by the idle policy, beside three competitors) shows no wait at all
    meanwhile. Two looks that see it runnable with no CPU time between them credit the time
    between them: it is not stopped while it waits, and is once it has had its seconds on the
    CPU (the stretch lifted, so that a loaded machine's share of that CPU is credited, not
    capped)."""
    monkeypatch.setattr(criterion_clock, "STRETCH", 100.0)
    *competitors, starved = (spinner(0) for _ in range(4))
    os.sched_setscheduler(starved.pid, os.SCHED_IDLE, os.sched_param(0))
    try:
        time.sleep(0.1)  # its last slice, if it had one, is behind it
        clock = CriterionClock(0.3, starved.pid)
        while time.monotonic() < clock.start + 0.9:  # three times its seconds
            assert not clock.expired(), "a thread waiting for a CPU was stopped"
            time.sleep(0.02)
        ended(*competitors)
        os.sched_setscheduler(starved.pid, os.SCHED_OTHER, os.sched_param(0))
        while not clock.expired():  # it has its 0.3 s on the CPU
            time.sleep(0.02)
        assert time.monotonic() < clock.last_moment
    finally:
        ended(*competitors, starved)


STARVED_BY_ITS_OWN = """
import hashlib, os, subprocess, sys, threading
competition, cpu = sys.argv[1], int(sys.argv[2])
os.sched_setaffinity(0, {cpu})
data = bytes(1 << 24)
def spin():
    while True:
        hashlib.sha256(data).digest()  # computes without the GIL: a CPU, not a lock, is shared
for _ in range(7 if competition == "threads" else 3):
    if competition == "threads":
        threading.Thread(target=spin, daemon=True).start()
    else:
        subprocess.Popen([sys.executable, "-c", "while True: pass"])  # inherits the CPU
sys.stdout.write("on\\n"); sys.stdout.flush()
whole = bytes(1 << 28)
while True:  # one long call without the GIL: this thread waits for a CPU, never for the lock
    hashlib.sha256(whole).digest()
"""


@pytest.mark.parametrize("competition", ["threads", "processes"])
def test_waiting_for_its_own_threads_or_processes_earns_no_time(competition):
    """The main thread of ``worker`` waits for a CPU its own spinners hold: that wait is not
    credited (threads: their CPU time is taken off; processes: none is credited while they
    run), so the clock ends at its seconds, where a competitor outside would have stretched it
    (``test_starved_code_runs_on_until_it_has_had_its_seconds_on_a_cpu``). Other sessions busy
    on the same CPU (a loaded machine) are credited, rightly: Linux shares the CPU between
    sessions first, so with G of them the worker's threads get 1 / (1 + G) of it and G / (1 + G)
    of the time is credited, under the 3/4 the test allows (0.6 of its 0.8 s) while G < 3; a
    clock crediting the main thread's whole wait would credit 7/8 of it on a quiet machine."""
    worker = subprocess.Popen(
        [sys.executable, "-c", STARVED_BY_ITS_OWN, competition, str(CPU)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline() == "on\n"
        clock = CriterionClock(0.2, worker.pid)
        before = waited(f"/proc/{worker.pid}/schedstat")
        time.sleep(0.8)
        assert waited(f"/proc/{worker.pid}/schedstat") - before > 0.3, "it was not starved"
        assert clock.expired()
    finally:
        for pid in (
            p for t in os.listdir(f"/proc/{worker.pid}/task") for p in _children(worker.pid, t)
        ):
            os.kill(pid, 9)
        ended(worker)


def _children(pid: int, thread: str) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{thread}/children").read_text().split()]


def _grader_works(seconds: float) -> None:
    """The checks' thread computes for ``seconds`` of its own CPU time (an expected value, a
    hypothesis example, a Numba compile), however long a loaded machine makes that take."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("with_worker", (False, True), ids=("checks-only", "beside-a-worker"))
def test_the_graders_own_work_is_not_the_students_time(with_worker, monkeypatch):
    """The grader computing for three times a criterion's seconds, while the student's code
    waits (a worker that sleeps), leaves the criterion its time; sleeping past it afterwards
    still ends it. No wall-clock allowance: the credit is the checks' thread's own time. The
    stretch is lifted: 0.6 s of the grader's CPU takes over ``STRETCH`` x 0.2 s of wall-clock
    time on two cores shared by five busy processes, and that cap is another test's subject
    (``test_nothing_runs_past_the_stretch``)."""
    monkeypatch.setattr(criterion_clock, "STRETCH", 1000.0)
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; print('on', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sleeper.stdout.readline() == "on\n"  # started: its own start is not waited for
        clock = CriterionClock(0.2, sleeper.pid if with_worker else None)
        _grader_works(0.6)
        assert not clock.expired(), "the grader's own CPU time was charged to the student"
        time.sleep(0.3)
        assert clock.expired()
    finally:
        ended(sleeper)


def test_nothing_runs_past_the_stretch(monkeypatch):
    monkeypatch.setattr(criterion_clock, "STRETCH", 2.0)
    *competitors, starved = (spinner(0) for _ in range(4))
    try:
        clock = CriterionClock(0.2, starved.pid)
        time.sleep(0.25)
        assert not clock.expired()
        time.sleep(0.2)
        assert clock.expired()
    finally:
        ended(*competitors, starved)


SLOW_ONCE = (
    "global SLOW\n"
    "    if 'SLOW' not in globals():\n"
    "        SLOW = 1; import os; ALL = os.sched_getaffinity(0)\n"
    "        os.sched_setaffinity(0, {%d})\n"
    "        sum(range(9_000_000))  # about 0.3 s of CPU, seconds of wall time when starved\n"
    "        os.sched_setaffinity(0, ALL)  # the other criteria run at full speed\n"
    "    return t // block_size"
)


def test_a_right_answer_on_a_busy_machine_passes_and_a_loop_still_fails(tmp_path, monkeypatch):
    """With its 1 s spent waiting for a CPU the competitors hold, the right answer passes (its
    seconds are CPU time while it is runnable); an endless loop beside it still fails.

    Its share of the CPU is between 1/13 (12 competitors) and about 1/26 (its session's load
    elsewhere counted against it, and the rest of the machine's), so its 0.3 s of CPU take 4 to
    8 s: over ``STRETCH``'s 10 s on a slower, loaded machine. The stretch is a cap for code that
    is starved for good, not what this test is about, so it is lifted here."""
    monkeypatch.setattr(criterion_clock, "STRETCH", 40.0)
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
    assert outcomes["block_offset"][1].startswith("your code ran past 1 s in block_offset:")
    assert time.monotonic() - start < 60


def test_the_grading_childs_own_work_is_not_the_students_time(tmp_path, monkeypatch):
    """Decoding a call's arguments is the grading child's work, not the student's: calls whose
    arguments take the child 1.5 times the criterion's seconds of CPU to decode leave the
    criterion its time (``CriterionClock.credit_harness``); a call that then sleeps past it is
    still stopped. No wall-clock allowance: the credit is the child's own CPU time (the stretch
    lifted, since the grader's encoding of those arguments, credited too, takes as long). A
    clock started within the criterion (hypothesis's shrinking) is credited alike."""
    from minipaged.grader.proxies import Proxy, RemoteStudent
    from minipaged.grader.remote import GradingChild
    from minipaged.grader.time_limit import TimeLimitExceeded

    monkeypatch.setattr(criterion_clock, "STRETCH", 1000.0)
    body = "import time; time.sleep(t) if type(t) is float else None; return 0"
    folder = submission(tmp_path / "own", logical_block=body)
    child = GradingChild(1, "process", folder.resolve(), Limits(check_seconds=0.3), Proxy)
    try:
        child.start()
        student = RemoteStudent(child)
        logical_block = student.memory.logical_block
        child.start_clock()
        shrinking = student.clock(0.3)  # hypothesis's, within the criterion: credited alike
        tuples = [(i,) for i in range(20_000)]  # a tag each: decoded value by value
        for _ in range(1000):
            assert logical_block(tuples, 16) == 0  # the deadline passed here, uncredited
            if child.clock.harness >= 1.5 * 0.3:
                break
        assert child.clock.harness >= 1.5 * 0.3
        assert shrinking.harness == child.clock.harness and not shrinking.expired()
        with pytest.raises(TimeLimitExceeded):
            logical_block(30.0, 16)
    finally:
        child.close()


def test_a_grading_childs_start_is_not_the_submissions_time(monkeypatch):
    """``--time-limit`` (``Limits.wall_seconds``) is the submission's: a child that takes
    longer than all of it to start (Python and the library importing, before any student code
    runs; here a wrapper that sleeps first) leaves it whole for the student's code, and the
    submission still has a deadline."""
    from minipaged.grader.proxies import Proxy, RemoteStudent
    from minipaged.grader.remote import GradingChild

    real = GradingChild.command

    def slow_start(self, channel=(-1, -1), notices=-1):
        return ["sh", "-c", 'sleep 1.5; exec "$@"', "sh", *real(self, channel, notices)]

    monkeypatch.setattr(GradingChild, "command", slow_start)
    child = GradingChild(1, "process", None, Limits(wall_seconds=1.0), Proxy)
    try:
        child.wall_deadline = deadline = time.monotonic() + child.limits.wall_seconds
        began = time.monotonic()
        child.start()  # the library's modules load: the grader's time, not the submission's
        took = time.monotonic() - began
        moved = child.wall_deadline - deadline
        assert 1.5 <= moved <= took, "the start was charged to the submission's time"
        assert RemoteStudent(child).memory.logical_block(35, 16) == 2
    finally:
        child.close()
