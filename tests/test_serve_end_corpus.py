"""``minipaged tui --serve`` ends on every signal that ends a command as it ends on Ctrl-C:
textual-serve tells each browser tab's app to quit and waits for it, then the command says
which signal ended it, with status 128 + its number (``minipaged.ending_signals``).
textual-serve did this for SIGINT and SIGTERM only, and exited 0 without a word; a closed
terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) ended the server at once, leaving each tab's app process
to notice alone; and with a tab open, aiohttp waited up to a minute for its websocket. The
guarded server as the command runs it (its tab's app a stand-in), and the real command, each
sent the real signals."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from minipaged import ending_signals
from tests.held_port import held_port
from tests.stuck import STUCK_AFTER_S
from tests.test_tui_serve import REPO, wait_for_port

pytest.importorskip("textual_serve")


# Child code: the guarded server as `tui --serve` runs it, with a stand-in for the tab's app
# (it runs until the server tells it anything: the quit at the end; test_tui_serve's).
SERVING = """
import shlex, sys
from tui.guarded_server import GuardedServer
from tui.serve import TEMPLATES
app = shlex.join([sys.executable, "-c", "import sys; sys.stdin.buffer.read(1)"])
server = GuardedServer(app, templates=TEMPLATES, host="127.0.0.1", port=int(sys.argv[1]))
server.serve()
print("ended by", server.ended_by, file=sys.stderr)
"""


def answer_as_a_browser(tab: socket.socket) -> None:
    """Answer the server's websocket frames as a browser does until the server closes it: a
    pong for each ping (so that the heartbeat never ends the tab), then the close answered
    and the connection closed (RFC 6455 §5: a server's frames unmasked, a client's masked)."""
    received = b""
    while True:
        more = tab.recv(4096)
        if not more:  # closed without a close frame
            return
        received += more
        while len(received) >= 2 and len(received) >= 2 + (received[1] & 0x7F):
            opcode, length = received[0] & 0x0F, received[1] & 0x7F  # short frames only
            payload, received = received[2 : 2 + length], received[2 + length :]
            if opcode == 0x9:  # ping
                mask = os.urandom(4)
                masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
                tab.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)
            elif opcode == 0x8:  # close
                tab.sendall(b"\x88\x80" + os.urandom(4))
                tab.close()
                return


SESSION_ENDS_S = 10.0
"""A margin the prompt end meets at any load (about 1 s measured here), and the old wait
never did (24 s measured here: aiohttp waits up to a minute for an open websocket)."""


def test_a_signal_with_a_tab_open_ends_its_session_at_once():
    """The tab's session ends at once and its app quits before the server ends, with nothing
    more on stderr: aiohttp waited up to a minute for the open websocket of a browser's tab
    (and, with the real app, an "Event loop is closed" traceback was once seen at the end)."""
    with held_port() as port:
        server = serving(port)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=STUCK_AFTER_S) as tab:
                key = base64.b64encode(os.urandom(16)).decode()
                tab.sendall(
                    f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                    f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13"
                    f"\r\nOrigin: http://127.0.0.1:{port}\r\n\r\n".encode()
                )
                assert tab.recv(1024).startswith(b"HTTP/1.1 101"), "the tab was refused"
                time.sleep(0.5)  # its app started (the stand-in starts at once)
                signalled = time.monotonic()
                server.send_signal(signal.SIGHUP)
                answer_as_a_browser(tab)
                _, err = server.communicate(timeout=STUCK_AFTER_S)
                took = time.monotonic() - signalled
        finally:
            server.kill()
    assert err.decode().splitlines() == [f"ended by {int(signal.SIGHUP)}"], err.decode()
    assert took < SESSION_ENDS_S, f"the server waited {took:.1f} s for the tab's session"


def serving(port: int, wait: bool = True) -> subprocess.Popen:
    """The guarded server of ``SERVING`` on ``port``, once it listens (with ``wait``)."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVING, str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if wait:
        wait_for_port(port, server)
    return server


def test_each_ending_signal_ends_the_server_as_ctrl_c_does():
    """The four at once, each to a server of its own (textual-serve's own end took SIGINT and
    SIGTERM only)."""
    servers = {}
    with contextlib.ExitStack() as held:
        ports = {number: held.enter_context(held_port()) for number in ending_signals.ENDING}
        try:
            servers = {number: serving(port, wait=False) for number, port in ports.items()}
            for number, server in servers.items():
                wait_for_port(ports[number], server)
                server.send_signal(number)
            for number, server in servers.items():
                _, err = server.communicate(timeout=STUCK_AFTER_S)
                assert err.decode().splitlines() == [f"ended by {int(number)}"], err.decode()
        finally:
            for server in servers.values():
                server.kill()


def test_the_command_says_which_signal_ended_it_with_its_status():
    """``minipaged tui --serve`` itself: it exited 0 without a word on SIGINT and SIGTERM."""
    with held_port() as port:
        server = subprocess.Popen(
            [sys.executable, "-m", "minipaged.cli", "tui", "--serve", "--port", str(port)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for_port(port, server)
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=STUCK_AFTER_S)
        finally:
            server.kill()
    assert server.returncode == 128 + signal.SIGTERM, (server.returncode, err)
    assert err.decode().splitlines() == [f"minipaged tui: {ending_signals.ENDING[signal.SIGTERM]}"]
