"""A model-free serving simulator: replay a workload's lengths on a KV-cache allocator at a real
model's scale, and measure what the source text's §2 and §3 argue about.

One step admits waiting requests first-come first-served until the allocator refuses one, then
grows every running sequence by one token. A sequence that cannot grow preempts the newest
running request (recomputation, §6: its memory is freed and it waits again, to be re-admitted
at its current lengths without sharing). There is no batch-size cap and prefill is free:
memory is the only limit, and "tokens per step" counts decode tokens.

Each running sequence $i$ has length $l_i$, final length $L_i$ and spans $r_i$ slots of its own
buffer or block table. Its unused slots $r_i - l_i$ split into

- **internal** $\\mathcal{W}_{int}$: slots past $L_i$, never written (§2's $L_{\\max} - L_i$
  for static allocation; the last block's empty slots after the last token, §3);
- **reservation** $\\mathcal{W}_{res}$: slots reserved ahead that will be written later (§2's
  $\\lceil t/\\Delta L \\rceil \\Delta L - t$ before the last chunk; under paging, the current
  block's empty slots are the reservation of $\\Delta L = B$ until the sequence ends).

**External** waste is the memory that was free when an allocation was refused although enough
was free in total (§2's condition), counted at the steps where that happened. **Shared** slots
are those several sequences' tables hold in common (copy-on-write, §5): $\\sum_i r_i$ =
reserved + shared. Means are over the measured steps: those that end with a request still
waiting (memory is full, the steady state), or every step when memory never filled.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import deque
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from minipaged.study.baselines import KVAllocator
from minipaged.study.room_to_run import check_room, more_room
from minipaged.study.workloads import Request


@dataclass
class SimResult:
    """What one allocator did with one workload. Memory shares are of ``capacity`` slots,
    averaged over the measured steps; ``unused_per_seq`` is $\\overline{r_i - l_i}$ in tokens."""

    allocator: str
    capacity: int
    measured: str  # "saturated" or "all" steps
    steps: int
    reserved: float
    internal: float
    reservation: float
    external: float
    shared: float
    waste_of_reserved: float  # (internal + reservation) / sum of r_i
    unused_per_seq: float
    peak_seqs: int
    mean_seqs: float
    tokens_per_step: float
    stalls: int
    preemptions: int

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(eq=False)  # compared by identity: two requests may have equal lengths
class _Group:
    """A request's live sequences, as parallel lists; a finished sequence leaves them."""

    request: Request
    lengths: list[int]  # l_i
    finals: list[int]  # L_i
    seqs: list[int] = field(default_factory=list)  # allocator ids, while admitted
    spans: list[int] = field(default_factory=list)  # r_i, while admitted
    started: bool = False  # admitted once: later admissions are re-admissions, unshared
    alone_refused_at: list[int] | None = None  # lengths when it last preempted itself alone


class _Totals:
    """Running sums over the live sequences, kept exact as each one changes: how many there
    are, and the sums of $l_i$, $r_i$, $\\max(0, r_i - L_i)$ and $\\min(r_i, L_i)$."""

    def __init__(self) -> None:
        self.seqs = self.length = self.spans = self.internal = self.bounded = 0

    def add(self, span: int, final: int) -> None:
        """A sequence of span $r_i$ = ``span`` and final length $L_i$ = ``final`` joins."""
        self.seqs += 1
        self.spans += span
        self.internal += max(0, span - final)
        self.bounded += min(span, final)

    def remove(self, span: int, final: int) -> None:
        """A sequence of span ``span`` and final length ``final`` leaves."""
        self.seqs -= 1
        self.spans -= span
        self.internal -= max(0, span - final)
        self.bounded -= min(span, final)


