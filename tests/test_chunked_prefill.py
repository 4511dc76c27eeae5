"""Chunked prefill against transformers' generate (the oracle) and against chunking off: the
same greedy tokens for every token budget, block size, preemption mode and prefix cache, with
parallel samples, beams and speculation; blocks held for the computed tokens only; bad
settings refused in one line."""

from __future__ import annotations

import pytest

from minipaged import invariants
from minipaged.backend import PagedBatch, attention_paths
from minipaged.checkpoint import load_model
from minipaged.chunked_prefill import PrefillChunk, StepBudget, chunk_size
from minipaged.config import EngineConfig
from minipaged.engine import LLMEngine
from minipaged.sampling import SamplingParams
from minipaged.trace import event_from_dict
from tests.test_engine import hf_generate

# A long prompt (chunked at most budgets) among short ones; lengths end mid-block for B = 4, 16.
PROMPTS = [list(range(20, 57)), [5, 9, 13, 17, 21, 3, 7], [11, 12, 13]]
GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def model(hf_llama):
    return load_model(hf_llama[1])


@pytest.fixture(scope="module")
def expected(hf_llama):
    """transformers' greedy continuation of each prompt: the oracle, computed once."""
    return [hf_generate(hf_llama[0], prompt, GREEDY.max_tokens) for prompt in PROMPTS]


def chunked(model, budget: int, **settings) -> LLMEngine:
    """An engine with chunked prefill and a budget of ``budget`` tokens a step (no more
    sequences than the budget can decode at once)."""
    settings.setdefault("max_num_seqs", min(budget, 8))
    settings.setdefault("num_gpu_blocks", 64)  # the default pool is 128k blocks: slow to check
    return LLMEngine(model, enable_chunked_prefill=True, max_num_batched_tokens=budget, **settings)


