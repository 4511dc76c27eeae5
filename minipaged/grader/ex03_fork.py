"""Checks for exercise 03: fork for parallel sampling and beam search (source text §5, "The
Copy-on-Write forking protocol").

The student's ``block_manager.py`` defines ``BlockManager``, the library's class with ``fork``
and ``free`` written by the student. Appends here use the library's ``append_slot``.
"""

from __future__ import annotations

from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import BlockManager
from minipaged.grader.program_steps import students_manager
from minipaged.grader.properties import BlockManagerMachine, run_programs
from minipaged.grader.recorded_events import Checked
from minipaged.grader.report import CheckFailed, Criterion, expect, expect_refused
from minipaged.grader.shared_state import expect_own_state


def block_manager_class(student) -> type[BlockManager]:
    return student.block_manager.BlockManager


def _manager(student, num_blocks: int = 16, block_size: int = 4):
    bm = student.block_manager.BlockManager(num_blocks, block_size=block_size, watermark=0.0)
    return Checked(bm)


def _refcounts(bm, blocks) -> list[int]:
    return [bm.refcount(p) for p in blocks]


def check_fork_copies_the_table(student):
    """fork gives the child its own copy of T_parent (the same blocks and length, another list)
    and returns it"""
    expect_own_state(
        lambda: _manager(student),
        lambda first: (first.allocate(0, 6), first.fork(0, 1)),
        lambda second: sorted(second.tables),
        "the sequences with a table, sorted(tables), of a second BlockManager(16, block_size=4) "
        "after allocate(0, 6) and fork(0, 1) on the first",
    )
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.fork(0, 1)
    expect(bm.table(1).blocks, [0, 1], "T_1 after fork(0, 1) with T_0=[0, 1]")
    returned = student.run(_what_fork_returns)  # a table comes back as its values: ask there
    if returned != "T_1":
        raise CheckFailed(
            f"fork(0, 1) returned {returned}, not the child's table T_1 (table(1)): its caller "
            "goes on with the table fork returns (the fast manager's beam search appends to "
            "it); return the table you stored for the child"
        )
    expect(bm.table(1).num_tokens, 6, "T_1.num_tokens after fork(0, 1) with a 6-token T_0")
    if bm.table(1).blocks is bm.table(0).blocks:
        raise CheckFailed(
            "after fork(0, 1), T_1.blocks is the very list T_0.blocks: when one sequence's table "
            "changes (a new block, a copy-on-write) the other's would change too; copy the list"
        )


def _what_fork_returns(student) -> str:
    """Next to the student's code, where a table is an object and not its values: what
    ``fork(0, 1)`` returned after ``allocate(0, 6)``, ``"T_1"`` when it is the child's table."""
    bm = _manager(student)
    bm.allocate(0, 6)
    returned = bm.fork(0, 1)
    if returned is bm.tables.get(1):
        return "T_1"
    return "the parent's table, T_0" if returned is bm.tables.get(0) else f"{returned!r:.60}"


def check_fork_raises_each_refcount_by_one(student):
    """fork raises R[p] by one for every p in T_parent and allocates nothing (no KV is copied),
    so it succeeds in a full pool"""
    bm = _manager(student)
    bm.allocate(0, 6)
    free_before = bm.device.num_free
    bm.fork(0, 1)
    expect(_refcounts(bm, [0, 1]), [2, 2], "[R[0], R[1]] after fork(0, 1)")
    expect(
        bm.device.num_free,
        free_before,
        "device.num_free before and after fork(0, 1) (steps 1-2 touch only ints)",
    )
    full = _manager(student, num_blocks=2)  # every other pool had blocks to spare
    full.allocate(0, 6)
    what = "fork(0, 1) in a pool of 2 blocks, both held by T_0=[0, 1] (none free)"
    try:
        full.fork(0, 1)
    except OutOfBlocks as error:
        raise CheckFailed(
            f"{what} raised OutOfBlocks ({error}): fork needs no free block, since it copies "
            "no KV (steps 1-2 touch only ints); a full pool must still fork"
        ) from None
    expect(_refcounts(full, [0, 1]), [2, 2], f"[R[0], R[1]] after {what}")


def check_parallel_sampling_shares_the_prompt(student):
    """n = 4 samples of a 32-token prompt (B = 16) share its 2 blocks: R[p] = 4, not 8 blocks

    Rule: each fork raises R[p] by one for every p in T_parent and allocates no block; a
    sample's first token past a full block goes to a fresh block of its own."""
    bm = _manager(student, block_size=16)
    bm.allocate(0, 32)
    for child in (1, 2, 3):
        bm.fork(0, child)
    expect(
        _refcounts(bm, [0, 1]),
        [4, 4],
        "[R[0], R[1]] after fork(0, 1), fork(0, 2), fork(0, 3): k - 1 = 3 forks (R += k - 1)",
    )
    expect(
        bm.device.num_used,
        2,
        "device.num_used after allocate(0, 32) and 3 forks: 4 streams of one prompt",
    )
    for seq in range(4):  # §5's figure: each branch's token 33 gets a block of its own
        bm.append_slot(seq)
    expect(
        bm.device.num_used, 6, "device.num_used after append_slot(seq) for each of the 4 streams"
    )
    expect(
        _refcounts(bm, [0, 1]),
        [4, 4],
        "[R[0], R[1]] after each stream's append_slot: the prompt stays shared",
    )


