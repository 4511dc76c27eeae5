"""The signals that end a command, and the one way the command line ends on each.

Ctrl-C (SIGINT), ``kill`` (SIGTERM), a closed terminal (SIGHUP) and Ctrl-\\ (SIGQUIT) all mean
"stop now". Each ends the command the same way: one line on stderr naming the signal, what
would outlive the command undone (``undone_at_an_end``: a grading child and its temporary
folder, the batch grader's grading processes and theirs), every output not yet put in place
dropped (``atomic_write.drop_unfinished``: the file at its name is left as it was, no hidden
``.name.XXXX`` stays), and the shells' status 128 + the signal's number (130 for Ctrl-C, 143
for ``kill``). Without a handler, SIGTERM, SIGHUP and SIGQUIT end Python at once, before any
cleanup, leaving the temporary files behind. ``python -m minipaged.train`` ends the same way.

A block that must finish once begun (a checkpoint's files put in place together) holds a
signal until it is done (``held_back``), then ends the same way.

Two commands hold something that must be given back before they end, and end on their own
event loop instead, then say the same line with the same status: the live TUI gives the
terminal back (``tui.ending``), and ``tui --serve`` tells each tab's app to quit
(``tui.guarded_server``).

The process ends with ``os._exit``, not an exception: a library's bare ``except:`` (some probe
optional imports that way while torch loads) could swallow a ``KeyboardInterrupt``, and the
command would run on. Traces are flushed line by line and the pools live in this process, so
exiting loses nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from minipaged import atomic_write
from minipaged.arguments import say

ENDING = {
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGTERM: "terminated (SIGTERM, as `kill` sends)",
    signal.SIGHUP: "ended: its terminal closed (SIGHUP)",
    signal.SIGQUIT: "quit (SIGQUIT, Ctrl-\\)",
}
"""Each signal that ends a command, and the words its line on stderr says."""


def end_on_signals(command: Callable[[], str]) -> dict[int, object] | None:
    """Make each signal of ``ENDING`` end the command at once, as the module says; ``command``
    gives the command's name for the line on stderr. Returns the handlers replaced (to
    ``restore``), or None off the main thread, where Python allows no signal handler."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def ended(signum: int, frame: object) -> None:
        if _HELD:  # inside held_back(): ended as the block leaves
            _HELD[-1].append(signum)
            return
        with contextlib.suppress(Exception):  # stdout may be mid-write, or its terminal gone
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            say(command(), ENDING[signum])
        for undo in reversed(list(_UNDONE.values())):  # the latest first, as blocks unwind
            with contextlib.suppress(Exception):
                undo()
        atomic_write.drop_unfinished()
        os._exit(128 + signum)

    return {number: signal.signal(number, ended) for number in ENDING}


def restore(previous: dict[int, object] | None) -> None:
    """Put back the handlers ``end_on_signals`` replaced."""
    for number, handler in (previous or {}).items():
        if handler is not None:  # None: set outside Python, which cannot be put back
            signal.signal(number, handler)


_HELD: list[list[int]] = []
"""For each ``held_back`` block now running, the signals that came inside it."""


@contextlib.contextmanager
def held_back() -> Iterator[None]:
    """Hold a signal of ``ENDING`` that comes inside the block until the block is done, then
    end the command on it, as it would have ended at once: for a few steps that must all
    happen or none (a checkpoint's files put in place one after another), where ending
    between two would leave a mix of new and old. Keep the block short: the command ends
    only after it. Nested blocks hold until the outermost is done."""
    _HELD.append([])
    try:
        yield
    finally:
        came = _HELD.pop()
        if _HELD:
            _HELD[-1].extend(came)
        elif came:
            signal.raise_signal(came[0])  # to the handler now in place: the end, at last


_UNDONE: dict[int, Callable[[], None]] = {}
"""What each ``undone_at_an_end`` block now running would leave behind, and how to undo it."""
_BLOCKS = itertools.count()


@contextlib.contextmanager
def undone_at_an_end(undo: Callable[[], None]) -> Iterator[None]:
    """Run ``undo`` if a signal of ``ENDING`` ends the command inside the block (on any
    thread), before the process ends: what the block started that would outlive the command
    (a process in a session of its own, which no Ctrl-C reaches; a temporary folder) is ended
    or removed, as the block's own ``finally`` would have done. An ``undo`` that fails is
    passed over: the others still run."""
    block = next(_BLOCKS)
    _UNDONE[block] = undo
    try:
        yield
    finally:
        del _UNDONE[block]
