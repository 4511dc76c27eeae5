"""What stands where a model's folder, or its ``config.json``, should be, named for what it is.
``--model DIR`` whose ``config.json`` was a folder said the file "does not exist"; a
``--model`` that is a symbolic link in a loop was "no such directory". Each is refused before
the model loads, as before, in one line that now says what is there: a folder, a FIFO, a
symbolic link to nothing or one that leads round in a loop."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from minipaged import cli
from minipaged.models import EMBEDDED_MODELS


def config_place(folder: Path, kind: str) -> None:
    """Put ``kind`` where ``folder``'s config.json goes."""
    config = folder / "config.json"
    config.unlink()
    if kind == "a folder":
        config.mkdir()
    elif kind == "a FIFO":
        os.mkfifo(config)
    elif kind == "a link to nothing":
        config.symlink_to("elsewhere.json")
    elif kind == "a link in a loop":
        config.symlink_to("config.json")


CONFIGS = {  # what stands at config.json: what the refusal says of it
    "nothing": "does not exist",
    "a folder": "is a folder, not a file",
    "a FIFO": "is not a regular file",
    "a link to nothing": "is a symbolic link to nothing",
    "a link in a loop": "is a symbolic link that leads round in a loop",
}


def refused(argv: list[str], capsys, *words: str) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("kind", CONFIGS)
def test_a_model_folder_whose_config_is_no_file_says_what_stands_there(kind, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(EMBEDDED_MODELS["tiny"], folder)
    config_place(folder, kind)
    argv = ["generate", "--prompt", "Emma", "--model", str(folder)]
    refused(argv, capsys, f"{folder / 'config.json'} {CONFIGS[kind]}", "pass a whole model")


MODELS = {
    "a link to nothing": ("elsewhere", "a symbolic link to nothing"),
    "a link in a loop": ("model", "a symbolic link that leads round in a loop"),
}


@pytest.mark.parametrize("kind", MODELS)
def test_a_model_that_is_a_broken_link_says_which(kind, tmp_path, capsys):
    target, words = MODELS[kind]
    (tmp_path / "model").symlink_to(target)
    argv = ["generate", "--prompt", "Emma", "--model", str(tmp_path / "model")]
    refused(argv, capsys, f"--model {tmp_path / 'model'}: {words}", '"tiny"')
