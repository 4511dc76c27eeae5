import json
from dataclasses import asdict

import pytest

from minipaged import trace
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine
from minipaged.sampling import SamplingParams

SHARED = list(range(10, 31))  # 21 tokens: five full blocks of B = 4 to share


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def run(model, arrivals: dict[int, list], **engine) -> list:
    """Every step of a run; ``arrivals[k]`` are the (prompt, params) added before step k."""
    engine = LLMEngine(model, **{"block_size": 4, **engine})
    steps = []
    while engine.has_unfinished() or len(steps) <= max(arrivals):
        for prompt, params in arrivals.get(len(steps), []):
            engine.add_request(prompt, params)
        steps.append(engine.step())
    return steps


def sampled(n: int = 1, max_tokens: int = 10, seed: int = 1) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.8, n=n, seed=seed, ignore_eos=True)


RUNS = {
    "fork-cow-swap": (
        {
            0: [
                ({"prompt_token_ids": [5, 6, 7]}, sampled(n=2)),
                ({"prompt_token_ids": list(range(10, 25))}, sampled()),
            ]
        },
        {"num_gpu_blocks": 10, "num_cpu_blocks": 16, "preemption": "swap"},
        {"fork", "cow-copy", "swap-out", "swap-in"},
    ),
    "recompute": (
        {
            0: [
                ({"prompt_token_ids": [5, 6, 7]}, sampled(n=2)),
                ({"prompt_token_ids": list(range(10, 25))}, sampled()),
            ]
        },
        {"num_gpu_blocks": 10, "num_cpu_blocks": 0, "preemption": "recompute"},
        {"preempt", "recompute"},
    ),
    "hash-prefix-hits": (
        {
            0: [({"prompt_token_ids": SHARED + [40]}, sampled(max_tokens=4))],
            2: [({"prompt_token_ids": SHARED + [41, 42]}, sampled(max_tokens=4))],
        },
        {"num_gpu_blocks": 32, "num_cpu_blocks": 0, "prefix_caching": "hash"},
        {"prefix-hit"},
    ),
    "radix-prefix-hits": (
        {
            0: [({"prompt_token_ids": SHARED + [40]}, sampled(max_tokens=4))],
            2: [({"prompt_token_ids": SHARED + [41, 42]}, sampled(max_tokens=4, n=2))],
        },
        {"num_gpu_blocks": 32, "num_cpu_blocks": 0, "prefix_caching": "radix"},
        {"prefix-hit", "fork"},
    ),
}


@pytest.fixture(scope="module", params=list(RUNS))
def recorded(request, tiny):
    arrivals, engine, kinds = RUNS[request.param]
    steps = run(tiny, arrivals, **engine)
    seen = {event.kind for step in steps for event in step.events}
    assert kinds <= seen, f"the run should show {kinds - seen}"
    return steps


@pytest.mark.parametrize("keyframe_every", [1, 3, 32])
def test_replay_gives_back_equal_step_outputs(recorded, tmp_path, keyframe_every):
    path = tmp_path / "run.jsonl"
    trace.save(path, {"model": "tiny"}, recorded, keyframe_every=keyframe_every)
    loaded = trace.load(path)
    assert loaded.header["model"] == "tiny"
    assert loaded.header["keyframe_every"] == keyframe_every
    assert loaded.error is None
    assert loaded.steps == recorded
    for got, want in zip(loaded.steps, recorded, strict=True):  # dict order too, for the TUI
        assert list(got.sequences) == list(want.sequences)
        assert list(got.state.tables) == list(want.state.tables)


def test_keyframes_come_every_k_steps_and_deltas_between(recorded, tmp_path):
    path = tmp_path / "run.jsonl"
    trace.save(path, {}, recorded, keyframe_every=3)
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert [line["keyframe"] for line in lines] == [i % 3 == 0 for i in range(len(recorded))]


