"""Hugging Face Llama checkpoint directories: read them into ``Llama``,
and write them so transformers' ``LlamaForCausalLM.from_pretrained`` reads ours.

A directory holds ``config.json``, the weights (``model.safetensors``, or shards listed in
``model.safetensors.index.json``) and usually ``tokenizer.json``. Our parameter names are HF's
without the ``model.`` prefix and our RoPE is HF's rotate-half, so weights move across
unchanged: loading is a rename, and so is saving, except that HF's separate q/k/v and gate/up
matrices are stacked into our packed projections on loading and split again on saving
(``minipaged.model.packed_projections``).

Everything here reads and writes local files only; nothing touches the network.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer as HFTokenizer

from minipaged import atomic_write, ending_signals
from minipaged.checkpoint_files import (
    WEIGHTS_FILE,
    CheckpointError,
    check_weight,
    read_json,
    read_weights,
)
from minipaged.checkpoint_kinds import (
    CONFIG_FILE,
    GENERATION_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    check_checkpoint_replaceable,
    kind_of,
    weights_bytes,
)
from minipaged.checkpoint_tensors import (
    HF_PREFIX,
    IGNORED_SUFFIXES,
    check_weights_match,
    hf_name,
    pack,
    unpack,
)
from minipaged.config import check_setting
from minipaged.device import check_device
from minipaged.model import Llama, LlamaConfig
from minipaged.models import EMBEDDED_MODELS, close_name, model_directory
from minipaged.output_paths import output_folder
from minipaged.rope import RopeScaling
from minipaged.tokenizer import Tokenizer


def load_config(path: str | Path) -> LlamaConfig:
    """Read ``config.json`` of a Hugging Face Llama directory (or embedded model name, see
    ``model_directory``), with ``generation_config.json``'s ``eos_token_id`` where that file
    states one: transformers' ``generate`` stops there, whatever ``config.json`` says.

    Absent optional keys take HF's defaults: ``rms_norm_eps`` 1e-6, ``tie_word_embeddings``
    False, ``head_dim`` = hidden_size / num_attention_heads, ``num_key_value_heads`` =
    num_attention_heads, ``rope_theta`` 10000 (read flat or under ``rope_parameters``, as
    transformers 5 writes it), and RoPE's scaling from ``rope_scaling`` or ``rope_parameters``
    (``minipaged.rope.RopeScaling``). Raises ``CheckpointError`` for another architecture, a
    rope scaling other than linear or llama3, biases or an activation other than SiLU, which
    this model does not implement.
    """
    directory = _existing_directory(path)
    file = directory / CONFIG_FILE
    raw = read_json(file, "the model's hyperparameters")
    try:
        config = _config_from(raw, file)
    except (TypeError, AttributeError, ZeroDivisionError) as error:
        raise CheckpointError(
            f"{file}: a value has the wrong type ({error}); sizes are positive integers, "
            "as in a config.json written by transformers' save_pretrained"
        ) from error
    generation = directory / GENERATION_FILE
    if not generation.exists():
        return config
    defaults = read_json(generation, "the generation defaults")
    if "eos_token_id" not in defaults:
        return config
    try:  # transformers' generate takes its EOS from here first, as we do
        return dataclasses.replace(config, eos_token_id=defaults["eos_token_id"])
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{generation}: {error}") from error


def _config_from(raw: dict[str, Any], file: Path) -> LlamaConfig:
    architectures = raw.get("architectures") or ["LlamaForCausalLM"]
    if "LlamaForCausalLM" not in architectures or raw.get("model_type", "llama") != "llama":
        raise CheckpointError(
            f"{file}: architectures {architectures} / model_type {raw.get('model_type')!r} is "
            "not supported; minipaged loads LlamaForCausalLM checkpoints (model_type 'llama')"
        )
    rope_parameters = raw.get("rope_parameters") or {}
    if not isinstance(rope_parameters, dict):
        raise CheckpointError(f"{file}: rope_parameters must be an object, got {rope_parameters!r}")
    scaling = raw.get("rope_scaling") or rope_parameters  # transformers 4's key, or 5's
    for key, supported in (("attention_bias", False), ("mlp_bias", False), ("hidden_act", "silu")):
        if raw.get(key, supported) != supported:
            raise CheckpointError(
                f"{file}: {key} = {raw[key]!r} is not supported; minipaged's Llama has "
                f"{key} = {supported!r}"
            )

    def required(key: str) -> Any:
        if key not in raw:
            raise CheckpointError(f"{file} has no {key!r}, which a Llama config must state")
        return raw[key]

    num_heads = required("num_attention_heads")
    hidden_size = required("hidden_size")
    try:
        return LlamaConfig(
            vocab_size=required("vocab_size"),
            hidden_size=hidden_size,
            intermediate_size=required("intermediate_size"),
            num_hidden_layers=required("num_hidden_layers"),
            num_attention_heads=num_heads,
            num_key_value_heads=raw.get("num_key_value_heads") or num_heads,
            head_dim=raw.get("head_dim") or hidden_size // num_heads,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),  # LlamaConfig refuses text ("1e-6")
            rope_theta=raw.get("rope_theta", rope_parameters.get("rope_theta", 10000.0)),
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=_flag(raw, "tie_word_embeddings", file),
            bos_token_id=_first_id(raw.get("bos_token_id")),
            eos_token_id=raw.get("eos_token_id"),  # one id, or a list: generation stops at any
            rope_scaling=RopeScaling.from_hf(scaling),
        )
    except ValueError as error:
        raise CheckpointError(f"{file}: {error}") from error


def load_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    *,
    config: LlamaConfig | None = None,
) -> Llama:
    """Build a ``Llama`` from a Hugging Face directory (or embedded model name, see
    ``model_directory``), weights cast to ``dtype``.

    Every parameter must be present with HF's name and shape; a tied model needs no
    ``lm_head.weight`` (one that is present is ignored, as HF does). Raises
    ``CheckpointError`` naming the file for a missing or corrupt file, a missing or
    unexpected tensor, or a shape that disagrees with ``config.json``. ``config``: the
    directory's ``config.json`` as the caller read it (``load_config``) and checked against
    the weights' headers (``check_weights_match``), as ``LLM`` does before it sizes the pools;
    read and checked here when None. Either way the model is built from the one reading that
    was checked: a second reading could differ from the first (a file rewritten meanwhile).
    """
    device = check_device(device)
    dtype = _weights_dtype(dtype)
    directory = _existing_directory(path)
    if config is None:
        config = load_config(directory)
        check_weights_match(directory, config)  # every tensor there, of its shape: headers only
    with torch.device("meta"):  # shapes only: the real tensors come from the file
        model = Llama(config)
    state: dict[str, torch.Tensor] = {}
    for file, tensors in read_weights(directory):
        for file_name, tensor in tensors.items():
            name = file_name.removeprefix(HF_PREFIX)
            if name.endswith(IGNORED_SUFFIXES) or (
                config.tie_word_embeddings and name == "lm_head.weight"
            ):
                continue
            check_weight(file, file_name, tensor)
            state[name] = tensor.to(dtype=dtype, device=device)
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    model.load_state_dict(pack(state, model.state_dict(), config), assign=True)
    if config.tie_word_embeddings:  # assign=True replaced both parameters: tie them again
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval()


def save_model(
    model: Llama,
    tokenizer: Tokenizer | HFTokenizer | str | Path,
    path: str | Path,
    extra: dict[str, str] | None = None,
    force: bool = False,
) -> None:
    """Write ``model`` and its tokenizer as a Hugging Face Llama directory at ``path``.

    The result loads with transformers' ``LlamaForCausalLM.from_pretrained`` and gives the
    same logits: fp32 weights under HF names (a tied ``lm_head`` is stored once, as
    ``embed_tokens``), and a ``config.json`` that states every value whose HF default differs
    from ours (``rms_norm_eps``, ``tie_word_embeddings``, ``head_dim``, ``rope_theta``).
    ``tokenizer`` is a ``Tokenizer``, a ``tokenizers.Tokenizer``, or a path to a
    ``tokenizer.json`` (or a directory holding one).

    Every argument is checked, and every file's content made, before the folder is made or
    any file written (``path`` by ``output_paths.output_folder``'s rule): a bad tokenizer or
    model leaves a checkpoint already at ``path`` as it was, never new weights beside an old
    config. ``extra``: more files of the checkpoint, by name, as text (``MODEL_CARD.md``);
    all are put in place together (``write_together``), so a signal that ends the command
    while they are saved leaves the old checkpoint or the new one, never a mix. A file at one
    of their names that is not of its kind (another model's config or weights:
    ``checkpoint_kinds``) is replaced only with ``force``: a ``ValueError`` before any is.
    """
    check_loaded_model(model, "save_model")
    _check_extra(extra)
    directory = _checkpoint_folder(path)
    if not isinstance(tokenizer, Tokenizer):
        tokenizer = Tokenizer(tokenizer)
    config = model.config

    state = {
        hf_name(name): tensor.detach().to("cpu", torch.float32).contiguous()
        for name, tensor in unpack(model.state_dict(), config).items()
        if not (config.tie_word_embeddings and name == "lm_head.weight")
    }
    special = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id}
    token_names = {
        key: tokenizer.tokenizer.id_to_token(token_id)
        for key, token_id in (
            ("bos_token", config.bos_token_id),
            ("eos_token", next(iter(config.eos_token_ids), None)),
        )
        if token_id is not None
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": config.max_position_embeddings,
        **token_names,
    }
    files = {
        WEIGHTS_FILE: weights_bytes(state),
        TOKENIZER_FILE: tokenizer.tokenizer.to_str(pretty=True).encode(),
        CONFIG_FILE: _json(_hf_config(config)),
        GENERATION_FILE: _json(special),
        TOKENIZER_CONFIG_FILE: _json(tokenizer_config),
        **{name: text.encode() for name, text in (extra or {}).items()},
    }
    check_checkpoint_replaceable(directory, extra or (), force)
    directory.mkdir(parents=True, exist_ok=True)
    write_together(directory, files, force)


def write_together(directory: Path, files: dict[str, bytes], force: bool = False) -> None:
    """Put ``files`` (name: content) in ``directory`` as one checkpoint: each is written whole
    to a temporary file beside its name first, so an error or a signal then leaves every old
    file as it was (``atomic_write``), and all are put in place with a signal that ends the
    command held back until the last is (``ending_signals.held_back``): never new weights
    beside an old config, or a model card of another run. A link at a name is replaced,
    never followed; a file of another kind at a name only with ``force`` (``kind_of``)."""
    staged: list[atomic_write.Replacement] = []
    try:
        for name, content in files.items():
            kind = kind_of(name)
            staged.append(
                atomic_write.Replacement(directory / name, "wb", replaces=kind, force=force)
            )
            staged[-1].file.write(content)
        with ending_signals.held_back():
            for replacement in staged:
                replacement.commit()
    except BaseException:
        for replacement in staged:
            replacement.discard()  # those put in place stay: the rest were never seen
        raise


def _hf_config(config: LlamaConfig) -> dict[str, Any]:
    scaling = config.rope_scaling.hf() if config.rope_scaling else {}
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "rms_norm_eps": config.rms_norm_eps,
        # transformers 4 reads the flat key, transformers 5 the nested one.
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta} | scaling,
        "rope_scaling": scaling or None,
        "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": config.tie_word_embeddings,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
        "torch_dtype": "float32",
        "dtype": "float32",
    }


def _existing_directory(path: str | Path) -> Path:
    directory = model_directory(path)
    if not directory.is_dir():
        made_by = (
            "; the embedded model is made by `python -m minipaged.train`"
            if directory in EMBEDDED_MODELS.values()
            else ""
        )
        raise CheckpointError(
            f"{directory} is not a directory: expected a Hugging Face Llama checkpoint "
            f"directory holding {CONFIG_FILE} and {WEIGHTS_FILE}{made_by}{close_name(path)}"
        )
    return directory


def check_loaded_model(model: object, who: str) -> None:
    """Refuse, with a ``TypeError`` naming ``who`` and the fix, a ``model`` that is not a
    loaded ``Llama``: its name or directory, say, which ``load_model`` turns into one."""
    if not isinstance(model, Llama):
        raise TypeError(
            f"{who} takes a loaded minipaged Llama, got {type(model).__name__} {model!r:.60}: "
            "load one with minipaged.checkpoint.load_model('tiny' or a Hugging Face Llama "
            "directory), or let LLM(model=...) load it"
        )


def _weights_dtype(dtype: object) -> torch.dtype:
    """``dtype`` by the engine's rule for its ``dtype`` setting (``config.check_setting``): a
    name of ``config.DTYPES`` or its ``torch.dtype``."""
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype
    return getattr(torch, check_setting("dtype", name))


def _checkpoint_folder(path: object) -> Path:
    """``path`` as the folder ``save_model`` writes, by the command line's rule for a folder
    to write (``output_paths.output_folder``), refused with a ``ValueError`` (``TypeError`` for
    what is no path) naming it and the fix."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"save_model's path must be a folder's path, got {type(path).__name__} {path!r:.60}"
        )
    try:
        return output_folder("a folder for the checkpoint")(os.fspath(path))
    except argparse.ArgumentTypeError as error:
        raise ValueError(f"save_model's path {os.fspath(path)!r:.80}: {error}") from None


