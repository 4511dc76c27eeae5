"""The step-through visualizer, driven through Textual's Pilot on the embedded tiny model.

Every app here runs a real engine in its thread worker; the scenarios sample with fixed seeds,
so each run is the same every time.
"""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest
from rich.console import Console
from textual.command import CommandList
from textual.widgets import Static

from minipaged import trace
from minipaged.block_state import BlockState, TableState
from minipaged.checkpoint import model_directory
from tests.stuck import STUCK_AFTER_S
from tests.tui_runs import settled, until
from tui import keymap
from tui.app import PagedApp
from tui.feed import StepFeed
from tui.help import HelpScreen
from tui.navigator import Navigator
from tui.pane import Pane, Selection
from tui.picker import ScenarioPicker
from tui.pool_view import MAX_ROWS, PoolView, pool_grid
from tui.scenarios import SCENARIOS
from tui.timeline import Timeline

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (model_directory("tiny") / "model.safetensors").is_file(),
        reason="the embedded tiny model is not built (python -m minipaged.train)",
    ),
]
SIZE = (120, 40)


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def started(pilot) -> PagedApp:
    app = pilot.app
    await until(pilot, lambda: app.navigator is not None)
    return app


async def at_step(pilot, index: int) -> None:
    app = pilot.app
    app.seek_step(index)
    await until(pilot, lambda: app.navigator.waiting is None)
    await pilot.pause()  # let the layout follow the new frame
    assert app.timeline.cursor == min(index, app.timeline.recorded)


def panes(app: PagedApp) -> dict[str, str]:
    """Every pane as styled text (ANSI), at its current size: what the user sees in it."""
    shown = {}
    for pane in app.query(Pane):
        console = Console(
            file=io.StringIO(), width=pane.content_size.width, force_terminal=True, record=True
        )
        console.print(pane.render())
        shown[pane.id] = console.export_text(styles=True)
    return shown


