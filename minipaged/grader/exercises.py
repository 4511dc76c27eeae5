"""The exercises: where each one's files are, what solves it, and what checks it.

Each exercise is a folder under ``tutorials/`` (a README and a ``starter/`` folder of files to
complete) and a module of checks in this package (``ex03_copy_on_write.py``, ...) whose
``CRITERIA`` the grader runs. The student's files mirror library modules, so ``solution`` names
the modules that solve the exercise: grading them must pass every criterion, and grading the
untouched starter must fail every one (``tests/test_exercises.py`` proves both).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from minipaged.grader.report import Criterion
from minipaged.grader.student import Student, load_folder, load_solution

TUTORIALS = (Path(__file__).resolve().parent / "tutorials").resolve()
"""The exercise folders: the repository's ``tutorials/`` in a source checkout (``tutorials`` here
is a link to it), and a copy shipped as package data in an installed package."""


@dataclass(frozen=True, slots=True)
class Exercise:
    number: int
    folder: str
    title: str
    solution: dict[str, str]  # student file stem -> the library module that solves it
    checks: str  # the module whose CRITERIA grade it
    graded: tuple[str, ...]  # the library functions the student writes: "module:Qual.name"

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f"{stem}.py" for stem in self.solution)

    @property
    def starter(self) -> Path:
        return TUTORIALS / self.folder / "starter"

    def criteria(self) -> tuple[Criterion, ...]:
        return importlib.import_module(self.checks).CRITERIA

    def graded_in(self, module: str) -> tuple[str, ...]:
        """The graded functions of library ``module``, as ``"module:Qual.name"``."""
        return tuple(name for name in self.graded if name.partition(":")[0] == module)


def _exercise(
    number: int, folder: str, title: str, solution: dict[str, str], checks: str, graded: str
):
    """``graded``: "module:Qual.name ..." with the module left out where it is the only one
    of ``solution``."""
    (module, *_) = solution.values()
    names = tuple(n if ":" in n else f"{module}:{n}" for n in graded.split())
    return Exercise(number, folder, title, solution, f"minipaged.grader.{checks}", names)


EXERCISES: dict[int, Exercise] = {
    e.number: e
    for e in (
        _exercise(
            1,
            "01-block-table-arithmetic",
            "block-table arithmetic: logical block, offset, slot, memory per token",
            {"memory": "minipaged.memory"},
            "ex01_block_table",
            "logical_block block_offset num_logical_blocks slot ModelShape.kv_bytes_per_token "
            "ModelShape.kv_bytes ModelShape.block_bytes_per_layer ModelShape.block_bytes",
        ),
        _exercise(
            2,
            "02-block-allocator",
            "a refcounted block allocator",
            {"allocator": "minipaged.allocator"},
            "ex02_allocator",
            "BlockAllocator.__init__ BlockAllocator.num_free BlockAllocator.refcount "
            "BlockAllocator.free_blocks BlockAllocator.allocate BlockAllocator.take "
            "BlockAllocator.incref BlockAllocator.decref",
        ),
        _exercise(
            3,
            "03-fork",
            "fork for parallel sampling and beam search",
            {"block_manager": "minipaged.block_manager"},
            "ex03_fork",
            "BlockManager.fork BlockManager.free",
        ),
        _exercise(
            4,
            "04-copy-on-write",
            "append with copy-on-write",
            {"block_manager": "minipaged.block_manager"},
            "ex04_copy_on_write",
            "BlockManager.append_slot",
        ),
        _exercise(
            5,
            "05-preemption",
            "preemption: swap and recompute",
            {"block_manager": "minipaged.block_manager", "scheduler": "minipaged.scheduler"},
            "ex05_preemption",
            "BlockManager.swap_out BlockManager.swap_in minipaged.scheduler:Scheduler._preempt",
        ),
        _exercise(
            6,
            "06-invariants",
            "write the invariants: properties that catch a bug zoo",
            {"properties": "minipaged.grader.properties"},
            "ex06_invariants",
            "BlockManagerMachine.block_state_invariants_hold "
            "BlockManagerMachine.writes_land_in_private_blocks "
            "BlockManagerMachine.every_sequence_reads_back_its_own_tokens "
            "BlockManagerMachine.after_all_freed",
        ),
        _exercise(
            7,
            "07-paged-attention",
            "paged attention decode in PyTorch with online softmax",
            {"attention": "minipaged.attention"},
            "ex07_attention",
            "paged_attention_decode_loop paged_attention_decode",
        ),
        _exercise(
            8,
            "08-copy-blocks",
            "a first CUDA kernel: copy a block, one thread per element",
            {"cache_ops": "cuda_kernels.cache_ops"},
            "ex08_copy_blocks",
            "copy_blocks_kernel copy_blocks",
        ),
        _exercise(
            9,
            "09-reshape-and-cache",
            "a CUDA kernel that writes keys and values at their slots",
            {"cache_ops": "cuda_kernels.cache_ops"},
            "ex09_reshape_and_cache",
            "reshape_and_cache_kernel reshape_and_cache",
        ),
        _exercise(
            10,
            "10-block-reduce",
            "one warp's dot product: a reduction in shared memory",
            {"block_reduce": "cuda_kernels.block_reduce"},
            "ex10_block_reduce",
            "tree_reduce",
        ),
        _exercise(
            11,
            "11-decode-kernel",
            "the paged-attention decode kernel in Numba CUDA",
            {"paged_attention": "cuda_kernels.paged_attention"},
            "ex11_decode_kernel",
            "decode_kernel paged_attention_decode",
        ),
        _exercise(
            12,
            "12-prefix-cache",
            "prefix caching: a radix tree with LRU eviction",
            {"radix_cache": "minipaged.radix_cache"},
            "ex12_prefix_cache",
            "RadixCache.match RadixCache.insert RadixCache.forget",
        ),
    )
}
"""The course, in order: each exercise builds on what the ones before it taught."""


def exercise(number: int) -> Exercise:
    if number not in EXERCISES:
        raise ValueError(
            f"no exercise {number}; the exercises are {min(EXERCISES)}..{max(EXERCISES)}"
        )
    return EXERCISES[number]


def load(number: int, path: Path | None = None, solution: bool = False) -> Student:
    """The work to grade: the library (``solution``), the folder ``path``, or the starter."""
    ex = exercise(number)
    if solution:
        return load_solution(ex.solution)
    load_check(number, path, solution)
    return load_folder(Path(path) if path is not None else ex.starter, tuple(ex.solution))


def load_check(number: int, path: Path | None, solution: bool) -> None:
    """Raise FileNotFoundError, saying what to do, when the files to grade are not there."""
    ex = exercise(number)
    if solution:
        return
    folder = Path(path) if path is not None else ex.starter
    missing = [name for name in ex.files if not (folder / name).is_file()]
    if missing:
        where = "" if folder.is_dir() else " (no such folder)"
        raise FileNotFoundError(
            f"{folder}{where} has no {', '.join(missing)}: pass --path with the folder holding "
            f"exercise {number:02d}'s files (copy them from tutorials/{ex.folder}/starter/)"
        )


def block_manager_class(number: int, path: Path | None = None, solution: bool = False) -> type:
    """A drop-in ``BlockManager`` (same constructor, same methods) built on the student's work
    for exercise 02 (the library's manager on their allocator), 03, 04 or 05 (their manager),
    or 12 (the library's manager with their radix tree as its ``"radix"`` prefix cache)."""
    checks = importlib.import_module(exercise(number).checks)
    if not hasattr(checks, "block_manager_class"):
        raise ValueError(
            f"exercise {number} builds no part of a block manager; exercises 2, 3, 4, 5 and 12 do"
        )
    return checks.block_manager_class(load(number, path, solution))


def graded_label(number: int, path: Path | None, solution: bool) -> str:
    """What a report says was graded: the folder, or the library modules."""
    ex = exercise(number)
    if solution:
        return "solution: " + ", ".join(ex.solution.values())
    return str(Path(path) if path is not None else ex.starter)
