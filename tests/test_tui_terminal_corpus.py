"""The live TUI gives the terminal back when a signal ends it. Textual puts the terminal in raw
mode (no echo, no line editing), switches to the alternate screen and turns mouse reporting
on; ``kill`` (SIGTERM), a closed terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) ended the command at
once (``minipaged.ending_signals``), leaving all three on, so the shell it returned to echoed
nothing typed and printed mouse moves as text; ``kill -INT`` went through Textual's unwinding
but exited 0, as if the app had been quit. Now each signal ends the app as its ``q`` does
(``tui.ending``), then the command says which signal, with status 128 + its number. Tested as
a person sees it: the real command in a pseudo-terminal, the real signals, then what it wrote
last and the terminal's settings."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from stuck import STUCK_AFTER_S

from minipaged import ending_signals
from minipaged.models import model_directory

ENTER_ALTERNATE_SCREEN = b"\x1b[?1049h"
LEAVE_ALTERNATE_SCREEN = b"\x1b[?1049l"
MOUSE_REPORTING_OFF = (b"\x1b[?1000l", b"\x1b[?1003l", b"\x1b[?1006l")
SHOW_CURSOR = b"\x1b[?25h"
DRAWN = b"step"
"""A word of the status line: the app has drawn its screen and is running."""

pytestmark = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)


class Terminal:
    """A pseudo-terminal of 100x30 cells running ``minipaged tui``: ``written`` holds every
    byte the app wrote to it; ``ours`` is the terminal's end the app holds, kept open here
    to read the terminal's settings after the app has gone."""

    def __init__(self) -> None:
        self.screen, self.ours = os.openpty()
        os.set_blocking(self.screen, False)
        self.settings = termios.tcgetattr(self.ours)
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "TERM": "xterm-256color",
            "COLUMNS": "100",
            "LINES": "30",
        }
        self.app = subprocess.Popen(
            [sys.executable, "-m", "minipaged.cli", "tui"],
            stdin=self.ours,
            stdout=self.ours,
            stderr=self.ours,
            env=env,
            start_new_session=True,
        )
        self.written = bytearray()

    def read(self) -> None:
        """Take what the app has written since the last read."""
        while select.select([self.screen], [], [], 0)[0]:
            try:
                more = os.read(self.screen, 65536)
            except OSError:
                return
            if not more:
                return
            self.written += more

    def close(self) -> None:
        self.app.kill()
        for fd in (self.screen, self.ours):
            with contextlib.suppress(OSError):  # the screen's end closed by the test already
                os.close(fd)


CLOSED = "SIGHUP, its terminal closed"
"""The case of a terminal window closed: nothing can be written to it any more."""


def test_each_ending_signal_gives_the_terminal_back():
    """SIGINT, SIGTERM, SIGHUP, and SIGHUP once the terminal's window has gone, each to an app
    of its own, all at once (a fifth app, for SIGQUIT, took the file past 8 s on two cores:
    ``tui.ending`` treats every signal of ``ENDING`` alike)."""
    named = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    cases = {**{signal.Signals(n).name: n for n in named}, CLOSED: signal.SIGHUP}
    terminals = {case: Terminal() for case in cases}
    try:
        waiting, deadline = dict(terminals), time.monotonic() + STUCK_AFTER_S
        while waiting:  # each signalled once its app has drawn its screen
            for case, terminal in list(waiting.items()):
                terminal.read()
                assert terminal.app.poll() is None, bytes(terminal.written[-500:])
                if ENTER_ALTERNATE_SCREEN in terminal.written and DRAWN in terminal.written:
                    if case == CLOSED:
                        os.close(terminal.screen)
                    terminal.app.send_signal(cases[case])
                    del waiting[case]
            assert time.monotonic() < deadline, "an app did not draw its screen"
            time.sleep(0.05)
        while any(t.app.poll() is None for t in terminals.values()):
            for case, terminal in terminals.items():
                if case != CLOSED:
                    terminal.read()  # or the app waits for room to write, for ever
            assert time.monotonic() < deadline + STUCK_AFTER_S, "an app runs on"
            time.sleep(0.05)
        for case, terminal in terminals.items():
            number, status = cases[case], terminal.app.returncode
            assert status == 128 + number, (case, status, bytes(terminal.written[-300:]))
            if case == CLOSED:  # nothing to see, and no error for want of a terminal
                continue
            terminal.read()
            last = bytes(terminal.written[terminal.written.rindex(ENTER_ALTERNATE_SCREEN) :])
            assert LEAVE_ALTERNATE_SCREEN in last, f"{case}: still on the alternate screen"
            for sequence in (*MOUSE_REPORTING_OFF, SHOW_CURSOR):
                assert sequence in last, f"{case}: {sequence!r} never written at the end"
            said = f"minipaged tui: {ending_signals.ENDING[number]}".encode()
            assert last.rstrip().endswith(said), (case, last[-200:])
            assert termios.tcgetattr(terminal.ours) == terminal.settings, f"{case}: raw mode"
    finally:
        for terminal in terminals.values():
            terminal.close()
