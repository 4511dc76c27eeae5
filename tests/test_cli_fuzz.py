"""Bad input of every kind, to every subcommand: the command line answers with one line on
stderr that names the input, exit status 2 for bad usage or 1 for a failure, and never a
traceback. Each case runs ``cli.main`` in this process; a few real processes check Ctrl-C."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minipaged import cli, trace
from minipaged.checkpoint import EMBEDDED_MODELS, WEIGHTS_FILE

TINY = EMBEDDED_MODELS["tiny"]
USAGE, FAILURE = 2, 1


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``minipaged ARGV``, run in this process."""
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse exits on bad usage and after --help
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def assert_refused(argv, capsys, status: int, names: str) -> str:
    got, out, err = run(argv, capsys)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert got == status, f"exit {got}, expected {status}: {err!r}"
    assert names in lines[0], f"the message should name {names!r}: {lines[0]!r}"
    assert lines[0].startswith("minipaged")
    return lines[0]


def model_copy(root: Path, name: str = "model") -> Path:
    """A copy of the tiny model's small files; the weights are a symbolic link."""
    directory = root / name
    directory.mkdir()
    for file in TINY.iterdir():
        if file.name == WEIGHTS_FILE:
            (directory / file.name).symlink_to(file)
        elif file.is_file():
            shutil.copy(file, directory / file.name)
    return directory


def generate(model: Path | str, *flags: str) -> list[str]:
    return ["generate", "--prompt", "Emma", "--max-tokens", "2", "--model", str(model), *flags]


GARBAGE = bytes(range(256)) * 4
NOT_UTF8 = b"\xff\xfe\x00{\x80\x81"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (GARBAGE, "not UTF-8 bytes"),
        (NOT_UTF8, "not UTF-8 bytes"),
        (b"{not json", "broken JSON"),
        (b"[1, 2, 3]", "a JSON list"),
        (b'{"model": {"type": "BPE"}}', "JSON the library does not read"),
        (b"", "an empty file"),
    ],
)
def test_a_bad_tokenizer_json_is_a_failure_naming_it(tmp_path, capsys, content, why):
    model = model_copy(tmp_path)
    (model / "tokenizer.json").write_bytes(content)
    assert_refused(generate(model), capsys, FAILURE, str(model / "tokenizer.json"))


@pytest.mark.parametrize("content", [GARBAGE, b"{oops", b'"a string"'])
def test_a_bad_tokenizer_config_is_a_failure_naming_it(tmp_path, capsys, content):
    model = model_copy(tmp_path)
    (model / "tokenizer_config.json").write_bytes(content)
    assert_refused(generate(model), capsys, FAILURE, "tokenizer_config.json")


CONFIG_EDITS = {
    "not utf-8": GARBAGE,
    "not json": b'{"vocab_size": 2048,',
    "a list": b"[]",
    "hidden_size a string": {"hidden_size": "128"},
    "hidden_size zero": {"hidden_size": 0},
    "no attention heads": {"num_attention_heads": 0, "head_dim": None},
    "negative layers": {"num_hidden_layers": -4},
    "heads a list": {"num_attention_heads": [4]},
    "rms_norm_eps null": {"rms_norm_eps": None},
    "rms_norm_eps text": {"rms_norm_eps": "tiny"},
    "rope_parameters a list": {"rope_parameters": [1, 2]},
    "architectures a number": {"architectures": 5},
    "another architecture": {"architectures": ["GPT2LMHeadModel"]},
    "missing vocab_size": {"vocab_size": ...},
    "huge vocabulary": {"vocab_size": 10**12},
    "rope_theta as text": {"rope_theta": "1e4"},
    "rope_theta of 1": {"rope_theta": 1},
    "rms_norm_eps infinite": {"rms_norm_eps": float("inf")},
    "a context past int32": {"max_position_embeddings": 2**31},
    "eos outside the vocabulary": {"eos_token_id": 10**9},
}


