"""The TUI's redesign, as the issue's done-when list states it: block identities never lie,
every jump key lands in the default run, the log scrolls back to a busy step's first line, a
selected token shows its address translation. Driven through Textual's Pilot on the tiny model.

The jump keys are tried on the live app, whose model thread records the run while the keys
look ahead in it; every other test looks at what the panes show of a run, the same live or
replayed (``tui.app`` shows both through one timeline), so it replays a scenario run once per
test process (``tests/tui_runs.py``) instead of running the model again.
"""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.segment import Segment

from minipaged.checkpoint import model_directory
from tests.tui_runs import replaying, until
from tui.app import PagedApp
from tui.event_log import EventLog
from tui.inspector import Inspector
from tui.pool_view import PoolView
from tui.scenarios import SCENARIOS
from tui.tables_view import TablesView
from tui.token_streams import TokenStreams

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (model_directory("tiny") / "model.safetensors").is_file(),
        reason="the embedded tiny model is not built (python -m minipaged.train)",
    ),
]
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def recorded(pilot) -> PagedApp:
    """The default app with its whole run computed."""
    app = pilot.app
    await until(pilot, lambda: app.timeline is not None and app.timeline.finished)
    return app


async def at_step(pilot, index: int) -> None:
    pilot.app.seek_step(index)
    await pilot.pause()
    await pilot.pause()


def block_segments(pane, frame, width: int = 100) -> list[tuple[tuple[str, int], Segment]]:
    """Each rendered segment of ``pane`` that shows a block, with the block it names."""
    console = Console(width=width, color_system="truecolor")
    out = []
    for segment in console.render(pane.draw(frame, width)):
        meta = segment.style.meta if segment.style else {}
        if "block" in meta and segment.text.strip():
            out.append((tuple(meta["block"]), segment))
    return out


def identities(pane, frame) -> dict[tuple[str, int], set[tuple[str, str]]]:
    """Block -> what a reader sees of it in ``pane``: (background colour, id shown)."""
    seen: dict[tuple[str, int], set[tuple[str, str]]] = {}
    current_tag: dict[tuple[str, int], str] = {}
    for block, segment in block_segments(pane, frame):
        text = segment.text.strip()
        digits = text.translate(SUPERSCRIPT)
        if digits.isdigit() and text != digits:  # a token's block tag (white when shared)
            current_tag[block] = digits
            continue
        if text.split(":")[0].isdigit():  # a pool cell or a table entry: the id itself
            current_tag[block] = text.split(":")[0]
        else:
            assert block in current_tag, f"tokens of block {block} appear before its tag"
        colour = segment.style.bgcolor.name if segment.style.bgcolor else ""
        state = frame.step.state
        refcounts = state.device_refcounts if block[0] == "device" else state.host_refcounts
        if not refcounts[block[1]] or text.startswith(":") or "×" in text:
            continue  # a free cell, or the R of a shared block (its own look)
        seen.setdefault(block, set()).add((colour, current_tag[block]))
    return seen


async def test_no_two_live_blocks_share_an_identity_in_any_pane_of_a_frame():
    async with replaying("tour").run_test(size=(160, 50)) as pilot:
        app = await recorded(pilot)
        for step in (1, 2, 4, 20, 25, 34):
            await at_step(pilot, step)
            frame = app.timeline.frame()
            panes = [app.base.query_one(kind) for kind in (PoolView, TablesView, TokenStreams)]
            everywhere: dict[tuple[str, int], set[tuple[str, str]]] = {}
            for pane in panes:
                for block, seen in identities(pane, frame).items():
                    assert all(shown == str(block[1]) for _, shown in seen), (step, block, seen)
                    everywhere.setdefault(block, set()).update(seen)
            for block, seen in everywhere.items():
                assert len(seen) == 1, f"step {step}: block {block} looks different: {seen}"
            owners: dict[tuple[str, str], tuple[str, int]] = {}
            for block, seen in everywhere.items():
                look = next(iter(seen))
                assert owners.setdefault(look, block) == block, f"step {step}: {look} is shared"
            live = {p for p, r in enumerate(frame.step.state.device_refcounts) if r}
            assert live <= {p for pool, p in everywhere if pool == "device"}


JUMP_KINDS = {
    "c": {"cow-copy"},
    "w": {"swap-out", "swap-in"},
    "p": {"preempt"},
    "h": {"prefix-hit"},
}
"""DESIGN.md's key map: the next copy-on-write, swap (out or in), preemption, prefix hit. Written
out here: read from ``tui.navigator.JUMPS``, a jump that looks for the wrong kinds would pass."""


