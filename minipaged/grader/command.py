"""``minipaged exercises``: list the exercises, or grade one.

``minipaged exercises check N`` grades the student's copy of exercise N (by default the starter
files in ``tutorials/``, which the student edits in place; ``--path DIR`` for a copy elsewhere;
``--solution`` for the library's own modules), prints pass / fail / blocked per criterion with
what was wrong, writes a JSON report, and exits 0 when no criterion failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from minipaged.grader.exercises import EXERCISES
from minipaged.grader.grading import grade

REPORT_NAME = "report.json"


def add_parser(sub: argparse._SubParsersAction) -> None:
    exercises = sub.add_parser(
        "exercises",
        help="classroom exercises: list them, or check a student's work",
        description="Nine exercises, each a folder under tutorials/ with a README and starter "
        "files. Edit the starter files, then check them.",
    )
    actions = exercises.add_subparsers(dest="exercises_command", metavar="ACTION", required=True)
    actions.add_parser("list", help="the exercises, their folders and files")
    check = actions.add_parser(
        "check",
        help="grade exercise N: pass / fail / blocked per criterion, and a JSON report",
        description="Exit status 0 when no criterion failed (blocked ones, which need a GPU, "
        "do not count), 1 otherwise.",
    )
    check.add_argument("number", type=int, help="the exercise, 1 to 9")
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
    report = grade(args.number, args.path, args.solution)
    report.render(console)
    target = args.json
    if target is None and not args.solution:
        target = (args.path or EXERCISES[args.number].starter) / REPORT_NAME
    if target is not None:
        report.save(target)
        console.print(f"report: {target}", highlight=False)
    return 0 if report.passed else 1


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
