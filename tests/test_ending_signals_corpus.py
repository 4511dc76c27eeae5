"""Every signal that ends a command ends it the way Ctrl-C does. ``kill`` (SIGTERM), a closed
terminal (SIGHUP) and Ctrl-\\ (SIGQUIT) ended Python at once, before any cleanup, so an output
not yet put in place stayed beside its name as a hidden ``.name.XXXX`` file, and the command
said nothing. Now each is one line on stderr naming the signal, status 128 + its number, the
old file left as it was and nothing else left (``minipaged.ending_signals``; a real ``trace
record`` killed at its first step: ``test_interrupted_output_corpus``); and what would
outlive the command is ended first: a batch grading's processes, in sessions of their own,
graded on alone until their time limit. Each case sends the signal for real, to a real
process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from exercise01_answers import answered
from grading_processes import grading_processes
from stuck import STUCK_AFTER_S

from minipaged import cli, ending_signals

ENDING = [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]

# Child code: `minipaged demo` replaced by a command that has half written an output (its
# temporary file made, nothing put in place) when the signal comes.
MID_WRITE = """
import sys, time
from minipaged import atomic_write, cli
def writing(args):
    replacement = atomic_write.Replacement(sys.argv[1])
    replacement.file.write("half of a new file")
    replacement.file.flush()
    print("running", file=sys.stderr, flush=True)
    time.sleep(60)
cli.COMMANDS["demo"] = writing
sys.exit(cli.main(["demo"]))
"""


def start_mid_write(path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-c", MID_WRITE, str(path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    assert process.stderr.readline() == b"running\n"
    return process


@pytest.mark.parametrize("number", ENDING, ids=[s.name for s in ENDING])
def test_a_signal_mid_write_leaves_the_old_file_and_no_temporary_one(tmp_path, number):
    path = tmp_path / "report.json"
    path.write_text("the report written before\n")
    process = start_mid_write(path)
    process.send_signal(number)
    _, err = process.communicate(timeout=STUCK_AFTER_S)
    assert process.returncode == 128 + number, (process.returncode, err)
    assert err.decode().splitlines() == [f"minipaged demo: {ending_signals.ENDING[number]}"]
    assert path.read_text() == "the report written before\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_the_handlers_are_put_back_when_the_command_returns(capsys):
    """``cli.main`` called from Python (a test, a notebook) leaves its caller's handlers."""
    before = {number: signal.getsignal(number) for number in ending_signals.ENDING}
    assert cli.main(["demo", "--steps", "1", "--no-pause"]) == 0
    assert {number: signal.getsignal(number) for number in ending_signals.ENDING} == before


def test_kill_during_a_batch_ends_its_grading_and_leaves_no_temporary_folder(tmp_path):
    """The batch grades each student in a process of its own session, which no Ctrl-C reaches
    and which the batch's end left grading, alone, until its time limit."""
    root, temp = tmp_path / "class", tmp_path / "temp"
    temp.mkdir()
    endless = "import time\n    while True:\n        time.sleep(0.05)"
    answered(root / "aaron", {"return j = floor(t / B)": endless})
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "TMPDIR": str(temp),
    }
    argv = ["exercises", "check", "1", "--batch", str(root), "--time-limit", "120"]
    batch = subprocess.Popen(
        [sys.executable, "-m", "minipaged.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + STUCK_AFTER_S
        # Its grading child started: the grading process's temporary folder is made
        while not grading_processes(root / "aaron", children_only=True):
            assert time.monotonic() < deadline and batch.poll() is None, "no grading started"
            time.sleep(0.05)
        batch.send_signal(signal.SIGTERM)
        _, err = batch.communicate(timeout=STUCK_AFTER_S)
        assert batch.returncode == 143 and "terminated (SIGTERM" in err.decode(), err
        deadline = time.monotonic() + STUCK_AFTER_S  # SIGKILL, reaped by init: not at once
        while grading_processes(root / "aaron"):
            assert time.monotonic() < deadline, "the student's grading runs on, alone"
            time.sleep(0.05)
    finally:  # what a failing run left, ended here rather than left for its time limit
        batch.kill()
        for pid in grading_processes(root / "aaron"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert list(temp.iterdir()) == []
    assert not (tmp_path / "gradebook.csv").exists()


# Child code: the signal comes while the output's temporary file is being set up (made, not yet
# locked), the moment a Replacement did not yet count it among the outputs to drop.
AT_ITS_MAKING = """
import os, signal, sys
from minipaged import atomic_write, cli
def signalled(fd, operation):
    os.kill(os.getpid(), signal.SIGTERM)
atomic_write.fcntl.flock = signalled
cli.COMMANDS["demo"] = lambda args: atomic_write.Replacement(sys.argv[1])
sys.exit(cli.main(["demo"]))
"""


def test_a_signal_as_the_temporary_file_is_made_leaves_none(tmp_path):
    path = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", AT_ITS_MAKING, str(path)],
        capture_output=True,
        env=env,
        timeout=STUCK_AFTER_S,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert list(tmp_path.iterdir()) == [], "its hidden .report.json.XXXX stayed"
