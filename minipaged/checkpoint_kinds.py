"""What ``save_model`` (and ``python -m minipaged.train --out``) may replace in the folder it
writes: each file of a checkpoint only over a file of its own kind (``minipaged.replaceable``).

``train --out`` named at another model's folder replaced its weights and config without a
word, and so did ``save_model`` called from Python. A config that minipaged wrote is known by
what it holds (a Llama's, without the ``transformers_version`` that Hugging Face's own saves
write), so another model's folder is refused by its config before any file is replaced; each
other file is known by what minipaged puts in it: the weights by the ``writer`` of their
safetensors metadata (another Llama's weights carry the same tensor names), the model card by
its first line (any text is not enough: a user's notes are text). An extra file of another
name holds nothing that says who wrote it, so it is replaced only with ``force``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors.torch import save

from minipaged import json_input
from minipaged.checkpoint_files import WEIGHTS_FILE
from minipaged.replaceable import PYTHON_FORCE, OutputKind, check_replaceable
from minipaged.tokenizer import TOKENIZER

CONFIG_FILE = "config.json"
GENERATION_FILE = "generation_config.json"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
MODEL_CARD_FILE = "MODEL_CARD.md"
WEIGHTS_METADATA = {"format": "pt", "writer": "minipaged"}
"""The safetensors metadata ``save_model`` writes (``weights_bytes``): ``format`` as
transformers writes it (and requires), and ``writer``, which tells weights minipaged saved from
another Llama's of the same tensor names."""


def _json_object(head: bytes) -> dict | None:
    """The JSON object ``head`` holds whole, or None. Read by ``json_input.loads``: a file
    nested thousands of levels deep in the folder written to is no file of ours, not a
    ``RecursionError``."""
    try:
        value = json_input.loads(head)
    except json_input.NotJSON:  # not JSON, or cut off by HEAD_BYTES: no file of ours is that long
        return None
    return value if isinstance(value, dict) else None


def _minipaged_config(head: bytes) -> bool:
    config = _json_object(head)
    return (
        config is not None
        and config.get("architectures") == ["LlamaForCausalLM"]
        and "transformers_version" not in config
    )


def _keys_within(*keys: str):
    def recognizes(head: bytes) -> bool:
        value = _json_object(head)
        return value is not None and set(value) <= set(keys)

    return recognizes


def _minipaged_weights(head: bytes) -> bool:
    """A safetensors file (an 8-byte little-endian header length, then a JSON header) whose
    tensors carry a Llama's names and whose metadata names minipaged its writer."""
    if len(head) < 8:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    header = _json_object(head[8 : 8 + length])
    if header is None or "model.embed_tokens.weight" not in header:
        return False
    metadata = header.get("__metadata__")
    return isinstance(metadata, dict) and metadata.get("writer") == WEIGHTS_METADATA["writer"]


def weights_bytes(state: dict[str, torch.Tensor]) -> bytes:
    """``state`` as a safetensors file carrying ``WEIGHTS_METADATA``, the same bytes for the
    same tensors. safetensors writes metadata in a hash map's order, which changes from one
    process to the next, so the JSON header is written again with the metadata's keys sorted
    (the tensors' offsets count from the end of the header, so the data stays as it is)."""
    raw = save(state, metadata=WEIGHTS_METADATA)
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors keeps the data 8-byte aligned
    return struct.pack("<Q", len(text)) + text + raw[8 + length :]


def model_card_title(name: str) -> str:
    """The first line of the model card of the model ``name`` (``train --out``'s folder): the
    line that tells a card minipaged wrote from any other text."""
    return f"# minipaged {name} model"


def _minipaged_model_card(head: bytes) -> bool:
    return re.match(rb"# minipaged [^\n]+ model\r?\n", head) is not None


KINDS = {
    CONFIG_FILE: OutputKind("a Llama config minipaged wrote", _minipaged_config),
    GENERATION_FILE: OutputKind(
        "a generation config minipaged wrote", _keys_within("bos_token_id", "eos_token_id")
    ),
    TOKENIZER_FILE: TOKENIZER,
    TOKENIZER_CONFIG_FILE: OutputKind(
        "a tokenizer config minipaged wrote",
        _keys_within("tokenizer_class", "model_max_length", "bos_token", "eos_token"),
    ),
    WEIGHTS_FILE: OutputKind("a Llama's weights minipaged saved (safetensors)", _minipaged_weights),
}
"""Each file of a checkpoint, and the kind of file saving one may replace at its name."""
EXTRAS = {
    MODEL_CARD_FILE: OutputKind(
        f"a model card minipaged wrote (its first line {model_card_title('NAME')!r})",
        _minipaged_model_card,
    ),
}
"""``save_model``'s ``extra`` files that minipaged can tell it wrote, by name."""
OTHER_EXTRA = OutputKind(
    "a file minipaged can tell it wrote (nothing in an extra file of another name says so)",
    lambda head: False,
)
"""Any other ``extra`` file: only nothing (no file, an empty one) is replaced without force."""


def kind_of(name: str) -> OutputKind:
    """The kind of file a checkpoint's file ``name`` may replace."""
    return KINDS.get(name) or EXTRAS.get(name, OTHER_EXTRA)


def check_checkpoint_replaceable(
    folder: Path, extra: Iterable[str] = (), force: bool = False, way: str = PYTHON_FORCE
) -> None:
    """Refuse, before any file is written, a checkpoint saved into ``folder`` (with the
    ``extra`` files named) where a file of another kind stands at one of its names
    (``replaceable.check_replaceable``; ``way``: how to ask to replace it anyway)."""
    for name in [*KINDS, *extra]:
        check_replaceable(folder / name, kind_of(name), force, way=way)
