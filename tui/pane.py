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
from textual.css.styles import RulesMap
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.visual import RenderOptions, Visual
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
        self.drawn: tuple[tuple, list[Strip]] | None = None  # the last draw, and its key
        self.set_reactive(Widget.auto_links, False)  # no link restyle, no hover repaint

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
        laid out again (a repaint of the pane alone is much cheaper). The lines drawn to
        measure it are the ones the repaint shows."""
        if not self.styles.height or not self.styles.height.is_auto or not self.size.width:
            return not self.size.width  # a pane never laid out needs its first layout
        width = self.content_size.width
        return len(Drawn(self, self.frame).strips(width)) != self.content_size.height

    def render(self) -> RenderableType | Visual:
        if self.frame is None:  # not yet, or never: a student's run that stopped at once
            stopped = getattr(self.app, "stopped", None) is not None
            return Text("no step ran" if stopped else "loading the model…", style="dim")
        return Drawn(self, self.frame)

    @abstractmethod
    def draw(self, frame: Frame, width: int) -> RenderableType:
        """What to show for ``frame`` in ``width`` columns: every pane defines it."""


class Drawn(Visual):
    """A pane's ``draw`` of a frame as Textual strips, made once and kept while nothing they
    depend on changes. Textual asks a pane for its height and then for its lines, and the
    app asks first whether the height changed: each of those would otherwise draw the frame
    and turn Rich's segments into lines again."""

    def __init__(self, pane: Pane, frame: Frame) -> None:
        self.pane, self.frame = pane, frame

    def strips(self, width: int) -> list[Strip]:
        pane = self.pane
        style = pane.visual_style.rich_style
        # A pane whose height follows its content draws the same at any height.
        auto = pane.styles.height is not None and pane.styles.height.is_auto
        key = (
            id(self.frame),
            pane.selection,
            width,
            None if auto else pane.content_size.height,
            style,
            tuple(sorted(pane.screen.classes)),
        )
        if pane.drawn is None or pane.drawn[0] != key:
            console = pane.app.console
            options = pane.app.console_options.update(highlight=False, width=width, height=None)
            drawn = pane.post_render(pane.draw(self.frame, width), style)
            lines = Segment.split_and_crop_lines(
                console.render(drawn, options), width, include_new_lines=False, pad=False
            )
            pane.drawn = (key, [Strip(line) for line in lines])
        return pane.drawn[1]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The same lines for Rich (a test or a screenshot prints a pane's render)."""
        for strip in self.strips(options.max_width):
            yield from strip
            yield Segment.line()

    def render_strips(
        self, width: int, height: int | None, style: VisualStyle, options: RenderOptions
    ) -> list[Strip]:
        return self.strips(width)[:height]

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return container_width

    def get_height(self, rules: RulesMap, width: int) -> int:
        return len(self.strips(width))
