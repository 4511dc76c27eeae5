"""A step's story: its events in the order a reader needs them, folded into runs, under one
headline. Plain logic over ``minipaged.events``, no widgets (the event log draws it).

- *Causes before effects*: an event that explains the events just before it (a prefix hit
  explains the ``incref`` lines that share its blocks) is moved in front of them.
- *Runs fold*: consecutive events of one kind about the same sequences (a finishing sequence
  releasing 12 blocks) become one line that lists their blocks; it can be expanded.
- *A headline* names the step's most telling events in order of importance, for example
  ``CoW: s0 copied block 1→2, R 4→3``. Event kinds this module does not know (added to
  ``minipaged.events`` later) still appear, through their ``narrate()`` and ``kind``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from minipaged.chunked_prefill import PrefillChunk
from minipaged.events import (
    Alloc,
    CowCopy,
    Event,
    Finish,
    Fork,
    Free,
    Preempt,
    PrefixHit,
    Recompute,
    SeqId,
    SwapIn,
    SwapOut,
)
from minipaged.outputs import StepOutput

EXPLAINS = {
    "prefix-hit": frozenset({"alloc", "incref"}),
    "prefill-chunk": frozenset({"alloc", "prefix-insert"}),
}
"""A kind -> the kinds of the events just before it (same sequence) that it causes. The engine
records a hit before its takes and shares; traces recorded before it did are put right here.
A prompt's chunk is recorded once its blocks are taken, and told before them."""


def in_story_order(events: Sequence[Event]) -> list[Event]:
    """``events`` with each explaining event moved in front of the run of events it explains."""
    out: list[Event] = []
    for event in events:
        at = len(out)
        explained = EXPLAINS.get(event.kind, frozenset())
        while at and out[at - 1].kind in explained and out[at - 1].seq_ids() == event.seq_ids():
            at -= 1
        out.insert(at, event)
    return out


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a step's story: a single event, or a run of like events folded into one.
    ``said`` replaces the events' own words where the step around them makes those untrue."""

    events: tuple[Event, ...]
    said: str = ""

    @property
    def folded(self) -> bool:
        return len(self.events) > 1

    def text(self) -> str:
        first, count = self.events[0], len(self.events)
        if self.said:
            return self.said
        if count == 1:
            return first.narrate()
        blocks = ", ".join(str(b) for e in self.events for b in sorted(e.blocks_in("device")))
        seqs = ", ".join(f"seq {s}" for s in sorted(first.seq_ids()))
        summary = {
            "alloc": f"{seqs} takes {count} free device blocks: {blocks} (R=1 each)",
            "free": f"{seqs} releases {count} blocks: {blocks}; R=0, free again",
            "incref": f"{seqs} shares {count} blocks: {blocks} (R+1 each)",
            "decref": f"{seqs} lets go of {count} blocks others still hold: {blocks}",
            "prefix-evict": f"{count} unused cached blocks are evicted for reuse: {blocks}",
        }
        return summary.get(first.kind, f"{first.narrate()} (and {count - 1} more like it)")


def fold(events: Sequence[Event]) -> list[Line]:
    """Consecutive events of one kind about the same sequences, as one ``Line`` each.

    Two events read differently beside a prefix hit of the same sequence in the step: the
    blocks the hit takes back (cached, $\\mathcal{R}=0$) keep their keys and values, which
    "takes free block" alone would not say, so they fold apart from fresh blocks; and a
    recomputed sequence prefills only the tokens the cache did not hold."""
    found = {e.seq: e for e in events if isinstance(e, PrefixHit)}
    runs: list[tuple[list[Event], bool]] = []
    for event in events:
        back = isinstance(event, Alloc) and event.block in getattr(
            found.get(event.seq), "blocks", ()
        )
        last = runs[-1] if runs else None
        if (
            last
            and last[1] == back
            and last[0][-1].kind == event.kind
            and (last[0][-1].seq_ids() == event.seq_ids())
        ):
            last[0].append(event)
        else:
            runs.append(([event], back))
    return [Line(tuple(run), said(run, back, found)) for run, back in runs]


def said(run: list[Event], back: bool, found: dict[SeqId, PrefixHit]) -> str:
    """A run's words where its events' own would mislead (see ``fold``), else ``""``."""
    first = run[0]
    if back:
        blocks = ", ".join(str(e.block) for e in run if isinstance(e, Alloc))
        return (
            f"seq {first.seq} takes back {len(run)} cached block(s) nobody held: {blocks} "
            "(R 0→1 each; their keys and values are kept, no prefill)"
        )
    if isinstance(first, Recompute) and first.seq in found:
        cached = found[first.seq].num_tokens
        return (
            f"seq {first.seq} returns: {first.num_tokens - cached} of its {first.num_tokens} "
            f"tokens are prefilled again to rebuild its KV cache ({cached} are found in the "
            "prefix cache)"
        )
    return ""


