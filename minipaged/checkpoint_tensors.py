"""A checkpoint's tensors by Hugging Face's names, and the check that ``config.json`` describes
the weights beside it.

Our parameter names are HF's without the ``model.`` prefix, except that HF stores the q/k/v and
gate/up matrices apart where our model stacks them (``minipaged.model.packed_projections``):
``unpack`` splits them under HF's names, ``pack`` stacks them back.

``check_weights_match`` compares ``config.json`` with the shapes in the weights files' headers
(no tensor is loaded), before anything is sized from the config: a config that claims 40
layers for weights that hold 4 is told so, not refused later as a KV cache too large for
memory, and not loaded as a model with layers of random numbers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

import torch

from minipaged.checkpoint_files import CheckpointError, read_weight_shapes
from minipaged.model import Llama, LlamaConfig, packed_projections

HF_PREFIX = "model."
"""HF nests everything but ``lm_head`` under ``model``: ``model.layers.0...`` is our
``layers.0...``."""

IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
"""Buffers that older checkpoints saved though they are recomputed from the config."""

SIZED_BY = {
    "embed_tokens": ("vocab_size", "hidden_size"),
    "lm_head": ("vocab_size", "hidden_size"),
    "q_proj": ("num_attention_heads", "head_dim", "hidden_size"),
    "k_proj": ("num_key_value_heads", "head_dim", "hidden_size"),
    "v_proj": ("num_key_value_heads", "head_dim", "hidden_size"),
    "o_proj": ("hidden_size", "num_attention_heads", "head_dim"),
    "gate_proj": ("intermediate_size", "hidden_size"),
    "up_proj": ("intermediate_size", "hidden_size"),
    "down_proj": ("hidden_size", "intermediate_size"),
}
"""The ``config.json`` values each HF module's weight shape comes from (norms: hidden_size), so
a shape that disagrees is told with the values that made the expected one."""

_LAYER = re.compile(r"^layers\.(\d+)\.")


def check_weights_match(directory: Path, config: LlamaConfig) -> None:
    """Refuse ``directory``'s weights unless they hold exactly the tensors ``config`` describes:
    ``num_hidden_layers`` layers (told as "config.json says N layers, the weights hold M"),
    every parameter present, none unexpected, each of the shape the config implies (told with
    the config values it comes from). Reads the files' headers only."""
    config_file = directory / "config.json"
    shapes = {  # by our name: (the file, the name in it, the shape)
        name: (file, file_name, shape)
        for file, tensors in read_weight_shapes(directory)
        for file_name, shape in tensors.items()
        if not (name := file_name.removeprefix(HF_PREFIX)).endswith(IGNORED_SUFFIXES)
        and not (config.tie_word_embeddings and name == "lm_head.weight")
    }
    expected = layer_zero_shapes(config)
    count = config.num_hidden_layers
    held = _whole_layers(shapes, expected)
    if held is not None and held != count:
        held_text = f"{held:,} layers (layers.0 to layers.{held - 1})" if held else "no layers"
        fix = f"set num_hidden_layers to {held}, or use the config" if held else "use the weights"
        raise CheckpointError(
            f"{config_file} says num_hidden_layers = {count:,}, but the weights hold "
            f"{held_text}: {fix} these weights were saved with"
        )
    for name, (file, file_name, shape) in shapes.items():
        layer = _LAYER.match(name)
        name = _LAYER.sub("layers.0.", name)
        if name not in expected or (layer and int(layer.group(1)) >= count):
            raise CheckpointError(
                f"{file}: unexpected tensor {file_name!r}; {config_file} describes a Llama with "
                f"{count} layers and no such parameter"
            )
        if shape != expected[name]:
            module = name.split(".")[-2]
            values = ", ".join(
                f"{field} = {getattr(config, field)}"
                for field in SIZED_BY.get(module, ("hidden_size",))
            )
            raise CheckpointError(
                f"{file}: tensor {file_name!r} has shape {shape}, but config.json implies "
                f"{expected[name]} from its {values}: correct {config_file}, or use the weights "
                "saved with it"
            )
    needed = [
        name.replace("layers.0.", f"layers.{layer}.", 1)
        for name in expected
        for layer in (range(count) if name.startswith("layers.0.") else [0])
    ]
    missing = [hf_name(name) for name in needed if name not in shapes]
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise CheckpointError(
            f"{directory}: the weights lack {len(missing)} tensor(s) the config needs: {shown}"
        )


def _whole_layers(shapes: dict[str, object], expected: dict[str, object]) -> int | None:
    """How many layers the weights hold, when they hold layers 0 to L - 1 each with every
    tensor a layer has; None when they do not (a layer part-saved or missing from the middle,
    which the tensor-by-tensor check names better)."""
    tensors: dict[int, set[str]] = {}
    for name in shapes:
        if match := _LAYER.match(name):
            tensors.setdefault(int(match.group(1)), set()).add(name[match.end() :])
    per_layer = {name.removeprefix("layers.0.") for name in expected if name.startswith("layers.")}
    whole = set(tensors) == set(range(len(tensors)))
    return len(tensors) if whole and all(t == per_layer for t in tensors.values()) else None


def layer_zero_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor a checkpoint of ``config`` holds, under HF's names without
    ``model.``, for layer 0 and the tensors outside the layers (the other layers repeat layer
    0's). Built from a one-layer model on the meta device: the model is the one source of the
    shapes, and nothing is allocated."""
    with torch.device("meta"):
        model = Llama(dataclasses.replace(config, num_hidden_layers=1))
    return {
        name: tuple(tensor.shape)
        for name, tensor in unpack(model.state_dict(), config).items()
        if not (config.tie_word_embeddings and name == "lm_head.weight")
    }


def _hf_parts(name: str, config: LlamaConfig) -> dict[str, int] | None:
    """For a parameter of a packed projection (``layers.0.self_attn.qkv_proj.weight``), HF's
    tensors that are stacked into it, in order, with their rows; None for any other."""
    module_path, _, leaf = name.rpartition(".")
    parent, _, module = module_path.rpartition(".")
    parts = packed_projections(config).get(module)
    if parts is None:
        return None
    return {f"{parent}.{part}.{leaf}": rows for part, rows in parts.items()}


def unpack(state: dict[str, torch.Tensor], config: LlamaConfig) -> dict[str, torch.Tensor]:
    """Our ``state`` under HF's names (still without ``model.``): packed projections split."""
    unpacked = {}
    for name, tensor in state.items():
        parts = _hf_parts(name, config)
        if parts is None:
            unpacked[name] = tensor
        else:
            unpacked.update(zip(parts, tensor.split(list(parts.values())), strict=True))
    return unpacked


def pack(
    state: dict[str, torch.Tensor], names: Iterable[str], config: LlamaConfig
) -> dict[str, torch.Tensor]:
    """Our parameters ``names`` from HF's tensors ``state``: packed projections stacked."""
    packed = {}
    for name in names:
        parts = _hf_parts(name, config)
        packed[name] = state[name] if parts is None else torch.cat([state[p] for p in parts])
    return packed


def hf_name(name: str) -> str:
    """HF's name of our (unpacked) parameter ``name``."""
    return name if name == "lm_head.weight" else HF_PREFIX + name