async def test_stepping_forward_then_back_restores_the_identical_view():
    async with PagedApp(SCENARIOS["parallel"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await at_step(pilot, 2)
        before, frame = panes(app), app.timeline.frame()
        for _ in range(6):
            await pilot.press("n")
            await settled(pilot)
        assert app.timeline.cursor == 8
        recorded = app.timeline.recorded
        for _ in range(3):
            await pilot.press("b")
        for _ in range(3):
            await pilot.press("left")
        assert app.timeline.cursor == 2
        assert app.timeline.frame() is frame
        assert panes(app) == before
        assert app.timeline.recorded >= recorded  # back only reads what was recorded


async def test_the_model_thread_computes_the_whole_run_ahead_without_a_key_press():
    async with PagedApp(SCENARIOS["several"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await until(pilot, lambda: app.timeline.finished)
        assert app.timeline.cursor == 0
        assert app.timeline.recorded > 10


async def test_play_advances_and_pause_stops():
    async with PagedApp(SCENARIOS["several"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await pilot.press("plus", "plus", "plus")  # 16 steps/s
        await pilot.press("space")
        await until(pilot, lambda: app.timeline.cursor >= 3)
        await pilot.press("space")
        assert app.player is None
        stopped = app.timeline.cursor
        await pilot.pause(0.5)
        assert app.timeline.cursor == stopped


async def test_play_stops_by_itself_at_the_end_of_the_run():
    async with PagedApp(SCENARIOS["parallel"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await at_step(pilot, 10**6)  # the last step
        last = app.timeline.cursor
        await at_step(pilot, last - 1)
        await pilot.press("space")
        await until(pilot, lambda: app.player is None)
        assert app.timeline.cursor == last
        assert "the run ended" in app.notice


async def test_the_scenario_picker_switches_the_run():
    async with PagedApp(SCENARIOS["several"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        old = app.feed
        await pilot.press("n", "s")
        assert isinstance(app.screen, ScenarioPicker)
        await pilot.press("n")  # keys belong to the picker while it is open
        names = list(app.scenarios)
        await pilot.press(*["down"] * (names.index("swap") - names.index("several")), "enter")
        app = await started(pilot)
        assert app.scenario.name == "swap"
        assert app.timeline.cursor == 0
        assert old.stopped.wait(STUCK_AFTER_S), "the previous run's thread is still working"


async def test_next_cow_lands_on_the_first_copy_on_write():
    async with PagedApp(SCENARIOS["parallel"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await pilot.press("c")
        await settled(pilot)
        cursor = app.timeline.cursor
        assert "cow-copy" in {event.kind for event in app.timeline.frame().step.events}
        assert all(
            "cow-copy" not in {e.kind for e in app.timeline.frame(i).step.events}
            for i in range(cursor)
        )


async def test_swap_and_preemption_jumps_land_on_their_events():
    async with PagedApp(SCENARIOS["swap"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await pilot.press("p")
        await settled(pilot)
        assert "preempt" in {event.kind for event in app.timeline.frame().step.events}
        await pilot.press("w")
        await settled(pilot)
        kinds = {event.kind for event in app.timeline.frame().step.events}
        assert kinds & {"swap-out", "swap-in"}


async def test_prefix_jump_lands_on_a_prefix_cache_hit():
    async with PagedApp(SCENARIOS["prefix"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await pilot.press("h")
        await settled(pilot)
        assert "prefix-hit" in {event.kind for event in app.timeline.frame().step.events}


async def test_prefix_jump_in_a_run_without_a_cache_says_there_are_no_hits():
    async with PagedApp(SCENARIOS["several"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await pilot.press("h")
        await settled(pilot)
        assert app.timeline.cursor == 0
        assert app.notice.startswith("no prefix hits in this run; the 'prefix'")


async def test_quitting_stops_the_model_thread():
    app = PagedApp(SCENARIOS["several"])
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        feed = app.feed
        await pilot.press("q")
    assert feed.stopped.wait(STUCK_AFTER_S), "the model thread kept running after quit"
    assert app.worker.is_cancelled


async def test_a_terminal_too_small_says_so_and_recovers_on_resize():
    async with PagedApp(SCENARIOS["several"]).run_test(size=(60, 20)) as pilot:
        app = await started(pilot)
        message = app.query_one("#too-small")
        assert message.display and not app.query_one("#main").display
        assert "60×20" in str(message.content) and "80×24" in str(message.content)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.query_one("#main").display and not message.display
        await pilot.press("n")
        await settled(pilot)
        assert app.timeline.cursor == 1


async def test_trace_replay_shows_the_same_steps_as_the_live_run(tmp_path):
    engine = SCENARIOS["swap"].build()
    steps = []
    while engine.has_unfinished():
        steps.append(engine.step())
    path = tmp_path / "swap.jsonl"
    trace.save(path, {"model": "tiny", "engine": {"kv_cache": engine.kv_cache.summary()}}, steps)
    recorded = trace.load(path)
    live, replay = PagedApp(SCENARIOS["swap"]), PagedApp(trace=recorded, tokenizer=engine.tokenizer)
    async with live.run_test(size=SIZE) as live_pilot:
        await started(live_pilot)
        async with replay.run_test(size=SIZE) as replay_pilot:
            await started(replay_pilot)
            assert replay.timeline.recorded == len(steps) and replay.feed is None
            for index in (1, 9, len(steps) // 2, len(steps)):
                await at_step(live_pilot, index)
                await at_step(replay_pilot, index)
                assert live.timeline.frame().step == replay.timeline.frame().step
                assert panes(live) == panes(replay), f"step {index}"


async def test_the_invariants_panel_names_a_violation(tmp_path):
    engine = SCENARIOS["several"].build()
    step = engine.step()
    state = step.state
    leaked = state.device_free[0]
    refcounts = tuple(1 if b == leaked else r for b, r in enumerate(state.device_refcounts))
    broken = replace(step, state=replace(state, device_refcounts=refcounts))
    async with PagedApp(trace=trace.Trace({}, [step, broken])).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await at_step(pilot, 1)
        assert "✗" not in panes(app)["invariants"]
        await at_step(pilot, 2)
        shown = panes(app)["invariants"]
        assert "✗ refcount conservation" in shown and f"block {leaked}" in shown


async def test_a_damaged_trace_replays_its_good_steps_and_says_where_it_broke(tmp_path):
    engine = SCENARIOS["several"].build()
    steps = [engine.step() for _ in range(3)]
    path = tmp_path / "damaged.jsonl"
    trace.save(path, {"model": "tiny", "engine": {"kv_cache": engine.kv_cache.summary()}}, steps)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]) + "\n")
    recorded = trace.load(path)
    assert recorded.error and len(recorded.steps) == 2
    async with PagedApp(trace=recorded).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        assert app.timeline.recorded == 2
        assert app.notice == f"the trace ends early: {recorded.error}"


async def test_the_help_screen_lists_every_key_of_the_key_map():
    async with PagedApp(SCENARIOS["several"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        shown = ""
        for static in app.screen.query(Static):
            console = Console(file=io.StringIO(), width=100, record=True)
            console.print(static.content)
            shown += console.export_text()
        for key in keymap.KEYMAP:
            assert re.search(rf"{re.escape(key.display)} +{re.escape(key.description)}", shown)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


def test_the_bindings_follow_the_readme_key_table():
    keys = {binding.key: binding.action for binding in keymap.bindings()}
    assert keys["n"] == keys["right"] == "forward"
    assert keys["b"] == keys["left"] == "back"
    assert keys["space"] == "play"
    assert (keys["plus"], keys["minus"]) == ("faster", "slower")
    assert [keys[k] for k in "cwph"] == [
        "jump('cow')",
        "jump('swap')",
        "jump('preempt')",
        "jump('prefix')",
    ]
    assert (keys["r"], keys["s"], keys["question_mark"], keys["q"]) == (
        "restart",
        "scenarios",
        "help",
        "quit",
    )
    assert (keys["a"], keys["comma"], keys["full_stop"], keys["l"], keys["k"]) == (
        "attention",
        "walk(-1)",
        "walk(1)",
        "layer",
        "head",
    )
    assert PagedApp.COMMAND_PALETTE_BINDING == "ctrl+p"


async def test_the_command_palette_offers_the_jumps():
    async with PagedApp(SCENARIOS["parallel"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"next copy-on-write")
        hits = app.screen.query_one(CommandList)  # the palette searches in a worker

        def found() -> bool:
            first = hits.get_option_at_index(0).prompt if hits.option_count else ""
            return "copy-on-write" in str(first)

        await until(pilot, found)
        await pilot.press("enter")
        await until(pilot, lambda: app.timeline.cursor > 0)
        await settled(pilot)
        assert "cow-copy" in {event.kind for event in app.timeline.frame().step.events}


async def test_clicking_a_block_selects_it_in_every_pane():
    async with PagedApp(SCENARIOS["parallel"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await at_step(pilot, 1)
        # Row 2 of the pool pane is the device grid's first row; cell 0 spans columns 0-3.
        await pilot.click(PoolView, offset=(4, 2))
        assert app.selection == Selection(block=0)
        assert all(pane.selection == Selection(block=0) for pane in app.query(Pane))
        assert "selected: block 0" in str(app.query_one("#status").content)
        await pilot.click(PoolView, offset=(4, 2))
        assert app.selection == Selection()


def test_forward_presses_before_their_steps_exist_add_up():
    engine = SCENARIOS["several"].build()
    steps = [engine.step() for _ in range(3)]
    timeline = Timeline(engine.report())
    navigator = Navigator(timeline, StepFeed())
    for _ in range(3):
        assert not navigator.forward().moved
    timeline.record(steps[:2])
    assert not navigator.recorded().moved
    timeline.record(steps[2:])
    assert navigator.recorded().moved
    assert timeline.cursor == 3 and navigator.waiting is None


def test_a_pool_sized_for_real_memory_is_summarised_not_drawn_cell_by_cell():
    blocks = 5000
    state = BlockState(4, {0: TableState((4999,), 3, "device")}, (0,) * 4999 + (1,), (), (), ())
    grid = pool_grid(state, "device", set(), Selection(), width=60).plain.splitlines()
    assert [cell.split() for cell in grid[:-1]] == [["4999:1"]]  # only the block in use
    assert grid[-1] == f"free ({blocks - 1}): 0–{blocks - 2}"


def test_a_huge_pool_draws_at_most_max_rows_of_used_blocks_and_counts_the_rest():
    blocks = 8192
    refcounts = tuple(1 if p % 2 else 0 for p in range(blocks))
    state = BlockState(4, {}, refcounts, (), (), ())
    grid = pool_grid(state, "device", set(), Selection(), width=80).plain.splitlines()
    per_row = 80 // 8  # a 4-digit cell is 8 columns: space, mark, id, ':', R
    assert len(grid) == MAX_ROWS + 2
    assert grid[-2] == f"… {blocks // 2 - per_row * MAX_ROWS} more blocks in use not drawn"
    assert grid[-1].startswith(f"free ({blocks // 2}): 0, 2, 4")
