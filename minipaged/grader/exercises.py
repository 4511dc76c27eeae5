"""The exercises: where each one's starter is, what solves it, and what checks it (where a
student's own files are, and loading them: ``minipaged.grader.student_folder``).

Each exercise is a folder under ``tutorials/`` (a README and a ``starter/`` folder of files to
complete) and a module of checks in this package (``ex03_copy_on_write.py``, ...) whose
``CRITERIA`` the grader runs. The student's files mirror library modules, so ``solution`` names
the modules that solve the exercise: grading them must pass every criterion, and grading the
untouched starter must fail every one (``tests/test_exercises.py`` proves both).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from minipaged.grader.report import Criterion, points
from minipaged.grader.student import Student

TUTORIALS = (Path(__file__).resolve().parent / "tutorials").resolve()
"""The exercise folders: the repository's ``tutorials/`` in a source checkout (``tutorials`` here
is a link to it), and a copy shipped as package data in an installed package."""


@dataclass(frozen=True, slots=True)
class TuiRun:
    """How ``minipaged tui --exercise N`` shows exercise N's work: the TUI scenario that makes
    its mechanism happen (``scenario``, a name of ``tui.scenarios.SCENARIOS``) and the engine
    settings it needs besides (exercise 12's tree is the ``"radix"`` prefix cache). The block
    manager the run uses is the exercise's checks' ``block_manager_class``."""

    scenario: str
    settings: tuple[tuple[str, object], ...] = ()


class DefinitionError(Exception):
    """An exercise's definition names a library function the library does not have: a
    mistake of the grader's, reported as such (``GraderFault``), never as the student's."""


@dataclass(frozen=True, slots=True)
class Exercise:
    number: int
    folder: str
    title: str
    solution: dict[str, str]  # student file stem -> the library module that solves it
    checks: str  # the module whose CRITERIA grade it
    graded: tuple[str, ...]  # the library functions the student writes: "module:Qual.name"
    requires: tuple[str, ...] = ()  # modules of an extra of minipaged's (EXTRAS) it needs
    tui: TuiRun | None = None  # how the TUI runs it; None: the TUI cannot show it
    answers: tuple[str, ...] = ()
    """Library functions that answer what the exercise asks though the student writes none of
    them (exercise 06's rules are ``minipaged.invariants``'; the private method a graded one
    is a call of, ``BlockManager._move``; a subclass's own version of a graded method, the
    simulator's ``FastBlockManager.free``): out of a student's reach like the graded ones."""
    handed_over: dict[str, str] = field(default_factory=dict)
    """The only graded functions and answers whose library version a grading child keeps, and
    why each: the library's own code calls them while the student's is graded, through their
    stubs (``minipaged.grader.delegation``), in the criteria ``on_the_library``, whose child
    alone keeps them. No child holds any other: each is replaced wherever the library holds
    it, and then is garbage, so that a student's code reading the child's memory (``ctypes``)
    finds none of it. Each one kept is within such code's reach in that child."""

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f"{stem}.py" for stem in self.solution)

    @property
    def starter(self) -> Path:
        return TUTORIALS / self.folder / "starter"

    def criteria(self) -> tuple[Criterion, ...]:
        return importlib.import_module(self.checks).CRITERIA

    def points(self) -> dict[str, int]:
        """Each criterion's points, by name: declared with the criterion, or an equal share of
        100 (``minipaged.grader.report.points``)."""
        criteria = self.criteria()
        return dict(zip((c.name for c in criteria), points(criteria), strict=True))

    def unmet(self) -> str:
        """``""``, or what to install for the modules this exercise needs that are missing."""
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        if not missing:
            return ""
        extras = sorted({EXTRAS[m] for m in missing})
        install = " ".join(f'"minipaged[{extra}]"' for extra in extras)
        return (
            f"exercise {self.number:02d} needs {' and '.join(missing)}, which is not installed "
            f"here: pip install {install}"
        )

    @property
    def hidden(self) -> tuple[str, ...]:
        """The library modules a grading child may not read once the student's code runs: the
        modules their files mirror, and those holding the exercise's answers."""
        answering = (name.partition(":")[0] for name in self.answers)
        return tuple(dict.fromkeys([*self.solution.values(), *answering]))

    def file_of(self, name: str) -> str | None:
        """The stem of the student's file whose rules the library function ``name`` is held to
        in a grading child (``delegation._allowed``): a graded function's file, and an answer
        that is a method of a graded class (``BlockManager._move``, the work of ``swap_out`` and
        ``swap_in``) its class's, so that the student's other files (exercise 05's scheduler)
        reach it through the library's graded methods as they reach those; None for any other
        answer, which nothing of theirs may reach."""
        classes = {g.rpartition(".")[0] for g in self.graded if "." in g.partition(":")[2]}
        if name in self.graded or (name in self.answers and name.rpartition(".")[0] in classes):
            module = name.partition(":")[0]
            return next(stem for stem, solved in self.solution.items() if solved == module)
        return None

    def lookup(self, name: str):
        """``(owner, attribute, value)`` of ``module:Qual.name``, one of the graded functions
        or answers, importing the module. A name the library lacks is this definition's
        mistake (``DefinitionError``), which no student can cause or fix."""
        module_name, _, qualname = name.partition(":")
        try:
            owner = importlib.import_module(module_name)
            *path, attribute = qualname.split(".")
            for part in path:
                owner = getattr(owner, part)
            return owner, attribute, owner.__dict__[attribute]
        except (ImportError, AttributeError, KeyError, ValueError) as error:
            role = "answers" if name in self.answers else "graded functions"
            raise DefinitionError(
                f"exercise {self.number:02d}'s definition (minipaged/grader/exercises.py) lists "
                f"{name} among its {role}, and the library has no such function "
                f"({type(error).__name__}: {error})"
            ) from None

    def graded_in(self, module: str) -> tuple[str, ...]:
        """The graded functions of library ``module``, as ``"module:Qual.name"``."""
        return tuple(name for name in self.graded if name.partition(":")[0] == module)


EXTRAS = {"numba": "cuda"}
"""The modules an exercise may need beyond minipaged's own dependencies, and the extra of
``pyproject.toml`` that installs each (``pip install 'minipaged[cuda]'``)."""


def _exercise(
    number: int,
    folder: str,
    title: str,
    solution: dict[str, str],
    checks: str,
    graded: str,
    requires: tuple[str, ...] = (),
    tui: TuiRun | None = None,
    answers: str = "",
    handed_over: dict[str, str] | None = None,
):
    """``graded``: "module:Qual.name ..." with the module left out where it is the only one
    of ``solution``; ``answers`` likewise, each with its module (those of ``cuda_kernels``
    only where Numba, which they import, is installed); ``handed_over``'s names as
    ``graded``'s."""
    (module, *_) = solution.values()
    names = tuple(n if ":" in n else f"{module}:{n}" for n in graded.split())
    checks = f"minipaged.grader.{checks}"
    numba = importlib.util.find_spec("numba") is not None
    answered = tuple(a for a in answers.split() if numba or not a.startswith("cuda_kernels"))
    kept = {n if ":" in n else f"{module}:{n}": why for n, why in (handed_over or {}).items()}
    return Exercise(number, folder, title, solution, checks, names, requires, tui, answered, kept)


ATTENTION_ROUTES = (
    "minipaged.attention:paged_attention_decode_partitions "
    "minipaged.attention:paged_attention_decode_partitioned minipaged.backend:paged_attention "
    "cuda_kernels.cpu.paged_attention:paged_attention_decode "
    "cuda_kernels.cpu.paged_attention_v2:paged_attention_decode_v2 "
    "cuda_kernels.paged_attention_v2:paged_attention_decode_v2 "
)
"""The library's other ways to the decode attention exercises 07 and 11 ask for: the split
(v2) reference, the backend that picks an implementation, the kernels' CPU twins (the same
arguments, the same result) and the v2 kernel."""


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
            answers="minipaged.allocator:BlockAllocator._block_id",
            tui=TuiRun("several"),
            handed_over={
                "BlockAllocator.__init__": "the library's BlockManager makes its two pools "
                "before the checks' subclass puts the student's allocators in their place "
                "(ex02_allocator.block_manager_class)",
            },
        ),
        _exercise(
            3,
            "03-fork",
            "fork for parallel sampling and beam search",
            {"block_manager": "minipaged.block_manager"},
            "ex03_fork",
            "BlockManager.fork BlockManager.free",
            answers="minipaged.study.fast_manager:FastBlockManager.free "
            "minipaged.study.fast_manager:FastBlockManager.fork_replacing",
            tui=TuiRun("beam"),
        ),
        _exercise(
            4,
            "04-copy-on-write",
            "append with copy-on-write",
            {"block_manager": "minipaged.block_manager"},
            "ex04_copy_on_write",
            "BlockManager.append_slot",
            answers="minipaged.study.fast_manager:FastBlockManager.try_append "
            "minipaged.block_manager:BlockManager._check_append",
            tui=TuiRun("parallel"),
        ),
        _exercise(
            5,
            "05-preemption",
            "preemption: swap and recompute",
            {"block_manager": "minipaged.block_manager", "scheduler": "minipaged.scheduler"},
            "ex05_preemption",
            "BlockManager.swap_out BlockManager.swap_in minipaged.scheduler:Scheduler._preempt",
            answers="minipaged.block_manager:BlockManager._move",
            tui=TuiRun("swap"),
            handed_over={
                "BlockManager.swap_out": "the student's scheduler, graded apart from their "
                "block manager, swaps a group out on the library's (Scheduler._preempt)",
                "BlockManager.swap_in": "the library's Scheduler.schedule, which their "
                "scheduler inherits, swaps the group back in on the library's block manager",
                "BlockManager._move": "the work of the library's swap_out and swap_in: it "
                "gives a student's code no more than those two do",
            },
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
            answers="minipaged.invariants:check minipaged.invariants:assert_holds "
            "minipaged.invariants:write_is_exclusive "
            "minipaged.invariants:refcounts_match_tables "
            "minipaged.invariants:free_iff_unreferenced "
            "minipaged.invariants:tables_stay_in_their_pool "
            "minipaged.invariants:tables_have_ceil_blocks",
        ),
        _exercise(
            7,
            "07-paged-attention",
            "paged attention decode in PyTorch with online softmax",
            {"attention": "minipaged.attention"},
            "ex07_attention",
            "paged_attention_decode_loop paged_attention_decode",
            answers=ATTENTION_ROUTES + "cuda_kernels.paged_attention:paged_attention_decode",
        ),
        _exercise(
            8,
            "08-copy-blocks",
            "a first CUDA kernel: copy a block, one thread per element",
            {"cache_ops": "cuda_kernels.cache_ops"},
            "ex08_copy_blocks",
            "copy_blocks_kernel copy_blocks",
            requires=("numba",),
            answers="cuda_kernels.cpu.cache_ops:copy_blocks_kernel "
            "cuda_kernels.cpu.cache_ops:copy_blocks",  # the CPU twins
        ),
        _exercise(
            9,
            "09-reshape-and-cache",
            "a CUDA kernel that writes keys and values at their slots",
            {"cache_ops": "cuda_kernels.cache_ops"},
            "ex09_reshape_and_cache",
            "reshape_and_cache_kernel reshape_and_cache",
            requires=("numba",),
            answers="cuda_kernels.cpu.cache_ops:reshape_and_cache_kernel "
            "cuda_kernels.cpu.cache_ops:reshape_and_cache minipaged.kv_cache:write_kv",
        ),
        _exercise(
            10,
            "10-block-reduce",
            "one warp's dot product: a reduction in shared memory",
            {"block_reduce": "cuda_kernels.block_reduce"},
            "ex10_block_reduce",
            "tree_reduce",
            requires=("numba",),
        ),
        _exercise(
            11,
            "11-decode-kernel",
            "the paged-attention decode kernel in Numba CUDA",
            {"paged_attention": "cuda_kernels.paged_attention"},
            "ex11_decode_kernel",
            "decode_kernel paged_attention_decode",
            requires=("numba",),
            answers=ATTENTION_ROUTES + "minipaged.attention:paged_attention_decode "
            "minipaged.attention:paged_attention_decode_loop",
        ),
        _exercise(
            12,
            "12-prefix-cache",
            "prefix caching: a radix tree with LRU eviction",
            {"radix_cache": "minipaged.radix_cache"},
            "ex12_prefix_cache",
            "RadixCache.match RadixCache.insert RadixCache.forget",
            answers="minipaged.radix_cache:RadixCache._walk "
            "minipaged.radix_cache:RadixCache._split "
            "minipaged.prefix_cache:HashPrefixCache.match "
            "minipaged.prefix_cache:HashPrefixCache.insert "
            "minipaged.prefix_cache:HashPrefixCache.forget",
            tui=TuiRun("prefix", (("prefix_caching", "radix"),)),
        ),
        _exercise(
            13,
            "13-three-wastes",
            "the three wastes of a recorded run, against the simulator",
            {"memory": "minipaged.memory", "recorded_waste": "minipaged.study.recorded_waste"},
            "ex13_three_wastes",
            "paged_internal_waste static_internal_waste reservation_waste "
            "external_fragmentation_stalls minipaged.study.recorded_waste:paged_waste "
            "minipaged.study.recorded_waste:static_waste "
            "minipaged.study.recorded_waste:orca_waste "
            "minipaged.study.recorded_waste:fragmentation_stalls",
            # the engine's tables' waste, and the simulator's spans: the checks' expectations;
            # the text's Orca buffer, grown a token at a time: ceil(t/ΔL)*ΔL slots at t
            answers="minipaged.study.recorded_waste:table_waste "
            "minipaged.study.recorded_waste:replay minipaged.study.baselines:OrcaAllocator.grow",
            handed_over={
                name: "the student's recorded_waste.py, graded apart from their memory.py, "
                "computes with the library's formulas, as its starter tells them to"
                for name in (
                    "paged_internal_waste",
                    "static_internal_waste",
                    "reservation_waste",
                    "external_fragmentation_stalls",
                )
            },
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


TUI_EXERCISES: dict[int, TuiRun] = {n: e.tui for n, e in EXERCISES.items() if e.tui is not None}
"""The exercises ``minipaged tui --exercise N`` runs, and how: read by its flag, its help, its
default scenario and the tests."""


def tui_exercise(number: int) -> TuiRun:
    """How the TUI runs exercise ``number``; ``ValueError`` naming those it runs otherwise."""
    exercise(number)
    if number not in TUI_EXERCISES:
        raise ValueError(
            f"exercise {number} builds no part of a block manager the TUI can run; exercises "
            f"{listed(TUI_EXERCISES)} do"
        )
    return TUI_EXERCISES[number]


def listed(items, last_joined_by: str = "or") -> str:
    """``"2, 3, 4, 5 or 12"``."""
    *rest, last = map(str, items)
    return f"{', '.join(rest)} {last_joined_by} {last}" if rest else last


def manager_of(number: int, student: Student) -> type:
    """``block_manager_class`` of the work ``student`` already loaded (in a grading child)."""
    tui_exercise(number)
    return importlib.import_module(exercise(number).checks).block_manager_class(student)
