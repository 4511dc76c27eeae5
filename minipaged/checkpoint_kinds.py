"""What ``save_model`` (and ``python -m minipaged.train --out``) may replace in the folder it
writes: each file of a checkpoint only over a file of its own kind (``minipaged.replaceable``).

``train --out`` named at another model's folder replaced its weights and config without a
word, and so did ``save_model`` called from Python. A config that minipaged wrote is known by
what it holds (a Llama's, without the ``transformers_version`` that Hugging Face's own saves
write), so another model's folder is refused by its config before any file is replaced; each
other file is known by its own format.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path

from minipaged.checkpoint_files import WEIGHTS_FILE
from minipaged.replaceable import PYTHON_FORCE, OutputKind, check_replaceable
from minipaged.tokenizer import TOKENIZER

CONFIG_FILE = "config.json"
GENERATION_FILE = "generation_config.json"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def _json_object(head: bytes) -> dict | None:
    """The JSON object ``head`` holds whole, or None."""
    try:
        value = json.loads(head)
    except ValueError:  # not JSON, or cut off by HEAD_BYTES: no file of ours is that long
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


def _llama_weights(head: bytes) -> bool:
    """A safetensors file (an 8-byte little-endian header length, then a JSON header) whose
    tensors carry a Llama's names."""
    if len(head) < 8:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and b'"model.embed_tokens.weight"' in head[8 : 8 + length]


def _text(head: bytes) -> bool:
    return b"\x00" not in head and bool(head.decode("utf-8", errors="ignore"))


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
    WEIGHTS_FILE: OutputKind("a Llama's weights (safetensors)", _llama_weights),
}
"""Each file of a checkpoint, and the kind of file saving one may replace at its name."""
EXTRA = OutputKind("text (a file of a checkpoint, such as its model card)", _text)
"""The kind of ``save_model``'s ``extra`` files (``MODEL_CARD.md``)."""


def kind_of(name: str) -> OutputKind:
    """The kind of file a checkpoint's file ``name`` may replace."""
    return KINDS.get(name, EXTRA)


def check_checkpoint_replaceable(
    folder: Path, extra: Iterable[str] = (), force: bool = False, way: str = PYTHON_FORCE
) -> None:
    """Refuse, before any file is written, a checkpoint saved into ``folder`` (with the
    ``extra`` files named) where a file of another kind stands at one of its names
    (``replaceable.check_replaceable``; ``way``: how to ask to replace it anyway)."""
    for name in [*KINDS, *extra]:
        check_replaceable(folder / name, kind_of(name), force, way=way)
