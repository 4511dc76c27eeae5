"""A student's code at work for the TUI (``minipaged.grader.student_run``): recorded in a grading
child under the grader's limits, each step within the per-criterion time, with the events their
code leaves out derived from what it returned (``minipaged.grader.witness``); and the TUI's
replay of it, whose error stays on screen until dismissed.
"""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest
from rich.console import Console

from minipaged.block_manager import AppendResult, BlockManager
from minipaged.block_table import BlockTable
from minipaged.grader.exercises import EXERCISES, TUI_EXERCISES, TUTORIALS
from minipaged.grader.grading import Limits, grade
from minipaged.grader.student_run import RecordedRun, asked_for, record
from minipaged.grader.witness import witnessed
from tests.stuck import eventually
from tests.test_grader_integrity import _alive
from tui.app import PagedApp
from tui.invariants_view import InvariantsView
from tui.scenarios import SCENARIOS
from tui.student_error import StudentError

SIZE = (120, 40)


@pytest.fixture
def anyio_backend():
    return "asyncio"


TODO_04 = 'raise NotImplementedError("exercise 04: reserve the slot for token t, copying on write")'
APPEND_SLOT = """table = self.table(seq)
        if table.pool == "host":
            raise ValueError(f"seq {seq} is swapped out: no device block to write")
        t = table.num_tokens
        j, o = divmod(t, self.block_size)
        cow = None
        if o == 0:
            table.blocks.append(self.device.allocate())
        elif self.device.refcount(table.blocks[j]) > 1:
            new = self.device.allocate()
            cow = (table.blocks[j], new)
            self.device.decref(table.blocks[j])
            table.blocks[j] = new
        table.num_tokens += 1
        return AppendResult(table.blocks[j] * self.block_size + o, cow)"""
"""Exercise 04 as a student who passes writes it: right tables and refcounts, no events."""


def starter_04(folder: Path, code: str) -> Path:
    source = (TUTORIALS / EXERCISES[4].folder / "starter" / "block_manager.py").read_text()
    assert TODO_04 in source
    folder.mkdir(exist_ok=True)
    (folder / "block_manager.py").write_text(source.replace(TODO_04, code))
    return folder


def parallel(number: int, folder: Path | None, limits: Limits | None = None):
    scenario = SCENARIOS["parallel"]
    requests = [(r.prompt, r.params) for r in scenario.requests]
    return record(number, folder, folder is None, "parallel", scenario.config, requests, limits)


def kinds(run) -> dict[str, int]:
    counted: dict[str, int] = {}
    for step in run.trace.steps:
        for event in step.events:
            counted[event.kind] = counted.get(event.kind, 0) + 1
    return counted


@pytest.fixture(scope="module")
def solution_run():
    return parallel(4, None)


@pytest.fixture(scope="module")
def eventless_run(tmp_path_factory):
    folder = starter_04(tmp_path_factory.mktemp("ex04"), APPEND_SLOT)
    assert grade(4, folder).passed  # passes every check, and records no event itself
    return parallel(4, folder)


@pytest.fixture(scope="module")
def starter_run():
    return parallel(4, EXERCISES[4].starter)


def test_a_passing_solution_that_records_no_events_shows_what_it_did(solution_run, eventless_run):
    """30 §2: the student's copy-on-write shows as the library's does: the same events, so
    the counters count it and c finds it."""
    assert eventless_run.error is None
    assert kinds(eventless_run)["cow-copy"] == 3
    assert kinds(eventless_run) == kinds(solution_run)
    assert [s.events for s in eventless_run.trace.steps] == [
        s.events for s in solution_run.trace.steps
    ]


def test_the_untouched_starter_names_the_function_to_write(starter_run):
    assert starter_run.unwritten and starter_run.step == 2  # the prefill ran; the decode did not
    assert starter_run.error.startswith("not written yet: exercise 04: reserve the slot")
    assert "(block_manager.py, line" in starter_run.error
    assert "asks you to write BlockManager.append_slot in block_manager.py" in starter_run.error
    assert len(starter_run.trace.steps) == 1


def test_asked_for_names_every_graded_function_and_its_file():
    assert asked_for(5) == (
        "BlockManager.swap_out in block_manager.py, BlockManager.swap_in in block_manager.py "
        "and Scheduler._preempt in scheduler.py"
    )


