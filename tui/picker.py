"""The scenario picker (``s``): choose a run; it starts from step 0."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tui.scenarios import Scenario


class ScenarioPicker(ModalScreen[str | None]):
    """Lists ``scenarios`` with what each shows; dismisses with the chosen name, or None when
    escaped."""

    DEFAULT_CSS = """
    ScenarioPicker { align: center middle; }
    ScenarioPicker > OptionList {
        width: 90; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface;
    }
    """
    BINDINGS: ClassVar = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, scenarios: dict[str, Scenario], current: str | None) -> None:
        super().__init__()
        self.scenarios = scenarios
        self.current = current

    def compose(self) -> ComposeResult:
        options = []
        for name, scenario in self.scenarios.items():
            prompt = Text(scenario.title, style="bold")
            prompt.append(f"  ({name})", style="dim")
            prompt.append(f"\n{scenario.story}\n", style="italic")
            options.append(Option(prompt, id=name))
        picker = OptionList(*options)
        picker.border_title = "scenarios: enter runs one, escape goes back"
        yield picker

    def on_mount(self) -> None:
        picker = self.query_one(OptionList)
        if self.current in self.scenarios:
            picker.highlighted = list(self.scenarios).index(self.current)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
