"""The model runner turns a scheduler plan into the step's tensors: every token of the plan at
its position, written at the slot §3 defines, with the block tables padded for the kernels."""

from __future__ import annotations

import contextlib

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged import memory
from minipaged.attention import NO_BLOCK, paged_attention_prefill
from minipaged.backend import PagedBatch, paged_attention
from minipaged.engine import LLMEngine, RequestRejected
from minipaged.kv_cache import KVCache, write_kv
from minipaged.model import Llama, LlamaConfig
from minipaged.model_runner import ModelRunner
from minipaged.sampling import SamplingParams
from minipaged.scheduler import ScheduledSeq, SchedulerOutput
from minipaged.sequence import Sequence

NUM_BLOCKS = 64
CONFIG = LlamaConfig(  # a one-layer model with 2 query heads over 1 KV head
    vocab_size=100,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
)


@st.composite
def plans(draw) -> tuple[int, SchedulerOutput]:
    """A block size and a plan of 1–6 sequences, each a prefill (several query tokens) or a
    decode (one), with block tables of distinct blocks in a shuffled order."""
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    blocks = draw(st.permutations(range(NUM_BLOCKS)))
    scheduled, next_block = [], 0
    for seq_id in range(draw(st.integers(1, 6))):
        seq_len = draw(st.integers(1, 40))
        query_len = draw(st.sampled_from([1, draw(st.integers(1, seq_len))]))
        needed = memory.num_logical_blocks(seq_len, block_size)
        if next_block + needed > NUM_BLOCKS:
            break
        table = list(blocks[next_block : next_block + needed])
        next_block += needed
        tokens = draw(st.lists(st.integers(0, 99), min_size=seq_len, max_size=seq_len))
        seq = Sequence(seq_id, tokens, prompt_len=seq_len)
        # prepare reads only the sequence, its query length and its table, not the group.
        scheduled.append(ScheduledSeq(None, seq, query_len, table, query_len > 1))
    return block_size, SchedulerOutput(scheduled=scheduled)


def runner(block_size: int) -> ModelRunner:
    cache = KVCache(1, NUM_BLOCKS, 1, block_size, 8)
    return ModelRunner(Llama(CONFIG), cache)


@given(plans())
def test_prepare_lists_each_query_token_at_its_position_and_slot(case):
    block_size, plan = case
    tokens, positions, batch = runner(block_size).prepare(plan)
    expected_tokens, expected_positions, expected_slots = [], [], []
    for item in plan.scheduled:
        seq_len = len(item.seq.token_ids)
        for t in range(seq_len - item.num_query_tokens, seq_len):
            expected_tokens.append(item.seq.token_ids[t])
            expected_positions.append(t)
            expected_slots.append(memory.slot(item.block_table, t, block_size))
    assert tokens.tolist() == expected_tokens
    assert positions.tolist() == expected_positions
    assert batch.slot_mapping.tolist() == expected_slots
    assert batch.slot_mapping.dtype == torch.int64


@given(plans())
def test_prepare_pads_block_tables_and_states_each_length(case):
    block_size, plan = case
    _, _, batch = runner(block_size).prepare(plan)
    width = max(len(item.block_table) for item in plan.scheduled)
    assert batch.block_tables.dtype == torch.int32
    assert batch.block_tables.tolist() == [
        item.block_table + [NO_BLOCK] * (width - len(item.block_table)) for item in plan.scheduled
    ]
    assert batch.seq_lens.tolist() == [len(item.seq.token_ids) for item in plan.scheduled]
    assert batch.query_lens.tolist() == [item.num_query_tokens for item in plan.scheduled]
    assert batch.block_size == block_size


@given(plans())
def test_execute_returns_one_row_of_logits_per_scheduled_sequence(case):
    """Prefill rows are reduced to each sequence's last token; decode rows are all last."""
    block_size, plan = case
    model_runner = runner(block_size)
    logits = model_runner.execute(plan)
    assert logits.shape == (len(plan.scheduled), 100)
    tokens, positions, batch = model_runner.prepare(plan)
    with torch.inference_mode():
        every = model_runner.model(tokens, positions, model_runner.kv_cache, batch)
    last = torch.cumsum(batch.query_lens, 0) - 1
    torch.testing.assert_close(logits, every[last])


