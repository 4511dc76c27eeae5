"""The event log: each step's story under a header with its headline, steps 1..cursor, newest
at the bottom, scrollable (mouse wheel, page up / page down) back to the first line of step 1.

The lines are ``tui.story``'s: events in cause-before-effect order, each in its own words
(``Event.narrate()``, which lives with the event type in ``minipaged.events``), runs of like
events folded into one ``▸`` line (``e`` expands them). The step under the cursor is bright
and earlier steps are dim; with a selection, the events that touch the selected sequence or
block stand out. Moving the cursor scrolls so that the step's header is in view, however many
lines the step has.

The log is virtual: only the lines in view are drawn. Each step's lines are made when first
shown and kept (per width, selection and expansion), and a step's line count is remembered,
so a long run costs a move no more than a short one.
"""

from __future__ import annotations

from bisect import bisect_right

from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from minipaged.events import Event
from tui.pane import Selection
from tui.story import fold, headline, in_story_order
from tui.timeline import Frame, Timeline

INDENT = 2
KEPT = 512  # steps' drawn lines kept; the oldest are dropped (and drawn again if scrolled to)
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
) -> list[Text]:
    """Frame's header and story, wrapped to ``width`` with a hanging indent, each kind of event
    in its colour from ``KIND_COLOURS`` (``tui.ansi_themes`` keeps them readable in both
    themes)."""
    step = frame.step
    title = f"step {step.step} · {headline(step)}"
    header = Text(title, style=Style(bold=True, reverse=current, dim=not current))
    rows = [*header.wrap(console, width)]
    for row in rows:
        row.rstrip()
    for line in fold(in_story_order(step.events)):
        style = Style(color=KIND_COLOURS.get(line.events[0].kind))
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
            # The marker, then the words wrapped with a hanging indent under their start.
            body = Text(words, style=style)
            for i, part in enumerate(body.wrap(console, max(width - INDENT - len(marker), 8))):
                row = Text(" " * INDENT)
                row.append(marker if i == 0 else " " * len(marker), style=style)
                row.append_text(part)
                row.rstrip()
                rows.append(row)
    return rows


