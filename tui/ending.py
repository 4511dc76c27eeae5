"""The live app's end on a signal: as its own ``q`` ends it, so that the terminal is given back.

A signal that ends a command (``minipaged.ending_signals``: Ctrl-C sent by ``kill -INT``,
``kill``, a closed terminal, Ctrl-\\) ends the command at once, which in the app would leave the
terminal as Textual set it: raw mode (no echo, no line editing), the alternate screen, mouse
reporting on. While the app runs, each such signal asks the app to exit instead, on its own
event loop; Textual's driver then restores the terminal (``stop_application_mode``), and the
command says which signal ended it and exits with 128 + its number, as every command does. A
second signal, or one that comes before the app's loop runs or after it has stopped, ends the
command at once, as before: an end that waits on an app that cannot exit must still end.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from minipaged import ending_signals


def run_ending_on_signals(app) -> int | None:
    """Run ``app`` live; return the signal that ended it, or None when it ended otherwise."""
    ended: list[int] = []
    previous: dict[int, Callable[[int, Any], Any] | int | None] = {}

    def end(number: int, frame: object) -> None:
        loop = app._loop  # the app's event loop, set while it runs
        if ended or loop is None or loop.is_closed():  # ended as it would have been
            at_once = previous[number]
            if callable(at_once):
                at_once(number, frame)  # the command line's: it does not return
            signal.signal(number, signal.SIG_DFL if at_once is None else at_once)
            signal.raise_signal(number)
            return
        ended.append(number)
        loop.call_soon_threadsafe(app.exit)  # from a signal handler: safe, unlike app.exit

    for number in ending_signals.ENDING:
        previous[number] = signal.signal(number, end)
    try:
        app.run()
    finally:
        ending_signals.restore(previous)
    return ended[0] if ended else None
