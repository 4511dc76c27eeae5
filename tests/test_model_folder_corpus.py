"""A folder named as a model that holds no model (an empty one, a folder of something else):
``generate --model DIR``, a draft model ``DIR`` and ``LLM(DIR)`` said only that
``DIR/config.json`` does not exist and what it should hold, with no way out, where ``tui
--model DIR`` said what to pass. Each now names the missing file and what to pass instead, in
one line, without a traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from minipaged import LLM, cli
from minipaged.checkpoint_files import CheckpointError
from minipaged.models import EMBEDDED_MODELS

WAY_OUT = "pass a whole model directory"


@pytest.mark.parametrize(
    "flags",
    [
        ["--model", "{dir}"],
        ["--speculative-config", json.dumps({"method": "draft", "draft_model": "{dir}"})],
    ],
    ids=["model", "draft-model"],
)
def test_a_folder_without_a_model_is_refused_with_the_way_out(tmp_path, capsys, flags):
    typed = [flag.replace("{dir}", str(tmp_path)) for flag in flags]
    assert cli.main(["generate", "--prompt", "Emma", "--max-tokens", "1", *typed]) in (1, 2)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{tmp_path / 'config.json'} does not exist" in err and WAY_OUT in err, err


def test_the_python_api_names_the_missing_file_and_the_way_out(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(EMBEDDED_MODELS["tiny"], model)
    (model / "config.json").unlink()  # the weights and tokenizer say their own ways out
    with pytest.raises(CheckpointError) as refused:
        LLM(str(model))
    assert f"{model / 'config.json'} does not exist" in str(refused.value)
    assert WAY_OUT in str(refused.value)
