"""``minipaged tui --serve`` ends on every signal that ends a command as it ends on Ctrl-C:
textual-serve tells each browser tab's app to quit and waits for it, then the command says
which signal ended it, with status 128 + its number (``minipaged.ending_signals``).
textual-serve did this for SIGINT and SIGTERM only, and exited 0 without a word; a closed
terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) ended the server at once, leaving each tab's app process
to notice alone. The real command, the real signals, all at once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minipaged import ending_signals
from tests.stuck import STUCK_AFTER_S
from tests.test_tui_serve import REPO, free_port, wait_for_port

pytest.importorskip("textual_serve")


def test_each_ending_signal_ends_the_server_as_ctrl_c_does():
    servers = {}
    try:
        for number in ending_signals.ENDING:
            port = free_port()
            servers[number] = subprocess.Popen(
                [sys.executable, "-m", "minipaged.cli", "tui", "--serve", "--port", str(port)],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            wait_for_port(port, servers[number])
        for number, server in servers.items():
            server.send_signal(number)
        for number, server in servers.items():
            _, err = server.communicate(timeout=STUCK_AFTER_S)
            assert server.returncode == 128 + number, (number, server.returncode, err)
            said = f"minipaged tui: {ending_signals.ENDING[number]}"
            assert err.decode().splitlines() == [said], err
    finally:
        for server in servers.values():
            server.kill()
