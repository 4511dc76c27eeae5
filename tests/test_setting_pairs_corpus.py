"""Scheduler settings that pass their own rules but mean nothing together (chunked prefill's
threshold and its token budget, the budget and the batch) are refused together, naming both
values and the flags to change, wherever they meet: ``EngineConfig`` with the budget given,
``Scheduler`` with the budget it runs on, and ``LLM`` with None resolved from the model's
context before its weights load. Generated over values at and around each other's bounds."""

from __future__ import annotations

import itertools

import pytest

from minipaged import LLM
from minipaged.block_manager import BlockManager
from minipaged.config import EngineConfig
from minipaged.scheduler import Scheduler

BUDGETS = (1, 16, 2048)
THRESHOLDS = (0, 1, 15, 16, 17, 2047, 2048, 2049, 2**31 - 1)
SEQS = (1, 16, 17)


def refusal(budget: int, threshold: int, max_num_seqs: int) -> str | None:
    """What must be refused of these chunked-prefill settings, as a pattern, or None."""
    if threshold > budget:
        return (
            f"long_prefill_token_threshold={threshold} is above max_num_batched_tokens={budget}"
            r".* so it caps nothing; .*--long-prefill-token-threshold.*--max-num-batched-tokens"
        )
    if budget < max_num_seqs:
        return (
            f"max_num_batched_tokens={budget} is below max_num_seqs={max_num_seqs}"
            r".*--max-num-batched-tokens.*--max-num-seqs"
        )
    return None


CASES = list(itertools.product(BUDGETS, THRESHOLDS, SEQS))


def settings(budget: int, threshold: int, seqs: int) -> dict:
    return {
        "max_num_batched_tokens": budget,
        "long_prefill_token_threshold": threshold,
        "max_num_seqs": seqs,
        "enable_chunked_prefill": True,
    }


@pytest.mark.parametrize(("budget", "threshold", "seqs"), CASES)
def test_the_config_refuses_a_threshold_above_its_budget_naming_both(budget, threshold, seqs):
    expected = refusal(budget, threshold, seqs)
    if expected is None:
        EngineConfig(**settings(budget, threshold, seqs))
    else:
        with pytest.raises(ValueError, match=expected):
            EngineConfig(**settings(budget, threshold, seqs))


@pytest.mark.parametrize(("budget", "threshold", "seqs"), CASES)
def test_a_scheduler_built_directly_refuses_what_the_config_refuses(budget, threshold, seqs):
    expected = refusal(budget, threshold, seqs)
    if expected is None:
        Scheduler(BlockManager(8), **settings(budget, threshold, seqs))
    else:
        with pytest.raises(ValueError, match=expected):
            Scheduler(BlockManager(8), **settings(budget, threshold, seqs))


def test_llm_refuses_a_threshold_above_the_budget_none_stands_for_before_loading(monkeypatch):
    import minipaged.llm

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights loaded before the settings were refused")

    monkeypatch.setattr(minipaged.llm, "load_model", no_loading)
    # the tiny model's context is under 2048 tokens, so None stands for a budget of 2048
    with pytest.raises(ValueError, match="threshold=2049 is above max_num_batched_tokens=2048"):
        LLM(enable_chunked_prefill=True, long_prefill_token_threshold=2049)


def test_a_threshold_with_chunking_off_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match=r"chunked prefill is off.*--enable-chunked-prefill"):
        EngineConfig(long_prefill_token_threshold=8)
