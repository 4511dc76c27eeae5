"""The event log: what the block manager did, newest at the bottom, each event in its own words
(``Event.narrate()``, which lives with the event type in ``minipaged.events``).

The step under the cursor is bright and earlier steps are dim; with a selection, the events
that touch the selected sequence or block stand out.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text

from minipaged.events import Event, SwapIn, SwapOut
from tui.pane import Pane, Selection
from tui.timeline import Frame, Timeline

STEP_WIDTH = 4
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


def touched_blocks(event: Event, pool: str) -> set[int]:
    """The blocks of ``pool`` (``"device"`` or ``"host"``) that ``event`` names. Read from the
    event's fields by name (block, src, dst, blocks, mapping), so event types added later are
    covered when they use the same names."""
    if isinstance(event, SwapOut | SwapIn):
        # mapping pairs are (from, to): device->host for a swap-out, host->device for a swap-in.
        side = 0 if (pool == "device") == isinstance(event, SwapOut) else 1
        return {pair[side] for pair in event.mapping}
    if getattr(event, "pool", "device") != pool:
        return set()
    named = {getattr(event, name) for name in ("block", "src", "dst") if hasattr(event, name)}
    return named | set(getattr(event, "blocks", ()))


def involves(event: Event, selection: Selection) -> bool:
    """Whether ``event`` names the selected sequence or device block."""
    if selection.seq is not None:
        seqs = {getattr(event, name, None) for name in ("seq", "parent", "child")}
        return selection.seq in seqs or selection.seq in getattr(event, "seqs", ())
    return selection.block is not None and selection.block in touched_blocks(event, "device")


def step_lines(frame: Frame, selection: Selection, current: bool) -> list[tuple[str, Style]]:
    step = frame.step
    if not step.events:
        tokens = step.num_prefill_tokens + step.num_decode_tokens
        quiet = f"no block changes: {tokens} token(s) fit in free slots of their last blocks"
        return [(quiet, Style(dim=True, italic=True))]
    lines = []
    for event in step.events:
        style = Style(color=KIND_COLOURS.get(event.kind))
        if selection != Selection():
            style += Style(bold=True) if involves(event, selection) else Style(dim=True)
        elif not current:
            style += Style(dim=True)
        lines.append((event.narrate(), style))
    return lines


class EventLog(Pane):
    """Events of steps 1..cursor. Guarantees: the last line is the last event of the step under
    the cursor (or says the step changed no block); nothing after the cursor is shown."""

    DEFAULT_CSS = """
    EventLog { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("events", id=id)
        self.timeline: Timeline | None = None
        self.intro = ""  # what the run shows, said at step 0

    def show(self, frame: Frame, selection: Selection) -> None:
        step = frame.step
        self.border_title = (
            f"events, step {step.step}: {step.num_prefill_tokens} prefill + "
            f"{step.num_decode_tokens} decode"
            if frame.index
            else "events"
        )
        super().show(frame, selection)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        height = max(self.content_size.height, 1)
        if self.timeline is None or frame.index == 0:
            intro = Text(f"{self.intro}\n\n" if self.intro else "", style="italic")
            intro.append("n or → runs the first step; space plays; ? explains", style="dim")
            return intro
        rows: list[tuple[Text, bool]] = []  # (row, whether it begins an event)
        index = frame.index
        # Newest first, wrapped with a hanging indent, until the pane is full.
        while index > 0 and len(rows) < height:
            earlier = self.timeline.frame(index)
            block: list[tuple[Text, bool]] = []
            current = index == frame.index
            for i, (line, style) in enumerate(step_lines(earlier, self.selection, current)):
                body = Text(line, style=style).wrap(self.app.console, max(width - STEP_WIDTH, 8))
                for j, part in enumerate(body):
                    label = f"{earlier.step.step:>3} " if i == 0 and j == 0 else " " * STEP_WIDTH
                    row = Text(label, style="dim")
                    row.append_text(part)
                    block.append((row, j == 0))
            rows = block + rows
            index -= 1
        shown = rows[-height:]
        # Start at an event's first line: half an event reads as a different event.
        while len(shown) > 1 and not shown[0][1]:
            shown = shown[1:]
        return Text("\n").join(row for row, _ in shown)
