"""Checks for exercise 02: a refcounted block allocator (source text §3 and §5).

The student's ``allocator.py`` mirrors ``minipaged.allocator``: ``OutOfBlocks`` and
``BlockAllocator`` with ``allocate``, ``take``, ``incref``, ``decref`` and the questions
``refcount``, ``refcounts``, ``free_blocks``, ``num_free``, ``num_used``.
"""

from __future__ import annotations

from minipaged.block_manager import BlockManager
from minipaged.grader.properties import BlockManagerMachine, run_programs
from minipaged.grader.report import CheckFailed, Criterion, expect
from minipaged.grader.shared_state import expect_own_state


def block_manager_class(student) -> type[BlockManager]:
    """The library's block manager running on the student's allocator, for both pools."""
    allocator = student.allocator.BlockAllocator

    class BlockManagerOnYourAllocator(BlockManager):
        def __init__(self, num_gpu_blocks: int, num_cpu_blocks: int = 0, *args, **kwargs):
            super().__init__(num_gpu_blocks, num_cpu_blocks, *args, **kwargs)
            self.device = allocator(num_gpu_blocks, pool="device")
            self.host = allocator(num_cpu_blocks, pool="host") if num_cpu_blocks else None

    return BlockManagerOnYourAllocator


def _raises(error_type, action, what: str) -> None:
    try:
        got = action()
    except error_type:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        raise CheckFailed(
            f"{what}: expected {error_type.__name__}, got {type(error).__name__}: {error}"
        ) from None
    raise CheckFailed(f"{what}: expected {error_type.__name__}, but it returned {got!r}")


def _questions_agree(pool, after: str) -> None:
    """The pool's questions describe one state: ``num_free`` counts the free list, ``num_used``
    the rest, ``refcount(p)`` is ``refcounts()[p]``, and a block is on the free list (once)
    iff $\\mathcal{R}[p] = 0$. A count kept beside the list, and forgotten on one path, fails
    here on the call that forgot it."""
    refcounts, free = pool.refcounts(), pool.free_blocks()
    n = len(refcounts)
    expect(pool.num_free, len(free), f"num_free after {after}, with free_blocks() = {free}")
    expect(pool.num_used, n - len(free), f"num_used after {after}, {len(free)} of {n} blocks free")
    expect(
        [pool.refcount(p) for p in range(n)],
        list(refcounts),
        f"refcount(p) for p = 0..{n - 1} after {after}, against refcounts() = {refcounts}",
    )
    expect(
        sorted(free),
        [p for p in range(n) if refcounts[p] == 0],
        f"the free list after {after}, sorted, against the blocks with R[p] = 0 "
        f"(refcounts() = {refcounts})",
    )


def check_new_pool_is_all_free(student):
    """a new pool of P_max blocks has every block free, with R[p] = 0"""
    pool = student.allocator.BlockAllocator(4)
    expect(pool.num_free, 4, "BlockAllocator(4).num_free")
    expect(pool.num_used, 0, "BlockAllocator(4).num_used")
    expect(pool.free_blocks(), (0, 1, 2, 3), "BlockAllocator(4).free_blocks()")
    expect(pool.refcounts(), (0, 0, 0, 0), "BlockAllocator(4).refcounts()")
    expect_own_state(
        lambda: student.allocator.BlockAllocator(4),
        lambda first: first.allocate(),
        lambda second: (second.free_blocks(), second.refcounts()),
        "(free_blocks(), refcounts()) of a second BlockAllocator(4) after allocate() on the first",
    )


def check_allocate_takes_the_first_free_block(student):
    """allocate takes the first block of the free list and sets R[p] = 1"""
    pool = student.allocator.BlockAllocator(4)
    got = [pool.allocate() for _ in range(3)]
    _questions_agree(pool, "allocate() three times on BlockAllocator(4)")
    expect(got, [0, 1, 2], "allocate() three times on BlockAllocator(4)")
    expect(
        [pool.refcount(p) for p in got],
        [1, 1, 1],
        "refcount(p) of the blocks three allocate() calls gave",
    )
    expect(
        (pool.num_free, pool.num_used),
        (1, 3),
        "(num_free, num_used) after allocate() three times on BlockAllocator(4)",
    )