def test_a_step_that_never_ends_is_stopped_and_what_it_started_ends_with_the_run(tmp_path):
    """One run, two proofs: the step is stopped at the per-step limit, and the process it left
    behind is ended with the run. The limit is 3 s: the parallel scenario's whole run of 20
    steps, the child's start included, took 1.8 s, so its first step, which must finish, has
    more than ten times what it needs, and the test waits 3 s instead of 10."""
    # The process left behind runs until this test's process ends (tail --pid), not for a
    # time: a sleep of 192.5 s ended on its own within the wait below once the run took over
    # 72 s, and a run that left it behind passed. Whatever the grader leaves, the test ends.
    left = ["tail", "-f", f"--pid={os.getpid()}", "/dev/null"]
    marker = "\0".join(left)
    holder = (
        f"import subprocess, sys, time; subprocess.Popen({left!r}, stdout=sys.stdout, "
        "stderr=sys.stderr); time.sleep(3600)"
    )
    try:
        start = time.monotonic()
        run = parallel(4, starter_04(tmp_path, holder), Limits(check_seconds=3.0))
        assert time.monotonic() - start < 90  # the model's import has its own clock
        assert run.error.startswith("your code ran past 3 s: is there a loop that never ends")
        assert run.step == 2 and len(run.trace.steps) == 1
        eventually(lambda: _alive(marker) == [], "the process the step started was still running")
    finally:
        for pid in _alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_copy_of_the_library_is_refused_before_it_runs(tmp_path):
    library = Path(__import__("minipaged.block_manager").block_manager.__file__)
    (tmp_path / "block_manager.py").write_text(library.read_text())
    run = parallel(4, tmp_path)
    assert "is a copy of the library's" in run.error and run.trace.steps == []


def test_the_tui_runs_exactly_the_exercises_that_declare_it():
    assert sorted(TUI_EXERCISES) == [2, 3, 4, 5, 12]
    assert {run.scenario for run in TUI_EXERCISES.values()} <= set(SCENARIOS)


@pytest.mark.anyio
async def test_a_students_error_stays_whole_until_dismissed(starter_run):
    """33 §5: the error is shown in full (not cut at the terminal's width), survives keys
    other than enter and escape, and the invariants pane says the run stopped."""
    app = PagedApp(trace=starter_run.trace, stopped=starter_run)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, StudentError)
        shown = str(app.screen.query_one("#student-error").render())
        for line in starter_run.error.removeprefix("not written yet: ").splitlines():
            assert " ".join(line.split()) in " ".join(shown.split())
        assert "minipaged exercises init 4 ex04" in shown
        assert "minipaged tui --exercise 4 --solution" in shown
        await pilot.press("n", "b", "c")
        assert isinstance(app.screen, StudentError)
        await pilot.press("escape")
        assert not isinstance(app.screen, StudentError)
        console = Console(file=io.StringIO(), width=200, record=True)
        console.print(app.query_one(InvariantsView).draw(app.timeline.frame(), 200))
        invariants = console.export_text()
        assert "✗ your code is not written yet (step 2)" in invariants


@pytest.mark.anyio
async def test_a_run_stopped_before_its_first_step_shows_only_the_message(tmp_path):
    """The file fails to import only where torch is not loaded yet: the run's child loads the
    student's files before the library's engine imports torch, as a grading child does, so a
    file that imports only after torch (in this test process, torch is) fails here as it
    fails ``exercises check``."""
    folder = starter_04(tmp_path, "pass")
    (folder / "block_manager.py").write_text(
        (folder / "block_manager.py").read_text()
        + "\nimport sys\nif 'torch' not in sys.modules:\n    raise ValueError('at import')\n"
    )
    run = parallel(4, folder)
    assert run.trace.steps == [] and "ValueError: at import" in run.error
    app = PagedApp(trace=run.trace, stopped=run)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, StudentError) and app.error is None
        assert "No step ran" in str(app.screen.query_one("#student-error").render())


@pytest.mark.anyio
async def test_the_students_copy_on_write_is_found_by_c(eventless_run):
    app = PagedApp(trace=eventless_run.trace, stopped=eventless_run)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.stopped is None and not isinstance(app.screen, StudentError)
        await pilot.press("c")
        await pilot.pause()
        assert "cow-copy" in {event.kind for event in app.timeline.frame().step.events}
        assert "parallel" in str(app.query_one("#status").render())