class EventLog(ScrollView, can_focus=False):
    """Steps 1..cursor. Guarantees: the last step shown is the cursor's; its header is in view
    after every move; nothing after the cursor is shown; every earlier step is a scroll away."""

    DEFAULT_CSS = """
    EventLog {
        border: round $primary 60%;
        border-title-color: $text;
        padding: 0 1;
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "events"
        self._timeline: Timeline | None = None
        self.intro = ""  # what the run shows, said at step 0
        self.expanded = False
        self.frame: Frame | None = None
        self.selection = Selection()
        self.header_line = 0  # where the cursor's step begins in the log
        self.wanted_y = (0, 0)  # (the cursor's header line, lines in all) to scroll to
        self.starts: list[int] = [0]  # starts[i]: the first line of step i + 1; then the end
        self.counts: dict[tuple, int] = {}  # (step, width, expanded) -> its number of lines
        self.drawn: dict[tuple, list[Strip]] = {}  # (step, look...) -> its lines
        self.opening: list[Strip] = []  # step 0: what the run shows
        self.width = 0

    @property
    def timeline(self) -> Timeline | None:
        return self._timeline

    @timeline.setter
    def timeline(self, timeline: Timeline | None) -> None:
        """A new run: nothing drawn for the last one is kept."""
        self._timeline, self.frame = timeline, None
        self.counts.clear()
        self.drawn.clear()

    def clear(self) -> None:
        """A new run is loading: nothing of the last run stays on screen, where its steps
        would read as the new run's until the model is ready."""
        self.timeline = None
        self.intro = ""
        self.opening, self.starts = [], [0]
        self.border_title = "events"
        self.virtual_size = Size(0, 0)
        self.refresh()

    def show(self, frame: Frame, selection: Selection) -> None:
        self.frame, self.selection = frame, selection
        step = frame.step
        title = f"events, step {step.step}: {step.num_prefill_tokens} prefill + "
        title += f"{step.num_decode_tokens} decode"
        if len(title) + 32 <= self.size.width:  # the keys, where there is room for them
            title += "  (e expands, pgup/pgdn scroll)"
        self.border_title = title if frame.index else "events"
        self.redraw()

    def redraw(self) -> None:
        frame = self.frame
        if frame is None or not self.is_mounted:
            return
        # One column spare for the scrollbar, which comes and goes with the log's length.
        self.width = width = max(self.scrollable_content_region.width - 1, 20)
        if self.timeline is None or frame.index == 0:
            intro = Text(f"{self.intro}\n\n" if self.intro else "", style="italic")
            intro.append("n or → runs the first step; space plays; ? explains", style="dim")
            self.opening = self.strips(intro.wrap(self.app.console, width))
            self.starts = [0, len(self.opening)]
            self.header_line, self.wanted_y = 0, (0, 0)
        else:
            self.opening = []
            self.starts = [0]
            for index in range(1, frame.index + 1):
                self.starts.append(self.starts[-1] + self.count(index))
            self.header_line = self.starts[frame.index - 1]
            self.wanted_y = self.header_line, self.starts[-1]
        self.virtual_size = Size(width, self.starts[-1])
        self.refresh()
        self.settle()

    def count(self, index: int) -> int:
        """How many lines step ``index`` takes at this width (drawn once to find out)."""
        key = (index, self.width, self.expanded)
        if key not in self.counts:
            self.counts[key] = len(self.rows(index))
        return self.counts[key]

    def rows(self, index: int) -> list[Strip]:
        """Step ``index``'s lines as they look now: bright if it is the cursor's step, with the
        selection's events standing out."""
        current = index == self.frame.index
        key = (index, self.width, self.expanded, self.selection, current)
        if key not in self.drawn:
            if len(self.drawn) >= KEPT:
                del self.drawn[next(iter(self.drawn))]  # the oldest drawn
            frame = self.timeline.frame(index)
            texts = step_rows(
                frame, self.selection, current, self.expanded, self.width, self.app.console
            )
            self.drawn[key] = self.strips(texts)
        return self.drawn[key]

    def strips(self, texts: list[Text]) -> list[Strip]:
        """One-line ``texts`` as strips, each under its own base style (a header's reverse)."""
        console = self.app.console
        return [
            Strip(text.render(console)).apply_style(console.get_style(text.style or "none"))
            for text in texts
        ]

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        line = scroll_y + y
        width = self.scrollable_content_region.width
        style = self.rich_style
        if self.opening:
            strip = self.opening[line] if line < len(self.opening) else Strip.blank(width, style)
        elif self.frame is None or not self.frame.index or line >= self.starts[-1]:
            strip = Strip.blank(width, style)
        else:
            index = bisect_right(self.starts, line)  # steps are numbered from 1
            strip = self.rows(index)[line - self.starts[index - 1]]
        return strip.crop_extend(scroll_x, scroll_x + width, style).apply_style(style)

    def plain_lines(self) -> list[str]:
        """Every line of the log as text, top to bottom (what scrolling would show)."""
        if self.opening or self.frame is None or not self.frame.index:
            return [strip.text for strip in self.opening]
        return [s.text for i in range(1, self.frame.index + 1) for s in self.rows(i)]

    def settle(self) -> None:
        """Scroll to the wanted place once the new content's size is known (now, or when the
        layout catches up: ``watch_virtual_size``)."""
        if not self.display:  # hidden (the attention view): no layout comes to wait for
            return  # showing it again resizes it, and ``on_resize`` redraws
        header, total = self.wanted_y
        target = min(header, max(total - self.scrollable_content_region.height, 0))
        if target <= self.max_scroll_y:
            # force: the first time the log outgrows its pane, Textual shows the scrollbar only
            # at the next layout, and until then drops an unforced scroll without a word.
            self.scroll_to(y=target, animate=False, immediate=True, force=True)
        else:
            self.call_after_refresh(self.settle)

    def watch_virtual_size(self) -> None:
        self.settle()

    def toggle_expanded(self) -> None:
        self.expanded = not self.expanded
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()
