"""What stopped a student's run (``minipaged tui --exercise N``), shown whole until dismissed.

The run was recorded in a grading process (``minipaged.grader.student_run``); when the
student's code raised, or ran past the per-step time limit, the replay opens on this dialog:
the whole message, wrapped, never cut at the terminal's width, with the step it stopped and,
for code not written yet, how to start and how to watch the library's own solution instead.
It stays until enter or escape closes it; the invariants pane keeps a red line saying the run
stopped (``headline``) for as long as the app runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

if TYPE_CHECKING:
    from minipaged.grader.student_run import RecordedRun


def headline(stopped: RecordedRun) -> str:
    """One line for the invariants pane: what stopped the run, and when."""
    first = (stopped.error or "").splitlines()[0] if stopped.error else ""
    if stopped.unwritten:
        return f"✗ your code is not written yet (step {stopped.step}): {first}"
    return f"✗ your code stopped the run at step {stopped.step}: {first}"


def explanation(stopped: RecordedRun) -> Text:
    """The dialog's text: the whole error, what the panes show, and what to do next."""
    text = Text()
    if stopped.unwritten:
        text.append("Your code is not written yet.\n\n", style="bold")
    else:
        text.append(f"Your code stopped the run at step {stopped.step}.\n\n", style="bold")
    text.append((stopped.error or "").removeprefix("not written yet: "))
    shown = stopped.step - 1 if stopped.step else 0
    text.append(
        f"\n\nThe panes show the {shown} step(s) before it." if shown else "\n\nNo step ran.",
        style="dim",
    )
    number = stopped.number
    if stopped.unwritten:
        text.append("\n\nTo start: ", style="bold")
        text.append(
            f"minipaged exercises init {number} ex{number:02d}, write the function(s) above "
            f"in ex{number:02d}/, check them with minipaged exercises check {number} and run "
            f"minipaged tui --exercise {number} inside ex{number:02d} (or pass --path "
            f"ex{number:02d}).\n"
        )
        text.append("To watch the library's own solution: ", style="bold")
        text.append(f"minipaged tui --exercise {number} --solution")
    text.append("\n\nenter or esc closes this; q quits.", style="dim")
    return text


class StudentError(ModalScreen):
    """Guarantees: the whole of ``stopped.error`` is on this screen (it scrolls when longer
    than the terminal), and only enter, escape or q leave it."""

    DEFAULT_CSS = """
    StudentError { align: center middle; }
    StudentError > VerticalScroll {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: thick $error; background: $surface; padding: 1 2;
    }
    """
    BINDINGS: ClassVar = [
        Binding("escape", "dismiss", "close"),
        Binding("enter", "dismiss", "close"),
    ]

    def __init__(self, stopped: RecordedRun) -> None:
        super().__init__()
        self.stopped = stopped

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(explanation(self.stopped), id="student-error")