async def test_every_jump_key_lands_on_the_next_step_of_its_kind_in_the_default_run():
    async with PagedApp().run_test(size=(120, 40)) as pilot:
        app = await recorded(pilot)
        assert app.scenario.name == "tour"
        steps = range(1, app.timeline.recorded + 1)
        kinds_at = {i: {e.kind for e in app.timeline.frame(i).step.events} for i in steps}
        for key, kinds in JUMP_KINDS.items():
            await at_step(pilot, 0)
            await pilot.press(key)
            await pilot.pause()
            first = next(i for i in steps if kinds_at[i] & kinds)
            assert app.timeline.cursor == first <= 40, f"{key}: step {app.timeline.cursor}"


async def test_a_jump_that_finds_nothing_names_a_scenario_that_has_it():
    async with PagedApp(SCENARIOS["several"]).run_test(size=(120, 40)) as pilot:
        app = await recorded(pilot)
        await pilot.press("w")
        await pilot.pause()
        assert "'swap' and 'tour' scenarios have them" in app.notice


async def test_the_log_scrolls_back_to_a_busy_steps_first_line():
    async with replaying("tour").run_test(size=(80, 24)) as pilot:
        app = await recorded(pilot)
        await at_step(pilot, 1)
        log = app.base.query_one(EventLog)
        await pilot.pause()
        lines = log.plain_lines()
        assert len(lines) > log.scrollable_content_region.height, "step 1 should not fit"
        assert lines[log.header_line].startswith("step 1 ·")
        top = round(log.scroll_y)
        assert top <= log.header_line < top + log.scrollable_content_region.height
        await pilot.press("pagedown")
        await pilot.pause()
        assert log.scroll_y > top, "the rest of the busy step is a page down away"
        await pilot.press("pageup")
        await pilot.pause()
        assert round(log.scroll_y) <= log.header_line


async def test_selecting_a_token_shows_its_logical_block_offset_block_and_slot():
    async with replaying("tour").run_test(size=(120, 40)) as pilot:
        app = await recorded(pilot)
        await at_step(pilot, 4)
        await pilot.press("down", "left_square_bracket", "left_square_bracket")
        await pilot.pause()
        chosen = app.selection
        frame = app.timeline.frame()
        table = frame.step.state.tables[chosen.seq]
        t, block_size = chosen.token, frame.step.state.block_size
        j, o = t // block_size, t % block_size
        p = table.blocks[j]
        shown = app.base.query_one(Inspector).draw(frame, 200).plain
        assert f"t={t}" in shown
        assert f"j=⌊{t}/{block_size}⌋={j}" in shown
        assert f"o={t} mod {block_size}={o}" in shown
        assert f"p=T_{chosen.seq}[{j}]={p}" in shown
        assert f"= {p * block_size + o}" in shown
        await pilot.press("enter")
        await pilot.pause()
        assert app.selection.block == p
        slots = app.base.query_one(Inspector).draw(app.timeline.frame(), 200).plain
        assert f"slots {'■' * min(block_size, table.num_tokens - j * block_size)}" in slots


async def test_typing_a_scenario_name_in_the_palette_ranks_that_scenario_first_with_its_notation():
    from textual.command import CommandList

    async with replaying("several").run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: pilot.app.timeline is not None)
        await pilot.press("ctrl+p", *"prefix")
        await pilot.pause(0.5)
        options = pilot.app.screen.query_one(CommandList)
        await until(pilot, lambda: options.option_count > 1)
        first = options.get_option_at_index(0).prompt
        shown = first.plain if hasattr(first, "plain") else str(first)
        assert shown.startswith("Scenario prefix:"), shown
        assert "R[p] = 4" in shown  # notation, not Rich markup


def test_a_step_story_puts_the_prefix_hit_before_the_shares_it_causes_and_folds_runs():
    from minipaged.events import Alloc, Free, Incref, PrefixHit
    from tui.story import fold, in_story_order

    events = [
        Alloc(0, 0, 0),
        Incref(1, 0, 0, 2),
        Incref(1, 1, 1, 2),
        PrefixHit(1, (0, 1), 8),
        Free(2, 5),
        Free(2, 6),
        Free(2, 7),
    ]
    ordered = in_story_order(events)
    assert [e.kind for e in ordered] == ["alloc", "prefix-hit", "incref", "incref"] + ["free"] * 3
    lines = fold(ordered)
    assert [len(line.events) for line in lines] == [1, 1, 2, 3]
    assert lines[-1].text() == "seq 2 releases 3 blocks: 5, 6, 7; R=0, free again"


