"""Snapshots of the visualizer in its key states, compared as SVG with ``snap_compare``.

Each run samples with a fixed seed on the embedded tiny model, animations are off and nothing
on screen blinks, and every snapshot waits until the whole run is recorded, so the status line
reads ``step k/N`` with the final N. After retraining the model or changing the layout, look at
the new screenshots and accept them with ``pytest tests/test_tui_snapshots.py
--snapshot-update``.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from minipaged.checkpoint import model_directory
from tests.tui_runs import until
from tui.app import PagedApp
from tui.scenarios import SCENARIOS

pytestmark = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)


def app_for(name: str) -> PagedApp:
    app = PagedApp(SCENARIOS[name])
    app.animation_level = "none"
    return app


def recorded_then(*keys: str, step: int | None = None):
    """A ``run_before`` that records the whole run, then moves to ``step`` and presses
    ``keys``, waiting out each request."""

    async def run_before(pilot) -> None:
        app = pilot.app
        await until(pilot, lambda: app.navigator is not None)
        app.record_everything()
        await until(pilot, lambda: app.timeline.finished)
        if step is not None:
            app.seek_step(step)
        for key in keys:
            await pilot.press(key)
            await until(pilot, lambda: app.navigator.waiting is None)
        await pilot.pause(0.1)  # the log scrolls once its new content is laid out
        await pilot.pause()

    return run_before


def test_first_copy_on_write_of_parallel_sampling(snap_compare):
    assert snap_compare(app_for("parallel"), terminal_size=(120, 40), run_before=recorded_then("c"))


def test_first_swap_under_memory_pressure(snap_compare):
    assert snap_compare(app_for("swap"), terminal_size=(120, 40), run_before=recorded_then("w"))


def test_every_pane_at_80_by_24_with_a_token_selected(snap_compare):
    # The tour's first swap-out; the inspector shows the selected token's address translation.
    keys = ("down", "left_square_bracket", "left_square_bracket")
    assert snap_compare(
        app_for("tour"), terminal_size=(80, 24), run_before=recorded_then(*keys, step=4)
    )


def test_every_pane_at_160_by_50_with_a_block_selected(snap_compare):
    # The tour's preemption by recompute; the inspector shows a block's slots.
    keys = ("down", "left_square_bracket", "left_square_bracket", "enter")
    assert snap_compare(
        app_for("tour"), terminal_size=(160, 50), run_before=recorded_then(*keys, step=20)
    )


def test_80_by_24_at_the_tours_first_copy_on_write(snap_compare):
    # The token pane shows the copies (blocks 10 and 11) though each row has one line.
    assert snap_compare(app_for("tour"), terminal_size=(80, 24), run_before=recorded_then("c"))


def test_block_identity_of_parallel_sampling_at_160_by_50(snap_compare):
    # The screen: blocks 0 and 16, 4 and 20, 1 and 17 wore one colour each.
    assert snap_compare(
        app_for("parallel"), terminal_size=(160, 50), run_before=recorded_then(step=19)
    )


def test_a_long_prompt_filling_in_chunks_beside_two_decodes(snap_compare):
    # Step 3 of the chunked scenario: the budget line, the long prompt's blocks half filled.
    assert snap_compare(
        app_for("chunked"), terminal_size=(120, 40), run_before=recorded_then(step=3)
    )


def test_the_same_arrivals_with_chunking_off_prefill_the_long_prompt_in_one_step(snap_compare):
    assert snap_compare(
        app_for("chunked-off"), terminal_size=(120, 40), run_before=recorded_then(step=1)
    )


def test_projection_mode(snap_compare):
    assert snap_compare(
        app_for("tour"), terminal_size=(120, 40), run_before=recorded_then("v", step=2)
    )


def test_beam_search_with_a_selected_sequence(snap_compare):
    async def select_beam(pilot) -> None:
        await recorded_then(step=6)(pilot)
        pilot.app.action_select_seq(min(pilot.app.timeline.frame().step.sequences))
        await pilot.pause()

    assert snap_compare(app_for("beam"), terminal_size=(120, 40), run_before=select_beam)


def test_help_screen(snap_compare):
    assert snap_compare(
        app_for("several"), terminal_size=(100, 36), run_before=recorded_then("question_mark")
    )


def test_every_snapshot_file_belongs_to_a_snapshot_test():
    """syrupy fails a run that leaves a snapshot unused, but not under pytest-xdist, which
    ``make test`` uses: a renamed test must not leave its old picture behind here either."""
    folder = Path(__file__).parent / "__snapshots__" / Path(__file__).stem
    tests = {
        name
        for name, test in globals().items()
        if name.startswith("test_") and "snap_compare" in inspect.signature(test).parameters
    }
    assert {path.stem for path in folder.iterdir()} == tests
