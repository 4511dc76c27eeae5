"""The events a student's block manager records, checked against what its code did.

The exercises ask for a change to the block tables and refcounts, not for its record: code
that records no event passes, and a run recorded for the TUI derives the events it left out
(``witness``). But events a student's code does record are kept as they are, and the TUI draws
them (its event log, its timeline marks, the moves of a swap): a fork recorded with the wrong
child, a copy-on-write with its pair reversed, a free recorded twice would be drawn as what
happened. So every check of exercises 03-05 grades the student's manager through ``Checked``:
after each call of a method of ``witness.DERIVED``, each event kind of ``KINDS`` that the call
recorded must be exactly the events the library records for what the call did, derived as the
witness derives them (from the tables before and after it and what it returned). A kind the call
did not record is not asked for; a swap recorded as a move the other way fails (``CONTRARY``).

A criterion's own checks speak first: the student's state error ("returned cow=None") says
what to fix, while an event list that disagrees with a wrong state only repeats it less
directly. So while a criterion runs under ``events_checked_last`` (the grader runs every
criterion so), an event mismatch is held, and raised only if the criterion's checks found
nothing else; outside it (a test driving ``Checked`` itself), it is raised at once.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from contextvars import ContextVar

from minipaged.grader.report import CheckFailed
from minipaged.grader.witness import DERIVED, table_copy

KINDS: dict[str, tuple[str, ...]] = {
    "allocate": ("alloc", "incref"),
    "append_slot": ("alloc", "cow-copy", "decref"),
    "fork": ("fork", "incref"),
    "free": ("free", "decref"),
    "swap_out": ("swap-out",),
    "swap_in": ("swap-in",),
}
"""The event kinds each method of ``DERIVED`` records in the library, and only those: an event
of another kind (a prefix-cache eviction or hit) is left to the checks of its exercise.
``allocate`` is no method a student writes in exercises 03-05, but a student's subclass can
override it, and the TUI draws its events as the others'."""

CONTRARY = {"swap_out": "swap-in", "swap_in": "swap-out"}
"""The kind of event that says the opposite of what a method does: a swap-out recorded as a
swap-in (every move recorded as one kind, say), which the TUI would draw moving the other way.
``KINDS`` alone would not see it, since it checks only the kinds the method records."""


_HELD: ContextVar[list[CheckFailed] | None] = ContextVar("held_event_mismatches", default=None)


@contextlib.contextmanager
def events_checked_last() -> Iterator[None]:
    """Run a criterion's checks with every event mismatch ``Checked`` finds held until they
    end: an error of the checks' own is raised as it is (the mismatches are dropped), and
    only where they all passed is the first mismatch raised."""
    held: list[CheckFailed] = []
    token = _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(token)
    if held:
        raise held[0]


class Checked:
    """``manager`` (the student's, maybe a proxy of a grading child's), whose ``DERIVED``
    methods fail (``CheckFailed``) when an event they record says something other than what
    they did. Every other attribute is the manager's own. The events are read, not kept: the
    checks of exercises 03-05 read no event stream of the managers they wrap."""

    def __init__(self, manager) -> None:
        self._manager = manager

    def __getattr__(self, name: str):
        if name in DERIVED:
            return functools.partial(self._call, name)
        return getattr(self._manager, name)

    def _call(self, name: str, *args):
        manager = self._manager
        manager.pop_events()
        before = {seq: table_copy(table) for seq, table in manager.tables.items()}
        result = getattr(manager, name)(*args)
        popped = [(getattr(e, "kind", None), e) for e in manager.pop_events()]
        recorded = [e for kind, e in popped if kind in KINDS[name]]
        contrary = [e for kind, e in popped if kind == CONTRARY.get(name)]
        if not (recorded or contrary):  # a call that records nothing is not asked for events
            return result
        shown = f"{name}({', '.join(map(repr, args))})"
        try:
            if contrary:
                raise CheckFailed(
                    f"{shown} recorded {contrary}: a move the other way. The TUI draws the "
                    f"events your code records as what happened: record a {KINDS[name][0]} "
                    "for each sequence it moved, or record nothing"
                )
            expected = _derived(manager, name, before, result, args)
            for kind in KINDS[name] if expected is not None else ():
                _expect_kind(kind, recorded, expected, shown)
        except CheckFailed as mismatch:
            if (held := _HELD.get()) is None:
                raise
            held.append(mismatch)
        return result


class _Recorder:
    """What ``witness``'s derivations read of a manager, with the events they record kept
    here, not sent to the student's manager."""

    def __init__(self, manager) -> None:
        self.tables, self.block_size = manager.tables, manager.block_size
        self.device, self.host = manager.device, manager.host
        self.events: list = []

    def record(self, event) -> None:
        self.events.append(event)


def _derived(manager, name: str, before: dict, result, args: tuple) -> list | None:
    """The events the library records for what ``manager.name(*args)`` did, or ``None`` where
    the tables it left cannot be read as a change (a table that lost a block in a swap): the
    checks of the tables say what is wrong there."""
    recorder = _Recorder(manager)
    try:
        DERIVED[name](recorder, before, set(), result, *args)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        return None
    return recorder.events


def _expect_kind(kind: str, recorded: list, expected: list, call: str) -> None:
    """Fail unless the ``kind`` events recorded are those expected, in any order, where the call
    recorded any."""
    got = [event for event in recorded if getattr(event, "kind", None) == kind]
    want = [event for event in expected if event.kind == kind]
    if got and sorted(map(_fields, got)) != sorted(map(_fields, want)):
        raise CheckFailed(
            f"{call} recorded the {kind} events {got}, but what it did (its block tables, "
            f"refcounts and returned value) records {want or 'none'}. The TUI draws the "
            "events your code records as what happened: record what the call did, or "
            "record nothing"
        )


def _fields(event) -> str:
    """What an event says, as its JSON record: a mapping held as a list or a tuple is one."""
    record = event.to_dict() if hasattr(event, "to_dict") else repr(event)
    return json.dumps(record, sort_keys=True, default=repr)