def _check_extra(extra: object) -> None:
    """``extra`` is None or a dict of plain file names (none of the checkpoint's own) to text;
    else ``TypeError`` or ``ValueError`` naming the entry and the fix."""
    if extra is None:
        return
    if not isinstance(extra, dict):
        raise TypeError(
            f"save_model's extra must be a dict of file name to text, got {extra!r:.60}"
        )
    own = {WEIGHTS_FILE, TOKENIZER_FILE, CONFIG_FILE, GENERATION_FILE, TOKENIZER_CONFIG_FILE}
    for name, text in extra.items():
        plain = isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
        if not plain or "\x00" in name or name in own or not isinstance(text, str):
            raise ValueError(
                f"save_model's extra file {name!r:.60} must be a plain file name (no folder, not "
                f"one of {sorted(own)}) with text, got {type(text).__name__}: name it so"
            )


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def _flag(raw: dict[str, Any], key: str, file: Path) -> bool:
    """The JSON boolean ``raw[key]`` (HF's default False when absent): ``bool("false")`` is
    True, so a string there would tie the embeddings the file meant to keep apart."""
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise CheckpointError(f"{file}: {key} must be true or false, got {value!r}")
    return value


def _first_id(token_id: int | list[int] | None) -> int | None:
    """A list where one token is meant (a config that lists its BOS): the first."""
    if isinstance(token_id, list):
        return token_id[0] if token_id else None
    return token_id