def test_a_headline_names_the_copy_on_write_with_its_refcounts():
    from minipaged.events import CowCopy, Decref
    from minipaged.outputs import StepOutput
    from tui.story import headline

    events = (CowCopy(0, 6, 1, 1, 2, 2, 4, (1, 2, 3)), Decref(0, 1, 3))
    out = StepOutput(3, {}, events, None, {}, {}, (), 0, 4)
    assert headline(out) == "CoW: s0 copied block 1→2, R 4→3"


async def test_a_click_on_the_timeline_strip_moves_the_cursor_to_that_step():
    from tui.strip import LABEL, TimelineStrip

    async with replaying("tour").run_test(size=(120, 40)) as pilot:
        app = await recorded(pilot)
        strip = app.base.query_one(TimelineStrip)
        assert strip.per_column() == 1  # 38 steps fit in 120 columns
        await pilot.click(TimelineStrip, offset=(strip.styles.padding.left + LABEL + 7, 1))
        await pilot.pause()
        assert app.timeline.cursor == 7


async def test_e_expands_a_folded_run_into_its_events_and_folds_it_again():
    async with replaying("tour").run_test(size=(160, 50)) as pilot:
        app = await recorded(pilot)
        await at_step(pilot, 1)  # seq 0 takes 7 blocks: one folded line
        log = app.base.query_one(EventLog)

        def shown() -> str:
            return "\n".join(log.plain_lines())

        assert "▸ seq 0 takes 7 free device blocks" in shown()
        assert "seq 0 takes free device block 3 as its logical block 3" not in shown()
        await pilot.press("e")
        assert "▾ seq 0 takes 7 free device blocks" in shown()
        assert "seq 0 takes free device block 3 as its logical block 3" in shown()
        await pilot.press("e")
        assert "▸ seq 0 takes 7 free device blocks" in shown()


async def test_token_rows_keep_their_order_when_sequences_finish():
    async with replaying("tour").run_test(size=(120, 40)) as pilot:
        app = await recorded(pilot)
        for index in range(app.timeline.recorded + 1):
            seqs = [stream.seq_id for stream in app.timeline.frame(index).streams]
            assert seqs == sorted(seqs), f"step {index}: rows {seqs}"
        assert app.timeline.frame(app.timeline.recorded).streams[0].status == "finished"


async def test_a_click_on_a_token_selects_it_and_shows_its_translation():
    from tui.token_streams import LABEL_WIDTH

    async with replaying("tour").run_test(size=(120, 40)) as pilot:
        app = await recorded(pilot)
        await at_step(pilot, 2)
        # Offsets count from the border: row 1 is s0's first line; its text starts after the
        # border, the padding and the label.
        await pilot.click(TokenStreams, offset=(1 + 1 + LABEL_WIDTH + 3, 1))
        await pilot.pause()
        assert app.selection.seq == 0 and app.selection.token is not None
        shown = app.base.query_one(Inspector).draw(app.timeline.frame(), 200).plain
        assert f"t={app.selection.token}" in shown and "slot" in shown


async def test_the_log_scrolls_back_from_the_last_step_to_the_first_line_of_step_1():
    async with replaying("tour").run_test(size=(80, 24)) as pilot:
        app = await recorded(pilot)
        last = app.timeline.recorded
        await at_step(pilot, last)
        log = app.base.query_one(EventLog)
        lines = log.plain_lines()
        assert lines[log.header_line].startswith(f"step {last} ·")
        assert sum(line.startswith("step ") for line in lines) == last, "a step lost its header"
        assert round(log.scroll_y) <= log.header_line < round(log.scroll_y) + log.size.height
        for _ in range(len(lines)):  # page up, as a reader would, until the top
            if round(log.scroll_y) == 0:
                break
            await pilot.press("pageup")
        await pilot.pause()
        assert log.render_line(0).text.startswith("step 1 ·")
        assert log.render_line(1).text.strip() == lines[1].strip()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_a_jump_always_brings_the_cursors_step_into_the_log(name):
    """Jumping straight to a step shows its header, also the first time the log outgrows its
    pane and the scrollbar has yet to appear (the speculative scenario at 160×50, step 3, once
    stayed at the top, showing steps 1 and 2)."""
    async with replaying(name).run_test(size=(160, 50)) as pilot:
        app = await recorded(pilot)
        log = app.base.query_one(EventLog)
        for index in (3, 5, 8):
            if index > app.timeline.recorded:
                break
            await at_step(pilot, index)
            await pilot.pause()
            lines = log.plain_lines()
            assert lines[log.header_line].startswith(f"step {app.timeline.frame().step.step} ·")
            top = round(log.scroll_y)
            assert top <= log.header_line < top + log.scrollable_content_region.height, (
                f"step {index}: header at line {log.header_line}, view {top}.."
            )
