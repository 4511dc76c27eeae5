"""A command that grades a student's code and is ended by a signal ends its grading first.
``minipaged exercises check N`` (and ``tui --exercise N``, which records a run of the student's
code) runs that code in a grading child, a process in a session of its own, and its output in
a temporary folder the grader made; only the batch grader ended them when a signal ended the
command (``test_ending_signals_corpus``), so a single check ended by Ctrl-C, ``kill``, a
closed terminal or Ctrl-\\ left the folder behind and, with a student's endless loop, the child
running alone until its CPU-time limit. Each case sends the real signal to the real command
and looks for what is left: the line a Ctrl-C prints, status 128 + the signal's number, no
grading process and nothing in the temporary folder."""

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
from grading_processes import grading_children_in
from stuck import STUCK_AFTER_S, eventually

from minipaged import ending_signals
from minipaged.models import model_directory

ENDING = list(ending_signals.ENDING)


def start(argv: list[str], temp: Path) -> subprocess.Popen:
    """``minipaged ARGV``, its temporary files in ``temp``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "TMPDIR": str(temp),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "minipaged.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )


def assert_ended_as_by_ctrl_c(command: subprocess.Popen, number: int, name: str, temp: Path):
    """``command`` ended by signal ``number`` as the command line says every such end is, and
    its grading with it."""
    _, err = command.communicate(timeout=STUCK_AFTER_S)
    assert command.returncode == 128 + number, (number, command.returncode, err)
    assert err.decode().splitlines()[-1] == f"minipaged {name}: {ending_signals.ENDING[number]}"
    # The child was sent SIGKILL and is reaped by init: not gone at once
    eventually(lambda: not grading_children_in(temp), f"a grading child runs on after {number}")
    assert list(temp.iterdir()) == [], f"{signal.Signals(number).name} left {list(temp.iterdir())}"


def end_each(tmp_path: Path, argv: list[str], numbers: list[int], name: str) -> None:
    """Start ``minipaged ARGV`` once for each signal of ``numbers``, all at once (each with a
    temporary folder of its own, named for its signal); send each its signal once its grading
    child runs, and check that each ended as by Ctrl-C."""
    commands = {}
    try:
        for number in numbers:
            temp = tmp_path / signal.Signals(number).name
            temp.mkdir()
            commands[number] = (start(argv, temp), temp)
        waiting, deadline = dict(commands), time.monotonic() + STUCK_AFTER_S
        while waiting:  # each signalled as soon as its child runs, while it surely still runs
            for number, (command, temp) in list(waiting.items()):
                assert command.poll() is None, command.stderr.read().decode()
                if grading_children_in(temp):
                    command.send_signal(number)
                    del waiting[number]
            assert time.monotonic() < deadline, "no grading child started"
            time.sleep(0.02)
        for number, (command, temp) in commands.items():
            assert_ended_as_by_ctrl_c(command, number, name, temp)
    finally:  # what a failing run left, ended here rather than left for its CPU-time limit
        for command, temp in commands.values():
            command.kill()
            for pid in grading_children_in(temp):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def test_each_ending_signal_ends_a_check_and_its_grading(tmp_path):
    """Each of the four stops a check stuck in a student's endless loop."""
    endless = "import time\n    while True:\n        time.sleep(0.05)"
    folder = answered(tmp_path / "student", {"return j = floor(t / B)": endless})
    report = tmp_path / "report.json"
    argv = ["exercises", "check", "1", f"--path={folder}", f"--json={report}"]
    end_each(tmp_path, argv, ENDING, "exercises check")
    assert not report.exists(), "a report was written for a grading that did not finish"


@pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)
def test_a_signal_while_the_tui_records_an_exercise_ends_its_grading(tmp_path):
    """``tui --exercise`` runs the code in a grading child before the app starts (here the
    library's, with ``--solution``: the child is still loading the model when the signal
    comes). One signal: the four share the mechanism the check's case sends each of, and a
    second app loading the model at once took the file past 8 s on a busy machine."""
    shot = tmp_path / "shot.svg"
    argv = ["tui", "--exercise", "2", "--solution", "--screenshot", str(shot)]
    end_each(tmp_path, argv, [signal.SIGHUP], "tui")
    assert not shot.exists()
