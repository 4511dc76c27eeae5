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

from minipaged.invariants import INVARIANTS
from tui.keymap import KEYMAP
from tui.strip import MARKS

LEGEND = (
    (
        "block identity",
        "colour means which physical block: a live block p wears one colour and its id, "
        "the same in its pool cell, its table entries and its tokens (which carry the id as "
        "a small tag where the block begins), and no two live blocks wear the same colour. "
        "A block keeps its colour while it lives; swapped to the host pool it keeps it, in "
        "italics; a copy-on-write copy gets its own. With more live blocks than colours the "
        "rest are grey: read their id. A shared block (R[p] > 1) shows R in black on white.",
    ),
    (
        "physical blocks",
        "a cell p:R is block p with refcount R[p]; · means free (c: free, but its contents "
        "kept in the prefix cache). • glued to a cell marks a block the step under the cursor "
        "changed. A huge pool shows its used blocks and the free ranges. Click a cell to "
        "select the block.",
    ),
    (
        "block tables T_r",
        "one row per sequence: L tokens with a slot (old→new when the step changed it), "
        "entries j→p, and [fill/B] of the last block; an entry the step changed is "
        "underlined, one that moved shows the old block struck out (old›new). A sequence "
        "without a table says why: not admitted yet, or preempted by recompute.",
    ),
    (
        "selection",
        "↑/↓ select a sequence, [ and ] one of its tokens: t → j = ⌊t/B⌋, o = t mod B → "
        "p = T_r[j] → slot p·B + o. enter selects that token's block: its B slots, filled or "
        "empty (internal fragmentation). esc clears; clicks work too.",
    ),
    (
        "token streams",
        "each token on its block's colour, rows in sequence id order. The last token is "
        "unpainted until the next step writes it; swapped-out tokens are in italics. "
        "¶ = paragraph.",
    ),
    (
        "events",
        "each step under a headline, causes before effects; ▸ lines fold runs of like events "
        "(e expands them). Scroll with the mouse or page up / page down.",
    ),
    (
        "scheduler",
        "requests (r) and their sequences (s) per queue; waiting and swapped requests show "
        "their block need against the free blocks and what holds them back; a preemption "
        "says why that victim.",
    ),
    ("memory", "pool use, internal waste (§3) and counts so far."),
    (
        "invariants",
        "minipaged.invariants checked at every step: "
        + "; ".join(f"{inv.name} ({inv.statement})" for inv in INVARIANTS)
        + ". One green line while all hold; a broken one unfolds in red.",
    ),
    (
        "timeline",
        "blocks in use per step, and a mark for each mechanism a step shows: "
        + ", ".join(f"{mark.letter} {mark.name}" for mark in MARKS)
        + ". A column with several kinds shows the most telling, underlined; the top row names "
        "them all for the cursor's step. Click to move there.",
    ),
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