@given(plans())
def test_a_mixed_step_attends_as_if_every_row_were_a_prefill(case):
    """A step with decodes and prompts side by side sends the decode rows through the decode
    path and the prompts through prefill (``backend.split_rows``); every row must get what
    the causal prefill over the whole batch gives it."""
    block_size, plan = case
    _, _, batch = runner(block_size).prepare(plan)
    generator = torch.Generator().manual_seed(0)
    num_rows = int(batch.query_lens.sum())
    pools = torch.randn(2, NUM_BLOCKS, 1, block_size, 8, generator=generator)
    query = torch.randn(num_rows, 2, 8, generator=generator)
    key, value = torch.randn(2, num_rows, 1, 8, generator=generator)
    split = pools.clone()
    output = paged_attention(query, key, value, split[0], split[1], batch, 0.5)
    whole = pools.clone()
    write_kv(whole[0], whole[1], key, value, batch.slot_mapping)
    paged = (whole[0], whole[1], batch.block_tables, batch.seq_lens, batch.query_lens)
    torch.testing.assert_close(output, paged_attention_prefill(query, *paged, 0.5, block_size))
    torch.testing.assert_close(split, whole)


def prepare_checked_against_a_fresh_build(model_runner: ModelRunner) -> list[int]:
    """Make ``model_runner.prepare`` check every batch it builds against ``PagedBatch.from_lists``
    (slots through ``memory.slot``, tables padded apart) and plain lists of tokens and
    positions; return the list that counts the batches checked."""
    prepare, checked = model_runner.prepare, []

    def checked_prepare(plan: SchedulerOutput):
        tokens, positions, batch = prepare(plan)
        items = plan.scheduled
        fresh = PagedBatch.from_lists(
            [item.block_table for item in items],
            [len(item.seq.token_ids) for item in items],
            model_runner.kv_cache.block_size,
            [item.num_query_tokens for item in items],
        )
        for name in ("slot_mapping", "block_tables", "seq_lens", "query_lens"):
            mine, theirs = getattr(batch, name), getattr(fresh, name)
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name
        expected = [
            (item.seq.token_ids[t], t)
            for item in items
            for t in range(len(item.seq.token_ids) - item.num_query_tokens, len(item.seq.token_ids))
        ]
        assert list(zip(tokens.tolist(), positions.tolist(), strict=True)) == expected
        checked.append(len(items))
        return tokens, positions, batch

    model_runner.prepare = checked_prepare
    return checked


@settings(max_examples=max(1, settings().max_examples // 4), deadline=None)
@given(
    requests=st.lists(
        st.tuples(
            st.integers(0, 3),  # arrival step
            st.integers(1, 30),  # prompt length
            st.integers(1, 12),  # max_tokens
            st.sampled_from([1, 2]),  # n: parallel samples fork and copy on write
        ),
        min_size=1,
        max_size=6,
    ),
    block_size=st.sampled_from([1, 4, 16]),
    num_gpu_blocks=st.integers(8, 40),
    preemption=st.sampled_from(["recompute", "swap"]),
)
def test_every_step_batch_equals_one_built_fresh_through_admit_finish_and_preempt(
    requests, block_size, num_gpu_blocks, preemption
):
    """The step's tensors, built from lists into two buffers, equal a batch built the plain
    way from the plan, at every step of workloads whose requests arrive, fork, finish and are
    preempted (recomputed or swapped) on a pool too small for all of them."""
    engine = LLMEngine(
        Llama(CONFIG),
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        num_cpu_blocks=64,
        preemption=preemption,
        watermark=0.0,
    )
    checked = prepare_checked_against_a_fresh_build(engine.runner)
    step, admitted = 0, 0
    while step <= 3 or engine.has_unfinished():
        for arrival, length, max_tokens, n in requests:
            if arrival == step:
                params = SamplingParams(max_tokens=max_tokens, n=n, seed=step, ignore_eos=True)
                with contextlib.suppress(RequestRejected):  # too large for this pool
                    engine.add_request({"prompt_token_ids": list(range(1, length + 1))}, params)
                    admitted += 1
        engine.step()
        step += 1
    assert len(checked) >= min(admitted, 1), "an admitted request ran no batch"
