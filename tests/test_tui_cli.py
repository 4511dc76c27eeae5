"""``minipaged tui`` from the command line: headless screenshots, trace replay, custom
scenarios, errors, and the real app in a real terminal (tmux)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minipaged import cli
from minipaged.checkpoint import model_directory
from tests.stuck import STUCK_AFTER_S
from tui.command import SCREENSHOT_TIMEOUT_S

pytestmark = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)
REPO = Path(__file__).resolve().parents[1]


def svg_text(path: Path) -> str:
    return path.read_text(encoding="utf-8").replace("&#160;", " ")


def test_a_headless_screenshot_shows_the_requested_step(tmp_path, capsys):
    out = tmp_path / "parallel.svg"
    argv = ["tui", "--scenario", "parallel", "--steps", "5", "--screenshot", str(out)]
    assert cli.main([*argv, "--size", "100x30"]) == 0
    assert "step 5/" in svg_text(out)
    assert "parallel sampling" in svg_text(out)
    assert f"wrote {out}" in capsys.readouterr().out


def test_a_screenshot_keeps_its_spaces_for_svg_converters(tmp_path):
    out = tmp_path / "tour.svg"
    assert cli.main(["tui", "--steps", "1", "--screenshot", str(out)]) == 0
    assert '<svg xml:space="preserve" ' in out.read_text(encoding="utf-8")


def corrupt_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    shutil.copytree(model_directory("tiny"), model)
    (model / "tokenizer.json").write_text("{garbage", encoding="utf-8")
    return model


def test_a_corrupt_tokenizer_ends_the_screenshot_at_once_with_one_line_and_status_1(
    tmp_path, capsys
):
    argv = ["tui", "--model", str(corrupt_model(tmp_path)), "--screenshot", str(tmp_path / "x")]
    start = time.monotonic()
    assert cli.main(argv) == 1
    # The defect waits out the whole timeout: anything less, however slow the machine, is not it.
    assert time.monotonic() - start < SCREENSHOT_TIMEOUT_S, "it waited for the screenshot timeout"
    err = capsys.readouterr().err
    assert err.startswith("minipaged tui: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_a_corrupt_tokenizer_ends_the_live_app_with_status_1(tmp_path, capsys):
    import asyncio

    from tui.app import PagedApp
    from tui.command import failed

    app = PagedApp(model=str(corrupt_model(tmp_path)))

    async def drive() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            deadline = time.monotonic() + STUCK_AFTER_S
            while app.is_running and time.monotonic() < deadline:
                await pilot.pause(0.05)

    asyncio.run(drive())
    assert app.return_code == 1
    assert failed(app) == 1
    assert "cannot run" in capsys.readouterr().err


def test_a_custom_scenario_comes_from_the_flags(tmp_path):
    out = tmp_path / "custom.svg"
    argv = ["tui", "--prompt", "Elizabeth", "--n", "3", "--block-size", "8"]
    argv += ["--num-gpu-blocks", "24", "--steps", "3", "--screenshot", str(out)]
    assert cli.main(argv) == 0
    shown = svg_text(out)
    assert "custom: n = 3, B = 8" in shown and "device: 24 blocks, B=8" in shown


def test_a_recorded_trace_replays_without_the_model(tmp_path):
    recorded, out = tmp_path / "run.jsonl", tmp_path / "replay.svg"
    record = ["trace", "record", str(recorded), "--prompt", "Elizabeth", "--prompt", "Emma"]
    assert (
        cli.main([*record, "--max-tokens", "8", "--block-size", "4", "--num-gpu-blocks", "16"]) == 0
    )
    assert (
        cli.main(["tui", "--trace", str(recorded), "--steps", "3", "--screenshot", str(out)]) == 0
    )
    shown = svg_text(out)
    assert "trace of tiny" in shown and "step 3/" in shown


def test_the_memory_gauge_shows_the_bytes_of_the_kv_dtype_live_and_in_a_replay(tmp_path):
    """FP8 stores b = 1 byte per element: the gauge shows the bytes the used blocks hold, for
    the dtype in use, in a live run and in a replay of its trace; an older trace whose header
    does not say is shown without the row rather than with a guess."""
    import json

    live, recorded, out = tmp_path / "live.svg", tmp_path / "run.jsonl", tmp_path / "replay.svg"
    flags = ["--prompt", "Emma was", "--max-tokens", "8", "--block-size", "4"]
    flags += ["--num-gpu-blocks", "16", "--kv-cache-dtype", "fp8_e5m2"]
    assert cli.main(["tui", *flags, "--steps", "3", "--screenshot", str(live)]) == 0
    # tiny: 2 (K and V) x 4 layers x 2 KV heads x 32 dims x B = 4 slots x b = 1 byte = 2 KiB
    assert "bytes  4.0 KiB/32.0 KiB fp8_e5m2 b=1" in svg_text(live)  # 2 of 16 blocks used
    assert cli.main(["trace", "record", str(recorded), *flags]) == 0
    assert (
        cli.main(["tui", "--trace", str(recorded), "--steps", "3", "--screenshot", str(out)]) == 0
    )
    assert "bytes  4.0 KiB/32.0 KiB fp8_e5m2 b=1" in svg_text(out)
    header, *steps = recorded.read_text().splitlines()
    old = json.loads(header)
    del old["engine"]["kv_cache"]
    recorded.write_text("\n".join([json.dumps(old), *steps]) + "\n")
    assert (
        cli.main(["tui", "--trace", str(recorded), "--steps", "3", "--screenshot", str(out)]) == 0
    )
    assert "bytes " not in svg_text(out) and "device" in svg_text(out)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "nope"], "unknown scenario 'nope'; choose one of tour, several, parallel"),
        (["--size", "big", "--screenshot", "x.svg"], "argument --size: must look like 120x40"),
        (["--size", "100000x100000", "--screenshot", "x.svg"], "at most 1000x500 cells"),
        (["--size", "1001x40", "--screenshot", "x.svg"], "at most 1000x500 cells"),
        (
            ["--prompt", "Emma", "--n", "3", "--beam-width", "2"],
            "--n 3 asks for the 3 best of the beams of --beam-width 2",
        ),
        (["--trace", "missing.jsonl"], "missing.jsonl does not exist"),
        (["--model", "no/such/dir"], "no model at no/such/dir"),
    ],
)
def test_bad_flags_say_what_is_wrong(argv, message, capsys):
    assert cli.main(["tui", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_real_app_runs_in_a_terminal():
    """Start ``minipaged tui`` in a detached tmux session (its own server socket), press keys,
    read the screen, quit."""
    tmux = ["tmux", "-L", f"minipaged-test-{time.monotonic_ns()}"]
    command = f"{sys.executable} -m minipaged.cli tui --scenario parallel"
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", command],
        check=True,
        cwd=REPO,
    )

    def screen() -> str:
        done = subprocess.run([*tmux, "capture-pane", "-p", "-t", "tui"], capture_output=True)
        return done.stdout.decode("utf-8", "replace")

    def wait_for(*texts: str) -> None:
        deadline = time.monotonic() + STUCK_AFTER_S  # a new process loads torch and the model
        while not all(text in (shown := screen()) for text in texts):
            assert time.monotonic() < deadline, f"{texts!r} never appeared:\n{shown}"
            time.sleep(0.1)

    try:
        wait_for("physical blocks", "step 0/")
        # c jumps to the run's one copy-on-write, at step 2, and the strip names it there.
        # "copy-on-write" alone proves nothing: the scenario's story shows it from step 0.
        subprocess.run([*tmux, "send-keys", "-t", "tui", "c"], check=True)
        wait_for("step 2/", "here: C CoW")
        subprocess.run([*tmux, "send-keys", "-t", "tui", "n"], check=True)
        wait_for("step 3/")
        subprocess.run([*tmux, "send-keys", "-t", "tui", "q"], check=True)
        deadline = time.monotonic() + STUCK_AFTER_S
        while (
            subprocess.run([*tmux, "has-session", "-t", "tui"], capture_output=True).returncode == 0
        ):
            assert time.monotonic() < deadline, "q did not quit the app"
            time.sleep(0.1)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_the_flag_help_names_every_scenario(capsys):
    from tui.scenarios import SCENARIOS

    assert cli.main(["tui", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert all(name in shown for name in SCENARIOS)
