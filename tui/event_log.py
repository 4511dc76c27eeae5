"""The event log: each step's story under a header with its headline, steps 1..cursor, newest
at the bottom, scrollable (mouse wheel, page up / page down).

The lines are ``tui.story``'s: events in cause-before-effect order, each in its own words
(``Event.narrate()``, which lives with the event type in ``minipaged.events``), runs of like
events folded into one ``▸`` line (``e`` expands them). The step under the cursor is bright
and earlier steps are dim; with a selection, the events that touch the selected sequence or
block stand out. Moving the cursor scrolls so that the step's header is in view, however many
lines the step has.
"""

from __future__ import annotations

from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from minipaged.events import Event
from tui.pane import Selection
from tui.story import fold, headline, in_story_order
from tui.timeline import Frame, Timeline

INDENT = 2
MAX_STEPS = 12  # steps drawn up to the cursor (fewer is a cheaper redraw); older: step back
KIND_COLOURS = {
    "alloc": "green",
    "free": "bright_black",
    "incref": "cyan",
    "decref": "cyan",
    "fork": "bright_cyan",
    "cow-copy": "bright_yellow",
    "swap-out": "bright_magenta",
    "swap-in": "bright_magenta",
    "preempt": "bright_red",
    "recompute": "red",
    "finish": "bright_blue",
}


def involves(event: Event, selection: Selection) -> bool:
    """Whether ``event`` names the selected sequence or device block."""
    if selection.seq is not None:
        return selection.seq in event.seq_ids()
    return selection.block is not None and selection.block in event.blocks_in("device")


def step_rows(
    frame: Frame,
    selection: Selection,
    current: bool,
    expanded: bool,
    width: int,
    console: Console,
    colours: dict[str, str] = KIND_COLOURS,
) -> list[Text]:
    """Frame's header and story, wrapped to ``width`` with a hanging indent, each kind of event
    in its colour from ``colours``."""
    step = frame.step
    title = f"step {step.step} · {headline(step)}"
    header = Text(title, style=Style(bold=True, reverse=current, dim=not current))
    rows = [*header.wrap(console, width)]
    for row in rows:
        row.rstrip()
    for line in fold(in_story_order(step.events)):
        style = Style(color=colours.get(line.events[0].kind))
        if selection != Selection():
            hit = any(involves(event, selection) for event in line.events)
            style += Style(bold=True) if hit else Style(dim=True)
        elif not current:
            style += Style(dim=True)
        said = [line.text()]
        if line.folded and expanded:
            said += [f"  {event.narrate()}" for event in line.events]
        for n, words in enumerate(said):
            marker = ("▾ " if expanded else "▸ ") if line.folded and n == 0 else "  "
            body = Text(marker + words, style=style)
            for i, part in enumerate(body.wrap(console, max(width - INDENT, 8))):
                row = Text(" " * INDENT if i == 0 else " " * (INDENT + 2))
                row.append_text(part)
                row.rstrip()
                rows.append(row)
    return rows


class EventLog(VerticalScroll):
    """Steps 1..cursor (the latest ``MAX_STEPS``). Guarantees: the last step shown is the
    cursor's; its header is in view after every move; nothing after the cursor is shown."""

    DEFAULT_CSS = """
    EventLog {
        border: round $primary 60%;
        border-title-color: $text;
        padding: 0 1;
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    EventLog > Static { width: 100%; text-wrap: nowrap; text-overflow: clip; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "events"
        self.timeline: Timeline | None = None
        self.intro = ""  # what the run shows, said at step 0
        self.expanded = False
        self.frame: Frame | None = None
        self.selection = Selection()
        self.header_line = 0  # where the cursor's step begins in the log
        self.wanted_y = (0, 0)  # (the cursor's header line, lines in all) to scroll to

    def compose(self):
        yield Static(Text("loading the model…", style="dim"))

    def show(self, frame: Frame, selection: Selection) -> None:
        self.frame, self.selection = frame, selection
        step = frame.step
        self.border_title = (
            f"events, step {step.step}: {step.num_prefill_tokens} prefill + "
            f"{step.num_decode_tokens} decode  (e expands, pgup/pgdn scroll)"
            if frame.index
            else "events"
        )
        self.redraw()

    def redraw(self) -> None:
        frame = self.frame
        if frame is None or not self.is_mounted:
            return
        # One column spare: a wrapped row must never wrap again in the Static (it would shift
        # every line below it, and the scroll position with them).
        width = max(self.scrollable_content_region.width - 1, 20)
        body = self.query_one(Static)
        if self.timeline is None or frame.index == 0:
            intro = Text(f"{self.intro}\n\n" if self.intro else "", style="italic")
            intro.append("n or → runs the first step; space plays; ? explains", style="dim")
            body.update(Text("\n").join(intro.wrap(self.app.console, width)))
            body.styles.height = "auto"
            self.header_line = 0
            self.scroll_home(animate=False)
            return
        # Projection: the theme's own high-contrast text; pale kind colours wash out on a screen.
        colours = {} if self.screen.has_class("-projection") else KIND_COLOURS
        rows: list[Text] = []
        for index in range(max(1, frame.index - MAX_STEPS + 1), frame.index + 1):
            current = index == frame.index
            if current:
                self.header_line = len(rows)
            earlier = self.timeline.frame(index)
            rows += step_rows(
                earlier, self.selection, current, self.expanded, width, self.app.console, colours
            )
        text = Text("\n").join(rows)
        text.no_wrap = True
        body.update(text)
        body.styles.height = len(rows)  # known now, so the scroll below need not wait a layout
        # Bottom-aligned, unless the cursor's step is taller than the pane: then its header
        # goes to the top, so a busy step never loses its first lines.
        self.wanted_y = self.header_line, len(rows)
        self.settle()

    def settle(self) -> None:
        """Scroll to the wanted place once the new content's size is known (now, or when the
        layout catches up: ``watch_virtual_size``)."""
        header, total = self.wanted_y
        target = min(header, max(total - self.scrollable_content_region.height, 0))
        if target <= self.max_scroll_y:
            self.scroll_to(y=target, animate=False, immediate=True)
        else:
            self.call_after_refresh(self.settle)

    def watch_virtual_size(self) -> None:
        self.settle()

    def toggle_expanded(self) -> None:
        self.expanded = not self.expanded
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()