class Silent(BlockManager):
    """Every block-manager method the exercises ask for, written as a student who passes
    writes it: the right tables and refcounts, and no events."""

    def append_slot(self, seq, token_ids=None):
        table = self.table(seq)
        j, o = divmod(table.num_tokens, self.block_size)
        cow = None
        if o == 0:
            table.blocks.append(self.device.allocate())
        elif self.device.refcount(table.blocks[j]) > 1:
            cow = (table.blocks[j], self.device.allocate())
            self.device.decref(cow[0])
            table.blocks[j] = cow[1]
        table.num_tokens += 1
        return AppendResult(table.blocks[j] * self.block_size + o, cow)

    def fork(self, parent, child):
        source = self.table(parent)
        for block in source.blocks:
            self.device.incref(block)
        self.tables[child] = BlockTable(self.block_size, list(source.blocks), source.num_tokens)
        return self.tables[child]

    def free(self, seq):
        table = self.tables.pop(seq)
        pool = self.device if table.pool == "device" else self.host
        for block in reversed(table.blocks):
            pool.decref(block)

    def swap_out(self, seqs):
        return self.move(seqs, self.device, self.host, "host")

    def swap_in(self, seqs):
        return self.move(seqs, self.host, self.device, "device")

    def move(self, seqs, src, dst, pool):
        moved = {}
        for seq in seqs:
            table = self.table(seq)
            for block in table.blocks:
                if block in moved:
                    dst.incref(moved[block])
                else:
                    moved[block] = dst.allocate()
            for block in reversed(table.blocks):
                src.decref(block)
            table.blocks, table.pool = [moved[b] for b in table.blocks], pool
        return list(moved.items())


def program(manager) -> list[list]:
    """A prefill, a fork, copies on write, a block filled, a swap out and in, and frees: the
    events after each call."""
    calls = [
        lambda: manager.allocate(0, 6),
        lambda: manager.fork(0, 1),
        lambda: manager.fork(0, 2),
        lambda: manager.append_slot(1),
        lambda: manager.append_slot(0),
        lambda: manager.append_slot(1),
        lambda: manager.append_slot(1),
        lambda: manager.swap_out([0, 2]),
        lambda: manager.swap_in([0, 2]),
        lambda: manager.free(2),
        lambda: manager.free(1),
        lambda: manager.free(0),
    ]
    seen = []
    for call in calls:
        call()
        seen.append(manager.pop_events())
    return seen


def test_the_witness_records_what_the_library_records_for_a_student_who_records_nothing():
    """An oracle: the library's manager's events, call by call."""
    library = program(BlockManager(8, 8, block_size=4, watermark=0.0))
    assert {e.kind for events in library for e in events} >= {
        "fork",
        "cow-copy",
        "swap-out",
        "swap-in",
        "free",
        "decref",
        "alloc",
    }
    assert program(Silent(8, 8, block_size=4, watermark=0.0))[3] == []  # silent indeed
    assert program(witnessed(Silent)(8, 8, block_size=4, watermark=0.0)) == library


def test_the_witness_never_doubles_events_the_code_records_itself():
    library = program(BlockManager(8, 8, block_size=4, watermark=0.0))
    assert program(witnessed(BlockManager)(8, 8, block_size=4, watermark=0.0)) == library


def test_snapshot_of_code_not_written_yet_at_80_by_24(snap_compare):
    """29 §3: one screen naming the function to write, how to start, and --solution."""
    from minipaged.trace import Trace

    error = (
        "not written yet: exercise 03: give the child T_parent and raise each R[p] by one "
        "(block_manager.py, line 38)\nExercise 03 asks you to write BlockManager.fork in "
        "block_manager.py and BlockManager.free in block_manager.py."
    )
    header = {"model": "tiny", "scenario": "beam search, K = 4 [exercise 03]"}
    stopped = RecordedRun(3, Trace(header, []), error, unwritten=True, step=1)
    app = PagedApp(trace=stopped.trace, stopped=stopped)
    app.animation_level = "none"
    assert snap_compare(app, terminal_size=(80, 24))
