"""Speculation's settings that only mean something beside another one are checked together,
before any weights load, naming both values (``minipaged.speculative.fits``): the tree's depth
against the step's token budget; a draft model's vocabulary, context,
dtype and device against the target's. A draft's config.json is read once and passed along,
as ``LLM`` does for the target's.
"""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from minipaged import LLM, checkpoint, cli
from minipaged.engine import LLMEngine
from minipaged.model import LlamaConfig
from minipaged.models import model_directory
from minipaged.speculative import SpeculativeConfig
from minipaged.speculative.fits import check_speculation_fits
from tests.test_speculative import small_llama
from tests.test_speculative_settings import no_weights_load

TARGET = LlamaConfig(64, 64, 128, 2, 4, 2, 512)


@pytest.mark.parametrize(
    ("budget", "depth"), list(itertools.product((2, 5, 8, 33, 64, 2048), (1, 4, 7, 31, 32, 511)))
)
def test_a_depth_no_step_can_hold_is_refused_naming_both(budget, depth):
    config = SpeculativeConfig(num_speculative_tokens=depth, max_tree_nodes=max(depth, 32))
    if budget >= depth + 1:  # one sequence's own token and its tree
        assert check_speculation_fits(config, TARGET, budget) is None
        return
    with pytest.raises(ValueError) as refused:
        check_speculation_fits(config, TARGET, budget)
    message = str(refused.value)
    for named in (
        f"num_speculative_tokens={depth:,}",
        f"max_num_batched_tokens={budget:,}",
        "--max-num-batched-tokens",
        f"at least {depth + 1:,}",
    ):
        assert named in message, (named, message)
    assert "\n" not in message


def test_a_full_batch_may_draft_less_deep_than_one_sequence():
    """The trees share what a full batch's own tokens leave of the budget: a budget that holds
    one sequence's tree but not every sequence's is the budget working, not a bad setting
    (``tests/test_chunked_prefill.py`` runs such an engine against transformers' tokens)."""
    config = SpeculativeConfig(num_speculative_tokens=3)
    assert check_speculation_fits(config, TARGET, 6) is None  # max_num_seqs plays no part
    LLMEngine(small_llama(16, seed=5), speculative=config, max_num_batched_tokens=6, max_num_seqs=6)


def test_llm_and_the_engine_check_the_budget_pair(monkeypatch):
    speculative = {"method": "ngram", "num_speculative_tokens": 8}
    settings = {"max_num_batched_tokens": 8, "max_num_seqs": 6}
    with pytest.raises(ValueError, match="max_num_batched_tokens=8 less that one token leaves 7"):
        LLMEngine(small_llama(16, seed=5), speculative=speculative, **settings)
    no_weights_load(monkeypatch)
    with pytest.raises(ValueError, match="to at least 9"):
        LLM("tiny", speculative=speculative, **settings)


def test_the_command_line_refuses_the_pair_in_one_line(capsys):
    flags = ["--max-num-batched-tokens", "40", "--max-num-seqs", "32"]
    flags += ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 40}']
    assert cli.main(["generate", "--prompt", "Emma", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "leaves 39" in err and "Traceback" not in err, err


def draft_copy(tmp_path, **changes) -> str:
    draft = tmp_path / "draft"
    shutil.copytree(model_directory("tiny-draft"), draft)
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(config | changes))
    return str(draft)


def test_a_draft_of_a_shorter_context_is_refused_from_its_config(tmp_path, monkeypatch):
    draft = draft_copy(tmp_path, max_position_embeddings=256)
    no_weights_load(monkeypatch)
    with pytest.raises(ValueError, match="draft model's context is 256 tokens but the target's"):
        LLM("tiny", speculative={"method": "draft", "draft_model": draft})


def test_a_loaded_draft_of_a_shorter_context_is_refused_by_the_engine():
    target, draft = small_llama(16, seed=5), small_llama(16, seed=6)
    draft.config = replace(draft.config, max_position_embeddings=8)
    with pytest.raises(ValueError, match="context is 8 tokens but the target's is"):
        LLMEngine(target, speculative=SpeculativeConfig("draft", draft_model=draft))


def test_a_loaded_draft_of_another_dtype_is_refused_naming_both():
    target, draft = small_llama(16, seed=5), small_llama(16, seed=6).to(torch.float64)
    with pytest.raises(ValueError, match="draft model is float64 on cpu but the target is float32"):
        LLMEngine(target, speculative=SpeculativeConfig("draft", draft_model=draft))


def test_the_drafts_config_json_is_read_once(monkeypatch):
    """It was read three times: by LLM's check, by the engine's, and by load_model; a file
    rewritten between the readings would have built a draft that no check saw."""
    draft_file = model_directory("tiny-draft") / "config.json"
    reads = []
    read_json = checkpoint.read_json

    def counted(file, holds):
        reads.append(file)
        return read_json(file, holds)

    monkeypatch.setattr(checkpoint, "read_json", counted)
    LLM("tiny", speculative={"method": "draft", "draft_model": "tiny-draft"})
    assert sum(Path(f).resolve() == draft_file.resolve() for f in reads) == 1, reads
