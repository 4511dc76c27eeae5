"""What a notebook passes where a loaded model is meant, and the weights' dtype of
``load_model``. ``LLMEngine("tiny")`` (the name, as ``LLM`` takes it) raised ``AttributeError:
'str' object has no attribute 'config'``, and ``load_model("tiny", dtype="float8")`` raised
torch's many-line ``to() received an invalid combination of arguments``. Each is now one
sentence naming the value and the fix (``checkpoint.check_loaded_model``; the engine's rule for
``dtype``, ``config.check_setting``), given before anything is loaded or built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minipaged.checkpoint import load_model, save_model
from minipaged.engine import LLMEngine
from minipaged.models import EMBEDDED_MODELS

NOT_A_MODEL = {
    "its name": ("tiny", "got str 'tiny'"),
    "its directory": (EMBEDDED_MODELS["tiny"], "got PosixPath"),
    "None": (None, "got NoneType None"),
    "a number": (5, "got int 5"),
    "a torch module that is no Llama": (torch.nn.Linear(2, 2), "got Linear"),
}


@pytest.mark.parametrize("case", list(NOT_A_MODEL))
@pytest.mark.parametrize("who", ["LLMEngine", "save_model"])
def test_what_is_no_loaded_model_is_refused_saying_how_to_load_one(who, case, tmp_path):
    model, words = NOT_A_MODEL[case]
    with pytest.raises(TypeError) as refused:
        if who == "LLMEngine":
            LLMEngine(model)
        else:
            save_model(model, EMBEDDED_MODELS["tiny"], tmp_path / "saved")
    message = str(refused.value)
    assert message.startswith(f"{who} takes a loaded minipaged Llama") and words in message
    assert "load_model" in message and "LLM(model=...)" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []


BAD_DTYPES = {
    "an FP8 name (a KV cache's, not the weights')": ("float8", "did you mean 'float32'?"),
    "a number": (5, "got 5"),
    "True": (True, "got True"),
    "an FP8 torch dtype": (torch.float8_e4m3fn, "got 'float8_e4m3fn'"),
    "an integer torch dtype": (torch.int8, "got 'int8'"),
    "a misspelt name": ("flaot16", "did you mean 'float16'?"),
}


@pytest.mark.parametrize("case", list(BAD_DTYPES))
def test_a_weights_dtype_that_cannot_work_is_refused_by_the_engines_rule(case):
    dtype, words = BAD_DTYPES[case]
    with pytest.raises(ValueError) as refused:
        load_model("tiny", dtype=dtype)
    message = str(refused.value)
    assert "dtype must be one of 'float32', 'float16', 'bfloat16'" in message
    assert words in message and "\n" not in message


@pytest.mark.parametrize("dtype", [torch.float16, "bfloat16", "float32"])
def test_a_weights_dtype_named_or_given_as_torch_spells_it_loads(dtype):
    model = load_model("tiny", dtype=dtype)
    assert str(next(model.parameters()).dtype) == f"torch.{str(dtype).removeprefix('torch.')}"


def test_a_loaded_model_still_makes_an_engine():
    assert isinstance(LLMEngine(load_model(Path(EMBEDDED_MODELS["tiny"]))), LLMEngine)
