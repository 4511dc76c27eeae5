"""Lecture controls: jump back to the previous event of a kind (C, W, P, H), go to step N (g)
and the bad numbers typed into it while a live run is shown, and the README's key table, which
lists every key the app binds.

Jumps and go-to-step move the cursor over a run recorded to its end, the same live or
replayed, so those tests replay a run recorded once per test process (``tests/tui_runs.py``);
the bad numbers typed while the model still runs are tried on the live app."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.widgets import Input

from minipaged.checkpoint import model_directory
from tests.tui_runs import replaying, until, whole_run
from tui import keymap
from tui.app import PagedApp
from tui.go_to_step import GoToStep
from tui.navigator import JUMPS
from tui.scenarios import SCENARIOS

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (model_directory("tiny") / "model.safetensors").is_file(),
        reason="the embedded tiny model is not built (python -m minipaged.train)",
    ),
]
SIZE = (120, 40)
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def steps_with(app: PagedApp, name: str) -> list[int]:
    kinds = JUMPS[name][1]
    return [
        i
        for i in range(app.timeline.recorded + 1)
        if any(e.kind in kinds for e in app.timeline.frame(i).step.events)
    ]


async def test_a_capital_letter_jumps_back_to_the_previous_event_of_its_kind():
    async with replaying("swap").run_test(size=SIZE) as pilot:
        app = await whole_run(pilot)
        swaps = steps_with(app, "swap")
        assert len(swaps) >= 2  # out, then in
        app.seek_step(app.timeline.recorded)
        await pilot.pause()
        for expected in reversed(swaps):
            await pilot.press("W")
            assert app.timeline.cursor == expected
        await pilot.press("W")
        assert app.timeline.cursor == swaps[0]
        assert app.notice == f"no swap before step {swaps[0]}"
        await pilot.press("w")
        assert app.timeline.cursor == swaps[1]  # forward again from there


async def test_a_jump_back_with_none_before_says_so_and_stays():
    async with replaying("several").run_test(size=SIZE) as pilot:
        app = await whole_run(pilot)
        app.seek_step(3)
        await pilot.pause()
        for key, what in (("C", "copy-on-write"), ("W", "swap"), ("P", "preemption")):
            await pilot.press(key)
            assert (app.timeline.cursor, app.notice) == (3, f"no {what} before step 3")


async def test_g_goes_to_the_step_typed_and_refuses_one_past_the_run():
    async with replaying("parallel").run_test(size=SIZE) as pilot:
        app = await whole_run(pilot)
        await pilot.press("g")
        assert isinstance(app.screen, GoToStep)
        await pilot.press("1", "2", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, GoToStep)
        assert app.timeline.cursor == 12
        await pilot.press("g")
        await pilot.press(*str(app.timeline.recorded + 1), "enter")
        assert isinstance(app.screen, GoToStep)  # asked again, saying why
        box = app.screen.query_one(Input)
        assert box.border_title.startswith(f"no step {app.timeline.recorded + 1};")
        await pilot.press("escape")
        assert not isinstance(app.screen, GoToStep)
        assert app.timeline.cursor == 12


async def test_bad_step_numbers_are_asked_again_and_the_live_run_goes_on():
    async with PagedApp(SCENARIOS["several"]).run_test(size=SIZE) as pilot:
        app = pilot.app
        await until(pilot, lambda: app.navigator is not None, "the model did not load")
        await pilot.press("n", "n")
        cursor = app.timeline.cursor
        await pilot.press("g")
        for typed in ("-", "-3", "", "+", "-12"):  # what an integer box lets one type
            await pilot.press(*typed, "enter")
            assert isinstance(app.screen, GoToStep), f"{typed!r} was taken"
            box = app.screen.query_one(Input)
            assert box.border_title.startswith("no step "), box.border_title
            assert box.value == ""
        await pilot.press("escape")
        assert app.timeline.cursor == cursor and app.error is None
        await pilot.press("n")
        await until(pilot, lambda: app.navigator.waiting is None, "the run stopped")
        assert app.timeline.cursor == cursor + 1


def test_the_readme_key_table_lists_every_key_the_app_binds():
    table = "\n".join(line for line in README.read_text().splitlines() if line.startswith("| `"))
    shown = set(re.findall(r"`([^`]+)`", table))
    for key in keymap.KEYMAP:
        for display in key.display.split(" or "):
            assert display in shown, f"README's key table has no `{display}` ({key.description})"
