"""A pane: one bordered view of the frame under the cursor, and the selection that links panes.

Every pane draws from the same ``Frame`` and ``Selection``, handed to
it by the app in one call, so the panes can never show two different moments.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from tui.timeline import Frame


@dataclass(frozen=True, slots=True)
class Selection:
    """What the user picked: a sequence (and maybe its token $t$), or a device block $p$. Every
    pane highlights it: a sequence's blocks, table row, tokens and events; a block's cell, the
    table entries that map to it, the tokens that live in it and the events that touch it. A
    selected token also shows its address translation; a selected block, its $B$ slots."""

    seq: int | None = None
    block: int | None = None
    token: int | None = None  # position t in sequence ``seq``

    def describe(self) -> str:
        if self.token is not None:
            return f"seq {self.seq}, token {self.token}"
        if self.seq is not None:
            return f"seq {self.seq}"
        if self.block is not None:
            return f"block {self.block}"
        return ""


class Pane(Widget):
    """A bordered view of one frame. Subclasses implement ``draw``; nothing is drawn until
    the app calls ``show``."""

    DEFAULT_CSS = """
    Pane {
        border: round $primary 60%;
        border-title-color: $text;
        padding: 0 1;
        height: auto;
    }
    """

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = title
        self.frame: Frame | None = None
        self.selection = Selection()
        self.drawn: tuple[tuple, list[Segment]] | None = None  # the last draw, and its key

    @property
    def link_style(self) -> Style:
        # Cells and labels are clickable (an "@click" action in their style); Textual would
        # restyle them as links and hide the colours that carry the meaning.
        return Style()

    def show(self, frame: Frame, selection: Selection) -> None:
        self.frame, self.selection = frame, selection
        self.refresh(layout=self.height_changes())

    def height_changes(self) -> bool:
        """Whether the new frame changes this pane's height: only then must the whole screen be
        laid out again (a repaint of the pane alone is much cheaper)."""
        if not self.styles.height or not self.styles.height.is_auto or not self.size.width:
            return not self.size.width  # a pane never laid out needs its first layout
        width = self.content_size.width
        options = self.app.console.options.update(width=width, max_width=width)
        segments = self.app.console.render(_AtWidth(self, self.frame), options)
        return len(list(Segment.split_lines(segments))) != self.content_size.height

    def render(self) -> RenderableType:
        if self.frame is None:
            return Text("loading the model…", style="dim")
        return _AtWidth(self, self.frame)

    @abstractmethod
    def draw(self, frame: Frame, width: int) -> RenderableType:
        """What to show for ``frame`` in ``width`` columns: every pane defines it."""


@dataclass(frozen=True, slots=True)
class _AtWidth:
    """Defers ``Pane.draw`` until Rich knows the width, so a pane whose height follows its
    content measures the same layout it draws (the pool grid wraps by width)."""

    pane: Pane
    frame: Frame

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Textual renders a pane more than once per frame (to measure its height, then to
        # draw it): reuse the segments while nothing they depend on has changed.
        pane = self.pane
        key = (
            id(self.frame),
            pane.selection,
            options.max_width,
            pane.content_size,
            tuple(sorted(pane.screen.classes)),
        )
        if pane.drawn is None or pane.drawn[0] != key:
            drawn = pane.draw(self.frame, options.max_width)
            pane.drawn = (key, list(console.render(drawn, options)))
        yield from pane.drawn[1]
