"""One JSON value of a trace, checked for its type and range and named by its path.

Every check here raises ``TraceError`` with the path of the field in the line
(``state.tables.3.num_tokens``), what it must be and what it is; ``minipaged.trace_schema``
composes them into the checks of a whole step, and ``minipaged.trace.load`` adds the file and
the line.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable
from dataclasses import MISSING, Field, fields

from minipaged.chunked_prefill import CHUNK_EVENTS
from minipaged.events import EVENTS, Event
from minipaged.speculative.events import SPECULATIVE_EVENTS

EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls for cls in EVENTS + CHUNK_EVENTS + SPECULATIVE_EVENTS
}
"""Every event kind a trace may hold, by the name it is saved under: the block manager's,
chunked prefill's and speculative decoding's, listed here rather than collected as modules
happen to be imported. ``minipaged.trace`` reads it as ``minipaged.trace.EVENT_TYPES``."""

ID_LIMIT = 2**62
"""Sequence ids, block ids and counts in events: any non-negative int64."""


class TraceError(ValueError):
    """A file that is not a readable minipaged trace; the message names the file and line."""


def fail(path: str, problem: str) -> typing.NoReturn:
    raise TraceError(f"{path} {problem}")


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def integer(value: object, path: str, low: int = 0, high: int = ID_LIMIT) -> int:
    """``value`` if it is an int in ``[low, high)`` (a JSON ``true`` is no integer)."""
    if type(value) is not int:
        fail(path, f"must be an integer, got {show(value)}")
    if not low <= value < high:
        fail(path, f"must be an integer >= {low} and < {high:,}, got {show(value)}")
    return value


def mapping(value: object, path: str) -> dict:
    if not isinstance(value, dict):
        fail(path, f"must be a JSON object, got {show(value)}")
    return value


def array(value: object, path: str) -> list:
    if not isinstance(value, list):
        fail(path, f"must be a JSON list, got {show(value)}")
    return value


def string(value: object, path: str, choices: tuple[str, ...] = ()) -> str:
    if not isinstance(value, str):
        fail(path, f"must be a string, got {show(value)}")
    if choices and value not in choices:
        fail(path, f"must be one of {', '.join(choices)}, got {show(value)}")
    return value


def require(record: dict, names: Iterable[str], path: str) -> None:
    for name in names:
        if name not in record:
            fail(path or "the step", f"lacks the field {name!r}")


def seq_key(key: str, path: str) -> int:
    """A map key that names a sequence: a decimal id, as ``json.dumps`` writes an int key."""
    if not (key.isascii() and key.isdigit()):
        fail(f"{path}.{key}", "is not a sequence id (a decimal integer)")
    return integer(int(key), f"{path}.{key}")


def typed(value: object, hint: object, path: str) -> None:
    """``value`` as JSON holds a field of type ``hint`` (an event's field): ``int`` (at least
    0), ``str``, ``float``, ``bool``, ``X | None``, ``tuple[X, ...]`` or ``tuple[X, Y]``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is not None:
            typed(value, next(a for a in args if a is not type(None)), path)
    elif origin is tuple:
        items = array(value, path)
        if len(args) == 2 and args[1] is Ellipsis:
            for i, item in enumerate(items):
                typed(item, args[0], f"{path}.{i}")
        elif len(items) != len(args):
            fail(path, f"must hold {len(args)} values, got {show(value)}")
        else:
            for i, (item, arg) in enumerate(zip(items, args, strict=True)):
                typed(item, arg, f"{path}.{i}")
    elif hint is int:
        integer(value, path)
    elif hint is str:
        string(value, path)
    elif hint is bool:
        if not isinstance(value, bool):
            fail(path, f"must be true or false, got {show(value)}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail(path, f"must be a number, got {show(value)}")
    else:  # a field type this checker does not know: a new event needs a rule here
        raise TypeError(f"{path}: no check for the type {hint!r}")


@functools.cache
def _event_fields(cls: type) -> tuple[dict[str, object], dict[str, Field]]:
    """An event class's field types and fields by name (resolving the types is slow)."""
    return typing.get_type_hints(cls), {f.name: f for f in fields(cls)}


def check_event(record: object, path: str) -> None:
    record = mapping(record, path)
    kind = record.get("kind")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        fail(
            f"{path}.kind", f"is not an event kind, got {show(kind)}; known: {sorted(EVENT_TYPES)}"
        )
    hints, known = _event_fields(EVENT_TYPES[kind])
    for name in record.keys() - known.keys() - {"kind"}:
        fail(f"{path}.{name}", f"is not a field of a {kind} event")
    for name, field in known.items():
        if name in record:
            typed(record[name], hints[name], f"{path}.{name}")
        elif field.default is MISSING and field.default_factory is MISSING:
            fail(path, f"lacks the field {name!r} of a {kind} event")
