"""JSON that a user hands over, nested thousands of levels deep or holding one key twice, at
every place minipaged reads JSON from a user: a trace's header and its step lines, a model's
``config.json``, ``generation_config.json`` and ``tokenizer_config.json``, a gradebook beside
a class, ``--speculative-config``. Nesting raised ``RecursionError`` ("'maximum recursion depth
exceeded while decoding a JSON array from a unicode string'", with no file named and no fix),
and a key given twice kept its last value without a word (a ``config.json`` holding
``rope_theta`` twice runs a model other than the one its author read). Both now go through
``json_input.loads``: one line naming the file and what is wrong, the usual status, nothing
run and nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minipaged import cli, json_input
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
    "text", ['{"a": {"a": 1}}', '[{"a": 1}, {"a": 2}]', "[" * 50 + "]" * 50, '{"x": NaN}']
)
def test_json_a_real_file_holds_is_read_as_json_reads_it(text):
    """The same key in two objects, a few levels of nesting, Python's NaN: as before."""
    assert json.dumps(json_input.loads(text)) == json.dumps(json.loads(text))
