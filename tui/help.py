"""The help screen (``?``): the key map, and how to read each pane."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.keymap import KEYMAP

LEGEND = (
    (
        "physical blocks",
        "a cell p:R is block p with refcount R[p]; · means free (c: free, but its contents "
        "kept in the prefix cache). Its colour is the sequence that owns it. R in black on "
        "white marks a shared block (R > 1). • marks the blocks the step under the cursor "
        "changed. Click a cell to select the block.",
    ),
    (
        "block tables T_r",
        "one row per sequence: L tokens with a slot, entries j→p (logical block j to physical "
        "block p), and [fill/B] of the last block; underlined = changed this step.",
    ),
    (
        "token streams",
        "each token painted in the colour of the block its key and value live in: shared "
        "blocks show the same colour in every sequence that holds them. The last token is "
        "unpainted until the next step writes it; swapped-out tokens are grey. ¶ = paragraph.",
    ),
    (
        "events",
        "each change the block manager made, in its own words; the current step is bright. "
        "Selecting a sequence or block (click it, or ctrl+p) highlights it everywhere.",
    ),
    ("memory", "pool use, internal waste (§3) and counts so far."),
    ("invariants", "minipaged.invariants checked at every step: green while they hold."),
)


class HelpScreen(ModalScreen[None]):
    """Shows ``KEYMAP`` (the same table the bindings come from) and a legend.
    Escape or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """
    BINDINGS: ClassVar = [
        Binding("escape", "dismiss", "close"),
        Binding("question_mark", "dismiss", "close", show=False),
    ]

    def compose(self) -> ComposeResult:
        keys = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key in KEYMAP:
            keys.add_row(Text(key.display), Text(key.description))
        legend = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        legend.add_column(style="bold", no_wrap=True)
        legend.add_column(style="dim")
        for pane, how in LEGEND:
            legend.add_row(Text(pane), Text(how))  # Text: "[p]" is notation, not markup
        with VerticalScroll() as scroll:
            scroll.border_title = "minipaged tui: keys"
            yield Static(keys)
            yield Static(Text("\nreading the panes", style="bold underline"))
            yield Static(legend)
            yield Static(Text("\nescape or ? closes this screen", style="italic"))
