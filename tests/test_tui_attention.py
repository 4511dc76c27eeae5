"""The attention view (source text §4): the engine's probe records what a step's attention read
and computed, the walk built from a record is the reference decode's (an oracle, not a
snapshot), and the view's keys open it, walk its blocks, change layer and head, and close it.
Last, a speculative step's tree shown as tokens (issue 29 §3).

One run of ``tour`` is recorded once (``tests.tui_runs.recorded``) and every app here replays it.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from minipaged import LLM, SamplingParams
from minipaged.attention import (
    paged_attention_decode_loop,
    paged_attention_decode_partitions,
    paged_attention_prefill,
)
from minipaged.attention_walk import walk
from minipaged.checkpoint import model_directory
from tests import test_tui
from tests.test_tui import SIZE, panes
from tests.tui_runs import recorded, replaying, until
from tui.attention_view import AttentionView, max_difference
from tui.command import screenshot_keys
from tui.event_log import EventLog
from tui.pane import Selection
from tui.scenarios import SCENARIOS
from tui.speculative_tree import tree_lines
from tui.timeline import Timeline, opening_step_of_trace
from tui.token_streams import TokenText

# test_tui's marks (anyio, and a skip without the tiny model) and its anyio backend fixture
pytestmark = test_tui.pytestmark
anyio_backend = test_tui.anyio_backend


def tour_records():
    """(frame index, record) for every row of every step of the recorded tour."""
    trace, _ = recorded("tour")
    return [(i + 1, r) for i, step in enumerate(trace.steps) for r in step.attention or ()]


def decode_step() -> tuple[int, int]:
    """A step of the tour where a sequence decodes over at least three blocks: (step, seq)."""
    return next(
        (i, r.seq_id)
        for i, r in tour_records()
        if len(r.positions) == 1 and r.seq_len > 2 * r.block_size
    )


def pool_of(record, layer: int):
    """The record's blocks as a pool (block j at index j) and its block table."""
    table = torch.arange(len(record.block_table), dtype=torch.int32)[None]
    return record.keys[layer], record.values[layer], table


# -- the probe and the walk: oracles -------------------------------------------------------


def test_every_recorded_walk_equals_the_reference_decode_and_the_models_output():
    for _, record in tour_records():
        layers, queries, heads, _ = record.query.shape
        for layer in range(layers):
            keys, values, table = pool_of(record, layer)
            for query in range(queries):
                seen = torch.tensor([record.positions[query] + 1], dtype=torch.int32)
                q = record.query[layer, query][None]  # [1, N_Q, d_h]
                args = (q, keys, values, table, seen, record.scale, record.block_size)
                loop = paged_attention_decode_loop(*args)[0]
                # One partition per block: m_k and l_k are each block's own max and sum.
                m_k, l_k, _ = paged_attention_decode_partitions(*args, record.block_size)
                for head in range(heads):
                    w = walk(record, layer, head, query)
                    torch.testing.assert_close(w.output, loop[head], atol=1e-5, rtol=1e-5)
                    torch.testing.assert_close(
                        w.recorded, record.output[layer, query, head], atol=0, rtol=0
                    )
                    assert w.max_delta < 1e-5
                    torch.testing.assert_close(w.merged, w.output, atol=1e-5, rtol=1e-5)
                    for block in w.blocks:  # the running m and l after block j
                        m = float(m_k[0, head, : block.j + 1].max())
                        running = l_k[0, head, : block.j + 1] * torch.exp(
                            m_k[0, head, : block.j + 1] - m
                        )
                        assert block.m == pytest.approx(m, abs=1e-5)
                        assert block.l == pytest.approx(float(running.sum()), rel=1e-5)
                        assert block.rescale == pytest.approx(math.exp(block.m_old - block.m))
                    assert sum(w.weights) == pytest.approx(1.0, abs=1e-5)


def test_the_walk_reads_the_blocks_of_the_table_through_their_slots():
    step, seq = decode_step()
    trace, _ = recorded("tour")
    record = next(r for r in trace.steps[step - 1].attention if r.seq_id == seq)
    w = walk(record, 0, 0)
    B = record.block_size
    assert [b.block for b in w.blocks] == list(record.block_table[: len(w.blocks)])
    for b in w.blocks:
        assert b.slots == tuple(b.block * B + t % B for t in b.positions)
    assert [t for b in w.blocks for t in b.positions] == list(range(record.seq_len))
    assert w.sharing == (0, 1) and w.kv_head == 0  # the tiny model: 2 query heads, 1 KV head


