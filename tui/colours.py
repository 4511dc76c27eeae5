"""Identities every pane shares, so one glance links them.

- A sequence has a colour: its label in every pane (``s3`` in the tables, tokens and queues).
- A physical block $p$ has an identity: a background colour *and* its id. Its pool cell, its
  entries in the block tables and the tokens whose keys and values live in it all carry both
  (tokens show the id as a small tag where the block begins). Which colour a block wears is
  handed out with the block (``tui.block_colours``): no two live blocks wear one colour at
  once, and past the palette's size the id alone tells the others apart.
- A block in the host swap pool looks as it did on the device, in italics: its contents moved.
- A shared block ($\\mathcal{R}[p] > 1$) has its own look wherever it appears: black on white,
  with its $R$.
"""

from __future__ import annotations

from functools import lru_cache

from rich.style import Style

SEQ_COLOURS = (
    "bright_blue",
    "bright_magenta",
    "bright_green",
    "bright_yellow",
    "magenta",
    "bright_cyan",
    "yellow",
    "bright_red",
)
"""ANSI names, so each theme makes them readable on its own background (``tui.ansi_themes``)."""

SELECTED = Style(reverse=True, bold=True)
"""The selected sequence or block, wherever it appears."""

CHANGED = Style(bold=True, underline=True)
"""What the step under the cursor changed."""

SHARED = Style(color="black", bgcolor="white", bold=True)
"""A shared block ($\\mathcal{R}[p] > 1$): its R in the pool, its id in tables and tokens."""

_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def seq_colour(seq: int) -> str:
    return SEQ_COLOURS[seq % len(SEQ_COLOURS)]


@lru_cache(maxsize=256)  # a Style is immutable: build each one once
def block_style(colour: str, pool: str = "device") -> Style:
    """A live block's look: white on the colour it wears (``Colouring.colour``), in italics
    in the host pool."""
    return Style(color="white", bgcolor=colour, italic=pool == "host" or None)


def block_tag(block: int) -> str:
    """Block ``block``'s id as superscript digits, the tag tokens carry where a block begins."""
    return str(block).translate(_SUPERSCRIPT)


@lru_cache(maxsize=4096)  # a Style is immutable: build each one once
def block_meta(block: int, pool: str = "device") -> Style:
    """Marks a span as showing ``block`` (tests read it back) and makes a device block
    clickable: a click selects it."""
    meta: dict[str, object] = {"block": (pool, block)}
    if pool == "device":
        meta["@click"] = f"app.select_block({block})"
    return Style.from_meta(meta)


@lru_cache(maxsize=4096)  # a Style is immutable: build each one once
def seq_label(seq: int) -> Style:
    """Bold, in the sequence's colour, and clickable: a click selects the sequence."""
    return Style(color=seq_colour(seq), bold=True) + Style.from_meta(
        {"@click": f"app.select_seq({seq})"}
    )
