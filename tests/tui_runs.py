"""A TUI test's run, recorded to its end before the test looks at it."""

from __future__ import annotations

import time

from tui.app import PagedApp

DEADLINE_S = 120  # loading the tiny model and recording a scenario, on a loaded machine


async def whole_run(pilot) -> PagedApp:
    """The pilot's app once the model has loaded and every step of its run is recorded."""
    app = pilot.app
    deadline = time.monotonic() + DEADLINE_S
    while app.navigator is None:
        assert time.monotonic() < deadline, "the model did not load"
        await pilot.pause(0.05)
    app.record_everything()
    while not app.timeline.finished:
        assert time.monotonic() < deadline, "the run was not recorded in time"
        await pilot.pause(0.05)
    return app