class Simulation:
    """Replays ``requests`` on ``allocator``; ``run`` returns a ``SimResult``.
    Deterministic: the beam branching process draws from ``seed``."""

    shortcuts = True  # False: grow every sequence with the plain ``_grow`` (tests compare)

    def __init__(self, allocator: KVAllocator, requests: list[Request], seed: int = 0) -> None:
        self.alloc = allocator
        self.rng = random.Random(seed)
        self.waiting = deque(
            _Group(r, [r.prompt_len] * len(r.output_lens), list(r.final_lens)) for r in requests
        )
        self.running: list[_Group] = []
        self.totals = _Totals()
        self._ids = itertools.count()
        self.preemptions = 0
        self._unusable = 0  # free slots when this step's allocator last stalled (§2)

    def run(self, progress: Progress | None = None, task: TaskID | None = None) -> SimResult:
        alloc, totals = self.alloc, self.totals
        keys = ("reserved", "span", "internal", "reservation", "external", "seqs", "tokens")
        saturated, every = dict.fromkeys(keys, 0), dict.fromkeys(keys, 0)
        steps = every_steps = peak = 0
        while self.waiting or self.running:
            self._unusable = 0
            self._admit()
            tokens, finished = self._decode()
            if progress is not None and task is not None:
                progress.advance(task, finished)
            peak = max(peak, totals.seqs)
            step = {
                "reserved": alloc.reserved,
                "span": totals.spans,
                "internal": totals.internal,
                "reservation": totals.bounded - totals.length,
                "external": self._unusable,
                "seqs": totals.seqs,
                "tokens": tokens,
            }
            every_steps += 1
            for key in keys:
                every[key] += step[key]
            if self.waiting:  # memory, not the workload, limited this step
                steps += 1
                for key in keys:
                    saturated[key] += step[key]
        measured, sums = ("saturated", saturated) if steps else ("all", every)
        steps = steps or every_steps
        cap = alloc.capacity * steps
        unused = sums["internal"] + sums["reservation"]
        return SimResult(
            allocator=alloc.name,
            capacity=alloc.capacity,
            measured=measured,
            steps=steps,
            reserved=sums["reserved"] / cap,
            internal=sums["internal"] / cap,
            reservation=sums["reservation"] / cap,
            external=sums["external"] / cap,
            shared=(sums["span"] - sums["reserved"]) / cap,
            waste_of_reserved=unused / sums["span"] if sums["span"] else 0.0,
            unused_per_seq=unused / sums["seqs"] if sums["seqs"] else 0.0,
            peak_seqs=peak,
            mean_seqs=sums["seqs"] / steps,
            tokens_per_step=sums["tokens"] / steps,
            stalls=alloc.stalls,
            preemptions=self.preemptions,
        )

    # -- one step --------------------------------------------------------------------------

    def _admit(self) -> None:
        while self.waiting:
            group = self.waiting[0]
            if not self._place(group):
                if not self.running:
                    raise ValueError(
                        f"a request of {len(group.lengths)} sequence(s) of up to "
                        f"{max(group.finals)} tokens does not fit the empty KV cache of "
                        f"{self.alloc.capacity} slots under {self.alloc.name}; "
                        f"{more_room(self.alloc)}"
                    )
                return
            self.waiting.popleft()
            self.running.append(group)

    def _place(self, group: _Group) -> bool:
        """Admit every sequence of ``group`` or none. A fresh multi-sequence request on a
        sharing allocator stores its prompt once and forks the rest (§5)."""
        alloc, totals, max_len = self.alloc, self.totals, group.request.max_len
        share = alloc.shares_prefixes and not group.started and len(group.lengths) > 1
        seqs: list[int] = []
        spans: list[int] = []
        for i, length in enumerate(group.lengths):
            seq = next(self._ids)
            stalls = alloc.stalls
            if share and i > 0:
                alloc.fork(seqs[0], seq)
            elif not alloc.admit(seq, length, max_len, final_len=group.finals[i]):
                self._note_stall(stalls)
                placed_so_far = zip(seqs, spans, group.finals, strict=False)  # the first i
                for placed, span, final in placed_so_far:
                    alloc.release(placed)
                    totals.remove(span, final)
                return False
            seqs.append(seq)
            spans.append(alloc.reserved_slots(seq))
            totals.add(spans[-1], group.finals[i])
        totals.length += sum(group.lengths)
        group.seqs, group.spans, group.started = seqs, spans, True
        return True

    def _decode(self) -> tuple[int, int]:
        """Grow every running sequence by one token and retire those that reach $L_i$;
        returns (tokens generated, requests finished)."""
        tokens = finished = 0
        branching, shortcuts = self.alloc.shares_prefixes, self.shortcuts
        for group in list(self.running):
            if not group.seqs:  # preempted earlier in this step
                continue
            if branching and group.request.beam and len(group.seqs) > 1:
                self._branch(group)
            unfinished = max(group.lengths) + 1 < min(group.finals)  # nobody ends this step
            i = self._grow_unfinished(group) if unfinished and shortcuts else 0
            tokens += i
            while i < len(group.seqs):
                if not self._grow(group, i):
                    break  # the group itself was preempted
                tokens += 1
                if group.lengths[i] == group.finals[i]:
                    self._release(group, i)
                else:
                    i += 1
            if not group.finals:  # every sequence reached its L_i
                self.running.remove(group)
                finished += 1
        return tokens, finished

    def _grow(self, group: _Group, i: int) -> bool:
        """Grow sequence ``i`` of ``group``, preempting the newest requests while it cannot;
        False when ``group`` itself was preempted."""
        alloc, seq = self.alloc, group.seqs[i]
        stalls = alloc.stalls
        while not alloc.grow(seq):
            if not self._preempt(group, stalls):
                return False
            stalls = alloc.stalls
        group.lengths[i] += 1
        self.totals.length += 1
        if group.spans[i] < group.lengths[i]:  # it had filled its span: the span grew
            self._set_span(group, i, alloc.reserved_slots(seq))
        return True

    def _grow_unfinished(self, group: _Group) -> int:
        """``_grow`` for each sequence of ``group`` in turn, when none of them reaches its
        $L_i$ with this token (the caller checks): nothing is released, so the indices hold
        still and one loop takes them all. Returns how many grew: all of them, or fewer when
        one was refused: then the newest request was preempted, and the caller grows the rest
        one by one (none, if that was ``group``).

        Equal to the plain loop because growing never changes ``stalls`` (only refusals do):
        the count read before the loop is the count before the refused growth."""
        alloc, lengths, spans = self.alloc, group.lengths, group.spans
        stalls = alloc.stalls
        for i, seq in enumerate(group.seqs):
            if not alloc.grow(seq):  # make room; the caller retries, unless group is gone
                self.totals.length += i
                self._preempt(group, stalls)
                return i
            lengths[i] += 1
            if spans[i] < lengths[i]:  # it had filled its span: the span grew
                self._set_span(group, i, alloc.reserved_slots(seq))
        self.totals.length += len(lengths)
        return len(lengths)

    def _preempt(self, group: _Group, stalls_before: int) -> bool:
        """A sequence of ``group`` was refused room: note the stall, preempt the newest running
        request (§6). False when that was ``group`` itself."""
        self._note_stall(stalls_before)
        victim = self.running.pop()
        if victim is group and not self.running:  # refused with the cache to itself
            if group.alone_refused_at == group.lengths:  # again, at the same lengths: it
                raise ValueError(  # would be re-admitted and refused forever
                    f"a request of {len(group.lengths)} sequence(s) at {max(group.lengths)} "
                    f"tokens cannot grow even alone in the KV cache of {self.alloc.capacity} "
                    f"slots under {self.alloc.name}; {more_room(self.alloc)}"
                )
            group.alone_refused_at = list(group.lengths)
        self._evict(victim)
        return victim is not group

    def _set_span(self, group: _Group, i: int, span: int) -> None:
        self.totals.remove(group.spans[i], group.finals[i])
        self.totals.add(span, group.finals[i])
        group.spans[i] = span

    def _note_stall(self, stalls_before: int) -> None:
        """After a refusal: if it was a stall, the memory free right now could not be used."""
        if self.alloc.stalls > stalls_before:
            self._unusable = max(self._unusable, self.alloc.capacity - self.alloc.reserved)

    def _branch(self, group: _Group) -> None:
        """One step of a model-free beam search on a sharing allocator: each of the $K$ new
        beams picks a parent beam, rank $k$ with weight $1/(k+1)$; a parent's first child
        continues it in place, the others fork from it (§5), and unpicked beams are freed.

        As many beams are forked as are left unpicked, so each fork takes the place of an
        unpicked beam (``fork_replacing``), freed in rank order as if after all the forks: a
        fork frees nothing, so the free list ends the same."""
        k = len(group.seqs)
        parents = sorted(self.rng.choices(range(k), cum_weights=_rank_weights(k), k=k))
        unpicked = [index for index in range(k) if index not in parents]
        if not unpicked:  # every beam picked itself once: nothing moves
            return
        forks = [j for j in range(1, k) if parents[j] == parents[j - 1]]  # not a first child
        seqs = [group.seqs[p] for p in parents]
        for j, gone in zip(forks, unpicked, strict=True):
            child = next(self._ids)
            self.alloc.fork_replacing(seqs[j], child, group.seqs[gone])
            self._replace(group, gone, parents[j])
            seqs[j] = child
        group.lengths = [group.lengths[p] for p in parents]
        group.finals = [group.finals[p] for p in parents]
        group.spans = [group.spans[p] for p in parents]
        group.seqs = seqs

    def _replace(self, group: _Group, gone: int, parent: int) -> None:
        """The running sums after sequence ``gone`` of ``group`` left and a copy of sequence
        ``parent`` joined. Beams usually have equal lengths, spans and final lengths, and then
        nothing changes."""
        lengths, spans, finals, totals = group.lengths, group.spans, group.finals, self.totals
        if (
            lengths[gone] != lengths[parent]
            or spans[gone] != spans[parent]
            or finals[gone] != finals[parent]
        ):
            totals.remove(spans[gone], finals[gone])
            totals.add(spans[parent], finals[parent])
            totals.length += lengths[parent] - lengths[gone]

    def _evict(self, group: _Group) -> None:
        """Recompute-preemption (§6): free everything, wait again at the front of the queue."""
        for seq, span, final, length in zip(
            group.seqs, group.spans, group.finals, group.lengths, strict=True
        ):
            self.alloc.release(seq)
            self.totals.remove(span, final)
            self.totals.length -= length
        group.seqs, group.spans = [], []
        self.waiting.appendleft(group)
        self.preemptions += 1

    def _release(self, group: _Group, i: int) -> None:
        """Sequence ``i`` of ``group`` reached its $L_i$: free it and take it out of the sums."""
        self.alloc.release(group.seqs.pop(i))
        self.totals.remove(group.spans.pop(i), group.finals.pop(i))
        self.totals.length -= group.lengths.pop(i)


@functools.cache
def _rank_weights(k: int) -> list[float]:
    """Cumulative weights $\\sum_{r \\le k'} 1/(r+1)$ of a beam's ranks, built once per $K$
    (``random.choices`` draws the same beams with them as with the plain weights)."""
    return list(itertools.accumulate(1 / (r + 1) for r in range(k)))


def simulate(
    allocators: list[KVAllocator], requests: list[Request], seed: int = 0, show_progress=None
) -> list[SimResult]:
    """Replay ``requests`` on each allocator in turn, with a progress bar over requests; a
    cache that could never finish the workload is refused first (``room_to_run``)."""
    check_room(allocators, requests)
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not (console.is_terminal if show_progress is None else show_progress),
        transient=True,
    ) as progress:
        results = []
        for alloc in allocators:
            task = progress.add_task(f"simulating {alloc.name}", total=len(requests))
            results.append(Simulation(alloc, requests, seed).run(progress, task))
        return results
