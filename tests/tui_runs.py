"""A TUI test's run, recorded to its end before the test looks at it; or one recorded once per
test process and replayed by every app that shows it."""

from __future__ import annotations

import functools
import time

from minipaged.tokenizer import Tokenizer
from minipaged.trace import Trace
from tests.stuck import STUCK_AFTER_S
from tui.app import PagedApp
from tui.scenarios import SCENARIOS
from tui.speculative_frames import frames


async def until(pilot, condition, what: str = "the app did not get there") -> None:
    """Let the app run until ``condition()`` holds; fail, saying ``what``, after
    ``STUCK_AFTER_S`` seconds (tests/stuck.py). The wait every TUI test uses."""
    deadline = time.monotonic() + STUCK_AFTER_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} in {STUCK_AFTER_S:g} s"
        await pilot.pause(0.02)


async def settled(pilot) -> None:
    """Wait until the app shows a run and no request waits for the model: after a restart
    (``r``) the run has no navigator until the model has loaded again."""
    app = pilot.app
    await until(pilot, lambda: app.navigator is not None and app.navigator.waiting is None)


async def whole_run(pilot) -> PagedApp:
    """The pilot's app once the model has loaded and every step of its run is recorded."""
    app = pilot.app
    await until(pilot, lambda: app.navigator is not None, "the model did not load")
    app.record_everything()
    await until(pilot, lambda: app.timeline.finished, "the run was not recorded")
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
