"""What a notebook hands ``trace.Recorder`` and ``trace.save``: a header that is no dict,
that sets the recorder's own keys, that JSON cannot hold or that ``load`` would refuse; a
``keyframe_every`` that is no integer of at least 1; a step that is no ``StepOutput``. Before
``trace.header_line``, ``{"keyframe_every": -3}`` in the header overwrote the recorder's own
(a trace whose header lies about its keyframes), ``{"format": "evil"}`` wrote a trace ``load``
refuses, ``keyframe_every=True`` or ``1.5`` was taken, a NaN was written as ``NaN``, and a
value JSON cannot hold raised after the temporary file was made, leaving it behind. Each is
refused before any file is made, in a message naming the problem and the fix; an existing
trace is left byte for byte; a refused step leaves the trace being written readable."""

from __future__ import annotations

import pytest

from minipaged import trace
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine
from minipaged.sampling import SamplingParams

HEADERS = {  # header, the error, words the message holds
    "a header that is no dict": (5, TypeError, "a trace's header is a dict"),
    "None for a header": (None, TypeError, "got NoneType None"),
    "the recorder's format": ({"format": "evil"}, ValueError, "the header sets format, which"),
    "the recorder's version": ({"version": 99}, ValueError, "the header sets version"),
    "the recorder's keyframes": (
        {"keyframe_every": -3},
        ValueError,
        "pass keyframe_every to the recorder itself",
    ),
    "an object JSON cannot hold": ({"x": object()}, TypeError, "not JSON serializable"),
    "NaN": ({"x": float("nan")}, ValueError, "not JSON compliant"),
    "infinity": ({"engine": {"watermark": float("inf")}}, ValueError, "not JSON compliant"),
    "a set": ({"prompts": {"a"}}, TypeError, "not JSON serializable"),
    "a model that is no text": ({"model": 5}, ValueError, "model must be a string, got 5"),
    "a block size load refuses": (
        {"engine": {"block_size": 0}},
        ValueError,
        "engine.block_size must be an integer >= 1",
    ),
}

KEYFRAMES = {  # keyframe_every, words
    "zero": (0, "got 0"),
    "negative": (-1, "got -1"),
    "True": (True, "must be an integer, got True"),
    "a float": (1.5, "must be an integer, got 1.5"),
    "text": ("2", "must be an integer, got '2'"),
    "past what load reads": (10**30, "< 4,611,686,018,427,387,904"),
}


def refused_and_left(tmp_path, make, error, words) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("a trace recorded before\n")
    with pytest.raises(error) as refused:
        make(path)
    message = str(refused.value)
    assert words in message and "\n" not in message, message
    assert path.read_text() == "a trace recorded before\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]  # no temporary file left


@pytest.mark.parametrize("case", list(HEADERS))
def test_a_header_that_would_not_load_is_refused_before_any_file_is_made(case, tmp_path):
    header, error, words = HEADERS[case]
    refused_and_left(tmp_path, lambda path: trace.Recorder(path, header), error, words)


@pytest.mark.parametrize("case", list(KEYFRAMES))
def test_a_keyframe_every_that_is_no_integer_of_at_least_1_is_refused(case, tmp_path):
    every, words = KEYFRAMES[case]
    refused_and_left(
        tmp_path,
        lambda path: trace.save(path, {"model": "tiny"}, [], keyframe_every=every),
        ValueError,
        f"keyframe_every {words}" if "integer" in words else words,
    )


@pytest.fixture(scope="module")
def steps():
    engine = LLMEngine(load_model("tiny"), block_size=4)
    engine.add_request({"prompt_token_ids": [5, 6, 7]}, SamplingParams(max_tokens=3))
    return [engine.step() for _ in range(2)]


@pytest.mark.parametrize("wrong", ["a step", None, {"step": 1}])
def test_a_step_that_is_no_step_output_is_refused_and_the_trace_reads_on(wrong, steps, tmp_path):
    path = tmp_path / "run.jsonl"
    with trace.Recorder(path, {"model": "tiny"}, keyframe_every=2) as recorder:
        recorder.write(steps[0])
        with pytest.raises(TypeError, match=r"Recorder\.write takes a StepOutput"):
            recorder.write(wrong)
        recorder.write(steps[1])
    loaded = trace.load(path)
    assert loaded.error is None and loaded.steps == steps


def test_a_header_of_what_the_run_was_is_written_as_given(steps, tmp_path):
    header = {"model": "tiny", "prompts": ["It is"], "engine": {"block_size": 4}, "note": [1]}
    trace.save(tmp_path / "run.jsonl", header, steps, keyframe_every=1)
    loaded = trace.load(tmp_path / "run.jsonl")
    assert {key: loaded.header[key] for key in header} == header
    assert loaded.header["keyframe_every"] == 1 and loaded.steps == steps
