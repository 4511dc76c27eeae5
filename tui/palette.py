"""The app's entries in Textual's command palette (ctrl+p): every key of the key map, every
scenario, and selecting any live sequence or used block, for keyboard users who cannot click."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rich.markup import escape
from textual.app import SystemCommand

from tui import keymap
from tui.pane import Selection

if TYPE_CHECKING:
    from tui.app import PagedApp


def commands(app: PagedApp) -> Iterable[SystemCommand]:
    """Scenarios first: the palette keeps this order among equal matches, so typing a
    scenario's name ("prefix") ranks the scenario above a key that mentions the word. Help
    texts are Rich markup to the palette, so the notation in them ("R[p]") is escaped."""
    for name, scenario in app.scenarios.items():
        yield SystemCommand(
            f"Scenario {name}: {scenario.title}",
            escape(scenario.story),
            lambda n=name: app.picked(n),
        )
    for key in keymap.KEYMAP:
        if key.action not in ("command_palette", "quit"):
            yield SystemCommand(
                key.description.capitalize(), escape(f"key: {key.display}"), run(app, key.action)
            )
    if app.timeline is not None:
        frame = app.timeline.frame()
        for stream in frame.streams:
            seq = stream.seq_id
            yield SystemCommand(
                f"Select sequence {seq}",
                f"request {stream.request_id}, {stream.status}: highlight it everywhere",
                lambda s=seq: app.select(Selection(seq=s)),
                discover=False,
            )
        for block, r in enumerate(frame.step.state.device_refcounts):
            if r:
                yield SystemCommand(
                    f"Select block {block}",
                    f"device block {block}, R={r}: highlight it everywhere",
                    lambda b=block: app.select(Selection(block=b)),
                    discover=False,
                )
    yield SystemCommand("Clear selection", "highlight nothing", lambda: app.select(Selection()))


def run(app: PagedApp, action: str) -> Callable[[], object]:
    # The palette has closed by the time this runs, so the action's key checks pass as usual.
    return lambda: app.run_action(action)