def run(engine, requests):
    """Add ``(prompt, params)`` requests and step to the end, checking after every step the
    block invariants, the scheduler's budget and that each live sequence holds $\\lceil t/B \\rceil$
    blocks for its $t$ computed tokens. Returns the outputs by request id and the events."""
    for prompt, params in requests:
        engine.add_request({"prompt_token_ids": prompt}, params)
    bm = engine.block_manager
    outputs, events = {}, []
    while engine.has_unfinished():
        step = engine.step()
        invariants.assert_holds(step.state)
        events += step.events
        spent_in_all = step.num_prefill_tokens + step.num_decode_tokens  # a tree's nodes too
        assert spent_in_all <= engine.scheduler.max_num_batched_tokens, "speculation included"
        for spent in [event for event in step.events if isinstance(event, StepBudget)]:
            assert spent.used <= spent.budget, "the scheduler stays within its budget"
            assert step.num_prefill_tokens <= spent.used
        for seq, table in bm.tables.items():
            assert table.num_blocks == -(-table.num_tokens // bm.block_size), f"seq {seq}"
        for output in step.finished:
            outputs[output.request_id] = [c.token_ids for c in output.outputs]
    assert bm.device.num_free == bm.device.num_blocks, "every block comes back"
    return outputs, events


def chunks_of(events) -> list[PrefillChunk]:
    return [event for event in events if isinstance(event, PrefillChunk)]


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("budget", [1, 3, 8, 17, 64])
def test_greedy_tokens_with_chunking_equal_transformers_for_every_budget(
    model, expected, budget, block_size
):
    engine = chunked(model, budget, block_size=block_size, num_gpu_blocks=256 // block_size)
    outputs, events = run(engine, [(p, GREEDY) for p in PROMPTS])
    assert [outputs[str(i)] for i in range(len(PROMPTS))] == expected
    if budget < len(PROMPTS[0]):
        firsts = [chunk.first for chunk in chunks_of(events) if chunk.seq == 0]
        assert len(firsts) > 1, "the long prompt was meant to take several chunks"
        if budget % block_size:
            assert any(first % block_size for first in firsts[1:]), "a chunk starts mid-block"


def test_chunking_on_with_room_for_every_prompt_changes_nothing_but_its_own_events(model):
    """A budget larger than the prompts: the same tokens and block events as chunking off."""
    off_engine = LLMEngine(model, block_size=4, num_gpu_blocks=64)
    off, off_events = run(off_engine, [(p, GREEDY) for p in PROMPTS])
    on, on_events = run(chunked(model, 2048, block_size=4), [(p, GREEDY) for p in PROMPTS])
    assert on == off
    added = (PrefillChunk, StepBudget)
    assert [e for e in on_events if not isinstance(e, added)] == off_events


def test_chunking_off_records_no_chunk_events_and_prefills_each_prompt_in_one_step(model):
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=64)
    _, events = run(engine, [(p, GREEDY) for p in PROMPTS])
    assert not [e for e in events if isinstance(e, PrefillChunk | StepBudget)]


def test_a_request_holds_blocks_for_its_computed_tokens_only(model):
    """After t prompt tokens, ceil(t/B) blocks: the 37-token prompt at 8 tokens a step."""
    engine = chunked(model, 8, block_size=4)
    engine.add_request({"prompt_token_ids": PROMPTS[0]}, GREEDY)
    held = []
    while engine.has_unfinished() and len(held) < 5:
        step = engine.step()
        held.append(len(step.state.tables[0].blocks))
    assert held == [2, 4, 6, 8, 10]


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_a_partly_prefilled_request_survives_preemption_unchanged(hf_llama, model, preemption):
    """Two prompts decode while the long one arrives in chunks into a pool too small for
    all three: the long one, the latest arrival, is preempted part way through its prompt
    and still writes transformers' tokens."""
    hf, _ = hf_llama
    engine = chunked(
        model, 5, block_size=4, num_gpu_blocks=16, num_cpu_blocks=16, preemption=preemption
    )
    longer = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    requests = [(PROMPTS[1], longer), (PROMPTS[2], longer), (PROMPTS[0], GREEDY)]
    outputs, events = run(engine, requests)
    assert outputs["0"] == hf_generate(hf, PROMPTS[1], 24)
    assert outputs["1"] == hf_generate(hf, PROMPTS[2], 24)
    assert outputs["2"] == hf_generate(hf, PROMPTS[0], 8)
    partly = set()  # sequences part way through their prompts
    preempted_part_way = False
    for event in events:
        if isinstance(event, PrefillChunk):
            done = event.first + event.num_tokens >= event.total
            partly = partly - {event.seq} if done else partly | {event.seq}
        if event.kind == "preempt" and partly & set(event.seqs):
            preempted_part_way = True
    assert preempted_part_way, "the pool was meant to preempt a partly prefilled request"
    kinds = {event.kind for event in events}
    assert ("swap-in" if preemption == "swap" else "recompute") in kinds


@pytest.mark.parametrize("prefix_caching", ["hash", "radix"])
def test_a_prefix_cache_hit_is_skipped_and_the_rest_is_chunked(model, hf_llama, prefix_caching):
    hf, _ = hf_llama
    shared = PROMPTS[0]
    second = [*shared, 60, 61, 62, 63, 64, 65, 66, 67, 68]
    engine = chunked(model, 6, block_size=4, prefix_caching=prefix_caching)
    first_out, _ = run(engine, [(shared, GREEDY)])
    outputs, events = run(engine, [(second, GREEDY)])
    assert first_out["0"] == hf_generate(hf, shared, 8)
    assert outputs["1"] == hf_generate(hf, second, 8)
    hit = next(event for event in events if event.kind == "prefix-hit")
    assert hit.num_tokens == 36  # nine full blocks of the shared 37 tokens
    firsts = [chunk.first for chunk in chunks_of(events)]
    assert firsts[0] == 36 and len(firsts) > 1, "the cached part skipped, the rest chunked"


def test_parallel_samples_and_beams_with_chunking_equal_transformers(model, hf_llama):
    hf, _ = hf_llama
    engine = chunked(model, 7, block_size=4)
    samples = SamplingParams(max_tokens=6, temperature=0, n=3, ignore_eos=True)
    beams = SamplingParams(
        max_tokens=6, temperature=0, use_beam_search=True, beam_width=2, ignore_eos=True
    )
    outputs, events = run(engine, [(PROMPTS[0], samples), (PROMPTS[1], beams)])
    assert outputs["0"] == hf_generate(hf, PROMPTS[0], 6) * 3
    assert outputs["1"] == hf_generate(
        hf, PROMPTS[1], 6, num_beams=2, num_return_sequences=2, length_penalty=1.0,
        early_stopping=False,
    )  # fmt: skip
    assert len(chunks_of(events)) > 2


def test_a_group_recomputed_after_preemption_is_chunked_in_step(model, hf_llama):
    """n = 2 samples, the latest arrival, with no host pool: preemption recomputes both
    sequences, chunk by chunk and side by side, and they are still transformers' tokens."""
    hf, _ = hf_llama
    engine = chunked(model, 6, block_size=4, num_gpu_blocks=16, num_cpu_blocks=0)
    first = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True)
    pair = SamplingParams(max_tokens=16, temperature=0, n=2, ignore_eos=True)
    outputs, events = run(engine, [(PROMPTS[0][:21], first), (PROMPTS[1], pair)])
    assert outputs["0"] == hf_generate(hf, PROMPTS[0][:21], 30)
    assert outputs["1"] == hf_generate(hf, PROMPTS[1], 16) * 2
    again = sorted({event.seq for event in events if event.kind == "recompute"})
    assert len(again) == 2, "both samples were meant to be recomputed"
    after = events[next(i for i, e in enumerate(events) if e.kind == "recompute") :]
    spans = [[(c.first, c.num_tokens) for c in chunks_of(after) if c.seq == s] for s in again]
    assert spans[0] == spans[1] and len(spans[0]) > 1, "the two move through it together"


