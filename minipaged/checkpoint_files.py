"""The files of a Hugging Face checkpoint directory as ``minipaged.checkpoint`` reads them: JSON
objects (``config.json``, the shard index) and the safetensors weights, one file or the shards
the index lists, with one error type, ``CheckpointError``, whose message names the file and
the fix.

Guarantee: every tensor ``read_weights`` returns holds floating-point numbers, all finite. A
weight of integers or booleans would be cast to float without a word, and one NaN or infinity
in a weight spreads through every activation after it, so the model would load and then
generate garbage (or trip the attention's overflow refusal with a scale it never chose).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from minipaged.json_input import NotJSON, loads

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"

WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
"""What a weight may hold: the floats a Llama checkpoint is saved in, cast to the model's dtype
on loading. An FP8 weight needs its checkpoint's scales, which this model does not read."""


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message names the file and the fix."""


def weight_files(directory: Path) -> list[Path]:
    """The weights files of ``directory``: the single file, or every shard the index lists."""
    single, index = directory / WEIGHTS_FILE, directory / WEIGHTS_INDEX_FILE
    if single.exists():  # a folder in its place is refused below, by name
        files = [single]
    elif index.exists():
        weight_map = read_json(index, "the map from tensor names to shard files").get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} has no 'weight_map' object naming each tensor's shard")
        files = sorted({_shard_path(directory, index, shard) for shard in weight_map.values()})
    else:
        raise CheckpointError(
            f"{directory} has neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE}: minipaged reads "
            "safetensors weights (convert a pytorch_model.bin with transformers' save_pretrained)"
        )
    for file in files:
        if not file.is_file():
            raise no_file(file, "weights" if file == single else f"what {WEIGHTS_INDEX_FILE} lists")
    return files


def read_weights(directory: Path) -> list[tuple[Path, dict[str, torch.Tensor]]]:
    """Each weights file with its tensors (``weight_files``)."""
    return [(file, _opened(file, load_file)) for file in weight_files(directory)]


def read_weight_shapes(directory: Path) -> list[tuple[Path, dict[str, tuple[int, ...]]]]:
    """Each weights file with its tensors' shapes, read from the file's header alone: no
    tensor is loaded, so a config can be checked against a checkpoint of any size at once."""

    def shapes(file: Path) -> dict[str, tuple[int, ...]]:
        with safe_open(file, framework="pt") as tensors:
            return {name: tuple(tensors.get_slice(name).get_shape()) for name in tensors.keys()}  # noqa: SIM118 (no __iter__)

    return [(file, _opened(file, shapes)) for file in weight_files(directory)]


def _opened(file: Path, read: Callable[[Path], Any]) -> Any:
    """``read(file)``, with a truncated or corrupt file refused by name."""
    try:
        return read(file)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"{file} is not a readable safetensors file ({error}); it may be truncated or "
            "corrupt: download or export it again"
        ) from error


def _shard_path(directory: Path, index: Path, shard: object) -> Path:
    """The file a ``weight_map`` entry names, which must be a file name inside ``directory``:
    an index must not make us read ``../`` or absolute paths elsewhere on the machine."""
    if not isinstance(shard, str) or not shard:
        raise CheckpointError(f"{index}: weight_map values must be shard file names, got {shard!r}")
    file = directory / shard
    if not file.resolve().is_relative_to(directory.resolve()):
        raise CheckpointError(
            f"{index} names the shard {shard!r}, outside {directory}; shards must lie in the "
            "checkpoint directory"
        )
    return file


def check_weight(file: Path, name: str, tensor: torch.Tensor) -> None:
    """Refuse the weight ``name`` of ``file`` unless it holds finite floating-point numbers
    (the module's guarantee)."""
    if tensor.dtype not in WEIGHT_DTYPES:
        raise CheckpointError(
            f"{file}: tensor {name!r} holds {str(tensor.dtype).removeprefix('torch.')}, but a "
            "Llama's weights are floating point (float32, float16, bfloat16 or float64); the "
            "file is not a plain Llama checkpoint: export it again with save_pretrained"
        )
    if tensor.numel() and not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise CheckpointError(
            f"{file}: tensor {name!r} holds {bad:,} NaN or infinite value(s) of "
            f"{tensor.numel():,}; a model with them computes NaN from the first layer on: "
            "the training that wrote it diverged, or the file is corrupt; use another checkpoint"
        )


def no_file(file: Path, holds: str) -> CheckpointError:
    """The error for ``file`` (to hold ``holds``): absent, or a folder in a file's place; each
    with the way out."""
    if not file.exists():  # an empty folder, or a folder of something else, named as a model
        return CheckpointError(
            f"{file} does not exist; it should hold {holds}: pass a whole model directory (a "
            "Hugging Face Llama's, with config.json, model.safetensors and tokenizer.json) or "
            "an embedded model's name, such as 'tiny'"
        )
    kind = "a folder" if file.is_dir() else "not a regular file"
    return CheckpointError(
        f"{file} is {kind}, not a file; it should hold {holds}: move it away and put the "
        "model's file there"
    )


def read_json(file: Path, holds: str) -> dict[str, Any]:
    if not file.is_file():
        raise no_file(file, holds)
    try:
        data = loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise CheckpointError(
            f"{file} is not UTF-8 text (byte {error.start}); it should be JSON holding {holds}"
        ) from error
    except NotJSON as error:  # undecodable, a key twice (which value?), nested past reading
        raise CheckpointError(f"{file} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a JSON object, got {type(data).__name__}")
    return data
