"""The two colourings every pane shares, so one glance links them.

- A sequence has a colour: its label, its row in the block tables and the pool cells it owns.
- A physical block has a (darker) colour: the tokens whose keys and values live in it are
  painted with it, so two sequences sharing a block show the same colour under the same tokens.
"""

from __future__ import annotations

from rich.style import Style

SEQ_COLOURS = (
    "#5fafff",
    "#ff87af",
    "#87d75f",
    "#ffaf5f",
    "#af87ff",
    "#5fd7d7",
    "#d7d75f",
    "#ff5f5f",
)

BLOCK_COLOURS = (
    "#1f4e79",
    "#7a2e4f",
    "#3d6b1f",
    "#7a4f12",
    "#4f3a80",
    "#1f6b6b",
    "#6b6b1f",
    "#802f2f",
    "#2f4f80",
    "#5a3a1a",
    "#2e5e46",
    "#603070",
)

SELECTED = Style(reverse=True, bold=True)
"""The selected sequence or block, wherever it appears."""

CHANGED = Style(bold=True, underline=True)
"""What the step under the cursor changed."""


def seq_colour(seq: int) -> str:
    return SEQ_COLOURS[seq % len(SEQ_COLOURS)]


def block_colour(block: int) -> str:
    return BLOCK_COLOURS[block % len(BLOCK_COLOURS)]


def seq_label(seq: int) -> Style:
    """Bold, in the sequence's colour, and clickable: a click selects the sequence."""
    return Style(color=seq_colour(seq), bold=True) + Style.from_meta(
        {"@click": f"app.select_seq({seq})"}
    )