@pytest.mark.parametrize("case", CONFIG_EDITS)
def test_a_bad_config_json_is_a_failure_naming_it(tmp_path, capsys, case):
    model = model_copy(tmp_path)
    edit = CONFIG_EDITS[case]
    if isinstance(edit, bytes):
        (model / "config.json").write_bytes(edit)
    else:
        config = json.loads((TINY / "config.json").read_text())
        config.update({k: v for k, v in edit.items() if v is not ...})
        for key in [k for k, v in edit.items() if v is ...]:
            del config[key]
        (model / "config.json").write_text(json.dumps(config))
    assert_refused(generate(model), capsys, FAILURE, "config.json")


def test_a_context_too_long_for_memory_is_refused_before_allocating(tmp_path, capsys):
    model = model_copy(tmp_path)
    config = json.loads((TINY / "config.json").read_text())
    config["max_position_embeddings"] = 2**31 - 1  # the default pool holds one full context
    (model / "config.json").write_text(json.dumps(config))
    assert_refused(generate(model), capsys, USAGE, "KV cache would take")


@pytest.mark.parametrize(
    "weights",
    [
        GARBAGE,
        b"",
        (TINY / WEIGHTS_FILE).read_bytes()[:5000],  # truncated: header and a little data
        b"\xff" * 8 + b"{}",  # a header length of 2^64 - 1
        (8).to_bytes(8, "little") + b'{"a": 1}',  # a header that is not a tensor table
    ],
    ids=["garbage", "empty", "truncated", "huge-header", "bad-header"],
)
def test_corrupt_safetensors_are_a_failure_naming_the_file(tmp_path, capsys, weights):
    model = model_copy(tmp_path)
    (model / WEIGHTS_FILE).unlink()
    (model / WEIGHTS_FILE).write_bytes(weights)
    assert_refused(generate(model), capsys, FAILURE, str(model / WEIGHTS_FILE))


def sharded(tmp_path: Path, weight_map: object) -> Path:
    model = model_copy(tmp_path)
    (model / WEIGHTS_FILE).unlink()
    index = {"metadata": {}, "weight_map": weight_map}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return model


@pytest.mark.parametrize(
    ("weight_map", "names"),
    [
        ({"model.norm.weight": 5}, "got 5"),
        ({"model.norm.weight": None}, "got None"),
        ({"model.norm.weight": ["a.safetensors"]}, "got ['a.safetensors']"),
        ({"model.norm.weight": ""}, "got ''"),
        (["model.safetensors"], "weight_map"),
        ({"model.norm.weight": "missing.safetensors"}, "missing.safetensors does not exist"),
    ],
)
def test_a_malformed_index_is_a_failure_naming_it(tmp_path, capsys, weight_map, names):
    model = sharded(tmp_path, weight_map)
    line = assert_refused(generate(model), capsys, FAILURE, names)
    assert "model.safetensors" in line


@pytest.mark.parametrize("shard", ["../outside.safetensors", "sub/../../outside.safetensors"])
def test_index_shards_must_stay_inside_the_checkpoint_directory(tmp_path, capsys, shard):
    shutil.copy(TINY / WEIGHTS_FILE, tmp_path / "outside.safetensors")
    model = sharded(tmp_path, {"model.norm.weight": shard})
    (model / "sub").mkdir()
    assert_refused(generate(model), capsys, FAILURE, "must lie in the checkpoint directory")


def test_an_absolute_shard_path_is_refused(tmp_path, capsys):
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copy(TINY / WEIGHTS_FILE, outside)
    model = sharded(tmp_path, {"model.norm.weight": str(outside)})
    assert_refused(generate(model), capsys, FAILURE, "must lie in the checkpoint directory")


