"""The models that ship inside the package, and how a model's name becomes its directory.

Apart from ``minipaged.checkpoint`` (which needs torch to load weights) so that the engine's
config can check a model's name without importing torch."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from minipaged.input_file import broken_link

EMBEDDED_MODELS = {name: Path(__file__).resolve().parent / name for name in ("tiny", "tiny-draft")}
"""Models that ship inside the package, by name. ``minipaged.train`` made both: ``tiny`` is
the default model, ``tiny-draft`` (a quarter of its size, the same tokenizer) is its draft
for speculative decoding. Each directory's ``MODEL_CARD.md`` says how."""


def model_directory(model: str | Path) -> Path:
    """The directory of ``model``: an embedded model's name (``"tiny"``) or a path to a Hugging
    Face Llama directory. A name wins over a directory of the same name in the working
    directory; pass ``./tiny`` for the latter."""
    if isinstance(model, str) and model in EMBEDDED_MODELS:
        return EMBEDDED_MODELS[model]
    return Path(model)


def close_name(model: object) -> str:
    """``"; did you mean 'tiny'?"`` when ``model`` is no directory but spells an embedded
    model's name in other case or with a slip (``"Tiny"``, ``"tiny "``, ``"tinny"``); else
    ``""``."""
    if not isinstance(model, str) and str(model) in EMBEDDED_MODELS:  # Path("tiny")
        return f"; the embedded model is named by the string {str(model)!r}, not a path"
    spelled = str(model).strip().lower()
    close = difflib.get_close_matches(spelled, EMBEDDED_MODELS, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_model_directory(model: str | Path) -> Path:
    """The directory of ``model`` (``model_directory``), refused with a ``FileNotFoundError``
    that says what to pass when there is no such directory, or it holds no ``config.json``."""
    directory = model_directory(model)
    if not directory.is_dir():
        raise FileNotFoundError(
            f'--model {model}: {no_directory(directory)}; pass "tiny" or a Hugging Face Llama '
            "directory holding config.json, model.safetensors and tokenizer.json"
            + close_name(model)
        )
    config = directory / "config.json"
    if not config.is_file():  # an empty folder, or another program's
        raise FileNotFoundError(
            f"--model {model}: {config} {no_file(config)}, so it is no model; pass a whole "
            'model directory ("tiny", or a Hugging Face Llama directory holding config.json, '
            "model.safetensors and tokenizer.json)"
        )
    return directory


def no_file(path: Path) -> str:
    """Why ``path``, which is no regular file, cannot be one of a model's files, in words that
    follow its name: a folder in its place was said not to exist."""
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists():
        return "is not a regular file (a FIFO, a socket or a device)"
    return f"is {broken_link(path)}" if path.is_symlink() else "does not exist"


def no_directory(path: Path) -> str:
    """Why ``path``, which is no directory, cannot be a model's: a file (a config.json or the
    weights named in place of their folder) or nothing at all."""
    if path.exists():
        return "a file, not a directory"
    return broken_link(path) if path.is_symlink() else "no such directory"


def files_read(config) -> list[tuple[str, Path]]:
    """Every file of the model directories a run of ``config`` (an ``EngineConfig``) reads, as
    ``output_paths.check_outputs_apart``'s inputs: the files of its model's directory and of
    its speculative draft model's (each named or a path; a loaded model reads no file). A
    command's output must take the place of none: ``trace record DRAFT/config.json`` with a
    draft model ``DRAFT`` would replace the draft's config with a trace."""
    draft = config.speculative.draft_model if config.speculative is not None else None
    files = []
    named_models = (("a file of the model", config.model), ("a file of the draft model", draft))
    for what, named in named_models:
        if isinstance(named, str | os.PathLike) and model_directory(named).is_dir():
            files += [(what, file) for file in sorted(model_directory(named).iterdir())]
    return files