def test_the_recorded_keys_are_the_ones_the_model_computes_for_the_sequence():
    """The blocks read hold the sequence's own keys and values at positions 0..L-1: those the
    contiguous forward pass computes for the same tokens."""
    step, seq = decode_step()
    trace, _ = recorded("tour")
    record = next(r for r in trace.steps[step - 1].attention if r.seq_id == seq)
    tokens = torch.tensor(trace.steps[step - 1].sequences[seq].token_ids[: record.seq_len])
    model = LLM("tiny").engine.model
    captured = {}

    def attend(layer, q, k, v):  # causal attention, remembering k and v
        captured[layer] = (k, v)
        group = q.shape[1] // k.shape[1]
        q_, k_, v_ = (t.transpose(0, 1) for t in (q, k, v))
        k_, v_ = k_.repeat_interleave(group, 0), v_.repeat_interleave(group, 0)
        return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True).transpose(0, 1)

    with torch.inference_mode():
        model.forward_with(tokens, torch.arange(len(tokens)), attend)
    for layer, (k, v) in captured.items():
        n, kv_heads, B, d = record.keys[layer].shape
        stored = record.keys[layer].permute(0, 2, 1, 3).reshape(n * B, kv_heads, d)
        torch.testing.assert_close(stored[: record.seq_len], k, atol=1e-4, rtol=1e-4)
        stored = record.values[layer].permute(0, 2, 1, 3).reshape(n * B, kv_heads, d)
        torch.testing.assert_close(stored[: record.seq_len], v, atol=1e-4, rtol=1e-4)


def test_a_prompt_chunk_records_each_query_and_each_sees_only_the_positions_before_it():
    llm = LLM(
        "tiny", block_size=4, enable_chunked_prefill=True, max_num_batched_tokens=8, max_num_seqs=4
    )
    llm.engine.runner.record_attention()
    prompt = list(range(3, 23))  # 20 tokens: chunks of 8, 8 and 4
    llm.engine.add_request({"prompt_token_ids": prompt}, SamplingParams(max_tokens=2))
    chunks = [llm.engine.step().attention[0] for _ in range(3)]
    assert [r.positions for r in chunks] == [range(0, 8), range(8, 16), range(16, 20)]
    record = chunks[1]
    for layer in range(record.query.shape[0]):
        keys, values, table = pool_of(record, layer)
        prefill = paged_attention_prefill(
            record.query[layer],
            keys,
            values,
            table,
            torch.tensor([record.seq_len], dtype=torch.int32),
            torch.tensor([len(record.positions)], dtype=torch.int32),
            record.scale,
            record.block_size,
        )
        for query, t in enumerate(record.positions):
            w = walk(record, layer, 1, query)
            assert w.position == t and w.blocks[-1].positions[-1] == t
            torch.testing.assert_close(w.output, prefill[query, 1], atol=1e-5, rtol=1e-5)
            assert w.max_delta < 1e-5


def test_the_tour_says_how_to_open_the_view_at_its_first_step():
    assert "a opens the attention view" in SCENARIOS["tour"].story


def test_generate_records_nothing():
    llm = LLM("tiny", block_size=4)
    assert llm.engine.runner.probe is None
    llm.engine.add_request("It is a truth", SamplingParams(max_tokens=2))
    assert llm.engine.step().attention is None


def test_a_bad_layer_head_or_query_is_named():
    _, record = tour_records()[0]
    with pytest.raises(IndexError, match="layer 5 is not in this record, which has 4: pick 0 to 3"):
        walk(record, 5, 0)
    with pytest.raises(IndexError, match="head 4 is not in this record, which has 4: pick 0 to 3"):
        walk(record, 0, 4)


# -- the view, driven by its keys -----------------------------------------------------------


def shown(app) -> str:
    """The attention view's text, without its styles."""
    return re.sub(r"\x1b\[[0-9;]*m", "", panes(app)["attention"])


async def opened(pilot, step: int, seq: int):
    app = pilot.app
    await until(pilot, lambda: app.navigator is not None)
    app.seek_step(step)
    app.select(Selection(seq=seq))
    await pilot.press("a")
    await pilot.pause()
    return app


