"""How a message crosses a pipe between the grader and a grading child: its length (8 bytes,
big-endian), then that many bytes of JSON (what the JSON may hold: ``minipaged.grader.wire``).
The reader refuses a message over ``MAX_FRAME`` before it reads it, and waits with a deadline,
a watch on the writer's life and, beside, a second pipe it keeps drained."""

from __future__ import annotations

import json
import os
import select
import struct
import time
from collections.abc import Callable
from typing import Any

MAX_FRAME = 64 * 2**20
"""The largest message the grader reads (64 MiB): a child cannot make it allocate more."""

_HEADER = struct.Struct(">Q")


class ProtocolError(Exception):
    """A message that is not what the protocol allows; the grader trusts nothing in it."""


def frame(document: Any) -> bytes:
    """``document`` as one message: its length, then its JSON."""
    data = json.dumps(document, separators=(",", ":")).encode()
    return _HEADER.pack(len(data)) + data


def write_frame(fd: int, document: Any) -> None:
    view = memoryview(frame(document))
    while view:
        view = view[os.write(fd, view) :]


def read_frame(
    fd: int, deadline=None, alive=None, watch: Callable | None = None, beside=None
) -> Any:
    """One message from ``fd``. Raises ``TimeoutError`` past ``deadline`` (a ``time.monotonic``
    value), ``EOFError`` when the writer is gone or the file descriptor ``alive`` (a process's
    pidfd) turns readable with nothing to read, and ``ProtocolError`` for a bad frame.
    ``watch()``, if given, is called every ``WATCH_SECONDS`` while nothing comes, and may
    raise to stop waiting. ``beside``: a pipe read as it fills while waiting (its ``fd``, its
    ``drain()``, ``open`` until its writers are gone): a child's notices, whose writer would
    otherwise wait on a full pipe."""
    header = _read_exactly(fd, _HEADER.size, deadline, alive, watch, beside)
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ProtocolError(
            f"the bytes {header!r} where a message's length belongs: {size}, more than the "
            f"{MAX_FRAME} allowed"
        )
    data = _read_exactly(fd, size, deadline, alive, watch, beside)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        began = data[:24]
        raise ProtocolError(f"a message that is not JSON ({error}; it began {began!r})") from None


WATCH_SECONDS = 0.5  # how often read_frame calls its watch while it waits


def _read_exactly(fd: int, size: int, deadline, alive, watch, beside=None) -> bytes:
    chunks, left = [], size
    while left:
        watched = [fd] if alive is None else [fd, alive]
        watched += [beside.fd] if beside is not None and beside.open else []
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if watch is not None:
            wait = WATCH_SECONDS if wait is None else min(wait, WATCH_SECONDS)
        ready, _, _ = select.select(watched, [], [], wait)
        if beside is not None and beside.fd in ready:
            beside.drain()
            ready.remove(beside.fd)
            if not ready:
                continue
        if fd in ready:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError("the channel closed")
            chunks.append(chunk)
            left -= len(chunk)
        elif ready:  # the process ended and nothing is left to read
            raise EOFError("the process ended")
        elif deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError
        elif watch is not None:
            watch()
    return b"".join(chunks)
