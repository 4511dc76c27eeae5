"""Reading JSON that a user wrote or handed over: a model's ``config.json``, a trace's lines, a
gradebook, ``--speculative-config``. ``json.loads`` alone takes two things a reader of such a
file must not: an object that holds one key twice, of which it keeps the last value without a
word (a ``config.json`` with ``rope_theta`` twice runs a model other than the one its author
read), and nesting deeper than Python's recursion allows, which raises ``RecursionError``
("maximum recursion depth exceeded while decoding a JSON array"), no ``ValueError`` and no
message a user can act on. Nor does it stop at numbers JSON does not hold: ``NaN`` and
``Infinity`` (Python's words, no JSON's), a float past float's range such as ``1e400`` (read as
infinity without a word) and an integer of thousands of digits (a bare ``ValueError`` from
Python's limit on converting them). ``loads`` refuses all of these as ``NotJSON``, a
``ValueError`` its callers name the file in, as they do any other JSON that cannot be read."""

from __future__ import annotations

import json
import math

_MAX_NUMBER_TEXT = 60  # how much of a refused number the message repeats


class NotJSON(ValueError):
    """Text that is no JSON ``loads`` reads: undecodable, an object holding a key twice, nested
    too deeply, or holding a number no float or sane integer holds. Its message says which,
    to follow the file's name."""


def loads(text: str | bytes) -> object:
    """``text`` as JSON (``json.loads``), or ``NotJSON`` saying why not."""
    try:
        return json.loads(
            text,
            object_pairs_hook=_one_value_per_key,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            parse_int=_integer,
        )
    except RecursionError:
        raise NotJSON(
            "its brackets are nested too deeply to read: thousands of levels, where a real "
            "file has a few"
        ) from None
    except UnicodeDecodeError as error:
        raise NotJSON(f"it is not UTF-8 text (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise NotJSON(f"{error.msg} at line {error.lineno}, column {error.colno}") from None


def _one_value_per_key(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise NotJSON(
                f"it holds the key {key!r:.60} twice in one object, so which value is meant "
                "cannot be told: keep one"
            )
        seen[key] = value
    return seen


def _no_constant(word: str) -> float:
    raise NotJSON(
        f"it holds {word}, which is Python's word and no JSON number: write a finite number"
    )


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJSON(
            f"it holds the number {text:.{_MAX_NUMBER_TEXT}}, past the largest a float holds "
            "(about 1.8e308): write a smaller one"
        )
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # Python refuses to convert integers of more than 4,300 digits
        raise NotJSON(
            f"it holds an integer of {len(text):,} digits, more than any setting needs: "
            "write a smaller one"
        ) from None