async def test_a_opens_the_view_on_the_selected_sequence_and_the_panes_show_block_0():
    step, seq = decode_step()
    async with replaying("tour").run_test(size=SIZE) as pilot:
        app = await opened(pilot, step, seq)
        record = next(r for r in app.timeline.frame().step.attention if r.seq_id == seq)
        assert app.attention.seq == seq and app.attention.j == 0
        assert app.selection == Selection(block=record.block_table[0])
        view = shown(app)
        assert f"s{seq} t={record.seq_len - 1}" in view
        assert "KV head 0 read by query heads 0, 1" in view
        assert "max|Δ|" in view and "✓" in view
        assert app.query_one(AttentionView).display and not app.query_one("#tokens").display
        await pilot.press("a")
        await pilot.pause()
        assert app.attention is None and app.selection == Selection(seq=seq)
        assert app.query_one("#tokens").display


@pytest.mark.parametrize("digits", [1.5e-08, 4.5e-08, 0.0, 9.9e-07])
def test_a_difference_float32_rounding_explains_reads_the_same_on_every_machine(digits):
    # the snapshots below were failing on a second machine whose SIMD lanes add in another
    # order: 4.5e-08 where the first machine showed 1.5e-08, for the same step
    assert max_difference(digits) == "max|Δ|<1e-6"


@pytest.mark.parametrize(
    ("delta", "shown"), [(1e-06, "max|Δ|=1.0e-06"), (2.5e-05, "max|Δ|=2.5e-05")]
)
def test_a_difference_rounding_does_not_explain_shows_its_value(delta, shown):
    assert max_difference(delta) == shown


async def test_full_stop_and_comma_walk_the_blocks_and_every_pane_follows():
    step, seq = decode_step()
    async with replaying("tour").run_test(size=SIZE) as pilot:
        app = await opened(pilot, step, seq)
        table = next(r for r in app.timeline.frame().step.attention if r.seq_id == seq)
        for j in (1, 2):
            await pilot.press("full_stop")
            assert app.attention.j == j
            assert app.selection == Selection(block=table.block_table[j])
        assert f"reading j=2 → p={table.block_table[2]}" in shown(app)
        await pilot.press("comma")
        assert app.attention.j == 1
        for _ in range(3):
            await pilot.press("comma")
        assert app.attention.j == 0  # never before the first block
        for _ in range(40):
            await pilot.press("full_stop")
        assert app.attention.j == math.ceil(table.seq_len / table.block_size) - 1


async def test_l_and_k_change_the_layer_and_head_and_wrap_around():
    step, seq = decode_step()
    async with replaying("tour").run_test(size=SIZE) as pilot:
        app = await opened(pilot, step, seq)
        await pilot.press("l")
        assert app.attention.layer == 1 and "layer 1" in shown(app)
        await pilot.press("k")
        assert app.attention.head == 1 and "head 1" in shown(app)
        await pilot.press("k", "k")
        assert app.attention.head == 3 and "KV head 1 read by query heads 2, 3" in shown(app)
        await pilot.press("l", "l", "l", "k")
        assert (app.attention.layer, app.attention.head) == (0, 0)


async def test_a_selected_token_opens_the_view_at_the_step_that_computed_it():
    step, seq = decode_step()
    async with replaying("tour").run_test(size=SIZE) as pilot:
        app = pilot.app
        await until(pilot, lambda: app.navigator is not None)
        app.seek_step(step + 3)
        token = next(r for r in app.timeline.frame(step).step.attention if r.seq_id == seq)
        app.select(Selection(seq=seq, token=token.seq_len - 1))
        await pilot.press("a")
        await pilot.pause()
        assert app.timeline.cursor == step
        assert f"t={token.seq_len - 1}" in shown(app)


async def test_the_view_follows_the_step_and_says_why_a_step_has_nothing():
    async with replaying("tour").run_test(size=SIZE) as pilot:
        app = await opened(pilot, 1, 0)
        assert "s0 t=" in shown(app)
        await pilot.press("b")  # frame 0: nothing ran
        await pilot.pause()
        assert "nothing has run yet" in shown(app)
        await pilot.press("n", "n")
        await pilot.pause()
        assert app.timeline.cursor == 2 and "s0 t=" in shown(app)


