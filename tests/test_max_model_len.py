"""``max_model_len`` (vLLM's name): the longest a sequence may grow, at most the model's
context. A Llama 3 checkpoint states a context of 131,072 tokens, and an engine sized for one
whole context by default (its pools and token budget) would ask for gigabytes a short run never
uses; ``max_model_len`` shrinks them, and the engine holds every sequence to it."""

from __future__ import annotations

import pytest

from minipaged import LLM, SamplingParams
from minipaged.config import EngineConfig

LONG = SamplingParams(max_tokens=200, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def short():
    return LLM(model="tiny", max_model_len=40, block_size=8)


def test_a_sequence_stops_at_max_model_len_not_at_max_tokens(short):
    (result,) = short.generate({"prompt_token_ids": [5] * 30}, LONG)
    assert len(result.outputs[0].token_ids) == 40 - 30
    assert result.outputs[0].finish_reason == "length"


def test_a_prompt_that_leaves_no_room_under_max_model_len_is_refused(short):
    with pytest.raises(ValueError, match="40 tokens but the model's context is 40 tokens"):
        short.engine.add_request({"prompt_token_ids": [5] * 40}, LONG)
    assert not short.engine.has_unfinished()


def test_unset_it_is_the_models_context_and_past_it_is_refused():
    tiny_context = LLM(model="tiny").engine.max_model_len
    assert LLM(model="tiny", max_model_len=tiny_context).engine.max_model_len == tiny_context
    with pytest.raises(ValueError, match=rf"max_model_len={tiny_context + 1} is past the model"):
        LLM(model="tiny", max_model_len=tiny_context + 1)


def test_it_shrinks_the_default_pool_and_budget_of_a_long_context_model():
    llama_3 = 131_072  # max_position_embeddings of Llama 3.1 and 3.2
    block_bytes = 2**20  # 1 MiB a block: 256 blocks fill the default 256 MiB
    whole = EngineConfig()
    capped = EngineConfig(max_model_len=4096)
    assert whole.pool_sizes(block_bytes, whole.context(llama_3)) == (8192, 8192)
    assert capped.pool_sizes(block_bytes, capped.context(llama_3)) == (256, 256)
    assert whole.token_budget(whole.context(llama_3)) == llama_3
    assert capped.token_budget(capped.context(llama_3)) == 4096
