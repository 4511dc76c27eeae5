"""Go to step N (``g``): a one-line dialog that takes a step number, for a lecture that returns
to a step it showed before."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input

from minipaged.python_numbers import MAX_COUNT
from minipaged.typed_numbers import integer_between

SHOWN = 18
"""Characters of a refused entry the box's title repeats (a paste may be thousands)."""


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
        shown = text if len(text) <= SHOWN else f"{text[:SHOWN]}..."
        box.border_title = f"no step {shown or '(empty)'}; {self.prompt()}"
        box.value = ""


def step_asked(text: str, last: int, finished: bool) -> int | None:
    """The step ``text`` names, or None when it names none of the run's: ``--steps``'s rule (a
    typed integer from 0 to ``MAX_COUNT``, ``minipaged.typed_numbers``), and not past
    ``last`` of a ``finished`` run (a live run records on). Never raises: an exception in a
    Textual handler would end the session."""
    try:
        step = integer_between(text, 0, MAX_COUNT)
    except ValueError:
        return None
    return step if not finished or step <= last else None
