"""Speculative decoding in the engine changes no output: greedy tokens equal transformers'
(and so plain decoding's) for both drafters, every block size, under memory pressure with swap
and with recompute, and with prefix caching; sampled tokens follow plain sampling's
distribution (chi-square, stated false-alarm rate). Every step keeps the invariants and every
block comes back."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from minipaged import cli, invariants
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine
from minipaged.model import Llama, LlamaConfig
from minipaged.sampling import SamplingParams
from minipaged.speculative import SpeculativeConfig
from minipaged.trace import event_from_dict
from tests.test_engine import PROMPTS, hf_generate
from tests.test_speculative_parts import FALSE_ALARM, chi_square_p_value

GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
SPEC_KINDS = {"spec-propose", "spec-verify", "spec-accept", "spec-prune"}


@pytest.fixture(scope="module")
def model(hf_llama):
    return load_model(hf_llama[1])


def small_llama(vocab_size: int, seed: int, hidden: int = 32, sharpness: float = 1.0) -> Llama:
    """A random Llama; ``sharpness`` scales ``lm_head`` so its distributions are far from
    uniform (a random init's are nearly uniform: a distribution test would see nothing)."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size, hidden, 2 * hidden, 2, 2, 1, hidden // 2)
    model = Llama(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    return model


def settings(method: str, model: Llama | None = None, **fields) -> SpeculativeConfig:
    if method == "ngram":
        return SpeculativeConfig("ngram", **fields)
    vocab = model.config.vocab_size
    draft = small_llama(vocab, seed=7, sharpness=30.0) if method == "draft" else model
    return SpeculativeConfig("draft", draft_model=draft, **fields)


def run(engine, requests):
    """Step ``(prompt, params)`` requests to the end, checking the invariants after every
    step; return the outputs by request id and the events."""
    for prompt, params in requests:
        engine.add_request({"prompt_token_ids": prompt}, params)
    outputs, events = {}, []
    while engine.has_unfinished():
        step = engine.step()
        invariants.assert_holds(step.state)
        assert not any(s not in step.sequences for s in step.state.tables), "a branch outlived"
        events += step.events
        for output in step.finished:
            outputs[output.request_id] = [c.token_ids for c in output.outputs]
    bm = engine.block_manager
    assert bm.device.num_free == bm.device.num_blocks, "every block comes back"
    return outputs, events


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("method", ["ngram", "draft", "self"])
def test_greedy_speculation_writes_transformers_tokens(hf_llama, model, method, block_size):
    hf, _ = hf_llama
    engine = LLMEngine(
        model,
        block_size=block_size,
        num_gpu_blocks=1024 // block_size,
        speculative=settings(method, model, num_speculative_tokens=3, branching=2),
    )
    outputs, events = run(engine, [(p, GREEDY) for p in PROMPTS])
    for i, prompt in enumerate(PROMPTS):
        assert outputs[str(i)] == hf_generate(hf, prompt, 12), f"prompt {i}"
    assert {e.kind for e in events} >= SPEC_KINDS
    if method == "self":  # its own draft: the top guess is always right, every step keeps d
        accepts = [e for e in events if e.kind == "spec-accept"]
        proposes = [e for e in events if e.kind == "spec-propose" and e.num_nodes]
        assert len(accepts) == len(proposes)
        assert all(len(a.tokens) - 1 == p.depth for a, p in zip(accepts, proposes, strict=True))
        assert engine.speculator.num_verify_passes < sum(len(o[0]) for o in outputs.values()) / 3


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("method", ["ngram", "self"])
def test_greedy_speculation_survives_preemption_unchanged(hf_llama, model, method, preemption):
    hf, _ = hf_llama
    engine = LLMEngine(
        model,
        block_size=4,
        num_gpu_blocks=14,
        num_cpu_blocks=16,
        preemption=preemption,
        speculative=settings(method, model, num_speculative_tokens=3, branching=2),
    )
    outputs, events = run(engine, [(p, GREEDY) for p in PROMPTS])
    kinds = {e.kind for e in events}
    assert "preempt" in kinds and "spec-accept" in kinds
    assert ("swap-in" if preemption == "swap" else "recompute") in kinds
    for i, prompt in enumerate(PROMPTS):
        assert outputs[str(i)] == hf_generate(hf, prompt, 12), f"prompt {i}"


@pytest.mark.parametrize("prefix_caching", ["hash", "radix"])
def test_greedy_speculation_with_prefix_caching_is_unchanged(hf_llama, model, prefix_caching):
    hf, _ = hf_llama
    shared = list(range(30, 46))
    prompts = [shared + [5, 6], shared + [7], shared + [5, 6, 8, 9]]
    engine = LLMEngine(
        model,
        block_size=4,
        num_gpu_blocks=96,
        prefix_caching=prefix_caching,
        speculative=settings("self", model, num_speculative_tokens=2, branching=2),
    )
    outputs, events = run(engine, [(p, GREEDY) for p in prompts])
    assert "prefix-hit" in {e.kind for e in events}
    for i, prompt in enumerate(prompts):
        assert outputs[str(i)] == hf_generate(hf, prompt, 12), f"prompt {i}"


def test_the_numba_cpu_backend_verifies_on_the_reference_and_says_so(hf_llama, model):
    pytest.importorskip("numba")
    hf, _ = hf_llama
    engine = LLMEngine(
        model, block_size=4, num_gpu_blocks=64, backend="numba-cpu",
        speculative=settings("self", model, num_speculative_tokens=2, branching=1),
    )  # fmt: skip
    outputs, events = run(engine, [(PROMPTS[0], GREEDY)])
    assert outputs["0"] == hf_generate(hf, PROMPTS[0], 12)
    verifies = [e for e in events if e.kind == "spec-verify"]
    assert verifies and all("reference" in e.narrate() for e in verifies)


def test_speculative_events_narrate_and_survive_a_trace_round_trip(model):
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=64, speculative=settings("draft", model))
    _, events = run(engine, [(PROMPTS[0], GREEDY)])
    for event in (e for e in events if e.kind in SPEC_KINDS):
        assert str(sorted(event.seq_ids())[0]) in event.narrate()
        assert event_from_dict(event.to_dict()) == event


def test_a_speculation_that_keeps_nothing_still_writes_one_token_per_pass(model):
    """A drafter that is always wrong: every pass writes exactly the target's token."""

    class Wrong:
        def propose(self, contexts, k, params, generator):
            return [[(0, None)] for _ in contexts]  # never what this target picks

    engine = LLMEngine(model, block_size=4, num_gpu_blocks=64, speculative=settings("ngram"))
    engine.speculator.drafter = Wrong()
    prompt = [9, 9, 9, 9]
    _, events = run(engine, [(prompt, GREEDY)])
    accepts = [e for e in events if e.kind == "spec-accept"]
    assert accepts and all(len(e.tokens) == 1 for e in accepts)


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_sampled_tokens_follow_plain_samplings_distribution(method):
    """Over 400 seeded requests of one prompt, the 2nd and 3rd generated tokens (the first
    that speculation writes) have the same distribution with and without speculation: a
    chi-square test of homogeneity per position, each failing a correct engine with
    probability FALSE_ALARM."""
    target = small_llama(vocab_size=6, seed=3, hidden=16, sharpness=8.0)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    params = [
        SamplingParams(max_tokens=3, temperature=1.0, ignore_eos=True, seed=s) for s in range(400)
    ]
    counts = {}
    for speculative in (None, settings(method, target, num_speculative_tokens=2, branching=2)):
        engine = LLMEngine(target, block_size=2, num_gpu_blocks=4096, max_num_seqs=400,
                           speculative=speculative)  # fmt: skip
        outputs, _ = run(engine, [(prompt, p) for p in params])
        counts[speculative is None] = [
            Counter(out[0][position] for out in outputs.values()) for position in (1, 2)
        ]
        if speculative is not None:
            assert 0 < engine.speculator.num_accepted < engine.speculator.num_proposed
    for position in range(2):
        plain, spec = counts[True][position], counts[False][position]
        tokens = sorted(set(plain) | set(spec))
        totals = [plain[t] + spec[t] for t in tokens]
        # Homogeneity of two samples of 400: expected count per cell is half of each total.
        observed = [plain[t] for t in tokens] + [spec[t] for t in tokens]
        expected = [total / 2 for total in totals] * 2
        p_value = chi_square_p_value(observed, expected)
        assert p_value > FALSE_ALARM, (position, plain, spec)


def test_the_cli_turns_speculation_on_and_greedy_text_stays_the_same(capsys):
    args = ["generate", "--prompt", "It is a truth", "--max-tokens", "12", "--temperature", "0"]
    args += ["--num-gpu-blocks", "64", "--block-size", "4"]
    assert cli.main(args) == 0
    plain = capsys.readouterr().out.split("memory")[0]  # the texts, before the memory table
    assert "It is a truth," in plain
    assert cli.main([*args, "--speculative-config", '{"method": "ngram", "branching": 3}']) == 0
    assert capsys.readouterr().out.split("memory")[0] == plain


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"method": "medusa"}', "method must be one of"),
        ("ngram", "must be a JSON object"),
        ('{"depth": 3}', "unknown speculative setting"),
        ('{"method": "draft"}', "needs draft_model"),
    ],
)
def test_the_cli_refuses_a_bad_speculative_config_in_one_line(capsys, value, message):
    args = ["generate", "--prompt", "Hi", "--max-tokens", "2", "--num-gpu-blocks", "64"]
    assert cli.main([*args, "--speculative-config", value]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_branches_left_by_a_step_that_raised_are_freed_when_its_request_is_aborted(model):
    """Ctrl-C (or any error) between forking the branches and the verdict leaves them in the
    block manager; aborting the request, as ``LLM.generate`` does then, frees them too."""
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=64, speculative=settings("draft", model))
    request = engine.add_request({"prompt_token_ids": PROMPTS[0]}, GREEDY)
    engine.step()  # the prefill

    def interrupted(plan):
        raise KeyboardInterrupt

    engine.runner.execute = interrupted
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    assert len(engine.block_manager.tables) > 1, "the branches were left behind"
    engine.abort_request(request)
    bm = engine.block_manager
    invariants.assert_holds(bm)
    assert not bm.tables and bm.device.num_free == bm.device.num_blocks


@pytest.mark.parametrize("kv_cache_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_greedy_speculation_over_an_fp8_cache_writes_plain_fp8_tokens(kv_cache_dtype):
    """The verify pass quantizes the nodes it writes and dequantizes what it reads with the
    cache's scales, as plain decoding does: the same FP8 cache gives the same tokens."""
    from minipaged import LLM

    params = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    prompts = ["It is a truth universally", "Emma Woodhouse, handsome, clever"]

    def tokens(**speculative) -> list[list[int]]:
        llm = LLM(
            "tiny", block_size=4, num_gpu_blocks=128, kv_cache_dtype=kv_cache_dtype, **speculative
        )
        return [output.outputs[0].token_ids for output in llm.generate(prompts, params)]

    plain = tokens()
    assert tokens(speculative={"method": "draft", "draft_model": "tiny-draft"}) == plain
    assert tokens(speculative={"method": "ngram"}) == plain