def check_incref_and_decref_count_tables(student):
    """incref and decref move R[p] by one and return it; a block with R[p] > 0 stays in use"""
    pool = student.allocator.BlockAllocator(2)
    p = pool.allocate()
    expect(pool.incref(p), 2, f"incref({p}) after allocate: the new R[{p}]")
    expect(
        (pool.num_free, pool.num_used),
        (1, 1),
        f"(num_free, num_used) of BlockAllocator(2) after allocate(), incref({p}): one block "
        "in use, held by two tables (count blocks, not references)",
    )
    _questions_agree(pool, f"allocate(), incref({p}) on BlockAllocator(2)")
    expect(pool.decref(p), 1, f"decref({p}) with R[{p}]=2: the new R[{p}]")
    expect(
        pool.free_blocks(),
        (1,),
        f"free_blocks() after allocate(), incref({p}), decref({p}): R[{p}]=1",
    )
    _questions_agree(pool, f"allocate(), incref({p}), decref({p}) on BlockAllocator(2)")
    expect(pool.decref(p), 0, f"decref({p}) with R[{p}]=1: the new R[{p}]")
    _questions_agree(pool, f"allocate(), incref({p}), decref({p}) twice on BlockAllocator(2)")
    expect(pool.free_blocks(), (1, p), f"free_blocks() after a second decref({p}): R[{p}]=0")
    three = student.allocator.BlockAllocator(2)  # R moves by one: "shared" is not R = 2
    q = three.allocate()
    three.incref(q)
    expect(three.incref(q), 3, f"incref({q}) with R[{q}]=2 (a third table shares it): the new R")
    expect(three.decref(q), 2, f"decref({q}) with R[{q}]=3: the new R[{q}], still shared")


def check_freed_blocks_join_the_back_of_the_free_list(student):
    """a freed block joins the back of the free list: the block freed longest ago is reused first"""
    pool = student.allocator.BlockAllocator(4)
    for _ in range(4):
        pool.allocate()
    pool.decref(2)
    pool.decref(0)
    _questions_agree(pool, "decref(2), then decref(0), on a full pool of 4")
    expect(
        pool.free_blocks(),
        (2, 0),
        "free_blocks() after decref(2), then decref(0), on a full pool of 4",
    )
    expect(pool.allocate(), 2, "allocate() with free list (2, 0)")


def check_full_pool_raises_out_of_blocks(student):
    """allocate on a full pool raises OutOfBlocks and changes nothing"""
    module = student.allocator
    pool = module.BlockAllocator(2)
    pool.allocate()
    pool.allocate()
    _raises(module.OutOfBlocks, pool.allocate, "allocate() on a full pool of 2")
    expect(pool.refcounts(), (1, 1), "refcounts() after the refused allocate() on a full pool of 2")
    _questions_agree(pool, "the refused allocate() on a full pool of 2")


def check_misuse_is_refused(student):
    """decref or incref of a free block raises ValueError; an unknown block id raises IndexError"""
    pool = student.allocator.BlockAllocator(2)
    p = pool.allocate()
    pool.decref(p)
    _raises(ValueError, lambda: pool.decref(p), f"decref({p}) of a free block (a double free)")
    _raises(ValueError, lambda: pool.incref(1), "incref(1) of a free block (share it unallocated)")
    _raises(IndexError, lambda: pool.refcount(2), "refcount(2) in a pool of blocks 0..1")
    _raises(IndexError, lambda: pool.decref(-1), "decref(-1)")
    expect(
        pool.refcounts(),
        (0, 0),
        "refcounts() after the refused decref, incref, refcount calls above",
    )
    pool.take(1)  # a block -1 would wrap around to, in use
    for method in ("refcount", "incref", "decref", "take"):
        for block in (-1, 2):
            what = f"{method}({block}) in a pool of blocks 0..1 (a negative id must not wrap)"
            _raises(IndexError, lambda m=method, b=block: getattr(pool, m)(b), what)
    expect(pool.refcounts(), (0, 1), "refcounts() after the refused calls with ids -1 and 2")
    _questions_agree(pool, "take(1) and the refused calls with ids -1 and 2")


def check_take_allocates_a_given_free_block(student):
    """take(p) allocates that free block (R[p]: 0 to 1); taking a block in use is refused"""
    pool = student.allocator.BlockAllocator(4)
    expect(pool.take(2), 2, "take(2) on a new pool")
    expect(pool.refcount(2), 1, "R[2] after take(2)")
    expect(pool.free_blocks(), (0, 1, 3), "the free list after take(2)")
    _questions_agree(pool, "take(2) on BlockAllocator(4)")
    _raises(ValueError, lambda: pool.take(2), "take(2) while R[2]=1")
    _questions_agree(pool, "take(2), then a refused take(2)")


def check_block_manager_runs_on_your_allocator(student):
    """the library's block manager keeps every invariant on random programs over your allocator

    Rule: R[p] equals the number of block tables holding p and a block is free iff R[p] = 0,
    after every allocate, incref and decref the block manager makes on your allocator."""
    run_programs(BlockManagerMachine, student=student, make=_on_your_allocator, max_examples=40)


def _on_your_allocator(student, num_device: int, num_host: int, block_size: int):
    """In the student's process: the library's manager on their allocator."""
    return block_manager_class(student)(num_device, num_host, block_size, watermark=0.0)


CRITERIA = tuple(
    Criterion(check, on_the_library=check is check_block_manager_runs_on_your_allocator)
    for check in (
        check_new_pool_is_all_free,
        check_allocate_takes_the_first_free_block,
        check_incref_and_decref_count_tables,
        check_freed_blocks_join_the_back_of_the_free_list,
        check_full_pool_raises_out_of_blocks,
        check_misuse_is_refused,
        check_take_allocates_a_given_free_block,
        check_block_manager_runs_on_your_allocator,
    )
)
