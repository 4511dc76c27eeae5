"""The timeline strip along the bottom: the whole run at a glance, and a way to move along it.

Top row: device blocks in use at each step, as a sparkline scaled to the run's peak (named at
its end, with the pool size). Bottom row: a
mark at each step with a fork ``F``, copy-on-write ``C``, swap ``W``, preemption ``P`` or prefix
hit ``H`` (the most drastic wins where several share a column). The cursor's column is
reversed; a click moves the cursor there. While the model thread is still computing, the
strip ends with how far it has got.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widget import Widget

from tui.timeline import Timeline

BARS = " ▁▂▃▄▅▆▇█"
MARKS = (  # drawn in this order of precedence: (mark, event kinds, colour)
    ("P", frozenset({"preempt"}), "bright_red"),
    ("W", frozenset({"swap-out", "swap-in"}), "bright_magenta"),
    ("C", frozenset({"cow-copy"}), "bright_yellow"),
    ("H", frozenset({"prefix-hit"}), "bright_green"),
    ("F", frozenset({"fork"}), "bright_cyan"),
)
LABEL = 9  # "blocks   " / "events   "


def mark_of(kinds: set[str]) -> tuple[str, str] | None:
    for mark, wanted, colour in MARKS:
        if kinds & wanted:
            return mark, colour
    return None


class TimelineStrip(Widget):
    """Guarantees: column i shows steps ``i*per .. i*per+per-1`` of the recorded run (``per``
    grows when the run is wider than the strip); a click seeks to the first step of its
    column; nothing past the recorded steps is drawn."""

    DEFAULT_CSS = """
    TimelineStrip { height: 2; padding: 0 1; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.timeline: Timeline | None = None

    def per_column(self) -> int:
        width = max(self.content_size.width - LABEL - 12, 1)
        steps = self.timeline.recorded + 1 if self.timeline else 1
        return max(1, -(-steps // width))

    def render(self) -> Text:
        timeline = self.timeline
        if timeline is None:
            return Text("")
        per = self.per_column()
        pool = len(timeline.frame(0).step.state.device_refcounts)
        peak = max(timeline.used)
        size = max(peak, 1)  # scaled to the run's peak, so a huge pool's use still shows
        spark = Text("blocks   ", style="dim")
        marks = Text("events   ", style="dim")
        for start in range(0, timeline.recorded + 1, per):
            indices = range(start, min(start + per, timeline.recorded + 1))
            here = Style(reverse=True) if timeline.cursor in indices else Style()
            used = max(timeline.used[i] for i in indices)
            spark.append(
                BARS[round(used / size * (len(BARS) - 1))], style=Style(color="green") + here
            )
            kinds = {e.kind for i in indices for e in timeline.frame(i).step.events}
            found = mark_of(kinds)
            mark, colour = found if found else ("·" if here else " ", "bright_black")
            marks.append(mark, style=Style(color=colour, bold=True) + here)
        spark.append(f"  peak {peak} of {pool} blocks", style="dim")
        done = "" if timeline.finished else f"  computing… {timeline.recorded} steps"
        spark.append(done, style="italic yellow")
        marks.append("  F fork C CoW W swap P preempt H prefix hit", style="dim")
        return Text("\n").join([spark, marks])

    def on_click(self, event: events.Click) -> None:
        if self.timeline is None:
            return
        column = event.x - self.styles.padding.left - LABEL
        if column >= 0:
            self.app.seek_step(min(column * self.per_column(), self.timeline.recorded))
