"""The ``speculative`` scenario, driven through Textual's Pilot: each speculative step shows
twice, first with the tree's branches as forked tables, then after the verify pass with the
kept branch adopted and the rest pruned; the invariants hold in every frame."""

from __future__ import annotations

import pytest

from minipaged import invariants
from minipaged.checkpoint import model_directory
from tests.test_tui import SIZE, at_step, panes, started
from tui.app import PagedApp
from tui.event_log import EventLog
from tui.scenarios import SCENARIOS
from tui.speculative_frames import frames

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (model_directory("tiny-draft") / "model.safetensors").is_file(),
        reason="the speculative scenario drafts with the embedded tiny-draft model",
    ),
]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def test_each_speculative_step_shows_its_branches_then_their_pruning():
    engine = SCENARIOS["speculative"].build()
    steps = []
    while engine.has_unfinished():
        steps += frames(engine.step(), len(steps) + 1)
    for step in steps:
        invariants.assert_holds(step.state)
    assert [s.step for s in steps] == list(range(1, len(steps) + 1))
    drafts = [i for i, s in enumerate(steps) if any(e.kind == "spec-propose" for e in s.events)]
    assert drafts, "the scenario must speculate"
    for i in drafts:
        propose = next(e for e in steps[i].events if e.kind == "spec-propose")
        assert set(propose.branches) <= set(steps[i].state.tables), "branches are drawn"
        after = steps[i + 1]
        kinds = [e.kind for e in after.events]
        assert kinds[0] == "spec-verify" and "spec-prune" in kinds and "spec-accept" in kinds
        assert not set(propose.branches) & set(after.state.tables), "every branch is gone"
    assert engine.block_manager.device.num_free == engine.block_manager.device.num_blocks


async def test_the_tables_pane_draws_the_branches_and_the_log_narrates_the_verdict():
    async with PagedApp(SCENARIOS["speculative"]).run_test(size=SIZE) as pilot:
        app = await started(pilot)
        await at_step(pilot, 2)  # the prompt's prefill, then the first tree's branches
        frame = app.timeline.frame()
        propose = next(e for e in frame.step.events if e.kind == "spec-propose")
        shown = panes(app)
        tables = shown["tables"]
        for branch in propose.branches:
            assert f"s{branch}" in tables
        await pilot.press("n")
        await at_step(pilot, 3)
        log = app.query_one(EventLog).plain_lines()  # what the log shows, not the events
        starts = [i for i, line in enumerate(log) if line.startswith("step 3 ")]
        assert starts, f"the log shows no step 3: {log[-2:]}"
        narrated = " ".join(" ".join(log[starts[0] :]).split())  # its wrapped lines as one text
        assert "becomes seq 0's table" in narrated or "accepts 0" in narrated
        assert "one target pass verifies" in narrated
