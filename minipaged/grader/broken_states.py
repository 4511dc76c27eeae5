"""Hand-built block states that break exactly one of exercise 06's five rules.

The bug zoo (``bug_zoo``) breaks rules the way real code does, and a bug usually breaks
several at once, so a suite that checks only some rules can still catch every member. These
states grade each rule on its own: in each, every rule but one holds, so only a property
that checks that rule, completely, fails on it. A property that checks
$\\mathcal{R}[p] \\ge$ the holders instead of $=$, skips the host pool, skips duplicates on
the free list, or asks only $\\mathcal{R} \\ge 1$ of a written block, passes one of them.

Each state is a real ``BlockManager`` whose allocators hold refcounts and free lists set by
hand (``PresetAllocator``), with simulated KV contents that agree with its tables, so a
property reads it exactly as it reads a running manager.

The states are public, in this module and in the repository, and a student's property can
build them too: one that failed on exactly these states, found by lookup, and checked no rule
passed all five rule criteria (and the false-alarm one). So grading shows each state
``disguised``: among sound blocks and sequences of its own, its blocks renamed but for those
its fault names, its tokens renumbered, each drawn anew for every grading; only a property
that checks the rule tells it from a sound state. The states of exercise 06's random programs
are as public (the programs are derandomized, the same at every grading), so grading shows
each of them in a ``disguise`` too.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from minipaged.allocator import BlockAllocator
from minipaged.block_manager import BlockManager
from minipaged.block_table import BlockTable
from minipaged.grader.properties import SimulatedKV

BLOCK_SIZE = 2


class PresetAllocator(BlockAllocator):
    """An allocator whose $\\mathcal{R}$ and free list are given, duplicates and all: a state
    no correct allocator reaches. Its free list is a list, so a block can be on it twice."""

    def __init__(self, refcounts: list[int], free: list[int], pool: str) -> None:
        super().__init__(len(refcounts), pool=pool)
        self._refcounts = list(refcounts)
        self._free_list = list(free)

    @property
    def num_free(self) -> int:
        return len(self._free_list)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(set(self._free_list))

    def free_blocks(self) -> tuple[int, ...]:
        return tuple(self._free_list)


@dataclass(frozen=True)
class BrokenState:
    """One state, the rule it breaks (1 to 5, as exercise 06's README numbers them) and what
    is wrong with it, in the words a failed criterion shows the student."""

    rule: int
    name: str
    fault: str  # what is wrong, for the message
    build: Callable[[], tuple[BlockManager, SimulatedKV, int | None]]
    device: tuple[int, ...] = ()  # the device blocks ``fault`` names, kept by a disguise
    host: tuple[int, ...] = ()  # the host blocks it names


def preset(
    tables: dict[int, tuple[list[int], int, str]],
    device: tuple[list[int], list[int]],
    host: tuple[list[int], list[int]] | None = None,
    last_write: int | None = None,
    block_size: int = BLOCK_SIZE,
) -> tuple[BlockManager, SimulatedKV, int | None]:
    """A manager with ``tables`` (seq -> (T_r, num_tokens, pool)) over pools given as
    (R by block, free list), and KV contents in which every sequence reads back what it wrote."""
    manager = BlockManager(len(device[0]), len(host[0]) if host else 0, block_size, 0.0)
    manager.device = PresetAllocator(*device, pool="device")
    manager.host = PresetAllocator(*host, pool="host") if host else None
    kv = SimulatedKV(block_size)
    for seq, (blocks, num_tokens, pool) in tables.items():
        table = BlockTable(block_size, list(blocks), num_tokens, pool)
        manager.tables[seq] = table
        kv.written[seq] = []
        for t in range(num_tokens):
            found = kv.slots[pool].get(table.slot(t))  # a block shared with an earlier table
            if found is None:
                kv.write(seq, table.slot(t), pool)
            else:
                kv.written[seq].append(found)
    return manager, kv, last_write


def _read_back_broken(pool: str):
    """Seq 0 holds T_0=[0, 1] with 3 tokens in ``pool``; its token 1 was overwritten."""
    pools = {"device": ([1, 1, 0], [2]), "host": ([0, 0], [0, 1])}
    host = ([1, 1, 0], [2]) if pool == "host" else None
    manager, kv, last = preset({0: ([0, 1], 3, pool)}, device=pools[pool], host=host)
    kv.slots[pool][1] = 999  # seq 0's token 1 was overwritten by someone else
    return manager, kv, last


def _token_lost():
    """Seq 0 wrote 4 tokens, but T_0=[0, 1] counts only 3 of them: reading back gives 3."""
    manager, kv, last = preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2]))
    kv.written[0].append(kv.written[0][-1] + 1)
    return manager, kv, last


BROKEN_STATES: tuple[BrokenState, ...] = (
    BrokenState(
        1,
        "refcount_above_its_holders",
        "device block 1 has R=2 but only seq 0's table holds it: R[p] must equal the "
        "number of holders, not merely be at least that",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 2, 0], [2])),
        device=(1,),
    ),
    BrokenState(
        1,
        "refcount_below_its_holders",
        "device block 0 has R=1 but the tables of seq 0 and seq 1 both hold it",
        lambda: preset({0: ([0], 2, "device"), 1: ([0], 2, "device")}, device=([1, 0, 0], [1, 2])),
        device=(0,),
    ),
    BrokenState(
        1,
        "refcount_with_no_holder",
        "device block 2 has R=1 but no table holds it: check R[p] for every block of the "
        "pool, not only the blocks some table holds",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 1, 0], [3])),
        device=(2,),
    ),
    BrokenState(
        1,
        "host_refcount_wrong",
        "host block 0 has R=2 but only seq 0's table (swapped out to the host) holds it: "
        "the rule holds in the host pool too",
        lambda: preset({0: ([0], 2, "host")}, device=([0, 0], [0, 1]), host=([2, 0], [1])),
        host=(0,),
    ),
    BrokenState(
        2,
        "unreferenced_block_missing_from_free_list",
        "device block 2 has R=0 but is not on the free list: it is leaked",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0, 0], [3])),
        device=(2,),
    ),
    BrokenState(
        2,
        "used_block_on_the_free_list",
        "device block 1 is held by seq 0 (R=1) and is also on the free list: the next "
        "allocation would hand it to another sequence",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2, 1])),
        device=(1,),
    ),
    BrokenState(
        2,
        "block_twice_on_the_free_list",
        "device block 2 is on the free list twice: two allocations would both get it",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2, 2])),
        device=(2,),
    ),
    BrokenState(
        2,
        "host_block_missing_from_free_list",
        "host block 1 has R=0 but is not on the host free list: the rule holds in the host "
        "pool too",
        lambda: preset({0: ([0], 2, "host")}, device=([0, 0], [0, 1]), host=([1, 0, 0], [2])),
        host=(1,),
    ),
    BrokenState(
        3,
        "write_into_a_shared_block",
        "the last token was written at slot 1, in device block 0, which seq 0 and seq 1 "
        "share (R=2): R[p] must be exactly 1, not merely at least 1",
        lambda: preset(
            {0: ([0], 2, "device"), 1: ([0], 2, "device")},
            device=([2, 0], [1]),
            last_write=1,
        ),
        device=(0,),
    ),
    BrokenState(
        4,
        "token_overwritten",
        "seq 0 wrote 3 tokens, but reading slot 1 through T_0=[0, 1] gives another token",
        lambda: _read_back_broken("device"),
        device=(0, 1),
    ),
    BrokenState(
        4,
        "token_lost",
        "seq 0 wrote 4 tokens, but reading through T_0=[0, 1] gives back only 3: a token is "
        "lost. Compare the whole list read back with the whole list written (equal lengths "
        "too), not token by token over the shorter of the two",
        _token_lost,
        device=(0, 1),
    ),
    BrokenState(
        4,
        "host_token_overwritten",
        "seq 0, swapped out to the host, wrote 3 tokens, but reading host slot 1 through "
        "T_0=[0, 1] gives another token: read back every sequence, in its table's pool",
        lambda: _read_back_broken("host"),
        host=(0, 1),
    ),
    BrokenState(
        5,
        "device_leak_after_all_freed",
        "every sequence is freed, yet device block 1 is not free (R=0 and off the free list)",
        lambda: preset({}, device=([0, 0, 0], [0, 2])),
        device=(1,),
    ),
    BrokenState(
        5,
        "host_leak_after_all_freed",
        "every sequence is freed, yet host block 0 is still in use (R=1)",
        lambda: preset({}, device=([0, 0], [0, 1]), host=([1, 0], [1])),
        host=(0,),
    ),
)


def disguised(
    state: BrokenState, rng: random.Random
) -> tuple[BlockManager, SimulatedKV, int | None]:
    """``state`` built, and hidden with ``rng``'s draws (``disguise``), but for the blocks its
    fault names (``state.device``, ``state.host``), which keep their ids. It breaks the rule
    ``state`` breaks, and only that, as ``state.build()`` does."""
    kept = {"device": state.device, "host": state.host}
    return disguise(*state.build(), rng, kept=kept, end=state.rule == 5)


OUTSIDE = 3
"""How far a block id outside its pool moves up: past the one to three blocks a disguise adds,
so that it stays outside the pool and names none of them."""


def disguise(
    manager: BlockManager,
    kv: SimulatedKV,
    last_write: int | None,
    rng: random.Random,
    kept: dict[str, tuple[int, ...]] | None = None,
    end: bool = False,
) -> tuple[BlockManager, SimulatedKV, int | None]:
    """``manager``'s state and ``kv``'s contents hidden with ``rng``'s draws: one to three
    blocks more in each pool, each free (at a random place on the free list) or, unless at a
    program's ``end`` (when every sequence is freed), held by a sound sequence of its own (a new
    id, one block, its tokens written); every block renamed but those ``kept`` names, the last
    write's slot with its block; every token renumbered, in the same order. A block id outside
    its pool (a broken manager's) moves up ``OUTSIDE``, and stays outside.

    Every rule holds or breaks as it does in ``manager``'s state, for the same blocks under
    their new names: what is added holds no block another holds, and renaming changes no
    count. Drawn anew at each grading, a disguise makes a state's print no print a property
    could have stored: it looks states up in vain, and only a property that checks the rules
    tells a broken state from a sound one."""
    snap = manager.snapshot()
    b = snap.block_size
    kept = kept or {}
    sizes = {"device": len(snap.device_refcounts)}
    if manager.host is not None:
        sizes["host"] = len(snap.host_refcounts)

    def inside(pool: str, p: int) -> int:
        return p + OUTSIDE if p >= sizes.get(pool, 0) else p

    pools = {
        "device": (list(snap.device_refcounts), [inside("device", p) for p in snap.device_free])
    }
    if "host" in sizes:
        pools["host"] = (list(snap.host_refcounts), [inside("host", p) for p in snap.host_free])
    tables = {
        seq: ([inside(t.pool, p) for p in t.blocks], t.num_tokens, t.pool)
        for seq, t in snap.tables.items()
    }
    slots = {
        pool: {inside(pool, s // b) * b + s % b: t for s, t in kv.slots[pool].items()}
        for pool in ("device", "host")
    }
    written = {seq: list(tokens) for seq, tokens in kv.written.items()}
    if last_write is not None:
        last_write = inside("device", last_write // b) * b + last_write % b
    fresh = itertools.count(max(_tokens(slots, written), default=0) + 1)
    for pool, (refcounts, free) in pools.items():
        for _ in range(rng.randint(1, 3)):
            block = len(refcounts)
            if not end and rng.random() < 0.5:  # held by a sound sequence of its own
                seq = rng.randrange(2, 10_000)
                while seq in tables or seq in written:
                    seq = rng.randrange(2, 10_000)
                tables[seq] = ([block], rng.randint(1, b), pool)
                written[seq] = [next(fresh) for _ in range(tables[seq][1])]
                slots[pool].update({block * b + o: t for o, t in enumerate(written[seq])})
                refcounts.append(1)
            else:
                refcounts.append(0)
                free.insert(rng.randint(0, len(free)), block)
    names = {}  # pool -> {block id: its name here}; an id outside the pool keeps its own
    for pool, (refcounts, _) in pools.items():
        keep = kept.get(pool, ())
        others = [p for p in range(len(refcounts)) if p not in keep]
        shuffled = rng.sample(others, len(others))
        names[pool] = {p: p for p in keep} | dict(zip(others, shuffled, strict=True))

    def name(pool: str, p: int) -> int:
        return names.get(pool, {}).get(p, p)

    every = sorted(_tokens(slots, written))
    numbers = sorted(rng.sample(range(1, 100 * len(every) + 100), len(every)))
    number = dict(zip(every, numbers, strict=True))

    def renamed(pool: str) -> tuple[list[int], list[int]]:
        """``pool``'s (R by block, free list) under its blocks' new names."""
        refcounts, free = pools[pool]
        moved = [0] * len(refcounts)
        for p, r in enumerate(refcounts):
            moved[names[pool][p]] = r
        return moved, [name(pool, p) for p in free]

    hosts = renamed("host") if "host" in pools else None
    hidden, _, _ = preset({}, renamed("device"), hosts, block_size=b)
    for seq in rng.sample(list(tables), len(tables)):
        blocks, num_tokens, pool = tables[seq]
        hidden.tables[seq] = BlockTable(b, [name(pool, p) for p in blocks], num_tokens, pool)
    seen = SimulatedKV(b)  # in orders that tell nothing of what was added, or when
    seen.slots = {"host": {}} | {
        pool: dict(sorted((name(pool, s // b) * b + s % b, number[t]) for s, t in contents.items()))
        for pool, contents in slots.items()
        if pool in pools
    }
    order = [*hidden.tables, *(seq for seq in written if seq not in hidden.tables)]
    seen.written = {seq: [number[t] for t in written[seq]] for seq in order if seq in written}
    if last_write is not None:
        last_write = name("device", last_write // b) * b + last_write % b
    return hidden, seen, last_write


def _tokens(slots: dict, written: dict) -> set[int]:
    """Every token a state's KV contents hold or its sequences wrote."""
    return {*slots["device"].values(), *slots["host"].values()} | {
        t for tokens in written.values() for t in tokens
    }
