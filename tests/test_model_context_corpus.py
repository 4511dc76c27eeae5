"""``--max-model-len`` past the model's context, on every command that loads a model: refused
before the weights load, in one line that names the flag (not ``max_model_len=``, the Python
API's keyword), the context the checkpoint's ``config.json`` states and the way out. The
engine refused it only once built from the loaded model; the model here has weights that do
not load, so a refusal that names the flag came before any load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_cli_corpus import assert_usage_error

from minipaged import cli
from minipaged.models import EMBEDDED_MODELS

CONTEXT = 64  # the model's max_position_embeddings, below the tiny model's own

COMMANDS = {  # the command line before the model's flags, from tmp_path
    "generate": lambda tmp: ["generate", "--prompt", "It is", "--max-tokens", "1"],
    "trace record": lambda tmp: ["trace", "record", str(tmp / "run.jsonl"), "--prompt", "It"],
    "tui": lambda tmp: ["tui", "--prompt", "It is", "--screenshot", str(tmp / "shot.svg")],
}


def model_of_context(tmp_path: Path, context: int, weights: bytes | None = None) -> Path:
    model = tmp_path / "model"
    shutil.copytree(EMBEDDED_MODELS["tiny"], model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": context}))
    if weights is not None:
        (model / "model.safetensors").write_bytes(weights)
    return model


def files_below(path: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("length", [CONTEXT + 1, 10**6])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_length_past_the_context_is_refused_by_the_flag_before_the_model_loads(
    command, length, tmp_path, capsys
):
    model = model_of_context(tmp_path, CONTEXT, weights=b"no weights")
    before = files_below(tmp_path)
    argv = [*COMMANDS[command](tmp_path), "--model", str(model), "--max-model-len", str(length)]
    line = assert_usage_error(argv, capsys, f"--max-model-len {length:,}", "config.json")
    assert f"context of {CONTEXT} tokens" in line and f"--max-model-len {CONTEXT} or less" in line
    assert "max_model_len=" not in line
    assert files_below(tmp_path) == before


@pytest.mark.parametrize("length", [16, CONTEXT])
def test_a_length_within_the_context_runs(length, tmp_path, capsys):
    model = model_of_context(tmp_path, CONTEXT)
    argv = [*COMMANDS["generate"](tmp_path), "--model", str(model), "--max-model-len", str(length)]
    assert cli.main(argv) == 0, capsys.readouterr().err
