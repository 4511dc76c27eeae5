"""The TUI's one typed field, go to step (``g``), given bad values while a live run is shown:
each is said in the box and asked for again, and the run goes on where it was."""

from __future__ import annotations

import time

import pytest
from textual.widgets import Input

from minipaged.checkpoint import model_directory
from tui.app import PagedApp
from tui.go_to_step import GoToStep
from tui.scenarios import SCENARIOS

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (model_directory("tiny") / "model.safetensors").is_file(),
        reason="the embedded tiny model is not built (python -m minipaged.train)",
    ),
]


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_bad_step_numbers_are_asked_again_and_the_live_run_goes_on():
    async with PagedApp(SCENARIOS["several"]).run_test(size=(120, 40)) as pilot:
        app = pilot.app
        deadline = time.monotonic() + 120
        while app.navigator is None:
            assert time.monotonic() < deadline, "the model did not load"
            await pilot.pause(0.05)
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
        while app.navigator.waiting is not None:
            assert time.monotonic() < deadline, "the run stopped"
            await pilot.pause(0.05)
        assert app.timeline.cursor == cursor + 1