BAD_FLAGS = [
    (["--n", "0"], "--n"),
    (["--n", "-1"], "--n"),
    (["--n", "many"], "--n"),
    (["--n", "1000000000"], "--n"),
    (["--beam-width", "0"], "--beam-width"),
    (["--max-tokens", "0"], "--max-tokens"),
    (["--max-tokens", ""], "--max-tokens"),
    (["--temperature", "nan"], "--temperature"),
    (["--temperature", "-1"], "--temperature"),
    (["--temperature", "inf"], "--temperature"),
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-k", "-3"], "--top-k"),
    (["--seed", "-1"], "--seed"),
    (["--seed", "1e3"], "--seed"),
    (["--block-size", "0"], "--block-size"),
    (["--block-size", "1000000000"], "--block-size"),
    (["--num-gpu-blocks", "0"], "--num-gpu-blocks"),
    (["--num-cpu-blocks", "-1"], "--num-cpu-blocks"),
    (["--num-gpu-blocks", str(10**15)], "--num-gpu-blocks"),
    (["--preemption", "later"], "--preemption"),
    (["--prefix-caching", "lru"], "--prefix-caching"),
    (["--device", ""], "--device"),
    (["--device", "gpu"], "'gpu'"),
    (["--device", "meta"], "'meta'"),
    (["--device", "cuda:99"], "'cuda:99'"),
    (["--model", ""], "--model"),
    (["--n", "3", "--beam-width", "2"], "--beam-width 2"),  # the 3 best of 2 beams
    (["--n", "1", "--beam-width", "2"], "--n 1"),  # read as every beam, not the best one
]


@pytest.mark.parametrize(("flags", "names"), BAD_FLAGS)
@pytest.mark.parametrize("command", [["generate"], ["trace", "record", "out.jsonl"]])
def test_bad_numbers_and_names_are_usage_errors(capsys, tmp_path, command, flags, names):
    if command[0] == "trace":
        command = [*command[:2], str(tmp_path / command[2])]
    argv = [*command, "--prompt", "Emma", "--max-tokens", "2", *flags]
    assert_refused(argv, capsys, USAGE, names)