def test_speculative_decoding_with_chunking_writes_transformers_tokens(model, expected):
    speculative = {"method": "ngram", "num_speculative_tokens": 3}
    engine = chunked(model, 6, block_size=4, speculative=speculative)
    outputs, events = run(engine, [(p, GREEDY) for p in PROMPTS])
    assert [outputs[str(i)] for i in range(len(PROMPTS))] == expected
    assert "spec-verify" in {event.kind for event in events}


def test_the_cpu_twins_run_decodes_and_leave_chunks_to_the_reference(model, expected):
    pytest.importorskip("numba")
    engine = chunked(model, 5, block_size=4, backend="numba-cpu")
    outputs, _ = run(engine, [(p, GREEDY) for p in PROMPTS])
    assert [outputs[str(i)] for i in range(len(PROMPTS))] == expected
    assert attention_paths("numba-cpu") == (
        "numba-cpu for decodes; torch, the reference, for prompts and their chunks"
    )
    assert attention_paths("torch") == "torch"
    # A chunk of several queries is the prefill part of a step; one of one query decodes.
    batch = PagedBatch.from_lists([[0, 1], [2], [3]], [7, 3, 2], 4, query_lens=[3, 1, 1])
    (decode_rows, decode_seqs), (prefill_rows, prefill_seqs) = batch.split
    assert decode_rows.tolist() == [3, 4]
    assert prefill_seqs.tolist() == [0] and prefill_rows.tolist() == [0, 1, 2]
    assert decode_seqs.tolist() == [1, 2]


def test_decodes_take_the_budget_first_then_the_partly_prefilled_then_admissions(model):
    engine = chunked(model, 8, block_size=4)
    engine.add_request({"prompt_token_ids": PROMPTS[1]}, GREEDY)  # seq 0: 7 tokens
    engine.add_request({"prompt_token_ids": PROMPTS[2]}, GREEDY)  # seq 1: 3 tokens
    first = engine.step()  # seq 0 whole, then the 1 token left of the budget to seq 1
    engine.add_request({"prompt_token_ids": PROMPTS[0]}, GREEDY)  # seq 2: 37 tokens
    budgets = [first, engine.step(), engine.step()]
    spent = [next(e for e in s.events if isinstance(e, StepBudget)) for s in budgets]
    assert [(s.decodes, s.chunks) for s in spent] == [
        ((), ((0, 7), (1, 1))),
        ((0,), ((1, 2), (2, 5))),  # a decode, seq 1 finishes its prompt, seq 2 is admitted
        ((0, 1), ((2, 6),)),  # two decodes, and seq 2 goes on with what they leave
    ]
    assert all(s.used == s.budget == 8 for s in spent)


