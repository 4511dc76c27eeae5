"""What a student's block manager did, as events, where their code records none.

The library's ``BlockManager`` records an event for every change it makes
(``minipaged.events``), and the TUI draws its event log, its timeline marks and its jumps
(``c``, ``w``, ``p``, ``h``) from them. The exercises ask a student for the change, not for its
record: a passing ``append_slot`` leaves the tables and refcounts right and returns
``AppendResult(slot, cow)``, and says nothing more. So a run recorded for the TUI
(``minipaged.grader.student_run``) wraps the student's manager in ``witnessed``: after each
method of ``DERIVED`` that recorded no event of a kind it should have, the missing events are
derived from what the method returned and from the tables before and after it, as the library
records them. Events a student's code records itself are kept as they are, never doubled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from minipaged import events
from minipaged.block_manager import BlockManager
from minipaged.block_table import BlockTable


def witnessed(cls: type) -> type:
    """A subclass of ``cls`` whose ``DERIVED`` methods record the events they leave out."""
    body = {name: _watched(getattr(cls, name), derive) for name, derive in DERIVED.items()}
    return type(cls.__name__, (cls,), {**body, "__module__": cls.__module__})


def _watched(method: Callable, derive: Callable) -> Callable:
    @functools.wraps(method)
    def call(manager, *args, **kwargs):
        earlier = manager.pop_events()
        tables = {seq: table_copy(table) for seq, table in manager.tables.items()}
        result = method(manager, *args, **kwargs)
        recorded = manager.pop_events()
        kinds = {event.kind for event in recorded}
        for event in earlier + recorded:
            manager.record(event)
        derive(manager, tables, kinds, result, *args)
        return result

    return call


def table_copy(table: BlockTable) -> BlockTable:
    """A copy of ``table`` that the manager's next change leaves as it was."""
    return BlockTable(table.block_size, list(table.blocks), table.num_tokens, table.pool)


def _allocate(manager, before: dict, kinds: set[str], result, seq, *_) -> None:
    """Each block of the new table: an ``Alloc`` where the table is its only holder (R[p] = 1),
    an ``Incref`` where it shares a cached prefix block."""
    table = manager.tables.get(seq)
    if seq in before or table is None:
        return
    for j, block in enumerate(table.blocks):
        refcount = manager.device.refcount(block)
        if refcount == 1 and "alloc" not in kinds:
            manager.record(events.Alloc(seq, j, block))
        elif refcount > 1 and "incref" not in kinds:
            manager.record(events.Incref(seq, j, block, refcount))


def _append_slot(manager, before: dict, kinds: set[str], result, seq, *_) -> None:
    """A block the table gained is an ``Alloc``; a ``cow`` pair is a copy-on-write."""
    old, table = before[seq], manager.tables[seq]
    if "alloc" not in kinds and len(table.blocks) > len(old.blocks):
        j = len(old.blocks)
        manager.record(events.Alloc(seq, j, table.blocks[j]))
    cow = getattr(result, "cow", None)
    if "cow-copy" not in kinds and cow is not None:
        src, dst = cow
        BlockManager._record_cow(manager, seq, old.num_tokens, src, dst)


def _fork(manager, before: dict, kinds: set[str], result, parent, child, *_) -> None:
    """The child's table, and one ``Incref`` per block it shares."""
    if "fork" in kinds or child not in manager.tables:
        return
    blocks = tuple(manager.tables[child].blocks)
    manager.record(events.Fork(parent, child, blocks))
    for j, block in enumerate(blocks):
        manager.record(events.Incref(child, j, block, manager.device.refcount(block)))


def _free(manager, before: dict, kinds: set[str], result, seq, *_) -> None:
    """Each block let go, last first: ``Free`` when no table holds it any more."""
    if kinds & {"free", "decref"} or seq not in before:
        return
    old = before[seq]
    pool = manager.device if old.pool == "device" else manager.host
    for block in reversed(old.blocks):
        after = pool.refcount(block)
        released = events.Free(seq, block, old.pool)
        manager.record(released if after == 0 else events.Decref(seq, block, after, old.pool))


def _moved(kind: str, event: type) -> Callable:
    def derive(manager, before: dict, kinds: set[str], result, seqs, *_) -> None:
        """One event per sequence moved, mapping its old blocks to its new ones."""
        if kind in kinds:
            return
        for seq in [seqs] if isinstance(seqs, int) else seqs:
            old, new = before[seq].blocks, manager.tables[seq].blocks
            manager.record(event(seq, tuple(zip(old, new, strict=True))))

    return derive


DERIVED: dict[str, Callable] = {
    "allocate": _allocate,
    "append_slot": _append_slot,
    "fork": _fork,
    "free": _free,
    "swap_out": _moved("swap-out", events.SwapOut),
    "swap_in": _moved("swap-in", events.SwapIn),
}
"""The block manager's methods an exercise asks for, and how to derive each one's events."""