def test_cuda_without_cuda_says_so(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    line = assert_refused(generate("tiny", "--device", "cuda"), capsys, USAGE, "'cuda'")
    assert "CUDA is not available" in line and "'cpu'" in line


@pytest.mark.parametrize("prompt", ["", "   "])
def test_an_empty_prompt_is_a_usage_error(capsys, prompt):
    argv = ["generate", "--prompt", prompt, "--max-tokens", "2"]
    got, out, err = run(argv, capsys)
    assert "Traceback" not in out + err
    assert got in (0, USAGE)
    if got:
        assert len(err.strip().splitlines()) == 1 and "prompt" in err


def test_a_missing_model_directory_is_a_usage_error(tmp_path, capsys):
    assert_refused(generate(tmp_path / "nowhere"), capsys, USAGE, "nowhere")


def test_a_model_directory_without_a_tokenizer_names_the_missing_file(tmp_path, capsys):
    model = model_copy(tmp_path)
    (model / "tokenizer.json").unlink()
    assert_refused(generate(model), capsys, USAGE, "tokenizer.json")


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "run.jsonl"
    argv = ["trace", "record", str(path), "--prompt", "Emma", "--n", "2", "--max-tokens", "6"]
    argv += ["--block-size", "4", "--num-gpu-blocks", "16"]
    assert cli.main(argv) == 0
    return path


def header_line() -> str:
    return json.dumps({"format": trace.FORMAT, "version": trace.VERSION, "model": "tiny"})


@pytest.mark.parametrize(
    ("content", "status", "names"),
    [
        (b"", FAILURE, "line 1"),
        (GARBAGE, FAILURE, "line 1"),
        (NOT_UTF8, FAILURE, "line 1"),
        (b"[1, 2]\n", FAILURE, "line 1"),
        (b'"trace"\n', FAILURE, "line 1"),
        (json.dumps({"format": trace.FORMAT, "version": 1}).encode(), FAILURE, "version 1"),
        ((header_line() + "\n[1, 2]\n").encode(), FAILURE, "line 2"),
        ((header_line() + "\n5\n").encode(), FAILURE, "line 2"),
        ((header_line() + '\n{"step": 1}\n').encode(), FAILURE, "line 2"),
        ((header_line() + "\n").encode() + NOT_UTF8, FAILURE, "line 2"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_file_and_line(tmp_path, capsys, content, status, names):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    for argv in (["trace", "replay", str(path)], ["tui", "--trace", str(path)]):
        if argv[0] == "tui" and names != "line 1" and "version" not in names:
            continue  # a damaged step line is the TUI's to show, in the app
        line = assert_refused(argv, capsys, status, names)
        assert "bad.jsonl" in line


def test_a_truncated_trace_replays_up_to_its_last_good_line(good_trace, tmp_path, capsys):
    whole = good_trace.read_bytes()
    lines = whole.splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:5]) + lines[5][: len(lines[5]) // 2])
    status, out, err = run(["trace", "replay", str(cut)], capsys)
    assert status == FAILURE and "Traceback" not in out + err
    assert err.count("\n") == 1
    assert "cut.jsonl: line 6 is cut off or corrupt" in err
    assert "replayed the 4 step(s) up to line 5, the last good line" in err
    assert "step 4:" in out and "step 5:" not in out


def test_a_missing_trace_is_a_usage_error(tmp_path, capsys):
    assert_refused(["trace", "replay", str(tmp_path / "gone.jsonl")], capsys, USAGE, "gone.jsonl")


@pytest.mark.parametrize("target", ["dir", "missing/run.jsonl"])
def test_recording_where_no_file_can_be_written_names_the_path(tmp_path, capsys, target):
    (tmp_path / "dir").mkdir()
    path = tmp_path / target
    argv = ["trace", "record", str(path), "--prompt", "Emma", "--max-tokens", "2"]
    assert_refused(argv, capsys, USAGE, str(path))  # refused as typed, before the model loads


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--hbm-gb", "inf"], "--hbm-gb"),
        (["--hbm-gb", "nan"], "--hbm-gb"),
        (["--hbm-gb", "-80"], "--hbm-gb"),
        (["--hbm-gb", "0"], "--hbm-gb"),
        (["--hbm-gb", "1e30"], "--hbm-gb"),
        (["--weights-gb", "nan"], "--weights-gb"),
        (["--hbm-gb", "10"], "--hbm-gb"),
        (["--requests", "0"], "--requests"),
        (["--requests", str(10**12)], "--requests"),
        (["--n", "0"], "--n"),
        (["--beam-width", "-1"], "--beam-width"),
        (["--n", "3", "--beam-width", "2"], "--beam-width"),
        (["--block-size", "0"], "--block-size"),
        (["--delta", "0"], "--delta"),
        (["--page-kb", "0"], "--page-kb"),
        (["--model", "gpt-5"], "--model"),
        (["--workload", ""], "--workload"),
    ],
)
def test_simulate_refuses_bad_and_huge_sizes_before_allocating(capsys, flags, names):
    assert_refused(["simulate", *flags], capsys, USAGE, names)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["bench", "--threads", "0"], "--threads"),
        (["bench", "nope"], "nope"),
        (["bench", "--seed", "x"], "--seed"),
        (["tui", "--steps", "-1"], "--steps"),
        (["tui", "--size", "0x0"], "--size"),
        (["tui", "--n", "0"], "--n"),
        (["tui", "--block-size", "0"], "--block-size"),
        (["tui", "--num-gpu-blocks", str(10**12)], "--num-gpu-blocks"),
        (["tui", "--exercise", "99"], "--exercise"),
        (["tui", "--trace", "gone.jsonl"], "gone.jsonl"),
        (["exercises", "check", "99"], "99"),
        (["exercises", "check", "x"], "number"),
        (["demo", "--steps", "0"], "--steps"),
        (["frobnicate"], "frobnicate"),
        ([], "COMMAND"),
    ],
)
def test_every_subcommand_reports_bad_usage_in_one_line(capsys, argv, names):
    assert_refused(argv, capsys, USAGE, names)


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--device", "abc"], "abc"),
        (["--device", "-1"], "-1"),
        (["--device", "cuda:x"], "cuda:x"),
        (["--model", "no-such-model"], "no-such-model"),
        (["--model", " "], "--model"),
        (["--backend", "cuda"], "cuda"),
        (["--backend", "torch", "--backend", ""], "--backend"),
        (["--out", "/dev/null/plots"], "/dev/null/plots"),
    ],
)
def test_bench_refuses_a_bad_setting_before_the_first_benchmark_runs(
    monkeypatch, capsys, flags, names
):
    """A full run takes minutes: a setting only the last benchmark reads is still checked
    before the first starts (it once ran the memory benchmark with --device abc, exit 0)."""
    from minipaged import study

    importlib.import_module("minipaged.study.bench")
    started = []
    monkeypatch.setattr(study.bench, "run", lambda name, options: started.append(name))
    got, _, err = run(["bench", "memory", *flags], capsys)
    assert got in (USAGE, FAILURE) and names in err and len(err.strip().splitlines()) == 1, err
    assert not started, f"{started} ran before the bad setting was refused"