def seqs(ids) -> str:
    return ", ".join(f"s{s}" for s in sorted(ids))


HEADLINED = frozenset(
    {"alloc", "free", "incref", "decref", "prefix-insert", "prefix-evict", "preempt"}
    | {"swap-out", "swap-in", "cow-copy", "fork", "prefix-hit", "recompute", "finish"}
    | {"prefill-chunk", "step-budget"}  # the budget: in the scheduler pane
)
"""Kinds ``headline`` summarises (or deliberately leaves to the lines below it)."""


def of_type(by_kind: dict[str, list[Event]], kind: str, cls) -> list:
    return [event for event in by_kind.get(kind, []) if isinstance(event, cls)]


def headline(step: StepOutput) -> str:
    """What the step did, most telling first (at most three parts)."""
    events = step.events
    by_kind: dict[str, list[Event]] = {}
    for event in events:
        by_kind.setdefault(event.kind, []).append(event)
    parts: list[str] = []
    for preempt in of_type(by_kind, "preempt", Preempt):
        parts.append(
            f"preempt by {preempt.mode}: request {preempt.request_id} ({seqs(preempt.seqs)})"
        )
    for kind, arrow in (("swap-out", "→ host"), ("swap-in", "← host")):
        swaps = of_type(by_kind, kind, SwapOut | SwapIn)
        if swaps:
            moved = {pair for swap in swaps for pair in swap.mapping}
            who = seqs({s.seq for s in swaps})
            parts.append(f"swap {kind[5:]}: {who} {arrow}, {len(moved)} block copies")
    cows = of_type(by_kind, "cow-copy", CowCopy)
    if cows:
        said = "; ".join(
            f"s{c.seq} copied block {c.src}→{c.dst}, R {c.refcount_before}→{c.refcount_before - 1}"
            for c in cows[:2]
        )
        parts.append(f"CoW: {said}{'; …' if len(cows) > 2 else ''}")
    forks = of_type(by_kind, "fork", Fork)
    if forks:
        parents = seqs({f.parent for f in forks})
        parts.append(f"fork: {seqs({f.child for f in forks})} from {parents}, no KV copied")
    for hit in of_type(by_kind, "prefix-hit", PrefixHit):
        parts.append(f"prefix hit: s{hit.seq} reuses {hit.num_tokens} cached tokens")
    cached = {hit.seq: hit.num_tokens for hit in of_type(by_kind, "prefix-hit", PrefixHit)}
    for again in of_type(by_kind, "recompute", Recompute):
        found = cached.get(again.seq, 0)
        said = (
            f"{again.num_tokens - found} of its {again.num_tokens}" if found else again.num_tokens
        )
        parts.append(f"recompute: s{again.seq} prefills {said} tokens again")
    for chunk in of_type(by_kind, "prefill-chunk", PrefillChunk):
        last = chunk.first + chunk.num_tokens - 1
        parts.append(
            f"chunk {chunk.index}/{chunk.num_chunks}: s{chunk.seq} prefills "
            f"{chunk.first}–{last} of {chunk.total}"
        )
    finished = of_type(by_kind, "finish", Finish)
    if finished:
        done = {f.seq for f in finished}  # not the frees of a sequence preempted alongside
        freed = sum(1 for e in of_type(by_kind, "free", Free) if e.seq in done)
        parts.append(f"finish: {seqs(done)}, {freed} blocks freed")
    for kind, found in by_kind.items():
        if kind not in HEADLINED:  # a kind added later: its own words
            parts.append(f"{kind}: {found[0].narrate()}")
    allocs = of_type(by_kind, "alloc", Alloc)
    if allocs and len(parts) < 3:
        parts.append(f"{len(allocs)} block(s) allocated to {seqs({a.seq for a in allocs})}")
    inserts = by_kind.get("prefix-insert", [])
    if inserts and len(parts) < 3:
        who = seqs({s for event in inserts for s in event.seq_ids()})
        parts.append(f"prefix cache: {who} register their full blocks")
    if not parts:
        tokens = step.num_prefill_tokens + step.num_decode_tokens
        return f"no block changes: {tokens} token(s) fit in free slots"
    return " · ".join(parts[:3]) + (" · …" if len(parts) > 3 else "")