def check_free_releases_only_unshared_blocks(student):
    """free drops T_r and decrements each R[p]; only blocks no other table holds become free"""
    bm = _manager(student, num_blocks=8)
    bm.allocate(0, 6)  # T_0 = [0, 1]
    bm.fork(0, 1)
    bm.append_slot(1)  # copy-on-write: T_1 = [0, 2]
    bm.free(1)
    expect(_refcounts(bm, [0, 1, 2]), [1, 1, 0], "[R[0], R[1], R[2]] after free(1)")
    expect(sorted(bm.device.free_blocks()), [2, 3, 4, 5, 6, 7], "free blocks after free(1)")
    if 1 in bm.tables:
        raise CheckFailed("seq 1 still has a block table after free(1): drop it from tables")
    bm.free(0)
    expect(bm.device.num_free, 8, "device.num_free after free(1), then free(0) (no leak)")


def check_free_releases_the_last_block_first(student):
    """free releases T_r's last block first, so a prefix cache loses a prefix from its tail"""
    bm = _manager(student, num_blocks=8)
    bm.allocate(0, 10)  # T_0 = [0, 1, 2]
    bm.free(0)
    tail = list(bm.device.free_blocks()[-3:])
    if tail == [0, 1, 2]:
        raise CheckFailed(
            "free(0) with T_0=[0, 1, 2] released block 0 first: the free list ends [0, 1, 2], "
            "expected [2, 1, 0]. Release the last block first (reversed(table.blocks)): the "
            "allocator reuses the front of the free list, and with prefix caching it must "
            "evict a cached prefix's tail before its root, never cut it at the root"
        )
    expect(tail, [2, 1, 0], "the end of the free list after free(0) with T_0=[0, 1, 2]")


def check_beam_search_step(student):
    """a beam-search step forks the chosen beams and frees the dropped ones, leaking nothing

    Rule: after every fork and free, R[p] equals the number of block tables holding p; once
    every beam is freed, every block is free."""
    bm = _manager(student)
    bm.allocate(0, 5)  # the prompt: T_0 = [0, 1]
    bm.fork(0, 1)
    bm.fork(0, 2)  # K = 3 beams
    for beam in (0, 1, 2):
        bm.append_slot(beam)  # beams 0 and 1 copy the shared block 1; beam 2 then holds it alone
    # The step's best candidates extend beam 0 twice and beam 1 once; beam 2 is dropped.
    bm.fork(0, 3)
    bm.free(2)
    held = {}
    for seq in bm.tables:
        for p in bm.table(seq).blocks:
            held[p] = held.get(p, 0) + 1
    expect(
        {p: bm.refcount(p) for p in held},
        held,
        "R[p] against the tables holding p after fork(0, 3), free(2)",
    )
    expect(
        bm.refcount(0),
        3,
        "R[0] after fork(0, 3), free(2): the prompt's first block, held by beams 0, 1 and 3",
    )
    for seq in list(bm.tables):
        bm.free(seq)
    expect(
        bm.device.num_free, bm.device.num_blocks, "device.num_free after free(seq) of every beam"
    )


def check_fork_refuses_bad_sequences(student):
    """fork into an existing sequence or from one swapped out to the host raises ValueError;
    fork from an unknown one raises KeyError"""
    bm = Checked(student.block_manager.BlockManager(16, 4, block_size=4, watermark=0.0))
    bm.allocate(0, 4)
    bm.allocate(1, 4)
    bm.allocate(2, 6)
    bm.swap_out([2])  # T_2 now holds host blocks 0 and 1
    for action, error, what in [
        (lambda: bm.fork(0, 1), ValueError, "fork(0, 1) when seq 1 already has a table"),
        (lambda: bm.fork(7, 8), KeyError, "fork(7, 8) when seq 7 does not exist"),
        (
            lambda: bm.fork(2, 9),
            ValueError,
            "fork(2, 9) when seq 2 is swapped out to the host (its table holds host block "
            "ids, which the device refcounts do not count)",
        ),
    ]:
        hint = "; check the sequences before changing any table or refcount"
        expect_refused(action, error, what, bm.snapshot, hint, student.where)


def check_random_programs_keep_every_invariant(student):
    """random programs of allocate / fork / append / free / swap keep every invariant

    (Exercises 04 and 05 grade their block managers with this check too.)

    Rule: after every step, R[p] equals the number of tables holding p, a block is free iff
    R[p] = 0, a token is written into a block no other table holds, a swap moves its tables to
    the other pool, each sequence reads back the tokens it wrote, and once every sequence is
    freed every block is free."""
    run_programs(BlockManagerMachine, student=student, make=students_manager)


CRITERIA = tuple(
    Criterion(check)
    for check in (
        check_fork_copies_the_table,
        check_fork_raises_each_refcount_by_one,
        check_parallel_sampling_shares_the_prompt,
        check_free_releases_only_unshared_blocks,
        check_free_releases_the_last_block_first,
        check_beam_search_step,
        check_fork_refuses_bad_sequences,
        check_random_programs_keep_every_invariant,
    )
)
