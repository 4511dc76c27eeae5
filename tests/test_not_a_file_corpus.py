"""What stands where a command reads a file, named for what it is. ``--model DIR`` whose
``config.json`` was a folder said the file "does not exist"; a ``--model`` that is a symbolic
link in a loop was "no such directory"; ``exercises check`` of a folder whose ``memory.py``
is a folder or a broken link said only "has no memory.py", which the student could see was
there. Each is refused as before (status 2, one line, before anything runs), and now says
what is there: a folder, a FIFO, a symbolic link to nothing or one that leads round in a
loop (``input_file.broken_link``)."""

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


EXERCISE_FILES = {  # what stands at the exercise's memory.py: what the refusal says of it
    "a folder": "memory.py is a folder: put the file itself there",
    "a link to nothing": "memory.py is a symbolic link to nothing",
    "a link in a loop": "memory.py is a symbolic link that leads round in a loop",
}


@pytest.mark.parametrize("kind", EXERCISE_FILES)
def test_an_exercise_file_that_is_no_file_says_what_stands_there(kind, tmp_path, capsys):
    folder = tmp_path / "ex01"
    assert cli.main(["exercises", "init", "1", str(folder)]) == 0
    capsys.readouterr()
    (folder / "memory.py").unlink()
    if kind == "a folder":
        (folder / "memory.py").mkdir()
    else:
        (folder / "memory.py").symlink_to("nowhere.py" if "nothing" in kind else "memory.py")
    argv = ["exercises", "check", "1", "--path", str(folder)]
    refused(argv, capsys, "has no memory.py", EXERCISE_FILES[kind])