async def test_brackets_choose_the_query_within_a_prompt():
    async with replaying("tour").run_test(size=SIZE) as pilot:
        app = await opened(pilot, 1, 0)  # step 1 computes the prompt: several queries
        record = app.timeline.frame().step.attention[0]
        last = record.positions[-1]
        assert f"t={last} " in shown(app)
        await pilot.press("left_square_bracket")
        assert app.attention.query == len(record.positions) - 2
        assert f"t={last - 1} " in shown(app)


# -- snapshots -------------------------------------------------------------------------------


def reading_block_2(pilot_step: int = 12, seq: int = 0):
    """A ``run_before``: the tour's step 12, s0's attention read up to its block 2."""

    async def run_before(pilot) -> None:
        await opened(pilot, pilot_step, seq)
        await pilot.press("full_stop", "full_stop")
        await pilot.pause()

    return run_before


def test_the_view_at_80_by_24(snap_compare):
    # A short screen: the view takes the tables' rows; the pools still show block 2 selected.
    assert snap_compare(replaying("tour"), terminal_size=(80, 24), run_before=reading_block_2())


def test_the_view_at_160_by_50(snap_compare):
    # Every block's tokens beside its scores; the tables and pools highlight block 2.
    assert snap_compare(replaying("tour"), terminal_size=(160, 50), run_before=reading_block_2())


# -- a speculative step's tree, as tokens (issue 29 §3) -------------------------------------


@pytest.mark.skipif(
    not (model_directory("tiny-draft") / "model.safetensors").is_file(),
    reason="the speculative scenario drafts with the embedded tiny-draft model",
)
def test_the_speculative_tree_shows_its_guesses_then_which_were_accepted():
    trace, tokenizer = recorded("speculative")
    timeline = Timeline(opening_step_of_trace(trace.steps[0]))
    timeline.record(trace.steps)
    piece = TokenText(tokenizer).piece
    verified = 0
    for index in range(1, timeline.recorded):
        frame, after = timeline.frame(index), timeline.frame(index + 1)
        for propose in (e for e in frame.step.events if e.kind == "spec-propose" and e.tokens):
            guessed = next(
                t.plain for t in tree_lines(frame, piece) if t.plain.startswith(f"s{propose.seq} ")
            )
            assert "guessed" in guessed and "✓" not in guessed
            assert all(piece(token) in guessed for token in propose.tokens)
            accept = next(
                e for e in after.step.events if e.kind == "spec-accept" and e.seq == propose.seq
            )
            line = next(
                t.plain for t in tree_lines(after, piece) if t.plain.startswith(f"s{propose.seq} ")
            )
            assert line.count("✓") == len(accept.tokens) - 1
            assert all(piece(token) + "✓" in line for token in accept.tokens[:-1])
            assert line.count("✗") == len(propose.tokens) - (len(accept.tokens) - 1)
            assert line.endswith(f"+ {piece(accept.tokens[-1])} (target's own)")
            verified += 1
    assert verified, "the scenario must speculate"


async def test_the_hidden_event_log_does_not_wait_for_a_layout_while_the_view_is_open(
    monkeypatch,
):
    """Hidden, the log has no height: its scroll once waited for a layout that never came,
    re-queued at every refresh, and each key took a second longer."""
    calls = []
    settle = EventLog.settle
    monkeypatch.setattr(EventLog, "settle", lambda log: calls.append(1) or settle(log))
    async with replaying("tour").run_test(size=SIZE) as pilot:
        app = await opened(pilot, 12, 0)  # a log longer than its pane: it scrolls
        calls.clear()
        await pilot.press("n")
        await pilot.pause(0.5)
        assert len(calls) < 5, f"the log's settle ran {len(calls)} times for one step"
        await pilot.press("a")
        log = app.query_one(EventLog)
        await until(pilot, lambda: log.display and log.scroll_y == log.max_scroll_y > 0)


def test_screenshot_keys_are_the_key_maps_and_a_wrong_one_is_named():
    assert screenshot_keys("a, full_stop,full_stop") == ["a", "full_stop", "full_stop"]
    with pytest.raises(ValueError, match="--keys: 'dot' is no key of the TUI; use the key map"):
        screenshot_keys("a,dot")
