"""A ``config.json`` that disagrees with the weights beside it (more or fewer layers, more
heads, a wider model, another vocabulary) is refused as that disagreement, naming the config's
value and what the weights hold, before anything is sized from the config: ``LLM`` (whose pools
are sized from the config), ``load_model``, ``check_kv_cache_fits`` (the TUI's first check) and
``minipaged generate`` alike. Generated over every size the weights' shapes depend on."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from minipaged import LLM, cli
from minipaged.checkpoint import WEIGHTS_FILE, CheckpointError, load_model, model_directory
from minipaged.checkpoint_tensors import SIZED_BY
from minipaged.config import EngineConfig
from minipaged.llm import check_kv_cache_fits

TINY = model_directory("tiny")
CONFIG = json.loads((TINY / "config.json").read_text())

INFLATED = {
    "num_hidden_layers": 40_000,  # pools sized from it would fill no machine's memory
    "num_attention_heads": 4_000,
    "num_key_value_heads": 4,
    "head_dim": 64_000,
    "hidden_size": 1_280_000,
    "intermediate_size": 3_440_000,
    "vocab_size": 20_480,
}
"""A value for each size the weights' shapes come from, valid on its own (heads still a
multiple of the KV heads, head_dim even), so only the weights can refuse it."""


def test_every_size_a_weight_shape_comes_from_is_inflated_here():
    sizes = {field for fields in SIZED_BY.values() for field in fields} | {"num_hidden_layers"}
    assert sizes == set(INFLATED)


@pytest.fixture
def copy(tmp_path):
    directory = tmp_path / "my model"  # a space in the path, as a user's folder may have
    shutil.copytree(TINY, directory)
    return directory


def edit_config(directory, **values):
    (directory / "config.json").write_text(json.dumps(CONFIG | values))


@pytest.mark.parametrize("field", INFLATED)
def test_a_config_that_disagrees_with_its_weights_is_refused_as_that_before_the_pools(copy, field):
    edit_config(copy, **{field: INFLATED[field]})
    for load in (
        lambda: LLM(copy),
        lambda: load_model(copy),
        lambda: check_kv_cache_fits(EngineConfig(model=str(copy))),
    ):
        with pytest.raises(CheckpointError) as refused:
            load()
        message = str(refused.value)
        assert f"{field} = {INFLATED[field]:,}" in message or (
            f"{field} = {INFLATED[field]}" in message
        ), message
        assert "config.json" in message and "memory" not in message, message


@pytest.mark.parametrize("layers", [3, 5, 4_000])
def test_the_layer_count_is_told_as_what_the_config_says_and_the_weights_hold(copy, layers):
    edit_config(copy, num_hidden_layers=layers)
    with pytest.raises(CheckpointError) as refused:
        LLM(copy)
    assert f"says num_hidden_layers = {layers:,}" in str(refused.value)
    assert "the weights hold 4 layers (layers.0 to layers.3)" in str(refused.value)
    assert "set num_hidden_layers to 4" in str(refused.value)


def test_a_layer_missing_from_the_middle_of_the_weights_is_named(copy):
    weights = load_file(copy / WEIGHTS_FILE)
    save_file(
        {name: t for name, t in weights.items() if ".layers.2." not in name}, copy / WEIGHTS_FILE
    )
    with pytest.raises(CheckpointError, match=r"lack \d+ tensor\(s\).*model\.layers\.2\."):
        LLM(copy)


def test_a_tensor_of_another_shape_names_the_config_values_it_comes_from(copy):
    weights = load_file(copy / WEIGHTS_FILE)
    name = "model.layers.1.self_attn.k_proj.weight"
    weights[name] = weights[name][:32]
    save_file(weights, copy / WEIGHTS_FILE)
    with pytest.raises(CheckpointError) as refused:
        load_model(copy)
    assert repr(name) in str(refused.value) and "(32, 128)" in str(refused.value)
    assert "from its num_key_value_heads = 2, head_dim = 32, hidden_size = 128" in str(
        refused.value
    )


def test_the_command_line_tells_an_inflated_config_in_one_line(copy, capsys):
    edit_config(copy, num_hidden_layers=40_000)
    status = cli.main(["generate", "--prompt", "It is", "--model", str(copy)])
    err = capsys.readouterr().err
    assert status != 0 and err.count("\n") == 1, err
    assert "num_hidden_layers = 40,000" in err and "Traceback" not in err


def test_the_matching_config_loads_and_generates(copy):
    outputs = LLM(copy, num_gpu_blocks=8).generate("It is", show_progress=False)
    assert outputs[0].outputs[0].token_ids


def test_sharded_weights_are_counted_across_their_shards(copy):
    """The layers and shapes are read from every shard the index lists, headers only."""
    weights = load_file(copy / WEIGHTS_FILE)
    (copy / WEIGHTS_FILE).unlink()
    names = sorted(weights)
    shard_of = {name: f"part-{i % 2}.safetensors" for i, name in enumerate(names)}
    for shard in set(shard_of.values()):
        save_file({n: weights[n] for n in names if shard_of[n] == shard}, copy / shard)
    (copy / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shard_of}))
    assert LLM(copy, num_gpu_blocks=8).generate("It is")[0].outputs[0].token_ids
    edit_config(copy, num_hidden_layers=40)
    with pytest.raises(
        CheckpointError, match="says num_hidden_layers = 40, but the weights hold 4"
    ):
        LLM(copy)
