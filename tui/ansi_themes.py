"""The two terminal themes every named colour of the app goes through, one per Textual theme,
and projection mode's Textual theme itself.

Panes name their colours (``bright_red`` for a preemption, ``bright_blue`` for sequence 0) and
Textual turns each name into RGB through the app's ANSI theme. Its own themes fail here:
MONOKAI, the dark one, gives red and magenta the same RGB (a preemption and a swap looked
alike), and ALABASTER, the light one, keeps pastels that fade on the light greys of projection
mode. These two keep every colour distinct and every text colour readable (WCAG AA, 4.5:1) on
the backgrounds of their theme; ``tests/test_tui_projection.py`` measures both. White and black
stay white and black: blocks are white text on their colour, and a shared block's tag is black
on white, in both themes.

Textual's own light theme draws a dialog's border title in its accent, an orange that reads at
1.4:1 on light grey, an input's placeholder at 2.5:1 and its error at 3.5:1:
``PROJECTION_THEME`` is that theme with every such colour dark enough for AA, so the help
screen, the scenario picker, the palette and the go-to-step box read as well as the panes.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.terminal_theme import TerminalTheme
from textual.color import Color
from textual.filter import LineFilter
from textual.theme import BUILTIN_THEMES, Theme

NO_DIM = Style(dim=False)


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


NAMES = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def theme(background: str, foreground: str, normal: dict, bright: dict) -> TerminalTheme:
    """A Rich terminal theme from colours by ANSI name (``bright`` without the prefix)."""
    return TerminalTheme(
        rgb(background),
        rgb(foreground),
        [rgb(normal[name]) for name in NAMES] + [rgb(bright["black"])],
        [rgb(bright[name]) for name in NAMES[1:]],
    )


DARK = theme(
    "#121212",
    "#e0e0e0",
    {
        "black": "#1a1a1a",
        "red": "#ff6e6e",
        "green": "#98c379",
        "yellow": "#d7d75f",
        "blue": "#6cb6ff",
        "magenta": "#c39bff",
        "cyan": "#56c8d8",
        "white": "#ffffff",
    },
    {
        "black": "#9a9a9a",
        "red": "#ff5f5f",
        "green": "#87d75f",
        "yellow": "#ffaf5f",
        "blue": "#5fafff",
        "magenta": "#ff87af",
        "cyan": "#5fd7d7",
        "white": "#ffffff",
    },
)
"""For textual-dark: the pastels the TUI has always used, each at least 4.5:1 on its panes."""

PROJECTION = theme(
    "#e0e0e0",
    "#1f1f1f",
    {
        "black": "#000000",
        "red": "#9e1a1a",
        "green": "#2b5d0f",
        "yellow": "#5c5c00",
        "blue": "#0d47a1",
        "magenta": "#6a1b9a",
        "cyan": "#005f6b",
        "white": "#ffffff",
    },
    {
        "black": "#4d4d4d",
        "red": "#b3001b",
        "green": "#1a5e00",
        "yellow": "#7a4a00",
        "blue": "#1a4fbf",
        "magenta": "#a0185f",
        "cyan": "#00606e",
        "white": "#ffffff",
    },
)
"""For textual-light (projection mode): dark colours that stay readable on light grey."""

_LIGHT = BUILTIN_THEMES["textual-light"]
PROJECTION_THEME = Theme(  # each role takes PROJECTION's colour of its hue
    name="minipaged-projection",
    primary=_LIGHT.primary,  # #004578, 6.4:1 on #d0d0d0
    secondary="#0d47a1",
    warning="#7a4a00",
    error="#9e1a1a",
    success="#1a5e00",
    accent="#7a4a00",
    background=_LIGHT.background,
    surface=_LIGHT.surface,
    panel=_LIGHT.panel,
    dark=False,
    variables={"footer-key-foreground": "#0d47a1", "text-disabled": "#4d4d4d"},
)
"""Projection mode's Textual theme: textual-light with its accent, secondary, warning, error,
success and disabled text darkened to at least 4.5:1 on its darkest grey (a dialog's input)."""


class Undimmed(LineFilter):
    """Projection mode draws no dimmed text. Textual dims by blending a colour halfway to the
    background, and on a projector's light grey that drops every dim label below 4.5:1; so
    in projection mode the dim attribute goes before the colours are resolved."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [
            Segment(text, style + NO_DIM if style is not None and style.dim else style, control)
            for text, style, control in segments
        ]
