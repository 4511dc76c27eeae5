"""JSON that a user hands over, nested thousands of levels deep or holding one key twice, at
every place minipaged reads JSON from a user: a trace's header and its step lines, a model's
``config.json``, ``generation_config.json`` and ``tokenizer_config.json``, a gradebook beside
a class, ``--speculative-config``. Nesting raised ``RecursionError`` ("'maximum recursion depth
exceeded while decoding a JSON array from a unicode string'", with no file named and no fix),
and a key given twice kept its last value without a word (a ``config.json`` holding
``rope_theta`` twice runs a model other than the one its author read). Both now go through
``json_input.loads``: one line naming the file and what is wrong, the usual status, nothing
run and nothing written.

The same readers are fed the rest of what is no JSON a setting holds: ``NaN`` (Python's word,
read as a float without a word), ``1e400`` (read as infinity), bytes that are no UTF-8, and an
empty file: each reader refuses each one in one line that names its file and the problem. The
folder ``save_model`` writes into is read by the same reader, so a file there nested past
reading is another model's file, not a ``RecursionError``."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from minipaged import cli, json_input
from minipaged.checkpoint import load_model, save_model
from minipaged.models import EMBEDDED_MODELS

DEEP = "[" * 100_000
NESTED, TWICE = "nested too deeply to read", "twice in one object"


def model_with(tmp_path: Path, name: str, text: str) -> list[str]:
    model = tmp_path / "model"
    shutil.copytree(EMBEDDED_MODELS["tiny"], model)
    (model / name).write_text(text)
    return ["generate", "--model", str(model), "--prompt", "It is", "--max-tokens", "1"]


def config_twice(tmp_path: Path) -> str:
    text = (EMBEDDED_MODELS["tiny"] / "config.json").read_text().rstrip().rstrip("}")
    return text + ', "rope_theta": 500000.0}'


def a_trace_header(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "run.jsonl").write_text(text + "\n")
    return ["trace", "replay", str(tmp_path / "run.jsonl")]


def a_gradebook(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "class" / "ada").mkdir(parents=True)
    (tmp_path / "gradebook.json").write_text(text)
    return ["exercises", "check", "1", "--batch", str(tmp_path / "class")]


def speculative(tmp_path: Path, text: str) -> list[str]:
    return ["generate", "--prompt", "It is", "--max-tokens", "1", "--speculative-config", text]


HEADER = '{"format": "minipaged-trace", "version": 2, "version": 2}'
BOOK = '{"exercise": 1, "minipaged_version": "0", "students": [], "exercise": 2}'

CASES = {  # command line from tmp_path; status; words of the one line on stderr
    "a trace's header nested": (lambda tmp: a_trace_header(tmp, DEEP), 1, [NESTED, "line 1"]),
    "a trace's header with a key twice": (
        lambda tmp: a_trace_header(tmp, HEADER),
        1,
        ["'version' " + TWICE, "is not a readable minipaged trace"],
    ),
    "config.json nested": (
        lambda tmp: model_with(tmp, "config.json", DEEP),
        1,
        ["config.json is not valid JSON", NESTED],
    ),
    "config.json with rope_theta twice": (
        lambda tmp: model_with(tmp, "config.json", config_twice(tmp)),
        1,
        ["config.json is not valid JSON", "'rope_theta' " + TWICE, "keep one"],
    ),
    "generation_config.json with a key twice": (
        lambda tmp: model_with(
            tmp, "generation_config.json", '{"eos_token_id": 1, "eos_token_id": 2}'
        ),
        1,
        ["generation_config.json is not valid JSON", "'eos_token_id' " + TWICE],
    ),
    "tokenizer_config.json nested": (
        lambda tmp: model_with(tmp, "tokenizer_config.json", DEEP),
        1,
        ["tokenizer_config.json is not valid JSON", NESTED],
    ),
    "a gradebook nested": (
        lambda tmp: a_gradebook(tmp, DEEP),
        2,
        ["gradebook.json is there and is no gradebook minipaged wrote", "move it away"],
    ),
    "a gradebook with its exercise twice": (
        lambda tmp: a_gradebook(tmp, BOOK),
        2,
        ["gradebook.json is there and is no gradebook minipaged wrote"],
    ),
    "--speculative-config nested": (
        lambda tmp: speculative(tmp, DEEP),
        2,
        ["must be a JSON object such as", NESTED],
    ),
    "--speculative-config with its method twice": (
        lambda tmp: speculative(tmp, '{"method": "ngram", "method": "draft"}'),
        2,
        ["'method' " + TWICE, "keep one"],
    ),
}


def files_below(path: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(CASES))
def test_json_nested_past_reading_or_with_a_key_twice_is_refused_naming_the_file(
    case, tmp_path, capsys
):
    command, status, words = CASES[case]
    argv = command(tmp_path)
    before = files_below(tmp_path)
    assert cli.main(argv) == status
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "recursion" not in err and "Traceback" not in out + err
    assert len(err) < 600, err  # the nested text is not echoed whole
    for word in words:
        assert word in err, err
    assert files_below(tmp_path) == before


@pytest.mark.parametrize(
    "text",
    ['{"a": {"a": 1}}', '[{"a": 1}, {"a": 2}]', "[" * 50 + "]" * 50, "[1.7e308, -5e-324]"],
)
def test_json_a_real_file_holds_is_read_as_json_reads_it(text):
    """The same key in two objects, a few levels of nesting, the largest and smallest floats:
    as before."""
    assert json.dumps(json_input.loads(text)) == json.dumps(json.loads(text))


DOCUMENTS = {  # what no reader of a setting takes, and the words its refusal holds
    "nested": (DEEP.encode(), NESTED),
    "NaN": (b'{"x": NaN}', "it holds NaN"),
    "Infinity": (b'{"x": [-Infinity]}', "it holds -Infinity"),
    "1e400": (b'{"x": 1e400}', "it holds the number 1e400"),
    "an integer of 5,000 digits": (b'{"x": 1' + b"0" * 4999 + b"}", "5,000 digits"),
    "not UTF-8": (b'{"x": "\xff"}', "UTF-8"),
    "empty": (b"", ""),
}


def a_model_file(name: str):
    def command(tmp_path: Path, data: bytes) -> list[str]:
        argv = model_with(tmp_path, name, "")
        (tmp_path / "model" / name).write_bytes(data)
        return argv

    return command


def a_trace_file(tmp_path: Path, data: bytes) -> list[str]:
    argv = a_trace_header(tmp_path, "")
    (tmp_path / "run.jsonl").write_bytes(data + b"\n")
    return argv


def a_gradebook_file(tmp_path: Path, data: bytes) -> list[str]:
    argv = a_gradebook(tmp_path, "")
    (tmp_path / "gradebook.json").write_bytes(data)
    return argv


READERS = {  # command line from tmp_path and the file's bytes; status; the file's name
    "a trace": (a_trace_file, 1, "run.jsonl"),
    "config.json": (a_model_file("config.json"), 1, "config.json"),
    "generation_config.json": (a_model_file("generation_config.json"), 1, "generation_config"),
    "tokenizer_config.json": (a_model_file("tokenizer_config.json"), 1, "tokenizer_config"),
    "a gradebook": (a_gradebook_file, 2, "gradebook.json is there and is no gradebook"),
}


@pytest.mark.parametrize("document", list(DOCUMENTS))
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_what_no_setting_holds_in_one_line_naming_the_file(
    reader, document, tmp_path, capsys
):
    command, status, name = READERS[reader]
    data, problem = DOCUMENTS[document]
    argv = command(tmp_path, data)
    before = files_below(tmp_path)
    assert cli.main(argv) == status
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in out + err, err
    assert len(err) < 600, err
    assert name in err, err
    if reader != "a gradebook":  # that one says only that the file is no gradebook of ours
        assert problem in err, err
    assert files_below(tmp_path) == before


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if d not in ("not UTF-8", "empty")])
def test_speculative_config_refuses_what_no_setting_holds(document, capsys):
    data, problem = DOCUMENTS[document]
    assert cli.main(speculative(Path("."), data.decode())) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--speculative-config" in err and problem in err, err


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "model.safetensors"])
def test_save_model_over_a_file_nested_past_reading_replaces_none_of_the_folder(name, tmp_path):
    """``checkpoint_kinds`` reads each file of the folder to tell ours from another's: a file
    nested past reading is not ours, refused as any other, not a ``RecursionError``."""
    tiny = load_model("tiny")
    folder = tmp_path / "model"
    save_model(tiny, EMBEDDED_MODELS["tiny"], folder)
    nested = DEEP.encode()
    if name == "model.safetensors":  # its JSON header follows its 8-byte length
        nested = struct.pack("<Q", len(nested)) + nested
    (folder / name).write_bytes(nested)
    before = files_below(folder)
    with pytest.raises(ValueError, match="is there and is not"):
        save_model(tiny, EMBEDDED_MODELS["tiny"], folder)
    assert files_below(folder) == before
