import json

import pytest

from minipaged import trace
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine
from minipaged.sampling import SamplingParams


@pytest.fixture(scope="module")
def recorded(hf_llama):
    """A run with forks, copy-on-write and swapping, step by step."""
    engine = LLMEngine(
        load_model(hf_llama[1]),
        block_size=4,
        num_gpu_blocks=10,
        num_cpu_blocks=16,
        preemption="swap",
    )
    engine.add_request(
        {"prompt_token_ids": [5, 6, 7]},
        SamplingParams(max_tokens=10, temperature=0.8, n=2, seed=1, ignore_eos=True),
    )
    engine.add_request(
        {"prompt_token_ids": list(range(10, 25))},
        SamplingParams(max_tokens=10, temperature=0, ignore_eos=True),
    )
    steps = []
    while engine.has_unfinished():
        steps.append(engine.step())
    return steps


def test_replay_gives_back_equal_step_outputs(recorded, tmp_path):
    kinds = {event.kind for step in recorded for event in step.events}
    assert {"fork", "cow-copy", "swap-out", "swap-in"} <= kinds, "the run should show them all"
    path = tmp_path / "run.jsonl"
    trace.save(path, {"model": "random"}, recorded)
    loaded = trace.load(path)
    assert loaded.header["model"] == "random"
    assert loaded.steps == recorded


def test_a_file_that_is_not_a_trace_is_refused_naming_it(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"hello": 1}) + "\n")
    with pytest.raises(ValueError, match=r"notes\.jsonl is not a readable minipaged trace"):
        trace.load(path)


def test_a_corrupt_step_line_is_refused_naming_the_line(recorded, tmp_path):
    path = tmp_path / "run.jsonl"
    trace.save(path, {}, recorded[:2])
    with path.open("a") as file:
        file.write("{not json\n")
    with pytest.raises(ValueError, match="line 4"):
        trace.load(path)


def test_a_newer_trace_version_is_refused(tmp_path):
    path = tmp_path / "future.jsonl"
    path.write_text(json.dumps({"format": "minipaged-trace", "version": 99}) + "\n")
    with pytest.raises(ValueError, match="version 99"):
        trace.load(path)
