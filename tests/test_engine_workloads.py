"""Random workloads on small pools (hypothesis): requests arrive at random steps with random
prompts, lengths, parallel samples and beams. Every request finishes or is rejected with a
reason, the invariants hold after every step, no block leaks, and deterministic requests
(greedy, beam search) produce the same tokens as on a pool large enough for everything."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from minipaged import invariants
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine, RequestRejected
from minipaged.sampling import SamplingParams

KINDS = {
    "greedy": dict(temperature=0),
    "n=2": dict(temperature=0.8, n=2, seed=3),
    "beam=2": dict(temperature=0, use_beam_search=True, beam_width=2),
    "sample": dict(temperature=1.0, top_k=20, top_p=0.9, seed=5),
}


@pytest.fixture(scope="module")
def model(hf_llama):
    return load_model(hf_llama[1])


request_strategy = st.tuples(
    st.integers(0, 4),  # arrival step
    st.lists(st.integers(3, 127), min_size=1, max_size=20),  # prompt
    st.integers(1, 8),  # max_tokens
    st.sampled_from(sorted(KINDS)),
)


def play(model, requests, **engine_args):
    """Run the workload; return {index: outputs or the rejection} after checking the
    invariants after every step and that nothing leaked."""
    engine = LLMEngine(model, **engine_args)
    results: dict[int, object] = {}
    ids: dict[str, int] = {}
    step = 0
    while step <= 4 or engine.has_unfinished():
        for index, (arrival, prompt, max_tokens, kind) in enumerate(requests):
            if arrival == step:
                params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, **KINDS[kind])
                try:
                    ids[engine.add_request({"prompt_token_ids": prompt}, params)] = index
                except RequestRejected as rejected:
                    results[index] = rejected
        output = engine.step()
        invariants.assert_holds(output.state)
        for finished in output.finished:
            results[ids[finished.request_id]] = [c.token_ids for c in finished.outputs]
        step += 1
        assert step < 400, "the workload did not finish: the scheduler is stuck"
    bm = engine.block_manager
    assert bm.device.num_free == bm.device.num_blocks
    assert bm.host is None or bm.host.num_free == bm.host.num_blocks
    return results


# A quarter of the profile's examples (each plays two engines): 12 in dev, 25 in ci, 500 in
# thorough.
@settings(
    max_examples=max(1, settings().max_examples // 4),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    requests=st.lists(request_strategy, min_size=1, max_size=6),
    block_size=st.sampled_from([2, 4, 8]),
    num_gpu_blocks=st.integers(10, 24),
    num_cpu_blocks=st.sampled_from([0, 8, 32]),
    preemption=st.sampled_from(["recompute", "swap"]),
    watermark=st.sampled_from([0.0, 0.01, 0.2]),
    prefix_caching=st.sampled_from([None, "hash", "radix"]),
)
def test_random_workloads_finish_without_leaks_and_match_an_unpressured_run(
    model, requests, block_size, num_gpu_blocks, num_cpu_blocks, preemption, watermark,
    prefix_caching,
):  # fmt: skip
    assume(not (preemption == "swap" and num_cpu_blocks == 0))  # EngineConfig refuses the pair
    pressured = play(
        model,
        requests,
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        num_cpu_blocks=num_cpu_blocks,
        preemption=preemption,
        watermark=watermark,
        prefix_caching=prefix_caching,
    )
    roomy = play(model, requests, block_size=block_size, num_gpu_blocks=512)
    assert set(pressured) == set(range(len(requests))), "every request finishes or is rejected"
    for index, (_, _, max_tokens, kind) in enumerate(requests):
        result = pressured[index]
        if isinstance(result, RequestRejected):
            assert "num_gpu_blocks" in str(result)
            assert result.num_blocks > result.limit, "only a request that can never fit"
            continue
        params = SamplingParams(max_tokens=max_tokens, **KINDS[kind])
        assert len(result) == params.num_sequences
        assert all(len(tokens) == max_tokens for tokens in result)
        if kind in ("greedy", "beam=2"):
            assert result == roomy[index], f"request {index} ({kind}) changed under pressure"
