"""The timeline strip along the bottom: the whole run at a glance, and a way to move along it.

Top row: device blocks in use at each step, as a sparkline scaled to the run's peak (named at
its end, with the pool size), then what the cursor's step holds. Bottom row: a mark for each
mechanism a step shows, each kind its own (``MARKS``: a swap-out is ``O``, never the ``P`` of
the preemption that caused it). A column holds one step, or several when the run is wider
than the strip; where it holds more than one kind it shows the most telling, underlined, and
the top row names them all for the cursor's column (a preemption by swapping shows ``O``, the
swap-out it is, underlined for the preemption too; ``P`` alone is one by recomputation). The
legend lists the marks the run has, so it always fits: a narrow strip puts more steps in a
column rather than cut the legend.
Routine bookkeeping (allocations, frees, refcounts, prefix-cache registrations, finishes)
happens in most steps and is told by the event log, not marked here. The cursor's column is
reversed; a click moves the cursor there. While the model thread is still computing, the strip
says how far it has got.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widget import Widget

from tui.timeline import Timeline

BARS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True, slots=True)
class Mark:
    letter: str
    kind: str
    name: str  # in the legend
    short: str  # in a narrow legend
    colour: str  # an ANSI name: tui.ansi_themes makes it readable in both themes


MARKS = (  # most telling first: a column with several kinds shows the first
    Mark("O", "swap-out", "swap out", "out", "bright_magenta"),  # a preemption by swapping
    Mark("I", "swap-in", "swap in", "in", "magenta"),
    Mark("P", "preempt", "preempt", "pre", "bright_red"),  # alone: one by recomputation
    Mark("R", "recompute", "recompute", "rec", "red"),
    Mark("X", "refuse", "refused", "ref", "bright_red"),
    Mark("A", "abort", "aborted", "abo", "red"),
    Mark("C", "cow-copy", "CoW", "cow", "bright_yellow"),
    Mark("F", "fork", "fork", "fork", "bright_cyan"),
    Mark("H", "prefix-hit", "prefix hit", "hit", "bright_green"),
    Mark("L", "prefill-chunk", "prompt chunk", "chunk", "yellow"),  # a long prompt, in pieces
    Mark("S", "spec-propose", "speculate", "spec", "bright_blue"),
    Mark("V", "spec-verify", "verify", "ver", "blue"),
    Mark("K", "spec-accept", "accept", "acc", "green"),
    Mark("D", "spec-prune", "prune", "pru", "cyan"),
)
MARK_OF = {mark.kind: mark for mark in MARKS}
ROUTINE = frozenset(
    {"alloc", "free", "incref", "decref", "prefix-insert", "prefix-evict", "finish"}
    | {"step-budget"}  # the scheduler pane shows it
)
"""Event kinds in most steps: the event log tells them; the strip leaves them unmarked."""

LABEL = 9  # "blocks   " / "events   "


def marks_of(kinds: set[str]) -> list[Mark]:
    """The marks of ``kinds``, most drastic first."""
    return [mark for mark in MARKS if mark.kind in kinds]


def legend(marks: list[Mark], short: bool) -> str:
    return "  " + " ".join(f"{m.letter} {m.short if short else m.name}" for m in marks)


def here_text(marks: list[Mark], room: int) -> str:
    """What the cursor's step holds, in ``room`` cells: each mark's name, else its short name,
    else its letter alone (a speculative step holds four kinds)."""
    if not marks:
        return ""
    for word in ("name", "short"):
        text = "  here: " + " + ".join(f"{m.letter} {getattr(m, word)}" for m in marks)
        if len(text) <= room:
            return text
    return "  here: " + "+".join(m.letter for m in marks)


class TimelineStrip(Widget):
    """Guarantees: column i shows steps ``i*per .. i*per+per-1`` of the recorded run (``per``
    grows when the run and the legend are wider than the strip); every kind of ``MARKS`` that
    occurs in the run is in the legend; a click seeks to the first step of its column; nothing
    past the recorded steps is drawn."""

    DEFAULT_CSS = """
    TimelineStrip { height: 2; padding: 0 1; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.timeline: Timeline | None = None

    def run_marks(self) -> list[Mark]:
        """The marks of every kind the recorded run has."""
        timeline = self.timeline
        kinds = set(timeline.frame(timeline.recorded).counts) if timeline else set()
        return marks_of(kinds)

    def layout(self) -> tuple[int, str]:
        """Steps per column and the legend: the full legend while every step has a column of
        its own, else the short one, with as many steps per column as it then takes."""
        room = max(self.content_size.width - LABEL, 1)
        steps = self.timeline.recorded + 1 if self.timeline else 1
        marks = self.run_marks()
        for short in (False, True):
            text = legend(marks, short)
            if steps + len(text) <= room:
                return 1, text
        columns = max(room - len(text), 8)
        return max(1, -(-steps // columns)), text

    def per_column(self) -> int:
        return self.layout()[0]

    def render(self) -> Text:
        timeline = self.timeline
        if timeline is None:
            return Text("")
        per, key = self.layout()
        pool = len(timeline.frame(0).step.state.device_refcounts)
        peak = max(timeline.used)
        size = max(peak, 1)  # scaled to the run's peak, so a huge pool's use still shows
        spark = Text("blocks   ", style="dim")
        row = Text("events   ", style="dim")
        here: list[Mark] = []
        for start in range(0, timeline.recorded + 1, per):
            indices = range(start, min(start + per, timeline.recorded + 1))
            cursor = timeline.cursor in indices
            at = Style(reverse=True) if cursor else Style()
            used = max(timeline.used[i] for i in indices)
            spark.append(
                BARS[round(used / size * (len(BARS) - 1))], style=Style(color="green") + at
            )
            marks = marks_of({e.kind for i in indices for e in timeline.frame(i).step.events})
            if cursor:
                here = marks
            if marks:
                several = Style(underline=True) if len(marks) > 1 else Style()
                row.append(
                    marks[0].letter, style=Style(color=marks[0].colour, bold=True) + several + at
                )
            else:
                row.append("·" if cursor else " ", style=Style(color="bright_black") + at)
        spark.append(f"  peak {peak}/{pool} blocks", style="dim")
        done = "" if timeline.finished else f"  computing… {timeline.recorded} steps"
        room = self.content_size.width - spark.cell_len - len(done)
        spark.append(here_text(here, room), style="bold")
        spark.append(done, style="italic yellow")
        row.append(key, style="dim")
        strip = Text("\n").join([spark, row])
        strip.no_wrap, strip.overflow = True, "ellipsis"  # two rows: a third would not show
        return strip

    def on_click(self, event: events.Click) -> None:
        if self.timeline is None:
            return
        column = event.x - self.styles.padding.left - LABEL
        if column >= 0:
            self.app.seek_step(min(column * self.per_column(), self.timeline.recorded))
