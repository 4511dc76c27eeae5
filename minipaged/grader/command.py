"""``minipaged exercises``: list the exercises, print one's hints, copy one out, or grade one,
or a class's.

``minipaged exercises hint N [--tier 2]`` prints exercise N's hints, the second tier only when
asked (``minipaged.grader.handout.hints``). ``minipaged exercises init N DIR`` copies exercise
N's README and starter files out of the installed package into ``DIR``
(``minipaged.grader.handout``), so a student who installed minipaged without a source checkout
can begin. ``minipaged exercises check N`` grades the
student's copy of exercise N: the folder it is run in when that holds the exercise's files (one
``init`` made), else the starter files in ``tutorials/`` of a source checkout, which a student
edits in place; ``--path DIR`` for a copy elsewhere; ``--solution`` for the library's own
modules. It runs the student's code in a child process with time and memory limits, prints
pass / fail / blocked per criterion with what was wrong and the points, writes a JSON report
(and, with ``--gradescope``, Gradescope's ``results.json``), and exits 0 when no criterion
failed, 1 otherwise, 3 when a report could not be written. ``--batch DIR`` grades every
sub-folder of ``DIR`` and writes a gradebook beside it (``minipaged.grader.gradebook``).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from minipaged.arguments import excludes, integer, named_path, naming, real
from minipaged.grader.exercises import EXERCISES, exercise
from minipaged.grader.grading import CPU_PER_WALL, Limits, cpu_seconds_for, grade, platform_problem
from minipaged.grader.report import printable
from minipaged.grader.report_files import check_reports_replaceable, save
from minipaged.grader.student_folder import folder_of, graded_code
from minipaged.output_paths import add_force_flag, check_outputs_apart, output_file
from minipaged.typed_numbers import read_integer

REPORT_NAME = "report.json"
UNSAVED = 3
"""``check``'s exit status when the grade was printed but a report could not be written: not
0, so a script that reads the report does not go on without one, and not 1, a failed
criterion."""
MIN_MEMORY_GIB = 1.0
"""Less address space than this and the grading child cannot start Python and torch."""
MAX_SECONDS = 86_400.0


def _site_url(text: str) -> str:
    from minipaged.grader.handout import site_url

    try:
        return site_url(text, "")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).strip()) from None


_site_url.__name__ = "text"  # a string checked as it is typed (tests/test_cli_corpus.py)


_SITE_URL_OPTION = {
    "type": _site_url,
    "metavar": "URL",
    "help": "where the site is published, for the links to its pages (default: "
    "$MINIPAGED_SITE_URL if set, else the project's site)",
}


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
        "into DIR (created; it must not hold the files already), then, inside DIR, check them "
        "with `minipaged exercises check N`.",
    )
    init.add_argument(
        "number",
        type=exercise_number("init N DIR"),
        metavar="N",
        help=f"the exercise, 1 to {max(EXERCISES)}",
    )
    init.add_argument("directory", metavar="DIR", help="where to put the files")
    init.add_argument("--site-url", **_SITE_URL_OPTION)
    hint = actions.add_parser(
        "hint",
        help="print exercise N's hints; --tier 2 for the second tier, when still stuck",
        description="Print the hints of exercise N: the README's own (tier 1), or the second "
        "tier, kept out of the README, to read only after trying the first.",
    )
    hint.add_argument(
        "number",
        type=exercise_number("hint N"),
        metavar="N",
        help=f"the exercise, 1 to {max(EXERCISES)}",
    )
    hint.add_argument(
        "--tier", type=integer(1, 2), default=1, help="1 (the README's hints) or 2 (more)"
    )
    check = actions.add_parser(
        "check",
        help="grade exercise N: pass / fail / blocked per criterion, points, a JSON report",
        description="Your code runs in a child process with a memory limit, a CPU-time limit "
        "and a wall-clock limit, confined by Landlock where Linux has it; the child only runs "
        "your functions and the grader judges what they return. Exit status 0 "
        "when no criterion failed (blocked ones, which need a GPU, do not count), 1 otherwise, "
        f"{UNSAVED} when a report could not be written.",
    )
    check.add_argument(
        "number",
        type=exercise_number("check N [DIR]"),
        metavar="N",
        help=f"the exercise, 1 to {max(EXERCISES)}",
    )
    check.add_argument(
        "directory",
        nargs="?",
        metavar="DIR",
        type=named_path("a folder"),
        help="the folder holding your files, as init made it (the same as --path DIR)",
    )
    where = check.add_mutually_exclusive_group()
    where.add_argument(
        "--path",
        type=named_path("a folder"),
        help="the folder holding your files (default: the folder you are in, when it holds "
        "them, as one made by init does; else, in a source checkout, the starter folder)",
    )
    where.add_argument(
        "--solution", action="store_true", help="grade the library's own modules instead"
    )
    batch = where.add_argument(
        "--batch",
        type=named_path("a folder"),
        metavar="DIR",
        help="grade every sub-folder of DIR, one per student, and write gradebook.csv and "
        "gradebook.json beside DIR",
    )
    check.add_argument(
        "--json",
        type=output_file("a report file"),
        metavar="FILE",
        help=f"where to write the report (default: {REPORT_NAME} in the graded folder; "
        "none for --solution)",
    )
    check.add_argument(
        "--gradescope",
        type=output_file("a results file"),
        metavar="FILE",
        help="also write the report as Gradescope's results.json to FILE "
        "(/autograder/results/results.json in a Gradescope autograder)",
    )
    force = add_force_flag(check, "a report")
    excludes(force, batch, "a class's gradebook replaces only a gradebook of that class")
    check.add_argument(
        "--jobs",
        type=integer(1, 256),
        metavar="N",
        help="with --batch: students graded at once (default: half this machine's CPUs, at "
        "least 1)",
    )
    check.add_argument(
        "--first-failure",
        action="store_true",
        help="stop at the first criterion that fails; the rest are reported as not run "
        "(faster while you work on one part; not with --batch)",
    )
    defaults = Limits()
    check.add_argument(
        "--memory-limit",
        type=limit,
        metavar="GIB",
        help="address space the grading process may use, in GiB, at least "
        f"{MIN_MEMORY_GIB:g} and at most this machine's memory; inf for no limit (default: "
        f"{defaults.memory_gib:g}, or the machine's memory if it has less)",
    )
    check.add_argument(
        "--time-limit",
        type=limit,
        metavar="SECONDS",
        default=defaults.wall_seconds,
        help="wall-clock seconds the grading of one submission may take, its processes' starts "
        f"not counted, at most {MAX_SECONDS:g} (a day); CPU time is capped at {CPU_PER_WALL:g} "
        f"times that; inf for no limit; each check stops after {defaults.check_seconds:g} s",
    )


limit = real(0, above=True, inf="for no limit")
"""An argparse type for ``--memory-limit`` / ``--time-limit``: a number above 0 by the one rule
for a typed number, or ``inf`` for none; ``limits_from`` checks it against the machine."""
limit.__name__ = "limit"  # judged after parsing, against the machine (test_cli_corpus)


def exercise_number(usage: str) -> Callable[[str], int]:
    """An argparse type for the number N of an exercise, refused where it is typed when it
    names none. ``usage`` is the action's words (``check N [DIR]``), shown when N is not a
    number: most often the folder typed first, and N after it."""

    def parse(word: str) -> int:
        try:
            number = read_integer(word)  # the one rule for a typed integer
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"N is the exercise's number, 1 to {max(EXERCISES)}, got {word!r:.60}; it comes "
                f"first: `minipaged exercises {usage}` (`minipaged exercises list` shows them)"
            ) from None
        try:
            exercise(number)
        except ValueError as error:  # its words: the exercises there are
            raise argparse.ArgumentTypeError(str(error)) from None
        return number

    parse.__name__ = "integer"
    return parse


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
    if args.exercises_command == "hint":
        from minipaged.grader.handout import hints

        console.print(hints(args.number, args.tier), markup=False, highlight=False)
        return 0
    if args.exercises_command == "init":
        from minipaged.grader.handout import default_site, init, typed_back

        copied = init(args.number, args.directory, args.site_url or default_site())
        unmet = exercise(args.number).unmet()
        folder = typed_back(args.directory)
        console.print(
            f"exercise {args.number:02d}: {', '.join(copied)} in {args.directory}\n"
            f"next: read {typed_back(Path(args.directory) / 'README.md')}, edit the "
            f"files, then inside {folder} run `minipaged exercises check {args.number}`"
            + (f"\nbefore you check it: {unmet}" if unmet else ""),
            markup=False,
            highlight=False,
        )
        return 0
    exercise(args.number)  # an unknown exercise is refused before anything else
    if args.directory is not None:  # `check N DIR`, the way `init N DIR` made it
        given = [f for f, v in (("--path", args.path), ("--batch", args.batch)) if v is not None]
        given += ["--solution"] if args.solution else []
        if given:
            raise ValueError(
                f"the folder {args.directory} and {given[0]} both say what to grade: give one"
            )
        args.path = args.directory
    problem = platform_problem()
    if problem:
        raise ValueError(problem)
    limits = limits_from(args.memory_limit, args.time_limit)
    if args.batch is not None:
        if args.first_failure:
            raise ValueError(
                "--first-failure is for checking your own work: a --batch grade runs every "
                "criterion of every student; leave --first-failure out"
            )
        return _batch(args, limits, console)
    if args.jobs is not None:
        raise ValueError("--jobs is for --batch: give --batch DIR, or leave --jobs out")
    if args.path is not None and args.directory is None:  # named by its flag, as DIR is not
        with naming("--path"):
            folder_of(args.number, args.path)
    target = args.json
    if target is None and not args.solution:
        target = folder_of(args.number, args.path) / REPORT_NAME
    outputs = [("--json" if args.json else "the report", target), ("--gradescope", args.gradescope)]
    check_outputs_apart(outputs, graded_code(args.number, args.path, args.solution))
    # Typed ones only: report.json in the graded folder is the grader's, whatever stands there
    check_reports_replaceable(
        [("--json", args.json), ("--gradescope", args.gradescope)], args.force
    )
    report = grade(args.number, args.path, args.solution, limits, args.first_failure)
    report.render(console)
    written = [(target, report.to_dict())] if target is not None else []
    if args.gradescope is not None:
        from minipaged.grader.gradebook import gradescope

        written.append((args.gradescope, gradescope(report.to_dict())))
    owned = {target} if args.json is None else set()  # the graded folder's: see above
    saved = [
        save(console, args.number, path, document, force=args.force or path in owned)
        for path, document in written
    ]
    if not all(saved):  # the grade is printed above, but a file asked for is missing
        return UNSAVED
    return 0 if report.passed else 1


def _batch(args: argparse.Namespace, limits: Limits, console: Console) -> int:
    """Grade every sub-folder of ``--batch DIR`` with a progress bar; write the gradebook."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from minipaged.grader.gradebook import (
        check_gradebook_replaceable,
        grade_batch,
        submissions,
        write_gradebook,
    )

    for flag, value in (("--json", args.json), ("--gradescope", args.gradescope)):
        if value is not None:
            raise ValueError(
                f"{flag} writes one submission's report; with --batch every student's report "
                "goes into their folder and gradebook.json holds them all: leave it out"
            )
    folders = submissions(args.number, args.batch)
    check_gradebook_replaceable(args.number, args.batch)  # before anyone is graded
    jobs = args.jobs or max(1, (os.cpu_count() or 2) // 2)
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"grading exercise {args.number:02d}", total=len(folders))

        def done(row) -> None:
            line = f"{row.student}: {row.status}, {row.total} points, {row.seconds:g} s"
            line += f" ({row.cause})" if row.cause else ""
            progress.console.print(printable(line), markup=False, highlight=False)
            progress.advance(task)

        rows = grade_batch(args.number, args.batch, limits, jobs, done)
    unsaved = [f"{row.student}'s report ({row.unsaved})" for row in rows if row.unsaved]
    try:
        paths = write_gradebook(args.number, args.batch, rows)
        console.print(f"gradebook: {paths[0]} and {paths[1]}", highlight=False)
    except (OSError, ValueError) as error:  # ValueError: something not ours appeared there
        unsaved.append(f"the gradebook ({error})")
    for what in unsaved:  # the grades are printed above, but files asked for are missing
        console.print(printable(f"not written: {what}"), markup=False, highlight=False)
    return UNSAVED if unsaved else 0


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
        cpu_seconds=None if unlimited else cpu_seconds_for(seconds),
        wall_seconds=seconds,
    )


def _machine_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


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
