"""A peer's test of DESIGN.md's TUI key map, row by row, through Textual's Pilot.

| key | action |
| `n` or `→` | step forward |  `b` or `←` | step back |  `space` | play / pause |
| `+` / `-` | faster / slower |  `c`, `w`, `p`, `h` | jump to the next copy-on-write, swap,
preemption, prefix hit |  `r` | restart |  `s` | scenario picker |  `?` | help screen |
`ctrl+p` | command palette |  `q` | quit |

The default scenario, ``tour``, holds a fork, a copy-on-write, a swap out and in, a preemption
and a prefix hit (README), so one app walks every row.
"""

from __future__ import annotations

import pytest
from textual.command import CommandPalette

from tests.tui_runs import settled, until
from tui.app import PagedApp
from tui.scenarios import SCENARIOS

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def press(pilot, key):
    """Press ``key`` and wait until the view no longer waits for the model."""
    await pilot.press(key)
    await settled(pilot)
    await pilot.pause()


def kinds(app):
    return {event.kind for event in app.timeline.frame().step.events}


async def test_stepping_keys_move_through_recorded_states():
    async with PagedApp(SCENARIOS["tour"]).run_test(size=SIZE) as pilot:
        app = pilot.app
        await until(pilot, lambda: app.navigator is not None)
        start = app.timeline.cursor
        await press(pilot, "n")
        assert app.timeline.cursor == start + 1
        await press(pilot, "right")
        assert app.timeline.cursor == start + 2
        await press(pilot, "b")
        assert app.timeline.cursor == start + 1
        await press(pilot, "left")
        assert app.timeline.cursor == start
        await press(pilot, "n")
        await press(pilot, "n")
        await press(pilot, "r")
        assert app.timeline.cursor == 0


JUMPS = {"c": {"cow-copy"}, "w": {"swap-out", "swap-in"}, "p": {"preempt"}, "h": {"prefix-hit"}}


async def test_jump_keys_land_on_the_first_step_with_their_event():
    """From the start (``r``), each jump key lands on the first step holding its event."""
    async with PagedApp(SCENARIOS["tour"]).run_test(size=SIZE) as pilot:
        app = pilot.app
        await until(pilot, lambda: app.navigator is not None)
        for key, wanted in JUMPS.items():
            await press(pilot, "r")
            await press(pilot, key)
            assert kinds(app) & wanted, key
            landed = app.timeline.cursor
            earlier = ({e.kind for e in app.timeline.frame(i).step.events} for i in range(landed))
            assert not any(step & wanted for step in earlier), key


async def test_play_pause_and_speed_keys():
    async with PagedApp(SCENARIOS["tour"]).run_test(size=SIZE) as pilot:
        app = pilot.app
        await until(pilot, lambda: app.navigator is not None)
        speed = app.speed
        await pilot.press("minus")
        assert app.speed == speed - 1
        await pilot.press("plus", "plus", "plus")
        assert app.speed == speed + 2
        start = app.timeline.cursor
        await pilot.press("space")
        await until(pilot, lambda: app.timeline.cursor >= start + 2)
        await pilot.press("space")
        stopped = app.timeline.cursor
        await pilot.pause(0.5)
        assert app.timeline.cursor == stopped


async def test_screens_keys_open_picker_help_palette_and_q_quits():
    async with PagedApp(SCENARIOS["tour"]).run_test(size=SIZE) as pilot:
        app = pilot.app
        await until(pilot, lambda: app.navigator is not None)
        base = app.screen
        for key in ("s", "question_mark", "ctrl+p"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is not base, key
            if key == "ctrl+p":
                assert isinstance(app.screen, CommandPalette)
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is base, key
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running
