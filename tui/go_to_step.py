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
        if (
            text.lstrip("-").isdigit()
            and int(text) >= 0
            and (not self.finished or int(text) <= self.last)
        ):
            self.dismiss(int(text))
            return
        box = self.query_one(Input)
        box.border_title = f"no step {text or '(empty)'}; {self.prompt()}"
        box.value = ""