def full_snapshot_bytes(steps) -> int:
    """What storing every step's whole block state and sequences costs (format version 1)."""
    return sum(
        len(json.dumps({"state": asdict(s.state), "sequences": asdict(s)["sequences"]}))
        for s in steps
    )


def test_a_typical_trace_is_at_least_ten_times_smaller_than_full_snapshots(tiny, tmp_path):
    """Two requests, 48 steps, a pool sized like the default (thousands of blocks): the
    case that took 7 MB when every line held a full snapshot."""
    prompts = [{"prompt_token_ids": [0, 37, 746]}, {"prompt_token_ids": [0, 70, 71, 72]}]
    arrivals = {0: [(prompt, sampled(max_tokens=48)) for prompt in prompts]}
    steps = run(tiny, arrivals, block_size=16, num_gpu_blocks=8192, num_cpu_blocks=8192)
    assert len(steps) >= 48
    path = tmp_path / "run.jsonl"
    trace.save(path, {"model": "tiny"}, steps)
    size = path.stat().st_size
    assert size * 10 <= full_snapshot_bytes(steps), (size, full_snapshot_bytes(steps))
    assert trace.load(path).steps == steps


def test_a_truncated_trace_gives_the_steps_before_the_damage_and_names_the_line(recorded, tmp_path):
    path = tmp_path / "run.jsonl"
    trace.save(path, {}, recorded, keyframe_every=2)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]) + lines[4][:-20])  # cut off inside line 5
    loaded = trace.load(path)
    assert loaded.steps == recorded[:3]
    assert "run.jsonl: line 5 is cut off or corrupt" in loaded.error
    assert "replayed the 3 step(s) up to line 4, the last good line" in loaded.error


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "Expecting property name"),
        ("[1, 2]", "must be a JSON object"),
        ('{"step": 1}', "lacks the field 'keyframe'"),
    ],
)
def test_a_corrupt_step_line_ends_the_trace_naming_the_line(recorded, tmp_path, line, problem):
    path = tmp_path / "run.jsonl"
    trace.save(path, {}, recorded[:2])
    with path.open("a") as file:
        file.write(line + "\n")
        file.write(path.read_text().splitlines()[-1] + "\n")  # good lines after it are not read
    loaded = trace.load(path)
    assert loaded.steps == recorded[:2]
    assert "line 4" in loaded.error and problem in loaded.error


def test_a_delta_with_no_keyframe_before_it_is_refused(recorded, tmp_path):
    path = tmp_path / "run.jsonl"
    trace.save(path, {}, recorded[:3], keyframe_every=32)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[2]]) + "\n")
    loaded = trace.load(path)
    assert loaded.steps == [] and "no keyframe before it" in loaded.error


def test_an_interrupted_recording_leaves_every_finished_step_readable(recorded, tmp_path):
    path = tmp_path / "run.jsonl"
    recorder = trace.Recorder(path, {"model": "tiny"}, keyframe_every=2)
    for step in recorded[:3]:
        recorder.write(step)
    assert trace.load(path).steps == recorded[:3]  # before close(): every line is flushed
    recorder.close()


def test_a_file_that_is_not_a_trace_is_refused_naming_it(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"hello": 1}) + "\n")
    with pytest.raises(trace.TraceError, match=r"notes\.jsonl is not a readable minipaged trace"):
        trace.load(path)


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x80", b"[1]", b'"x"'])
def test_a_header_that_is_not_an_object_is_refused_naming_the_file(tmp_path, content):
    path = tmp_path / "odd.jsonl"
    path.write_bytes(content)
    with pytest.raises(trace.TraceError, match=r"odd\.jsonl .*line 1"):
        trace.load(path)


@pytest.mark.parametrize("version", [1, 99])
def test_another_trace_version_is_refused(tmp_path, version):
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({"format": "minipaged-trace", "version": version}) + "\n")
    with pytest.raises(ValueError, match=f"version {version}"):
        trace.load(path)
