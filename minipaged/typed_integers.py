"""One rule for an integer a person types: a command-line flag's, each side of ``tui --size``'s
``WIDTHxHEIGHT``, the TUI's go-to-step box. What one accepts, all accept.

The rule: ASCII decimal digits, with a minus sign for a negative number, nothing else. Python's
``int`` reads more than that ("+5", " 5 ", "1_000", other scripts' digits such as "٤٠") and
raises on what ``str.isdigit`` calls digits ("²") and on more than 4,300 digits; each place
used to draw its own line through those, so "+5" was a step to ``--steps`` and not to the box.
This module imports nothing of the project, so the command line's parser can use it."""

from __future__ import annotations

import re

INTEGER = re.compile(r"-?[0-9]{1,4300}")
"""An integer as typed; 4,300 digits is the most ``int`` reads from text."""


def read_integer(text: str) -> int:
    """The integer ``text`` spells by the rule above; ``ValueError`` for any other text."""
    if not isinstance(text, str) or not INTEGER.fullmatch(text):
        raise ValueError(f"expected an integer (digits 0-9), got {text!r:.60}")
    return int(text)


def integer_between(text: str, low: int, high: int) -> int:
    """``read_integer(text)`` from ``low`` to ``high``; ``ValueError`` naming the bounds."""
    value = read_integer(text)
    if not low <= value <= high:
        shown = f"{value:,}" if len(text) <= 40 else f"a number of {len(text):,} digits"
        raise ValueError(f"must be between {low:,} and {high:,}, got {shown}")
    return value
