"""Who pays for the attention entry points' overflow check (``minipaged.attention_call``): a
caller's direct call does, once per call; the engine's forward pass does not (its scale is the
model's, and the check's read-back would stall a GPU every layer); and a result that needs
gradients is read without touching its graph, so the check warns about nothing."""

from __future__ import annotations

import warnings

import pytest
import torch

from minipaged import LLM, SamplingParams, attention, attention_call


@pytest.fixture
def checks(monkeypatch):
    """Count the overflow checks run (``attention_call.holds_nan``)."""
    calls = []
    original = attention_call.holds_nan

    def counted(output):
        calls.append(output.shape)
        return original(output)

    monkeypatch.setattr(attention_call, "holds_nan", counted)
    return calls


def decode_arguments(**changes):
    gen = torch.Generator().manual_seed(0)
    arguments = {
        "query": torch.randn(2, 4, 8, generator=gen),
        "key_pool": torch.randn(6, 2, 4, 8, generator=gen),
        "value_pool": torch.randn(6, 2, 4, 8, generator=gen),
        "block_tables": torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
        "seq_lens": torch.tensor([7, 5], dtype=torch.int32),
        "scale": 8**-0.5,
        "block_size": 4,
    }
    return arguments | changes


def test_a_direct_call_checks_its_result_once(checks):
    attention.paged_attention_decode(**decode_arguments())
    assert len(checks) == 1


def test_the_engine_forward_pass_runs_no_overflow_check(checks):
    llm = LLM("tiny", num_gpu_blocks=16, backend="torch")
    outputs = llm.generate(["It is", "Mr. Darcy"], SamplingParams(max_tokens=4, ignore_eos=True))
    assert [len(out.outputs[0].token_ids) for out in outputs] == [4, 4]
    assert checks == []
    attention.paged_attention_decode(**decode_arguments())  # outside the engine: checked again
    assert len(checks) == 1


def test_a_refused_overflow_is_still_refused_after_an_engine_step():
    llm = LLM("tiny", num_gpu_blocks=16, backend="torch")
    llm.generate(["It is"], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match=r"makes the logits q.k\*scale overflow"):
        attention.paged_attention_decode(**decode_arguments(scale=3e38))


def test_a_result_that_needs_gradients_is_checked_without_a_warning():
    query = torch.randn(2, 4, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        output = attention.paged_attention_decode(**decode_arguments(query=query))
    assert output.requires_grad
    output.sum().backward()  # the check left the graph whole
    assert query.grad is not None and torch.isfinite(query.grad).all()
