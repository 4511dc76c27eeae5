"""The rules the block manager must never break, as predicates over a ``BlockState``.

The same predicates run after every step of the hypothesis state machine in the tests and in
the TUI's invariants panel. Each returns a list of violations in words; an empty list means the
invariant holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from minipaged.block_manager import BlockManager
from minipaged.block_state import BlockState
from minipaged.memory import num_logical_blocks


@dataclass(frozen=True, slots=True)
class Invariant:
    name: str
    statement: str
    violations: Callable[[BlockState], list[str]]


def _holders(state: BlockState, pool: str) -> Counter[int]:
    """How many tables in ``pool`` hold each block (a table holding a block twice counts twice)."""
    return Counter(b for t in state.tables.values() if t.pool == pool for b in t.blocks)


def _pools(state: BlockState) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    return [
        ("device", state.device_refcounts, state.device_free),
        ("host", state.host_refcounts, state.host_free),
    ]


def refcounts_match_tables(state: BlockState) -> list[str]:
    problems = []
    for pool, refcounts, _ in _pools(state):
        holders = _holders(state, pool)
        for block, r in enumerate(refcounts):
            if r != holders[block]:
                problems.append(
                    f"{pool} block {block}: R={r} but {holders[block]} table(s) hold it"
                )
    return problems


def free_iff_unreferenced(state: BlockState) -> list[str]:
    problems = []
    for pool, refcounts, free in _pools(state):
        for block, count in Counter(free).items():
            if count > 1:
                problems.append(f"{pool} block {block} is on the free list {count} times")
        zero = {b for b, r in enumerate(refcounts) if r == 0}
        for block in sorted(zero - set(free)):
            problems.append(f"{pool} block {block} has R=0 but is not on the free list (leaked)")
        for block in sorted(set(free) - zero):
            problems.append(f"{pool} block {block} is free and used (R={refcounts[block]})")
    return problems


def tables_stay_in_their_pool(state: BlockState) -> list[str]:
    sizes = {"device": len(state.device_refcounts), "host": len(state.host_refcounts)}
    problems = []
    for seq, table in state.tables.items():
        if table.pool not in sizes:
            problems.append(f"seq {seq}: unknown pool {table.pool!r}")
            continue
        for j, block in enumerate(table.blocks):
            if not 0 <= block < sizes[table.pool]:
                problems.append(
                    f"seq {seq}: T[{j}]={block} is not a {table.pool} block "
                    f"(the pool has {sizes[table.pool]})"
                )
    return problems


def tables_have_ceil_blocks(state: BlockState) -> list[str]:
    problems = []
    for seq, table in state.tables.items():
        expected = num_logical_blocks(table.num_tokens, state.block_size)
        if len(table.blocks) != expected:
            problems.append(
                f"seq {seq}: {table.num_tokens} tokens need ceil(L/B)={expected} blocks, "
                f"its table has {len(table.blocks)}"
            )
    return problems


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "refcount conservation",
        "R[p] equals the number of block tables that hold p",
        refcounts_match_tables,
    ),
    Invariant(
        "free iff R = 0",
        "a block is on the free list exactly when R[p] = 0, and at most once; no leaks",
        free_iff_unreferenced,
    ),
    Invariant(
        "one pool per table",
        "every id in T_r is a block of the pool the table lives in (device or host)",
        tables_stay_in_their_pool,
    ),
    Invariant(
        "M = ceil(L / B)",
        "every table has exactly ceil(L/B) blocks: only the last can have empty slots",
        tables_have_ceil_blocks,
    ),
)


def check(state: BlockState | BlockManager) -> dict[str, list[str]]:
    """Every invariant's violations by name; all lists are empty when the state is sound."""
    if isinstance(state, BlockManager):
        state = state.snapshot()
    return {inv.name: inv.violations(state) for inv in INVARIANTS}


def assert_holds(state: BlockState | BlockManager) -> None:
    """Raise AssertionError listing every violated invariant."""
    broken = {name: v for name, v in check(state).items() if v}
    if broken:
        lines = [f"{name}: {problem}" for name, problems in broken.items() for problem in problems]
        raise AssertionError("block-state invariants violated:\n" + "\n".join(lines))


def write_is_exclusive(state: BlockState, slot: int) -> list[str]:
    """Copy-on-write's promise (§5): the device block a token is written into has $R = 1$."""
    block = slot // state.block_size
    r = state.device_refcounts[block]
    return [] if r == 1 else [f"slot {slot} is in device block {block} with R={r}, not 1"]
