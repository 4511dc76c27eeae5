"""``minipaged exercises``: list the exercises, copy one out, or grade one.

``minipaged exercises init N DIR`` copies exercise N's README and starter files out of the
installed package into ``DIR``, so a student who installed minipaged without a source checkout
can begin. ``minipaged exercises check N`` grades the student's copy of exercise N (by default
the starter files in ``tutorials/``, which a student with a checkout edits in place; ``--path
DIR`` for a copy elsewhere; ``--solution`` for the library's own modules) in a child process
with time and memory limits, prints pass / fail / blocked per criterion with what was wrong,
writes a JSON report, and exits 0 when no criterion failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from rich.console import Console

from minipaged import atomic_write
from minipaged.grader.exercises import EXERCISES, exercise
from minipaged.grader.grading import Limits, grade

REPORT_NAME = "report.json"
MIN_MEMORY_GIB = 1.0
"""Less address space than this and the grading child cannot start Python and torch."""
MAX_SECONDS = 86_400.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    exercises = sub.add_parser(
        "exercises",
        help="classroom exercises: list them, copy one out, or check a student's work",
        description=f"{len(EXERCISES)} exercises, in order, each a README and starter files "
        "(tutorials/ in a source checkout). Copy one out with init, edit its files, then check "
        "them.",
    )
    actions = exercises.add_subparsers(dest="exercises_command", metavar="ACTION", required=True)
    actions.add_parser("list", help="the exercises, their folders and files")
    init = actions.add_parser(
        "init",
        help="copy exercise N's README and starter files into DIR",
        description="Copy exercise N's README and starter files out of the installed package "
        "into DIR (created; it must not hold the files already), then check them with "
        "`minipaged exercises check N --path DIR`.",
    )
    init.add_argument("number", type=int, help=f"the exercise, 1 to {max(EXERCISES)}")
    init.add_argument("directory", metavar="DIR", help="where to put the files")
    check = actions.add_parser(
        "check",
        help="grade exercise N: pass / fail / blocked per criterion, and a JSON report",
        description="Your code runs in a child process with a memory limit, a CPU-time limit "
        "and a wall-clock limit, confined by Landlock where Linux has it; the child only runs "
        "your functions and the grader judges what they return. Exit status 0 "
        "when no criterion failed (blocked ones, which need a GPU, do not count), 1 otherwise.",
    )
    check.add_argument("number", type=int, help=f"the exercise, 1 to {max(EXERCISES)}")
    where = check.add_mutually_exclusive_group()
    where.add_argument(
        "--path", type=Path, help="the folder holding your files (default: the starter folder)"
    )
    where.add_argument(
        "--solution", action="store_true", help="grade the library's own modules instead"
    )
    check.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help=f"where to write the report (default: {REPORT_NAME} in the graded folder; "
        "none for --solution)",
    )
    defaults = Limits()
    check.add_argument(
        "--memory-limit",
        type=float,
        metavar="GIB",
        help="address space the grading process may use, in GiB, at least "
        f"{MIN_MEMORY_GIB:g} and at most this machine's memory; inf for no limit (default "
        f"{defaults.memory_gib:g}, or the machine's memory if it has less)",
    )
    check.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        default=defaults.wall_seconds,
        help="wall-clock time the whole grading may take, in seconds, at most "
        f"{MAX_SECONDS:g} (a day); CPU time is capped at 1.5 times that; inf for no limit "
        f"(each check still stops after {defaults.check_seconds:g} s) (default "
        f"{defaults.wall_seconds:g})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except ModuleNotFoundError as error:
        if error.name != "hypothesis":
            raise
        raise ValueError(
            "the checks run hypothesis properties: install it with `pip install hypothesis`"
        ) from error


def _run(args: argparse.Namespace) -> int:
    console = Console(soft_wrap=True)
    if args.exercises_command == "list":
        console.print(listing(), markup=False, highlight=False)
        return 0
    if args.exercises_command == "init":
        copied = init(args.number, args.directory)
        console.print(
            f"exercise {args.number:02d}: {', '.join(copied)} in {args.directory}\n"
            f"next: read {Path(args.directory) / 'README.md'}, edit the files, then run "
            f"`minipaged exercises check {args.number} --path {args.directory}`",
            markup=False,
            highlight=False,
        )
        return 0
    limits = limits_from(args.memory_limit, args.time_limit)
    report = grade(args.number, args.path, args.solution, limits)
    report.render(console)
    target = args.json
    if target is None and not args.solution:
        target = (args.path or EXERCISES[args.number].starter) / REPORT_NAME
    if target is not None:
        try:
            note = report.save(target)
            console.print(f"report: {target}" + (f" ({note})" if note else ""), highlight=False)
        except OSError as error:  # an installed package's starter folder is not writable
            console.print(
                f"no report written ({error.strerror or error}: {target}); copy the exercise "
                f"out with "
                f"`minipaged exercises init {args.number} DIR`, or pass --json FILE",
                markup=False,
                highlight=False,
            )
    return 0 if report.passed else 1


def limits_from(memory_gib: float | None, seconds: float) -> Limits:
    """The ``Limits`` of ``--memory-limit`` and ``--time-limit``, each checked against the
    machine before anything is allocated; ``inf`` is no limit. Raises ``ValueError`` naming
    the flag, the value and the fix."""
    total = _machine_memory_gib()
    if memory_gib is None:
        memory_gib = min(Limits().memory_gib, total)
    if math.isnan(memory_gib) or (
        memory_gib != math.inf and not MIN_MEMORY_GIB <= memory_gib <= total
    ):
        raise ValueError(
            f"--memory-limit must be between {MIN_MEMORY_GIB:g} GiB (for Python and torch to "
            f"start) and this machine's {total:.1f} GiB, or inf for no limit; got {memory_gib:g}"
        )
    if math.isnan(seconds) or (seconds != math.inf and not 0 < seconds <= MAX_SECONDS):
        raise ValueError(
            f"--time-limit must be more than 0 and at most {MAX_SECONDS:g} seconds (a day), or "
            f"inf for no limit; got {seconds:g}"
        )
    unlimited = seconds == math.inf
    return Limits(
        memory_gib=None if memory_gib == math.inf else memory_gib,
        cpu_seconds=None if unlimited else int(1.5 * seconds) + 1,
        wall_seconds=seconds,
    )


def _machine_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def init(number: int, directory: str | Path) -> list[str]:
    """Copy exercise ``number``'s README and starter files into ``directory``; return their
    names. Refuses, changing nothing, when ``directory`` is not a folder that can hold them or
    any of them is there already (a symbolic link too, dangling or not: none is followed)."""
    ex = exercise(number)
    if not str(directory).strip():
        raise ValueError("exercises init needs a folder to copy into, got an empty name: give DIR")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file, not a folder: choose a new or empty folder")
    sources = [ex.starter.parent / "README.md"] + [ex.starter / name for name in ex.files]
    clashes = [s.name for s in sources if os.path.lexists(directory / s.name)]
    if clashes:
        raise ValueError(
            f"{directory} already holds {', '.join(clashes)}: choose an empty folder, or "
            f"check the work there with `minipaged exercises check {number} --path {directory}`"
        )
    contents = [(source.name, source.read_bytes()) for source in sources]
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in contents:
        atomic_write.create(directory / name, data)
    return [name for name, _ in contents]


def listing() -> str:
    """Two lines per exercise: its number and title, then its files and criteria."""
    lines = []
    for ex in EXERCISES.values():
        criteria = ex.criteria()
        elsewhere = sorted({c.runs_in for c in criteria} - {"process"})
        note = f", run in: {', '.join(elsewhere)}" if elsewhere else ""
        files = ", ".join(ex.files)
        lines.append(f"{ex.number:02d}  {ex.title}")
        lines.append(
            f"    tutorials/{ex.folder}/starter/: {files} ({len(criteria)} criteria{note})"
        )
    return "\n".join(lines)
