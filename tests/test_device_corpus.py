"""Device strings: every one torch accepts that the engine can run on is taken, by the config
and by ``check_device``; every other is refused naming what is accepted. Generated over
device types and index spellings, so a rule narrower or wider than torch's shows up."""

from __future__ import annotations

import itertools

import pytest
import torch

from minipaged import LLM, SamplingParams
from minipaged.config import EngineConfig
from minipaged.device import check_device

TYPES = ("cpu", "cuda", "CPU", "Cuda", "meta", "mps", "tpu", "")
INDEXES = ("", ":0", ":1", ":7", ":127", ":128", ":255", ":00", ":01", ":-1", ": 1", ":1a", ":")
SPELLINGS = [t + i for t, i in itertools.product(TYPES, INDEXES)] + [" cpu", "cpu ", "cuda\n"]


def torch_device(name: str) -> torch.device | None:
    """What torch makes of ``name``, or None where torch refuses it."""
    try:
        return torch.device(name)
    except (RuntimeError, TypeError):
        return None


def engine_can_run_on(name: str) -> bool:
    """The CPU or a CUDA device, by a number torch keeps as written (it keeps 8 bits: "cuda:128"
    reads back as "cuda:-128", "cuda:255" as "cuda")."""
    device = torch_device(name)
    return device is not None and device.type in ("cpu", "cuda") and str(device) == name


@pytest.mark.parametrize("name", SPELLINGS)
def test_the_config_takes_a_device_exactly_when_torch_does_and_the_engine_can_run_there(name):
    if engine_can_run_on(name):
        assert EngineConfig(device=name).device == name
    else:
        with pytest.raises(ValueError, match="device must be 'cpu', 'cuda', 'cpu:N' or 'cuda:N'"):
            EngineConfig(device=name)


@pytest.mark.parametrize("name", [n for n in SPELLINGS if engine_can_run_on(n)])
def test_check_device_places_every_cpu_number_on_the_one_cpu(name):
    if torch_device(name).type == "cpu":
        # equal to the device of every CPU tensor, as the attention contract compares them
        assert check_device(name) == torch.zeros(1, device=name).device == torch.device("cpu")
    elif not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available here"):
            check_device(name)


@pytest.mark.parametrize("name", ["cuda:128", "cuda:255", "cpu:128"])
def test_check_device_refuses_a_number_torch_wrapped_to_a_negative_one(name):
    with pytest.raises(ValueError, match="device numbers go from 0 to 127"):
        check_device(name)


def test_llm_on_cpu_0_writes_what_llm_on_cpu_writes():
    params = SamplingParams(max_tokens=6, temperature=0)
    prompts = [{"prompt_token_ids": [5, 6, 7, 8]}]
    tokens = [
        LLM(device=device, num_gpu_blocks=16).generate(prompts, params)[0].outputs[0].token_ids
        for device in ("cpu", "cpu:0", torch.device("cpu", 1))
    ]
    assert tokens[0] == tokens[1] == tokens[2]
