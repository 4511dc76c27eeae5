"""The status line: which run, where the cursor is, whether it plays, and the latest notice."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui.pane import Selection
from tui.timeline import Timeline

MIN_WIDTH, MIN_HEIGHT = 80, 24


def too_small(width: int, height: int) -> str:
    """What to say instead of the panes on a terminal below 80×24; ``""`` when it fits."""
    if width >= MIN_WIDTH and height >= MIN_HEIGHT:
        return ""
    return (
        f"The terminal is {width}×{height}; minipaged tui needs at least {MIN_WIDTH}×"
        f"{MIN_HEIGHT}.\nEnlarge the window (or make the font smaller) and it redraws at "
        "once. q quits."
    )


class StatusLine(Static):
    """One line. Guarantees: ``step k/N`` names the cursor's frame and the steps recorded so
    far (``N+`` while the model may still add more); a notice is shown until the next move."""

    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; padding: 0 1; }
    """

    def show(
        self,
        title: str,
        timeline: Timeline | None,
        playing: bool,
        speed: float,
        selection: Selection,
        notice: str,
    ) -> None:
        text = Text(title, style="bold")
        if timeline is not None:
            total = str(timeline.recorded) if timeline.finished else f"{timeline.recorded}+"
            text.append(f"  step {timeline.cursor}/{total}")
        text.append(f"  ▶ playing {speed:g} steps/s" if playing else "  paused", style="dim")
        if selection != Selection():
            text.append(f"  selected: {selection.describe()}", style="reverse")
        if notice:
            text.append(f"  {notice}", style="bold yellow")
        self.update(text)
