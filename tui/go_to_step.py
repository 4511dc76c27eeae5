"""Go to step N (``g``): a one-line dialog that takes a step number, for a lecture that returns
to a step it showed before."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input


class GoToStep(ModalScreen[int | None]):
    """Asks for a step from 0 to ``last``; dismisses with it, or with None when escaped. A
    number outside the run, or no number, is said in the box's title and asked for again."""

    DEFAULT_CSS = """
    GoToStep { align: center middle; }
    GoToStep > Input { width: 48; max-width: 100%; border: round $accent; }
    """
    BINDINGS: ClassVar = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, last: int, finished: bool) -> None:
        super().__init__()
        self.last = last
        self.finished = finished

    def compose(self) -> ComposeResult:
        box = Input(placeholder="a step number", type="integer", id="step")
        box.border_title = self.prompt()
        yield box

    def prompt(self) -> str:
        more = "" if self.finished else " or later"
        return f"go to step 0 to {self.last}{more}: enter goes, escape cancels"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        step = step_asked(text, self.last, self.finished)
        if step is not None:
            self.dismiss(step)
            return
        box = self.query_one(Input)
        shown = text if len(text) <= MAX_DIGITS else f"{text[:MAX_DIGITS]}..."
        box.border_title = f"no step {shown or '(empty)'}; {self.prompt()}"
        box.value = ""


MAX_DIGITS = 18
"""Digits a step number may have: more than any run records (and ``int`` refuses a string of
more than 4,300 digits with a ``ValueError``, which would end the session)."""


def step_asked(text: str, last: int, finished: bool) -> int | None:
    """The step ``text`` names, or None when it names none of the run's: not a number, below
    0, past ``last`` of a ``finished`` run (a live run records on), or longer than
    ``MAX_DIGITS``."""
    if not (text.isdigit() and text.isascii() and len(text) <= MAX_DIGITS):
        return None
    step = int(text)
    return step if not finished or step <= last else None
