"""``minipaged tui --serve`` refuses, before it serves, what each tab's app would refuse: it
forwarded the app's flags to every tab unchecked, so a trace that is no trace or is not there,
an unknown scenario, a model that is not there, a speculative setting that is no JSON object or
an exercise folder that is not there was served, each tab then showing the same error (or
dying), while the server said it served. Each case must end with one line and status 1 or 2
before any server starts: through ``cli.main`` with the server replaced by one that only
counts its starts, and one case as the real command, never listening on its port."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from minipaged import cli
from tests.stuck import STUCK_AFTER_S
from tests.test_tui_serve import REPO
from tui import serve

pytest.importorskip("textual_serve")

CASES = {
    # name: (the app's flags, a word of the one line, the status)
    "a trace that is no trace": (["--trace", "{tmp}/bytes.jsonl"], "not a readable", 1),
    "a trace that is not there": (["--trace", "{tmp}/none.jsonl"], "does not exist", 2),
    "a folder as the trace": (["--trace", "{tmp}"], "is a folder", 2),
    "an unknown scenario": (["--scenario", "nonsense"], "unknown scenario", 2),
    "a model that is not there": (["--model", "{tmp}/none"], "{tmp}/none", 2),
    "a speculative setting not JSON": (["--speculative-config", "bad"], "JSON object", 2),
    "an exercise folder not there": (["--exercise", "2", "--path", "{tmp}/x"], "{tmp}/x", 2),
    "a prompt the pool cannot hold": (
        ["--prompt", "Emma " * 400, "--num-gpu-blocks", "2"],
        "give the pool more blocks (num_gpu_blocks)",
        2,
    ),
}


@pytest.fixture
def flags(tmp_path):
    (tmp_path / "bytes.jsonl").write_bytes(b"\xff\x00 not a trace\n")
    return lambda words: [word.replace("{tmp}", str(tmp_path)) for word in words]


@pytest.mark.parametrize("case", CASES)
def test_a_flag_each_tab_would_refuse_is_refused_before_serving(case, flags, monkeypatch, capsys):
    served = []
    monkeypatch.setattr(serve, "serve", lambda args, parser: served.append(args) or 0)
    typed, said, status = CASES[case]
    assert cli.main(["tui", "--serve", *flags(typed)]) == status
    err = capsys.readouterr().err
    assert served == [], "it served"
    assert len(err.splitlines()) == 1 and flags([said])[0] in err, err


def test_the_real_command_refuses_it_without_listening(flags):
    """The port is held, bound, by the test: a command that went on to serve would fail to
    listen on it and say so, not refuse the flag. (Probing a free port for a listener raced
    other tests' servers, which may take the same port between the probe's turns.)"""
    typed, said, status = CASES["a trace that is no trace"]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "minipaged.cli",
                "tui",
                "--serve",
                "--port",
                str(port),
                *flags(typed),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _, err = server.communicate(timeout=STUCK_AFTER_S)
        finally:
            server.kill()
    err = err.decode()
    assert server.returncode == status and len(err.splitlines()) == 1 and said in err, err
