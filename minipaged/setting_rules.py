"""What a setting of ``EngineConfig`` accepts (``Setting``, read by its check and by its flag)
and the one check that judges a value by it (``check_rule``), with a refusal that names the
setting, what it accepts, the value and the way out. ``minipaged.config`` declares its fields
with ``setting``; ``config.check_setting`` judges a value by a field's name.

This module imports no torch, nor anything of the project: the command line builds its parser
from the config before any heavy import.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Setting:
    """What a field of ``EngineConfig`` accepts, read by its check and by its flag.

    ``kind``: ``int``, ``float``, ``str``, ``bool``, or ``object`` for a field whose own
    normalizer checks it; ``low`` / ``high``: inclusive bounds (``below``: ``high`` excluded);
    ``choices``: the accepted strings; ``none``: what None means, when it is allowed;
    ``flag``: whether the command lines offer it, as ``--name-with-dashes`` or ``flag_name``;
    ``fix``: the way out, added to every refusal of this setting; ``pattern``: a regular
    expression a string must match in full, and ``what`` the words that describe it;
    ``smallest``: for a number whose range starts at 0, the smallest positive value that
    means something else than 0 (a smaller one is refused, naming 0)."""

    help: str
    kind: type
    low: float | None = None
    high: float | None = None
    below: bool = False
    choices: tuple[str, ...] = ()
    none: str | None = None
    flag: bool = True
    flag_name: str | None = None
    metavar: str | None = None
    fix: str = ""
    pattern: str | None = None
    what: str | None = None
    smallest: float | None = None


def setting(default: object, help: str, kind: type, **rules: object) -> object:
    """A field of ``EngineConfig`` with its default and its ``Setting``."""
    return field(default=default, metadata={"setting": Setting(help, kind, **rules)})


def check_rule(name: str, value: object, rule: Setting) -> None:
    """Refuse ``value`` for the setting ``name`` unless ``rule`` accepts it."""
    if (value is None and rule.none is not None) or rule.kind is object:
        return  # None where allowed; an object field is judged by its own normalizer
    if rule.kind is bool:
        ok = isinstance(value, bool)
    elif rule.kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)  # True is no block size
    elif rule.kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
    else:
        ok = isinstance(value, str)
    if not ok:
        wrong_kind = not isinstance(value, str | int | float)  # a list, a dict, None
        raise (TypeError if wrong_kind else ValueError)(_refusal(name, value, rule))
    if rule.choices and value not in rule.choices:
        close = difflib.get_close_matches(value, rule.choices, n=1)
        hint = f"did you mean {close[0]!r}?" if close else ""
        raise ValueError(_refusal(name, value, rule, hint))
    too_high = rule.high is not None and (value > rule.high or (rule.below and value == rule.high))
    if too_high or (rule.low is not None and value < rule.low):
        raise ValueError(_refusal(name, value, rule))
    if rule.pattern is not None and not re.fullmatch(rule.pattern, value):
        raise ValueError(_refusal(name, value, rule))
    if rule.smallest is not None and 0 < value < rule.smallest:
        raise ValueError(_refusal(name, value, rule))


def _refusal(name: str, value: object, rule: Setting, hint: str = "") -> str:
    """One line: the setting, what it accepts, the value, and the way out."""
    ways = "; ".join(way for way in (hint, rule.fix) if way)
    return f"{name} must be {_described(rule)}, got {value!r}" + (f"; {ways}" if ways else "")


def _described(rule: Setting) -> str:
    """What ``rule`` accepts, for an error message: "an integer from 1 to 4,096", ..."""
    if rule.what is not None:
        what = rule.what
    elif rule.choices:
        what = f"one of {', '.join(map(repr, rule.choices))}"
    else:
        what = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}[
            rule.kind
        ]
        low = rule.low if rule.smallest is None else rule.smallest
        if rule.high is not None and rule.below:
            what += f" from {_number(low)} up to, not including, {_number(rule.high)}"
        elif rule.high is not None:
            what += f" from {_number(low)} to {_number(rule.high)}"
        elif low is not None:
            what += f" of at least {_number(low)}"
        if rule.smallest is not None:  # 0 and [smallest, high]: nothing between
            what = f"0, or {what}"
    return what + (" or None" if rule.none is not None else "")


def _number(bound: float | None) -> str:
    return f"{bound:,}" if isinstance(bound, int) else f"{bound:g}"
