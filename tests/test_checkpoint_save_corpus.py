"""``save_model``, the function a notebook calls to write a checkpoint, given what cannot
work: a model that is no Llama, a tokenizer that is not there or is no tokenizer, a path that
is empty, a file, a FIFO, a descriptor, or runs through a file. Before, it made the folder and
wrote the new weights first and read the tokenizer after, so a bad tokenizer left new weights
beside the old config and tokenizer (a checkpoint that loads and is wrong); a path that is a
file raised a bare ``[Errno 17] File exists``; a model of the wrong type raised
``AttributeError`` after making the folder; an empty path wrote into the working directory.
Each is refused before anything is made or written, in a message naming the value and the
fix, and a checkpoint already there is left byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minipaged.checkpoint import load_model, save_model
from minipaged.models import EMBEDDED_MODELS

TOKENIZER = EMBEDDED_MODELS["tiny"] / "tokenizer.json"


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def state(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below ``folder``, with its inode: a file replaced by the same bytes shows."""
    return {
        str(p.relative_to(folder)): (p.stat().st_ino, p.read_bytes() if p.is_file() else b"")
        for p in sorted(folder.rglob("*"))
    }


CASES = {  # (model, tokenizer, path) from (model, tmp_path); the error; words it must hold
    "a tokenizer that is not there": (
        lambda m, tmp: (m, tmp / "nope" / "tokenizer.json", tmp / "saved"),
        FileNotFoundError,
        ["nope/tokenizer.json does not exist", "pass the file or the model directory"],
    ),
    "a tokenizer that is a number": (
        lambda m, tmp: (m, 5, tmp / "saved"),
        TypeError,
        ["got int 5", "pass its path"],
    ),
    "a model that is its name": (
        lambda m, tmp: ("tiny", TOKENIZER, tmp / "saved"),
        TypeError,
        ["save_model takes a loaded minipaged Llama", "load_model", "got str 'tiny'"],
    ),
    "a path that is a file of the checkpoint": (
        lambda m, tmp: (m, TOKENIZER, tmp / "saved" / "config.json"),
        ValueError,
        ["config.json is a file", "name a folder for the checkpoint"],
    ),
    "a path through a file": (
        lambda m, tmp: (m, TOKENIZER, tmp / "saved" / "config.json" / "more"),
        ValueError,
        ["config.json, on the way to", "is a file"],
    ),
    "an empty path": (
        lambda m, tmp: (m, TOKENIZER, ""),
        ValueError,
        ["must name a folder for the checkpoint, got an empty string"],
    ),
    "a FIFO": (
        lambda m, tmp: (m, TOKENIZER, tmp / "fifo"),
        ValueError,
        ["fifo is a FIFO", "name a folder for the checkpoint"],
    ),
    "standard output": (
        lambda m, tmp: (m, TOKENIZER, "/dev/fd/1"),
        ValueError,
        ["this command's standard output", "name a folder for the checkpoint"],
    ),
    "a path that is a number": (
        lambda m, tmp: (m, TOKENIZER, 7),
        TypeError,
        ["save_model's path must be a folder's path, got int 7"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_save_model_refuses_before_writing_and_leaves_the_checkpoint_there(
    case, tiny, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # an empty path would have written here
    save_model(tiny, TOKENIZER, tmp_path / "saved")
    os.mkfifo(tmp_path / "fifo")
    before = state(tmp_path)
    arguments, error, words = CASES[case]
    with pytest.raises(error) as refused:
        save_model(*arguments(tiny, tmp_path))
    for word in words:
        assert word in str(refused.value), str(refused.value)
    assert state(tmp_path) == before


def test_a_checkpoint_saved_into_a_new_nested_folder_loads_back(tiny, tmp_path):
    save_model(tiny, EMBEDDED_MODELS["tiny"], tmp_path / "a" / "b")
    again = load_model(tmp_path / "a" / "b")
    assert again.config == tiny.config
