"""A peer's test of the offline API DESIGN.md promises, the way a vLLM user would use it.

``from minipaged import LLM, SamplingParams``; ``LLM(model="tiny", block_size, num_gpu_blocks,
num_cpu_blocks, backend, preemption, prefix_caching, seed, device)``; ``llm.generate`` with a
string, a list, or ``{"prompt_token_ids": [...]}``; ``RequestOutput.outputs[i].token_ids`` and
``.text``; every ``SamplingParams`` field doing what vLLM users expect; and ``llm.engine``'s
``add_request`` / ``step()`` -> ``StepOutput`` / ``has_unfinished()``, with the block-state
snapshot checked against the invariants after every step.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch

from minipaged import LLM, SamplingParams

PROMPTS = ["It is a truth universally acknowledged", "Mr. Darcy"]
GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def llm():
    return LLM(model="tiny", backend="torch", seed=0)


@pytest.fixture(scope="module")
def greedy_reference(llm):
    return [r.outputs[0].token_ids for r in llm.generate(PROMPTS, GREEDY)]


def token_ids(outputs):
    return [[c.token_ids for c in r.outputs] for r in outputs]


def test_generate_returns_one_request_output_per_prompt_in_order(llm):
    outputs = llm.generate(PROMPTS, GREEDY)
    assert len(outputs) == 2
    assert [r.prompt for r in outputs] == PROMPTS
    for r in outputs:
        (completion,) = r.outputs
        assert len(completion.token_ids) == 12
        assert all(isinstance(t, int) for t in completion.token_ids)
        assert isinstance(completion.text, str) and completion.text


def test_a_single_prompt_gives_a_list_of_one(llm, greedy_reference):
    outputs = llm.generate(PROMPTS[0], GREEDY)
    assert isinstance(outputs, list) and len(outputs) == 1
    assert outputs[0].outputs[0].token_ids == greedy_reference[0]


def test_a_prompt_of_token_ids_equals_its_text(llm, greedy_reference):
    ids = llm.generate(PROMPTS[0], GREEDY)[0].prompt_token_ids
    outputs = llm.generate({"prompt_token_ids": list(ids)}, GREEDY)
    assert outputs[0].outputs[0].token_ids == greedy_reference[0]
    assert outputs[0].prompt_token_ids == list(ids)


def test_temperature_zero_is_greedy_and_deterministic(llm, greedy_reference):
    assert token_ids(llm.generate(PROMPTS, GREEDY)) == [[t] for t in greedy_reference]
    top_1 = SamplingParams(max_tokens=12, temperature=1.0, top_k=1, ignore_eos=True, seed=3)
    assert [r.outputs[0].token_ids for r in llm.generate(PROMPTS, top_1)] == greedy_reference
    tiny_p = SamplingParams(max_tokens=12, temperature=1.0, top_p=1e-6, ignore_eos=True, seed=3)
    assert [r.outputs[0].token_ids for r in llm.generate(PROMPTS, tiny_p)] == greedy_reference


def test_max_tokens_bounds_every_output_and_ignore_eos_reaches_it(llm):
    for r in llm.generate(PROMPTS, SamplingParams(max_tokens=5, temperature=0.8, seed=1)):
        assert 1 <= len(r.outputs[0].token_ids) <= 5
    for r in llm.generate(PROMPTS, SamplingParams(max_tokens=7, ignore_eos=True, seed=1)):
        assert len(r.outputs[0].token_ids) == 7


def test_n_gives_n_outputs_that_differ_when_sampling(llm):
    (r,) = llm.generate(PROMPTS[0], SamplingParams(n=4, max_tokens=16, ignore_eos=True, seed=7))
    assert len(r.outputs) == 4
    assert len({tuple(c.token_ids) for c in r.outputs}) > 1


def test_n_greedy_samples_are_all_the_greedy_answer(llm, greedy_reference):
    (r,) = llm.generate(
        PROMPTS[0], SamplingParams(n=3, max_tokens=12, temperature=0, ignore_eos=True)
    )
    assert [c.token_ids for c in r.outputs] == [greedy_reference[0]] * 3


def test_a_request_seed_reproduces_its_samples_whatever_runs_beside_it(llm):
    seeded = SamplingParams(n=2, max_tokens=10, temperature=1.0, seed=11, ignore_eos=True)
    alone = llm.generate(PROMPTS[0], seeded)[0]
    other = SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True)
    beside = llm.generate([PROMPTS[1], PROMPTS[0]], [other, seeded])[1]
    assert [c.token_ids for c in alone.outputs] == [c.token_ids for c in beside.outputs]


def test_the_llm_seed_makes_unseeded_sampling_reproducible():
    params = SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True)
    first = token_ids(LLM("tiny", backend="torch", seed=5).generate(PROMPTS, params))
    second = token_ids(LLM("tiny", backend="torch", seed=5).generate(PROMPTS, params))
    assert first == second


def test_beam_search_returns_beam_width_outputs_best_first(llm, greedy_reference):
    params = SamplingParams(use_beam_search=True, beam_width=3, max_tokens=8, ignore_eos=True)
    (r,) = llm.generate(PROMPTS[0], params)
    assert len(r.outputs) == 3
    scores = [c.cumulative_logprob for c in r.outputs]
    assert scores == sorted(scores, reverse=True)
    assert len({tuple(c.token_ids) for c in r.outputs}) == 3
    width_1 = SamplingParams(use_beam_search=True, beam_width=1, max_tokens=12, ignore_eos=True)
    assert llm.generate(PROMPTS[0], width_1)[0].outputs[0].token_ids == greedy_reference[0]


def test_beam_search_n_is_vllms_beam_count_or_the_n_best_of_the_beams(llm):
    width_4 = SamplingParams(use_beam_search=True, beam_width=4, max_tokens=8, ignore_eos=True)
    (all_four,) = llm.generate(PROMPTS[0], width_4)
    beams = [c.token_ids for c in all_four.outputs]
    # vLLM's spelling: n beams with beam_width left at 1 runs n beams and returns them all
    vllm_spelling = SamplingParams(use_beam_search=True, n=4, max_tokens=8, ignore_eos=True)
    assert vllm_spelling.beam_width == 4
    assert [c.token_ids for c in llm.generate(PROMPTS[0], vllm_spelling)[0].outputs] == beams
    # n below the width: the same search, only its n best hypotheses returned
    two_best = SamplingParams(
        use_beam_search=True, beam_width=4, n=2, max_tokens=8, ignore_eos=True
    )
    assert [c.token_ids for c in llm.generate(PROMPTS[0], two_best)[0].outputs] == beams[:2]


def test_the_best_beam_scores_at_least_the_greedy_sequence(llm):
    greedy = llm.generate(PROMPTS[1], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
    beams = llm.generate(
        PROMPTS[1],
        SamplingParams(use_beam_search=True, beam_width=4, max_tokens=8, ignore_eos=True),
    )
    assert beams[0].outputs[0].cumulative_logprob >= greedy[0].outputs[0].cumulative_logprob - 1e-4


@pytest.mark.parametrize(
    "settings",
    [
        dict(block_size=8),
        dict(block_size=4, num_gpu_blocks=64),
        dict(prefix_caching="hash"),
        dict(prefix_caching="radix"),
        dict(prefix_caching=None),
        dict(device="cpu"),
        dict(block_size=4, num_gpu_blocks=8, num_cpu_blocks=8, preemption="swap"),
        dict(block_size=4, num_gpu_blocks=8, preemption="recompute"),
    ],
    ids=lambda settings: ",".join(f"{k}={v}" for k, v in settings.items()),
)
def test_memory_settings_never_change_greedy_tokens(settings, greedy_reference):
    llm = LLM(model="tiny", backend="torch", **settings)
    assert [r.outputs[0].token_ids for r in llm.generate(PROMPTS, GREEDY)] == greedy_reference


def test_a_tiny_pool_preempts_and_the_events_say_so():
    llm = LLM(
        model="tiny",
        backend="torch",
        block_size=4,
        num_gpu_blocks=8,
        num_cpu_blocks=8,
        preemption="swap",
    )
    kinds = Counter()
    llm.generate(PROMPTS, GREEDY, on_step=lambda step: kinds.update(e.kind for e in step.events))
    assert kinds["preempt"] and kinds["swap-out"] and kinds["swap-in"]


@pytest.mark.parametrize(
    "settings",
    [
        dict(block_size=0),
        dict(num_gpu_blocks=0),
        dict(backend="cudnn"),
        dict(preemption="evict"),
        dict(prefix_caching="lru"),
        dict(model="no-such-model"),
    ],
    ids=lambda settings: ",".join(f"{k}={v}" for k, v in settings.items()),
)
def test_a_bad_setting_is_one_line_that_names_it(settings):
    ((value),) = settings.values()
    with pytest.raises((ValueError, TypeError, FileNotFoundError)) as error:
        LLM(**{"model": "tiny", **settings})
    message = str(error.value)
    assert "\n" not in message
    assert str(value) in message


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_device_cuda_without_a_gpu_is_refused_in_one_line():
    with pytest.raises((ValueError, RuntimeError)) as error:
        LLM(model="tiny", device="cuda")
    assert "cuda" in str(error.value).lower() and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_tokens", 0),
        ("temperature", -1.0),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -2),
        ("n", 0),
        ("beam_width", 0),
    ],
)
def test_a_bad_sampling_field_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_the_engine_steps_a_request_to_the_end_with_sound_snapshots(llm, greedy_reference):
    from minipaged import invariants

    engine = llm.engine
    request_id = engine.add_request(PROMPTS[0], GREEDY)
    assert engine.has_unfinished()
    tokens, finished, steps = [], [], 0
    while engine.has_unfinished():
        step = engine.step()
        steps += 1
        tokens += list(step.new_tokens.values())
        assert all(isinstance(e.narrate(), str) and e.narrate() for e in step.events)
        assert step.state is not None
        invariants.assert_holds(step.state)
        finished += step.finished
    assert tokens == greedy_reference[0]
    assert steps == 12  # one prefill step that samples, then one token a step
    assert [r.request_id for r in finished] == [request_id]
    assert finished[0].outputs[0].token_ids == greedy_reference[0]
    assert not step.state.tables  # no leak after all sequences end
    assert all(r == 0 for r in step.state.device_refcounts)


def test_engine_forks_for_n_and_copies_on_write_once_the_samples_diverge(llm):
    engine = llm.engine
    engine.add_request(PROMPTS[1], SamplingParams(n=3, max_tokens=6, seed=2, ignore_eos=True))
    kinds = Counter()
    while engine.has_unfinished():
        step = engine.step()
        kinds.update(e.kind for e in step.events)
        for table in step.state.tables.values():
            assert len(table.blocks) == -(-table.num_tokens // step.state.block_size)
    assert kinds["fork"] == 2
    assert kinds["cow-copy"] >= 1


def test_top_k_minus_one_means_off_as_in_vllm(llm):
    params = dict(max_tokens=6, temperature=1.0, seed=4, ignore_eos=True)
    off = llm.generate(PROMPTS[0], SamplingParams(top_k=0, **params))
    minus_one = llm.generate(PROMPTS[0], SamplingParams(top_k=-1, **params))
    assert token_ids(off) == token_ids(minus_one)


def test_sampling_params_fields_come_in_the_designs_order():
    """DESIGN.md: ``SamplingParams(max_tokens, temperature, top_p, top_k, n, use_beam_search,
    beam_width, ignore_eos, seed)``, positionally too."""
    params = SamplingParams(8, 0.0, 0.9, 5, 2, False, 1, True, 42)
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k, params.n) == (
        8,
        0.0,
        0.9,
        5,
        2,
    )
    assert (params.use_beam_search, params.beam_width, params.ignore_eos, params.seed) == (
        False,
        1,
        True,
        42,
    )


def test_generate_takes_vllms_use_tqdm(llm, greedy_reference, capsys):
    outputs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [r.outputs[0].token_ids for r in outputs] == greedy_reference
    assert not capsys.readouterr().err


@pytest.mark.skipif(
    torch.cuda.is_available() or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1",
    reason="checks the refusal where neither a GPU nor the simulator can run the kernels",
)
def test_backend_numba_without_a_gpu_or_the_simulator_is_refused_naming_the_way_out():
    with pytest.raises(ValueError) as error:
        LLM(model="tiny", backend="numba")
    message = str(error.value)
    assert "\n" not in message and "NUMBA_ENABLE_CUDASIM" in message and "numba-cpu" in message


def test_a_step_output_carries_tokens_events_and_a_block_state_snapshot(llm, greedy_reference):
    """DESIGN.md: ``step()`` -> ``StepOutput`` "with tokens, events and block-state snapshot",
    read by those names."""
    from minipaged import invariants

    engine = llm.engine
    engine.add_request(PROMPTS[0], GREEDY)
    tokens = []
    while engine.has_unfinished():
        step = engine.step()
        tokens += list(step.tokens.values())
        assert isinstance(step.events, tuple)
        invariants.assert_holds(step.snapshot)
        assert step.block_state is step.snapshot
    assert tokens == greedy_reference[0]
