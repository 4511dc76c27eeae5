"""A trace's events held against its refcounts: what was recorded must add up.

The block manager records an event for every refcount $\\mathcal{R}[p]$ it changes, in the
order it changes them, and a recorded run starts on an empty engine at step 1. So a trace
keeps these invariants, which ``Ledger`` checks line by line once a step is decoded
(``minipaged.trace_schema`` has checked that each line is well formed):

- steps count 1, 2, 3, ... with none left out;
- every block an event names is a block of its pool;
- the events of step $k$, applied in order to the refcounts step $k - 1$ left (all 0 before
  step 1), are each possible where they stand (an ``alloc`` takes a block with $R = 0$, a
  ``free`` lets go of one with $R = 1$, an ``incref`` or ``decref`` states the $R$ it leaves)
  and end at exactly the refcounts step $k$ shows.

Events reordered, duplicated or dropped, or a refcount edited, break one of these; the
``TraceError`` names the event by its step and index (``events.3``) or the block whose
refcount is off, with what the events before it expected. Whether the state is *sound*
otherwise (free lists, leaks) stays with ``minipaged.invariants``, and a run of code under
test (a student's block manager) is not held to the ledger at all (``trace.load``'s
``check_events``): its wrong refcounts are what its replay is there to show.
"""

from __future__ import annotations

from minipaged.events import Event
from minipaged.outputs import StepOutput
from minipaged.trace_values import fail

__all__ = ["Ledger"]

POOLS = ("device", "host")


class Ledger:
    """The refcounts the events so far add up to, one list per pool, and the last step."""

    def __init__(self) -> None:
        self.refcounts: dict[str, list[int]] | None = None  # set by the first step's sizes
        self.last_step = 0

    def step(self, step: StepOutput) -> None:
        """Apply ``step``'s events in order and hold the result to its refcounts; raise
        ``TraceError`` at the first event or block where they part."""
        if step.step != self.last_step + 1:
            fail(
                "step",
                f"must be {self.last_step + 1}, the step after {self.last_step} (a recorded "
                f"run counts from 1 and writes every step), got {step.step}",
            )
        state = step.state
        if self.refcounts is None:  # a run starts on an empty engine
            sizes = {"device": len(state.device_refcounts), "host": len(state.host_refcounts)}
            self.refcounts = {pool: [0] * size for pool, size in sizes.items()}
        for i, event in enumerate(step.events):
            self._check_blocks(event, f"events.{i}")  # before any list is indexed by them
            self._apply(event, f"events.{i} ({event.kind})")
        for pool in POOLS:
            self._check_end(pool, getattr(state, f"{pool}_refcounts"))
        self.last_step = step.step

    def _check_blocks(self, event: Event, path: str) -> None:
        pool = getattr(event, "pool", "device")
        if pool not in POOLS:
            fail(f"{path}.pool", f"must be one of {', '.join(POOLS)}, got {pool!r:.40}")
        for pool in POOLS:
            size = len(self.refcounts[pool])
            outside = sorted(block for block in event.blocks_in(pool) if block >= size)
            if outside:
                fail(path, f"names {pool} block {outside[0]}, outside the {size:,}-block pool")

    def _apply(self, event: Event, path: str) -> None:
        """One event's change to $\\mathcal{R}$, as ``minipaged.block_manager`` makes it."""
        kind = event.kind
        if kind == "alloc":
            self._move(event.pool, event.block, path, want=0, by=1)
        elif kind == "free":
            self._move(event.pool, event.block, path, want=1, by=-1)
        elif kind in ("incref", "decref"):
            by = 1 if kind == "incref" else -1
            before = self._at(event.pool, event.block)
            if before < 1 or before + by != event.refcount or event.refcount < 1:
                fail(
                    path,
                    f"says {event.pool} block {event.block} has R={event.refcount} after it, "
                    f"but the events before it left R={before}, so a {kind} gives "
                    f"{'R=' + str(before + by) if before >= 1 else 'nothing: the block is free'}"
                    + ("; a decref to 0 is a free" if kind == "decref" and before == 1 else ""),
                )
            self.refcounts[event.pool][event.block] += by
        elif kind == "cow-copy":
            if self._at("device", event.src) != event.refcount_before:
                fail(
                    path,
                    f"says its source block {event.src} had R={event.refcount_before}, but the "
                    f"events before it left R={self._at('device', event.src)}",
                )
            self._move("device", event.dst, path, want=0, by=1)  # the copy's fresh block
        elif kind in ("swap-out", "swap-in"):
            src, dst = ("device", "host") if kind == "swap-out" else ("host", "device")
            for old, new in event.mapping:  # a block shared in the group: one copy, R counts
                if self._at(src, old) < 1:
                    fail(path, f"moves {src} block {old}, which the events before it left free")
                self.refcounts[src][old] -= 1
                self.refcounts[dst][new] += 1

    def _move(self, pool: str, block: int, path: str, want: int, by: int) -> None:
        if self._at(pool, block) != want:
            fail(
                path,
                f"takes {pool} block {block} at R={want}, but the events before it left "
                f"R={self._at(pool, block)}",
            )
        self.refcounts[pool][block] += by

    def _at(self, pool: str, block: int) -> int:
        return self.refcounts[pool][block]

    def _check_end(self, pool: str, shown: tuple[int, ...]) -> None:
        added = self.refcounts[pool]
        if added == list(shown):
            return
        if len(shown) != len(added):
            fail(
                f"state.{pool}_refcounts",
                f"has {len(shown):,} blocks, where the run's {pool} pool has {len(added):,}",
            )
        for block, (got, expected) in enumerate(zip(shown, added, strict=True)):
            if got != expected:
                fail(
                    f"state.{pool}_refcounts",
                    f"gives block {block} R={got}, but the step's events add up to R={expected}",
                )
