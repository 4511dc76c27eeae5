"""What hides a block state a student's property judges in exercise 06: drawn anew at each
grading, among sound blocks and sequences of its own, its blocks renamed, its tokens renumbered.

The hand-built states (``broken_states``) are public, in the library and the repository, and
the states of exercise 06's random programs are as public (the programs are derandomized, the
same at every grading): a property that failed on exactly the broken ones, or on any state
missing from a stored set of the library's, found by lookup, checked no rule. Shown each state
in a disguise, a property looks states up in vain: only one that checks the rules tells a
broken state from a sound one.
"""

from __future__ import annotations

import itertools
import random

from minipaged.block_manager import BlockManager
from minipaged.block_table import BlockTable
from minipaged.grader.broken_states import BrokenState, preset
from minipaged.grader.properties import SimulatedKV


def disguised(
    state: BrokenState, rng: random.Random, sound: bool = False
) -> tuple[BlockManager, SimulatedKV, int | None]:
    """``state`` built, and hidden with ``rng``'s draws (``disguise``), but for the blocks its
    fault names (``state.device``, ``state.host``), which keep their ids. It breaks the rule
    ``state`` breaks, and only that, as ``state.build()`` does. With ``sound``: the state it
    was made from (``state.sound()``), hidden the same way, the same blocks kept: it breaks no
    rule, and only the rule tells it from the broken one."""
    kept = {"device": state.device, "host": state.host}
    built = state.sound() if sound else state.build()
    return disguise(*built, rng, kept=kept, end=state.rule == 5)


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
