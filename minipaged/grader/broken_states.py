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

Each state comes with the sound state it was made from (``sound``): the same tables, the fault
repaired. A property that failed on every state, or on every state it had not stored, failed
on each broken state too, and passed all five rule criteria checking nothing; a rule criterion
asks that the properties hold on the sound states as well.

The states are public, in this module and in the repository, and a student's property can
build them too: one that failed on exactly these states, found by lookup, and checked no rule
passed all five rule criteria (and the false-alarm one). So grading shows each state, broken
and sound, in a ``disguise`` (``minipaged.grader.disguise``) drawn anew for every grading:
only a property that checks the rule tells the one from the other.
"""

from __future__ import annotations

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
    is wrong with it, in the words a failed criterion shows the student; and ``sound``, the
    state it was made from, its fault repaired, which breaks no rule."""

    rule: int
    name: str
    fault: str  # what is wrong, for the message
    build: Callable[[], tuple[BlockManager, SimulatedKV, int | None]]
    sound: Callable[[], tuple[BlockManager, SimulatedKV, int | None]]
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


def _read_back(pool: str):
    """Seq 0 holds T_0=[0, 1] with 3 tokens in ``pool``, and reads them back."""
    pools = {"device": ([1, 1, 0], [2]), "host": ([0, 0], [0, 1])}
    host = ([1, 1, 0], [2]) if pool == "host" else None
    return preset({0: ([0, 1], 3, pool)}, device=pools[pool], host=host)


def _read_back_broken(pool: str):
    """``_read_back(pool)``, but seq 0's token 1 was overwritten."""
    manager, kv, last = _read_back(pool)
    kv.slots[pool][1] = 999  # seq 0's token 1 was overwritten by someone else
    return manager, kv, last


def _token_lost():
    """Seq 0 wrote 4 tokens, but T_0=[0, 1] counts only 3 of them: reading back gives 3."""
    manager, kv, last = _read_back("device")
    kv.written[0].append(kv.written[0][-1] + 1)
    return manager, kv, last


BROKEN_STATES: tuple[BrokenState, ...] = (
    BrokenState(
        1,
        "refcount_above_its_holders",
        "device block 1 has R=2 but only seq 0's table holds it: R[p] must equal the "
        "number of holders, not merely be at least that",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 2, 0], [2])),
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2])),
        device=(1,),
    ),
    BrokenState(
        1,
        "refcount_below_its_holders",
        "device block 0 has R=1 but the tables of seq 0 and seq 1 both hold it",
        lambda: preset({0: ([0], 2, "device"), 1: ([0], 2, "device")}, device=([1, 0, 0], [1, 2])),
        lambda: preset({0: ([0], 2, "device"), 1: ([0], 2, "device")}, device=([2, 0, 0], [1, 2])),
        device=(0,),
    ),
    BrokenState(
        1,
        "refcount_with_no_holder",
        "device block 2 has R=1 but no table holds it: check R[p] for every block of the "
        "pool, not only the blocks some table holds",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 1, 0], [3])),
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0, 0], [3, 2])),
        device=(2,),
    ),
    BrokenState(
        1,
        "host_refcount_wrong",
        "host block 0 has R=2 but only seq 0's table (swapped out to the host) holds it: "
        "the rule holds in the host pool too",
        lambda: preset({0: ([0], 2, "host")}, device=([0, 0], [0, 1]), host=([2, 0], [1])),
        lambda: preset({0: ([0], 2, "host")}, device=([0, 0], [0, 1]), host=([1, 0], [1])),
        host=(0,),
    ),
    BrokenState(
        2,
        "unreferenced_block_missing_from_free_list",
        "device block 2 has R=0 but is not on the free list: it is leaked",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0, 0], [3])),
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0, 0], [3, 2])),
        device=(2,),
    ),
    BrokenState(
        2,
        "used_block_on_the_free_list",
        "device block 1 is held by seq 0 (R=1) and is also on the free list: the next "
        "allocation would hand it to another sequence",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2, 1])),
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2])),
        device=(1,),
    ),
    BrokenState(
        2,
        "block_twice_on_the_free_list",
        "device block 2 is on the free list twice: two allocations would both get it",
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2, 2])),
        lambda: preset({0: ([0, 1], 3, "device")}, device=([1, 1, 0], [2])),
        device=(2,),
    ),
    BrokenState(
        2,
        "host_block_missing_from_free_list",
        "host block 1 has R=0 but is not on the host free list: the rule holds in the host "
        "pool too",
        lambda: preset({0: ([0], 2, "host")}, device=([0, 0], [0, 1]), host=([1, 0, 0], [2])),
        lambda: preset({0: ([0], 2, "host")}, device=([0, 0], [0, 1]), host=([1, 0, 0], [2, 1])),
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
        lambda: preset(  # copy-on-write gave seq 1 a block of its own
            {0: ([0], 2, "device"), 1: ([1], 2, "device")},
            device=([1, 1], []),
            last_write=1,
        ),
        device=(0,),
    ),
    BrokenState(
        3,
        "write_into_a_block_three_share",
        "the last token was written at slot 1, in device block 0, which seqs 0, 1 and 2 "
        "share (R=3): a write needs R[p] = 1 whatever the number of sharers, not R[p] != 2",
        lambda: preset(
            {0: ([0], 2, "device"), 1: ([0], 2, "device"), 2: ([0], 2, "device")},
            device=([3, 0], [1]),
            last_write=1,
        ),
        lambda: preset(  # copy-on-write gave seq 2 a block of its own; seqs 0 and 1 share
            {0: ([0], 2, "device"), 1: ([0], 2, "device"), 2: ([1], 2, "device")},
            device=([2, 1], []),
            last_write=3,
        ),
        device=(0,),
    ),
    BrokenState(
        4,
        "token_overwritten",
        "seq 0 wrote 3 tokens, but reading slot 1 through T_0=[0, 1] gives another token",
        lambda: _read_back_broken("device"),
        lambda: _read_back("device"),
        device=(0, 1),
    ),
    BrokenState(
        4,
        "token_lost",
        "seq 0 wrote 4 tokens, but reading through T_0=[0, 1] gives back only 3: a token is "
        "lost. Compare the whole list read back with the whole list written (equal lengths "
        "too), not token by token over the shorter of the two",
        _token_lost,
        lambda: _read_back("device"),
        device=(0, 1),
    ),
    BrokenState(
        4,
        "host_token_overwritten",
        "seq 0, swapped out to the host, wrote 3 tokens, but reading host slot 1 through "
        "T_0=[0, 1] gives another token: read back every sequence, in its table's pool",
        lambda: _read_back_broken("host"),
        lambda: _read_back("host"),
        host=(0, 1),
    ),
    BrokenState(
        5,
        "device_leak_after_all_freed",
        "every sequence is freed, yet device block 1 is not free (R=0 and off the free list)",
        lambda: preset({}, device=([0, 0, 0], [0, 2])),
        lambda: preset({}, device=([0, 0, 0], [0, 2, 1])),
        device=(1,),
    ),
    BrokenState(
        5,
        "host_leak_after_all_freed",
        "every sequence is freed, yet host block 0 is still in use (R=1)",
        lambda: preset({}, device=([0, 0], [0, 1]), host=([1, 0], [1])),
        lambda: preset({}, device=([0, 0], [0, 1]), host=([0, 0], [1, 0])),
        host=(0,),
    ),
)
