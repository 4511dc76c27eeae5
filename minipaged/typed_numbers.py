"""One rule for a number a person types: an integer (a command-line flag's, each side of
``tui --size``'s ``WIDTHxHEIGHT``, the TUI's go-to-step box) or a real number (a flag's). What
one accepts, all accept.

The rule: ASCII decimal digits, with a minus sign for a negative number, nothing else. Python's
``int`` reads more than that ("+5", " 5 ", "1_000", other scripts' digits such as "٤٠") and
raises on what ``str.isdigit`` calls digits ("²") and on more than 4,300 digits; each place
used to draw its own line through those, so "+5" was a step to ``--steps`` and not to the box.
A real number is read the same way: ASCII digits, a point, an exponent, a minus sign (Python's
``float`` also took "١.٥" and "1_0.5" for ``--hbm-gb``); ``inf`` and ``nan`` are words the
callers refuse or take by name.
This module imports nothing of the project, so the command line's parser can use it."""

from __future__ import annotations

import re

INTEGER = re.compile(r"-?[0-9]{1,4300}")
"""An integer as typed; 4,300 digits is the most ``int`` reads from text."""

REAL = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|-?(inf|infinity|nan)", re.I)
"""A real number as typed: ``2``, ``-0.5``, ``.5``, ``1e-3``, or the words ``inf`` / ``nan``."""


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


def read_real(text: str) -> float:
    """The real number ``text`` spells by the rule above; ``ValueError`` for any other text."""
    if not isinstance(text, str) or not REAL.fullmatch(text):
        raise ValueError(f"expected a number (digits 0-9, a point, an exponent), got {text!r:.60}")
    return float(text)
