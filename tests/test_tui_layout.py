"""What a new user met trying the TUI, each now held by a test: every pane readable at 80×24
(key bar, strip legend, token pane showing a copy-on-write's copy, memory counters, invariants
line); each event kind its own timeline mark and a column that holds several saying so; and a
scenario switch that shows nothing of the previous run while the next one loads.

What the panes show of a run is the same live or replayed (one timeline draws both), so the
tests that look at a whole run replay one recorded once per test process
(``tests/tui_runs.py``); the scenario switch, which starts a model run, stays live."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import minipaged.speculative.events  # noqa: F401  (registers the speculative event kinds)
from minipaged.checkpoint import model_directory
from minipaged.events import CowCopy
from minipaged.trace import EVENT_TYPES
from tests.tui_runs import replaying, whole_run
from tui.app import PagedApp
from tui.event_log import EventLog
from tui.key_bar import KeyBar
from tui.keymap import KEYMAP
from tui.pane import Pane
from tui.scenarios import SCENARIOS
from tui.strip import LABEL, MARK_OF, MARKS, ROUTINE, TimelineStrip, marks_of

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


def test_every_event_kind_is_marked_or_named_routine_and_each_mark_is_its_own():
    assert set(MARK_OF) | ROUTINE == set(EVENT_TYPES)
    assert not set(MARK_OF) & ROUTINE
    letters = [mark.letter for mark in MARKS]
    assert len(set(letters)) == len(letters)
    assert MARK_OF["swap-out"].letter != MARK_OF["preempt"].letter != MARK_OF["swap-in"].letter


async def at(app: PagedApp, pilot, step: int) -> None:
    app.seek_step(step)
    await pilot.pause()
    await pilot.pause()


def strip_column(app: PagedApp, step: int):
    """The strip's mark for ``step`` (one step per column here): (letter, underlined)."""
    strip = app.base.query_one(TimelineStrip)
    assert strip.per_column() == 1
    row = strip.render().split("\n")[1]
    column = LABEL + step
    styles = [span.style for span in row.spans if span.start <= column < span.end]
    return row.plain[column], any(getattr(s, "underline", False) for s in styles)


async def test_each_step_shows_its_most_telling_mark_underlined_when_it_has_several():
    """Tour step 1 forks and hits the prefix cache: it shows F (not H), underlined; a
    preemption by swapping shows O, the swap-out, never P; the top row names every mark of
    the cursor's step."""
    app = replaying("tour")
    async with app.run_test(size=(160, 50)) as pilot:
        await whole_run(pilot)
        swap_outs = 0
        for index in range(1, app.timeline.recorded + 1):
            kinds = {e.kind for e in app.timeline.frame(index).step.events}
            marks = marks_of(kinds)
            letter, underlined = strip_column(app, index)
            if not marks:
                assert letter in " ·", index
                continue
            assert letter == marks[0].letter and underlined == (len(marks) > 1), index
            if "swap-out" in kinds:
                swap_outs += 1
                assert letter == "O", index
        assert swap_outs
        first = {e.kind for e in app.timeline.frame(1).step.events}
        assert {"fork", "prefix-hit"} <= first
        assert strip_column(app, 1) == ("F", True)
        await at(app, pilot, 1)
        top = app.base.query_one(TimelineStrip).render().split("\n")[0].plain
        assert "here: F fork" in top and "H prefix hit" in top


def shown(app: PagedApp) -> dict[str, str]:
    """Each pane's text as drawn at its size, the key bar's and the strip's too."""
    text = {}
    for pane in app.query(Pane):
        console = Console(file=io.StringIO(), width=pane.content_size.width, record=True)
        console.print(pane.render())
        text[pane.id] = console.export_text()
    text["keys"] = app.query_one(KeyBar).render().plain
    text["strip"] = app.query_one(TimelineStrip).render().plain
    return text


async def test_at_80_by_24_every_pane_says_what_it_must_and_cuts_nothing():
    app = replaying("tour")
    async with app.run_test(size=(80, 24)) as pilot:
        await whole_run(pilot)
        cow_steps = [
            i
            for i in range(1, app.timeline.recorded + 1)
            if any(isinstance(e, CowCopy) for e in app.timeline.frame(i).step.events)
        ]
        for step in (cow_steps[0], 12, app.timeline.recorded):
            await at(app, pilot, step)
            text = shown(app)
            items = [f"{k.footer_keys or k.display} {k.footer}" for k in KEYMAP if k.footer]
            bar = text["keys"].strip()
            assert bar.startswith("? help") and "q quit" in bar
            assert all(part.strip() in items for part in bar.split("  ") if part.strip())
            legend = text["strip"].split("\n")[1]
            for mark in app.base.query_one(TimelineStrip).run_marks():
                assert f"{mark.letter} {mark.short}" in legend, mark
            assert "…" not in text["invariants"] and "invariants hold" in text["invariants"]
            assert "so far" in text["gauges"] and "forks" in text["gauges"]
            assert "recomputed" in text["gauges"]
            assert "waiting" in text["queues"]
            for pane in app.query(Pane):  # nothing drawn below a pane's bottom edge
                assert pane.region.bottom <= app.base.query_one("#main").region.bottom, pane.id
        await at(app, pilot, cow_steps[0])
        tokens = shown(app)["tokens"]
        for event in app.timeline.frame().step.events:
            if isinstance(event, CowCopy):
                tag = str(event.dst).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
                assert tag in tokens, f"the copy, block {event.dst}, is not in the token pane"


async def test_a_scenario_switch_shows_nothing_of_the_previous_run_while_the_next_loads():
    app = PagedApp(SCENARIOS["tour"])
    async with app.run_test(size=(120, 40)) as pilot:
        await whole_run(pilot)
        await at(app, pilot, 10)
        log = app.base.query_one(EventLog)
        assert any(line.startswith("step 10") for line in log.plain_lines())
        app.start(SCENARIOS["several"])  # the model loads in its thread from here
        assert log.plain_lines() == [] and log.border_title == "events"
        assert all(not log.render_line(y).text.strip() for y in range(log.size.height))
        await pilot.pause()
        assert not any(line.startswith("step ") for line in log.plain_lines())
        await whole_run(pilot)
        await at(app, pilot, 1)
        assert app.scenario.name == "several"
        assert [line for line in log.plain_lines() if line.startswith("step ")] == [
            line for line in log.plain_lines() if line.startswith("step 1 ")
        ]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=str)
async def test_the_strip_keeps_its_two_rows_and_names_every_mark_of_the_cursors_step(size):
    """A speculative step holds four kinds (F, V, K, D): at 80 columns their names once
    wrapped onto the marks' row and hid it. The top row names them as the width allows."""
    app = replaying("speculative")
    async with app.run_test(size=size) as pilot:
        await whole_run(pilot)
        strip = app.base.query_one(TimelineStrip)
        for step in range(1, app.timeline.recorded + 1):
            await at(app, pilot, step)
            console = Console(file=io.StringIO(), width=strip.content_size.width, record=True)
            console.print(strip.render())
            lines = console.export_text().rstrip("\n").split("\n")
            assert len(lines) == 2 and lines[1].startswith("events"), (step, lines)
            marks = marks_of({e.kind for e in app.timeline.frame(step).step.events})
            if marks:
                here = lines[0].split("here: ")[1]
                assert all(m.letter in here for m in marks), (step, lines[0])
