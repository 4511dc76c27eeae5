"""Hugging Face checkpoint directories: our export loads in transformers with the same logits,
HF's own files load in minipaged, and every broken directory fails with an error that names
the file and the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from minipaged.checkpoint import CheckpointError, load_config, load_model, save_model
from minipaged.model import Llama, LlamaConfig
from minipaged.rope import RopeScaling
from minipaged.tokenizer import Tokenizer, train_tokenizer

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
"""Llama 3.1's scaling, with a context of 32 so that tests' short runs reach it."""

TEXT = [
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.",
] * 20


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(train_tokenizer(texts=TEXT, vocab_size=300))


@pytest.fixture(scope="module")
def hf_dir(transformers, llama_config, tmp_path_factory) -> Path:
    """A random untied transformers Llama saved with ``save_pretrained``: the good checkpoint
    that the error tests break one way each."""
    torch.manual_seed(0)
    config = llama_config(vocab_size=64, tie_word_embeddings=False)
    path = tmp_path_factory.mktemp("hf_llama")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture
def broken(hf_dir, tmp_path) -> Path:
    """A fresh copy of the good checkpoint for one test to break."""
    return Path(shutil.copytree(hf_dir, tmp_path / "ckpt"))


def edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (path / "config.json").write_text(json.dumps(config))


def edit_weights(path: Path, edit) -> None:
    tensors = load_file(path / "model.safetensors")
    edit(tensors)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(
    "tied, scaling",
    [(True, None), (False, None), (False, LLAMA3 | {"original_max_position_embeddings": 4})],
    ids=["tied", "untied", "llama3-rope"],
)
def test_export_loads_in_transformers_with_the_same_logits(
    tied, scaling, transformers, tokenizer, tmp_path
):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        rope_theta=5000.0,  # not HF's default, so a lost rope_theta shows
        tie_word_embeddings=tied,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
        rope_scaling=scaling,  # a dict, as config.json states it
    )
    ours = Llama(config).eval()
    with torch.no_grad():  # every part matters and logits are peaky, as test_model.sharpen
        for name, param in ours.named_parameters():
            if name.endswith("proj.weight"):
                param.mul_(6.0)
            elif name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            else:  # embed_tokens and lm_head
                param.mul_(50.0)
    save_model(ours, tokenizer, tmp_path)

    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    tokens = torch.tensor([tokenizer.encode("a single man in possession of a good fortune")])
    with torch.no_grad():
        torch.testing.assert_close(
            hf(tokens).logits, ours.forward_contiguous(tokens), atol=1e-4, rtol=0
        )
    assert load_model(tmp_path).config == config


def test_tied_export_stores_the_embedding_once(tokenizer, tmp_path):
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=True,
    )
    save_model(Llama(config), tokenizer, tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in saved
    assert "model.embed_tokens.weight" in saved


def test_export_writes_hf_config_and_tokenizer(tokenizer, tmp_path):
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
    )
    save_model(Llama(config), tokenizer, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["LlamaForCausalLM"]
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert written["rope_theta"] == 10000.0
    assert written["rms_norm_eps"] == 1e-5
    assert written["tie_word_embeddings"] is True
    assert written["head_dim"] == 16
    assert Tokenizer(tmp_path).encode("a wife") == tokenizer.encode("a wife")
    assert Tokenizer(tmp_path).bos_id == tokenizer.bos_id


def test_sharded_checkpoint_loads_like_a_single_file(hf_dir, broken):
    tensors = load_file(broken / "model.safetensors")
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[:5],
        "model-00002-of-00002.safetensors": names[5:],
    }
    for shard, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, broken / shard, metadata={"format": "pt"})
    weight_map = {name: shard for shard, shard_names in shards.items() for name in shard_names}
    (broken / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (broken / "model.safetensors").unlink()

    tokens = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        torch.testing.assert_close(
            load_model(broken).forward_contiguous(tokens),
            load_model(hf_dir).forward_contiguous(tokens),
        )


def test_tied_checkpoint_needs_no_lm_head(broken):
    edit_config(broken, tie_word_embeddings=True)
    edit_weights(broken, lambda tensors: tensors.pop("lm_head.weight"))
    model = load_model(broken)
    assert model.lm_head.weight is model.embed_tokens.weight


def test_absent_optional_keys_take_hf_defaults(transformers, broken):
    edit_config(broken, rms_norm_eps=None, tie_word_embeddings=None, head_dim=None)
    ours = load_config(broken)
    theirs = transformers.LlamaConfig.from_pretrained(broken)
    assert ours.rms_norm_eps == theirs.rms_norm_eps == 1e-6
    assert ours.tie_word_embeddings is theirs.tie_word_embeddings is False
    assert ours.head_dim == theirs.head_dim == 16


def test_rope_theta_is_read_flat_or_under_rope_parameters(broken):
    edit_config(broken, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    assert load_config(broken).rope_theta == 500000.0
    edit_config(broken, rope_parameters=None, rope_theta=20000.0)
    assert load_config(broken).rope_theta == 20000.0


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"nowhere is not a directory.*config\.json"):
        load_model(tmp_path / "nowhere")


def test_missing_config_json_is_named(broken):
    (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json does not exist"):
        load_model(broken)


def test_corrupt_config_json_names_the_file_and_position(broken):
    (broken / "config.json").write_text('{"hidden_size": 64,\n "vocab_size": }')
    with pytest.raises(CheckpointError, match=r"config\.json is not valid JSON: .* line 2"):
        load_model(broken)


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"eos_token_id": }', r"generation_config\.json is not valid JSON"),
        ("[2]", r"generation_config\.json must hold a JSON object"),
        ('{"eos_token_id": "two"}', r"generation_config\.json: eos_token_id .* must be a token"),
        ('{"eos_token_id": [2, -1]}', r"generation_config\.json: eos_token_id .* must be a token"),
        ('{"eos_token_id": 1000000000}', r"generation_config\.json: eos_token_id .* token id in"),
    ],
)
def test_a_bad_generation_config_json_is_named(broken, text, says):
    (broken / "generation_config.json").write_text(text)
    with pytest.raises(CheckpointError, match=says):
        load_model(broken)


def test_generation_config_json_s_eos_is_the_one_generation_stops_at(broken):
    (broken / "generation_config.json").write_text('{"eos_token_id": [2, 7]}')
    assert load_config(broken).eos_token_ids == (2, 7)
    (broken / "generation_config.json").write_text('{"bos_token_id": 1}')  # no EOS: config.json's
    edit_config(broken, eos_token_id=5)
    assert load_config(broken).eos_token_ids == (5,)


def test_missing_weights_file_names_what_was_expected(broken):
    (broken / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"neither model\.safetensors nor .*index\.json"):
        load_model(broken)


def test_truncated_safetensors_names_the_file(broken):
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is not a readable safetensors"):
        load_model(broken)


def test_missing_tensor_is_named(broken):
    edit_weights(broken, lambda tensors: tensors.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"lack 1 tensor.*model\.layers\.1\.mlp\.up_proj"):
        load_model(broken)


def test_unexpected_tensor_is_named(broken):
    def add(tensors):
        tensors["model.layers.2.mlp.up_proj.weight"] = torch.zeros(128, 64)

    edit_weights(broken, add)
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'model\.layers\.2\.mlp"):
        load_model(broken)


def test_wrong_shape_names_the_tensor_and_both_shapes(broken):
    def shrink(tensors):
        tensors["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(16, 64)

    edit_weights(broken, shrink)
    with pytest.raises(
        CheckpointError,
        match=r"model\.safetensors: tensor 'model\.layers\.0\.self_attn\.k_proj\.weight' has "
        r"shape \(16, 64\), but config\.json implies \(32, 64\)",
    ):
        load_model(broken)


def test_unsupported_architecture_is_rejected(broken):
    edit_config(broken, architectures=["MistralForCausalLM"], model_type="mistral")
    with pytest.raises(
        CheckpointError, match=r"config\.json: .*MistralForCausalLM.*LlamaForCausal"
    ):
        load_model(broken)


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "type 'yarn' is not supported"),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "type 'dynamic' is not supported"),
        ({"rope_parameters": {"rope_type": "longrope"}}, "type 'longrope' is not supported"),
        ({"rope_scaling": {"rope_type": "linear"}}, "has no 'factor'"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, "factor .* from 1 to"),
        ({"rope_scaling": {"rope_type": "linear", "factor": "2"}}, "factor .* must be a number"),
        ({"rope_scaling": "llama3"}, "rope scaling must be an object"),
        (
            {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}},
            r"has no \['low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings'\]",
        ),
        (
            {"rope_scaling": LLAMA3 | {"low_freq_factor": 4.0, "high_freq_factor": 1.0}},
            "needs low_freq_factor < high_freq_factor",
        ),
        (
            {"rope_scaling": LLAMA3 | {"original_max_position_embeddings": 0}},
            "original_max_position_embeddings .* must be a positive integer",
        ),
    ],
)
def test_a_rope_scaling_this_model_does_not_implement_is_refused_naming_it(broken, changes, says):
    edit_config(broken, **changes)
    with pytest.raises(CheckpointError, match=r"config\.json: .*" + says):
        load_model(broken)


@pytest.mark.parametrize(
    "changes",
    [{"rope_scaling": LLAMA3}, {"rope_parameters": LLAMA3 | {"rope_theta": 500000.0}}],
    ids=["rope_scaling", "rope_parameters"],
)
def test_llama3_rope_scaling_is_read_from_either_key(broken, changes):
    edit_config(broken, **changes)
    assert load_config(broken).rope_scaling == RopeScaling.from_hf(LLAMA3)
    assert load_config(broken).rope_scaling.original_max_position_embeddings == 32


def test_invalid_sizes_in_config_name_the_file(broken):
    edit_config(broken, num_key_value_heads=3)
    with pytest.raises(CheckpointError, match=r"config\.json: num_attention_heads \(4\)"):
        load_config(broken)