def test_an_unexpected_error_is_still_one_line_with_exit_1(monkeypatch, capsys):
    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "demo", broken)
    line = assert_refused(["demo"], capsys, FAILURE, "KeyError")
    assert "bug in minipaged" in line


def test_ctrl_c_in_a_command_exits_130_in_one_line(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "demo", interrupted)
    assert_refused(["demo"], capsys, 130, "interrupted")


# Child code that writes "running" to stderr as the engine takes its first step (the engine,
# and with it torch, is imported before main starts).
AT_FIRST_STEP = (
    "from minipaged.engine import LLMEngine\n"
    "first = LLMEngine.step\n"
    "def step(self, *args, **kwargs):\n"
    "    LLMEngine.step = first\n"
    "    print('running', file=sys.stderr, flush=True)\n"
    "    return first(self, *args, **kwargs)\n"
    "LLMEngine.step = step\n"
)


def interrupt(delay: float | None, *argv: str, number: int = signal.SIGINT) -> tuple[int, str]:
    """Start ``minipaged ARGV`` in a real process, send it the signal ``number`` (SIGINT:
    Ctrl-C) ``delay`` seconds after ``main`` has put in its handlers (Python's own start-up is
    not ours to catch), or with ``delay`` None as its engine takes its first step, and return
    its status and what it wrote to stderr after that moment."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # "ready" is printed once main has put in its handlers: a signal sent before that
    # belongs to Python's start-up (and is ignored outright where the test runner ignores it).
    code = (
        "import sys\n" + (AT_FIRST_STEP if delay is None else "") + "from minipaged import cli\n"
        "from minipaged import ending_signals\n"
        "handle = ending_signals.end_on_signals\n"
        "def announced(command):\n"
        "    previous = handle(command)\n"
        "    print('ready', file=sys.stderr, flush=True)\n"
        "    return previous\n"
        "ending_signals.end_on_signals = announced\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    assert process.stderr.readline() == b"ready\n"
    if delay is None:  # no guessing how long loading takes on this machine
        assert process.stderr.readline() == b"running\n"
    else:
        time.sleep(delay)
    process.send_signal(number)
    _, err = process.communicate(timeout=120)
    return process.returncode, err.decode()


@pytest.mark.parametrize("delay", [0.0, 0.5, None], ids=["parsing", "importing-torch", "running"])
def test_sigint_exits_130_with_one_line_at_any_moment(delay):
    """Ctrl-C while the flags are parsed, while torch loads, and while the model writes."""
    # 16 samples of 400 tokens keep the model writing well past the last signal, even on a
    # fast machine: a run that had already ended would test nothing.
    status, err = interrupt(
        delay, "generate", "--prompt", "Emma", "--max-tokens", "400", "--ignore-eos", "--n", "16"
    )
    assert status == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [err.strip()] and "interrupted (Ctrl-C)" in err
