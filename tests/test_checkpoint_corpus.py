"""Checkpoints whose files parse but whose contents are wrong: weights of integers, booleans or
FP8, NaN or infinite weights (in any tensor, of any layer), a ``tie_word_embeddings`` that is a
string, a tokenizer that knows none of a prompt's characters. Each is refused by name, by
``load_model`` and ``LLM`` before any model exists, and by ``minipaged generate`` with status 1
(a broken file), never loaded to generate garbage."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from minipaged import LLM, cli
from minipaged.checkpoint import WEIGHTS_FILE, CheckpointError, load_model, model_directory

TINY = model_directory("tiny")
TENSORS = list(load_file(TINY / WEIGHTS_FILE))
PICKED = [TENSORS[0], TENSORS[len(TENSORS) // 2], TENSORS[-1]]
"""A tensor at the start, the middle and the end of the file: every one is checked."""


@pytest.fixture
def copy(tmp_path):
    directory = tmp_path / "model"
    shutil.copytree(TINY, directory)
    return directory


def rewrite_weight(directory, name, change):
    weights = load_file(directory / WEIGHTS_FILE)
    weights[name] = change(weights[name])
    save_file(weights, directory / WEIGHTS_FILE)


def poisoned(value):
    def change(tensor):
        tensor = tensor.clone()
        tensor.view(-1)[tensor.numel() // 2] = value
        return tensor

    return change


BAD_WEIGHTS = {
    "NaN": (poisoned(float("nan")), "NaN or infinite"),
    "inf": (poisoned(float("inf")), "NaN or infinite"),
    "-inf": (poisoned(float("-inf")), "NaN or infinite"),
    "int32": (lambda t: t.to(torch.int32), "holds int32"),
    "int64": (lambda t: t.to(torch.int64), "holds int64"),
    "bool": (lambda t: t > 0, "holds bool"),
    "fp8": (lambda t: t.to(torch.float8_e4m3fn), "holds float8_e4m3fn"),
}


@pytest.mark.parametrize("name", PICKED)
@pytest.mark.parametrize("case", BAD_WEIGHTS)
def test_a_weight_that_is_not_finite_floats_is_refused_naming_the_tensor(copy, case, name):
    change, words = BAD_WEIGHTS[case]
    rewrite_weight(copy, name, change)
    with pytest.raises(CheckpointError) as refused:
        load_model(copy)
    assert words in str(refused.value) and repr(name) in str(refused.value)
    assert str(copy / WEIGHTS_FILE) in str(refused.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_weights_saved_in_another_float_dtype_load(copy, dtype):
    rewrite_weight(copy, PICKED[1], lambda t: t.to(dtype))
    model = load_model(copy)
    assert next(model.parameters()).dtype == torch.float32


def test_the_command_line_refuses_a_nan_checkpoint_as_a_broken_file(copy, capsys):
    rewrite_weight(copy, PICKED[0], poisoned(float("nan")))
    status = cli.main(["generate", "--prompt", "It is", "--model", str(copy)])
    err = capsys.readouterr().err
    assert status == 1, err
    assert "NaN or infinite" in err and err.count("\n") == 1


@pytest.mark.parametrize("value", ["yes", "false", 1, None, [True]], ids=repr)
def test_tie_word_embeddings_must_be_a_json_boolean(copy, value):
    config = json.loads((copy / "config.json").read_text())
    config["tie_word_embeddings"] = value
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="tie_word_embeddings must be true or false"):
        load_model(copy)


def test_a_prompt_the_tokenizer_has_no_token_for_is_named_not_called_empty(copy):
    tokenizer = {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    (copy / "tokenizer.json").write_text(json.dumps(tokenizer))
    llm = LLM(str(copy), num_gpu_blocks=8, backend="torch")
    with pytest.raises(ValueError, match="encodes to no tokens"):
        llm.generate(["It is"])
    assert llm.generate([{"prompt_token_ids": [1, 2]}])[0].outputs[0].token_ids


@pytest.mark.parametrize(
    "name, meant", [("Tiny", "tiny"), ("tiny ", "tiny"), ("TINY-DRAFT", "tiny-draft")]
)
def test_a_misspelled_embedded_model_is_named_with_the_name_meant(name, meant, tmp_path, capsys):
    with pytest.raises(CheckpointError, match=f"did you mean '{meant}'"):
        LLM(name)
    assert cli.main(["generate", "--prompt", "x", "--model", name]) == 2
    assert f"did you mean '{meant}'" in capsys.readouterr().err


def test_a_missing_directory_unlike_any_model_name_gets_no_guess(tmp_path):
    with pytest.raises(CheckpointError) as refused:
        LLM(str(tmp_path / "llama"))
    assert "did you mean" not in str(refused.value)


def test_llm_reads_config_json_and_each_weights_header_once(copy, monkeypatch):
    from pathlib import Path

    from minipaged import checkpoint_files

    reads: list[str] = []
    read_text, safe_open = Path.read_text, checkpoint_files.safe_open

    def counted_read_text(self, *args, **kwargs):
        reads.append(self.name)
        return read_text(self, *args, **kwargs)

    def counted_safe_open(file, *args, **kwargs):
        reads.append(f"header of {Path(file).name}")
        return safe_open(file, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted_read_text)
    monkeypatch.setattr(checkpoint_files, "safe_open", counted_safe_open)
    LLM(str(copy), num_gpu_blocks=8)
    assert reads.count("config.json") == 1, reads
    assert reads.count(f"header of {WEIGHTS_FILE}") == 1, reads


def test_llm_builds_the_model_from_the_config_it_checked(copy, monkeypatch):
    """config.json rewritten after LLM checked it against the weights: the model is built from
    the reading that was checked, not from the new file (which no tensor matches)."""
    import minipaged.llm

    checked = minipaged.llm.check_kv_cache_fits

    def then_rewritten(config):
        model_config = checked(config)
        raw = json.loads((copy / "config.json").read_text(encoding="utf-8"))
        raw["num_hidden_layers"] += 5
        (copy / "config.json").write_text(json.dumps(raw), encoding="utf-8")
        return model_config

    monkeypatch.setattr(minipaged.llm, "check_kv_cache_fits", then_rewritten)
    llm = LLM(str(copy), num_gpu_blocks=8)
    assert llm.model.config.num_hidden_layers == len(llm.model.layers)
    assert llm.model.config.num_hidden_layers == load_model(TINY).config.num_hidden_layers
