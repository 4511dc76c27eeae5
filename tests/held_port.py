"""A port for a test's own server, held by the test from the moment it is chosen until the
server is done with it.

Finding a free port (bind to port 0, read it, close) and then starting a server on it races
every other test that does the same: under ``pytest -n`` another worker's server may take the
port in between, and a test that waits until "something listens" there then talks to the
other test's server. ``held_port`` keeps the port bound (not listening) with ``SO_REUSEADDR``
for the whole block: no other socket can be bound to it, while a server that sets
``SO_REUSEADDR`` too (aiohttp's, ``http.server``'s, ``socket.create_server``'s, on Linux) may
listen on it. So whatever listens there is the test's own server.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 no other socket can be bound to while the block runs, which the
    block's own server may listen on."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]
