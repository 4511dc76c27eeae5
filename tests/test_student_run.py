"""A student's code at work for the TUI (``minipaged.grader.student_run``): recorded in a grading
child under the grader's limits, each step within the per-criterion time, with the events their
code leaves out derived from what it returned (``minipaged.grader.witness``); and the TUI's
replay of it, whose error stays on screen until dismissed.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from rich.console import Console

from minipaged.grader.exercises import EXERCISES, TUI_EXERCISES, TUTORIALS
from minipaged.grader.grading import Limits, grade
from minipaged.grader.student_run import asked_for, record
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


def test_a_step_that_never_ends_is_stopped_within_the_per_step_limit(tmp_path):
    folder = starter_04(tmp_path, '__import__("time").sleep(3600)')
    start = time.monotonic()
    run = parallel(4, folder, Limits(check_seconds=10.0))
    assert time.monotonic() - start < 90  # the model's import has its own clock
    assert run.error.startswith("still running after 10 s: is there a loop that never ends?")
    assert run.step == 2 and len(run.trace.steps) == 1


def test_a_process_left_behind_ends_with_the_run(tmp_path):
    holder = (
        "import subprocess, sys, time; subprocess.Popen(['sleep', '92.5'], stdout=sys.stdout, "
        "stderr=sys.stderr); time.sleep(3600)"
    )
    run = parallel(4, starter_04(tmp_path, holder), Limits(check_seconds=10.0))
    assert "still running after 10 s" in run.error
    time.sleep(0.5)
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if b"92.5" in _read(p)]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


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
    folder = starter_04(tmp_path, "pass")
    (folder / "block_manager.py").write_text(
        (folder / "block_manager.py").read_text() + "\nraise ValueError('at import')\n"
    )
    run = parallel(4, folder)
    assert run.trace.steps == [] and "ValueError" in run.error
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