def test_chunk_and_budget_events_narrate_and_survive_a_trace_round_trip():
    chunk = PrefillChunk(3, 64, 32, 200, 3, 7, 6)
    assert chunk.narrate().startswith(
        "seq 3 prefills tokens 64–95 of 200 (chunk 3 of 7), 6 blocks allocated"
    )
    spent = StepBudget(32, (0, 1, 2), ((3, 29),))
    assert "3 decode (seq 0, 1, 2); seq 3 prefills 29; 0 left" in spent.narrate()
    for event in (chunk, spent):
        assert event_from_dict(event.to_dict()) == event


def test_the_chunk_rule_shares_the_budget_and_respects_the_cap():
    assert chunk_size(remaining=100, left=32) == 32
    assert chunk_size(remaining=10, left=32) == 10
    assert chunk_size(remaining=100, left=32, width=3) == 10
    assert chunk_size(remaining=100, left=32, cap=16) == 16
    assert chunk_size(remaining=100, left=2, width=3) == 0


def test_the_long_prefill_threshold_caps_every_chunk(model, expected):
    engine = chunked(model, 64, block_size=4, long_prefill_token_threshold=10)
    outputs, events = run(engine, [(PROMPTS[0], GREEDY)])
    assert outputs["0"] == expected[0]
    assert [chunk.num_tokens for chunk in chunks_of(events)] == [10, 10, 10, 7]


def test_a_prompt_longer_than_the_budget_is_served_with_chunking_and_refused_without(
    model, expected
):
    engine = LLMEngine(model, max_num_batched_tokens=16, max_num_seqs=4, num_gpu_blocks=64)
    engine.add_request(PROMPTS[1], GREEDY)
    engine.step()  # a request already running
    with pytest.raises(ValueError) as refused:
        engine.add_request(PROMPTS[0])
    message = str(refused.value)
    assert "37 tokens" in message and "max_num_batched_tokens is 16" in message
    assert "--enable-chunked-prefill" in message and "\n" not in message
    outputs, _ = run(engine, [])  # the running request loses nothing
    assert outputs == {"0": expected[1]}
    outputs, _ = run(chunked(model, 16, block_size=4), [(PROMPTS[0], GREEDY)])
    assert len(outputs["0"][0]) == GREEDY.max_tokens


def test_a_prompt_longer_than_the_context_is_still_refused_with_chunking(model):
    engine = chunked(model, 16)
    with pytest.raises(ValueError, match="the model's context is 256 tokens"):
        engine.add_request([5] * 300)
    assert not engine.has_unfinished()


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"max_num_batched_tokens": 0}, ValueError, "max_num_batched_tokens must be an integer"),
        ({"max_num_batched_tokens": -5}, ValueError, "got -5"),
        ({"max_num_batched_tokens": 2.5}, ValueError, "got 2.5"),
        ({"max_num_batched_tokens": True}, ValueError, "got True"),
        ({"max_num_batched_tokens": "64"}, ValueError, "got '64'"),
        ({"max_num_batched_tokens": 4, "max_num_seqs": 8}, ValueError, "below max_num_seqs=8"),
        ({"enable_chunked_prefill": "yes"}, ValueError, "True or False, got 'yes'"),
        ({"enable_chunked_prefill": 1}, ValueError, "True or False, got 1"),
        ({"long_prefill_token_threshold": -1}, ValueError, "from 0 to 2,147,483,647, got -1"),
        ({"long_prefill_token_threshold": 8}, ValueError, "--enable-chunked-prefill"),
    ],
)
def test_bad_chunking_settings_are_refused_in_one_line(settings, error, message):
    with pytest.raises(error) as refused:
        EngineConfig(**settings)
    assert message in str(refused.value) and "\n" not in str(refused.value)
