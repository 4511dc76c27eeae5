"""What ``python -m minipaged.train`` is given to read, when it cannot be read: a corpus that is
a folder, a symbolic link in a loop, a FIFO, no UTF-8, or too short for one window of
``--context`` tokens, and a ``--tokenizer`` folder without a tokenizer that loads. A folder
or a loop was called a corpus that "does not exist", a Latin-1 corpus and a short one ended
in a traceback (``UnicodeDecodeError``; ``RuntimeError: stack expects a non-empty
TensorList`` after the tokenizer was trained), and a broken ``--tokenizer`` file in one
after the corpus was read. Each is now refused as a bad flag is: status 2, one line naming
the flag, the path and the way out, before any model is built and with nothing written.

A symbolic link that leads round in a loop is one class with every file a command reads
(``input_file.check_input_file``): ``trace replay`` and ``tui --trace`` said "Too many
levels of symbolic links; check the path and its permissions" with status 1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from minipaged import cli, train
from minipaged.models import EMBEDDED_MODELS


def corpus_of(tmp_path: Path, kind: str) -> Path:
    """A ``--corpus`` path of ``kind``, made in ``tmp_path``."""
    path = tmp_path / kind.replace(" ", "-")
    if kind == "a folder":
        path.mkdir()
    elif kind == "a loop":
        path.symlink_to(path.name)
    elif kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "Latin-1":
        path.write_bytes("Emma said: caf\xe9.\n".encode("latin-1"))
    return path  # "missing": nothing made


CORPORA = {  # kind: words the refusal must hold
    "missing": "does not exist",
    "a folder": "is a folder",
    "a loop": "leads round in a loop",
    "a FIFO": "not a regular file",
    "Latin-1": "is not UTF-8 text (byte 14)",
}


def refused(argv: list[str], capsys, *words: str) -> None:
    """``train``'s parsing of ``argv`` ends with status 2 and one error line holding
    ``words``."""
    with pytest.raises(SystemExit) as ended:
        train.parse_args(argv)
    err = capsys.readouterr().err
    assert ended.value.code == 2, err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert "Traceback" not in err
    for word in words:
        assert word in line, line


@pytest.mark.parametrize("kind", CORPORA)
def test_a_corpus_that_cannot_be_read_is_refused_where_it_is_typed(kind, tmp_path, capsys):
    corpus = corpus_of(tmp_path, kind)
    out = tmp_path / "model"
    argv = ["--corpus", str(corpus), "--out", str(out)]
    refused(argv, capsys, "--corpus", str(corpus), CORPORA[kind])
    assert not out.exists()


def test_a_corpus_too_short_for_one_window_ends_before_the_model_is_built(tmp_path, capsys):
    corpus = tmp_path / "short.txt"
    corpus.write_text("".join(f"Paragraph {i}, said she.\n" for i in range(40)))
    out = tmp_path / "model"
    threads = torch.get_num_threads()  # train sets it for the process
    try:
        with pytest.raises(SystemExit) as ended:
            train.main(["--corpus", str(corpus), "--out", str(out), "--vocab-size", "300"])
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "Traceback" not in err
    assert f"--corpus {corpus} is too short for --context 512" in err
    assert "a longer corpus or a smaller --context" in err
    assert not out.exists()


@pytest.mark.parametrize("kind", ["a folder without one", "a broken tokenizer.json"])
def test_a_tokenizer_that_does_not_load_is_refused_where_it_is_typed(kind, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Emma.\n")
    folder = tmp_path / "draft"
    folder.mkdir()
    if kind == "a broken tokenizer.json":
        (folder / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    argv = ["--corpus", str(corpus), "--tokenizer", str(folder), "--out", str(tmp_path / "m")]
    words = ["has no tokenizer.json"] if kind == "a folder without one" else ["is not a tokenizer"]
    refused(argv, capsys, "--tokenizer", str(folder), *words)
    assert not (tmp_path / "m").exists()


def test_a_model_folder_given_as_tokenizer_is_taken(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Emma.\n")
    args = train.parse_args(["--corpus", str(corpus), "--tokenizer", str(EMBEDDED_MODELS["tiny"])])
    assert args.tokenizer == EMBEDDED_MODELS["tiny"]


READERS = {  # a command that reads the file at `path`
    "trace replay": lambda path: ["trace", "replay", str(path)],
    "tui --trace": lambda path: ["tui", "--trace", str(path)],
}


@pytest.mark.parametrize("reader", READERS)
def test_a_symbolic_link_in_a_loop_is_refused_as_a_bad_path_by_every_reader(
    reader, tmp_path, capsys
):
    loop = tmp_path / "run.jsonl"
    loop.symlink_to("run.jsonl")
    assert cli.main(READERS[reader](loop)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{loop} is a symbolic link that leads round in a loop" in err
    assert "name the file itself" in err


def test_links_in_a_loop_through_two_names_are_one_loop(tmp_path, capsys):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    assert cli.main(["trace", "replay", str(tmp_path / "a")]) == 2
    assert "leads round in a loop" in capsys.readouterr().err
