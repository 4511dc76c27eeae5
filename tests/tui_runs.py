"""A TUI test's run, recorded to its end before the test looks at it; or one recorded once per
test process and replayed by every app that shows it."""

from __future__ import annotations

import functools
import time

from minipaged.tokenizer import Tokenizer
from minipaged.trace import Trace
from tui.app import PagedApp
from tui.scenarios import SCENARIOS
from tui.speculative_frames import frames

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


@functools.cache
def recorded(name: str) -> tuple[Trace, Tokenizer | None]:
    """Scenario ``name`` run once per test process, with its attention recorded (as the app
    runs it), as an in-memory trace: apps replay it without loading the model again. Its
    header holds the KV cache's summary, as a recorded trace's does, so a replay's gauges
    show the block's bytes as the live app's do."""
    engine = SCENARIOS[name].build()
    steps: list = []
    while engine.has_unfinished():
        steps += frames(engine.step(), len(steps) + 1)
    header = {"scenario": SCENARIOS[name].title, "engine": {"kv_cache": engine.kv_cache.summary()}}
    return Trace(header, steps), engine.tokenizer


def replaying(name: str, **options) -> PagedApp:
    """An app replaying ``recorded(name)``, animations off (for snapshots too); ``options``
    go to ``PagedApp`` (``projection=True``)."""
    trace, tokenizer = recorded(name)
    app = PagedApp(trace=trace, tokenizer=tokenizer, **options)
    app.animation_level = "none"
    return app
