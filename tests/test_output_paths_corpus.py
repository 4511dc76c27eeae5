"""Where a command writes, tried with paths that name something no written file may replace:
a FIFO, a device (through a link to ``/dev/null``), a socket, a link to a process's open file
(as ``/dev/stdout`` is), a folder; a file the command
reads (the code ``exercises check`` grades, the trace ``tui`` replays, the model ``trace
record`` runs); and the same file named by two outputs. Each is refused before any work, in
one line that names the path and the fix, with status 2, and what stood there is left as it
was. Every file is written by replacing its name (``minipaged.atomic_write``), so before this
rule ``trace record FIFO`` put a file in the FIFO's place (its reader waited for ever), and as
root ``--json /dev/null`` replaced ``/dev/null`` itself; ``--json DIR/memory.py`` put the
report in place of the student's code."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from minipaged import atomic_write, cli
from minipaged.arguments import LONGEST_MESSAGE
from minipaged.grader.exercises import EXERCISES

USAGE = 2


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def device(path: Path) -> Path:
    """A link to ``/dev/null``: a character device, reached without touching the real one."""
    path.symlink_to("/dev/null")
    return path


def unix_socket(path: Path) -> Path:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()  # the socket file stays
    return path


def stdout_link(path: Path) -> Path:
    """A link such as ``/dev/stdout``: here fd 1 is pytest's capture, a regular file, so only
    the link's own target tells it from a file."""
    path.symlink_to("/proc/self/fd/1")
    return path


def folder(path: Path) -> Path:
    path.mkdir()
    return path


KINDS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (fifo, "a FIFO"),
    "device": (device, "a character device"),
    "socket": (unix_socket, "a socket"),
    "stdout link": (stdout_link, "a link to a process's open file"),
    "folder": (folder, "a folder"),
}
"""What can stand where an output goes, how to make it, and the words that name it."""


def what_stands(path: Path) -> tuple:
    """What is at ``path``, to compare before and after: its kind, link and content."""
    st = os.lstat(path)
    link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    content = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
    return stat.S_IFMT(st.st_mode), st.st_ino, link, content


def refused(argv: list[str], capsys, *names: str) -> str:
    """Run ``minipaged ARGV``; assert one line on stderr, status 2, naming each of ``names``."""
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse's refusal where a value is typed
        status = exit_.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err[:600]!r}"
    assert status == USAGE, f"exit {status}: {lines[0][:300]!r}"
    assert len(lines[0]) < LONGEST_MESSAGE + 200
    for name in names:
        assert name in lines[0], f"the message should name {name!r}: {lines[0][:400]!r}"
    return lines[0]


def exercise_folder(tmp_path: Path, number: int = 1, name: str = "mine") -> Path:
    target = tmp_path / name
    assert cli.main(["exercises", "init", str(number), str(target)]) == 0
    return target


OUTPUTS: dict[str, Callable[[Path, Path], list[str]]] = {
    "trace record file": lambda tmp, out: ["trace", "record", str(out), "--prompt", "It is"],
    "tui --screenshot": lambda tmp, out: ["tui", "--steps", "1", "--screenshot", str(out)],
    "exercises check --json": lambda tmp, out: [
        *("exercises", "check", "1", "--solution", "--json", str(out))
    ],
    "exercises check --gradescope": lambda tmp, out: [
        *("exercises", "check", "1", "--solution", "--gradescope", str(out))
    ],
}
"""Every flag that names a file to write, with the rest of a command line that would run."""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("output", OUTPUTS)
def test_an_output_that_is_not_a_file_is_refused_where_it_is_typed_and_left_as_it_was(
    output, kind, tmp_path, capsys
):
    make, words = KINDS[kind]
    target = make(tmp_path / "out")
    before = what_stands(target)
    refused(OUTPUTS[output](tmp_path, target), capsys, str(target), words)
    assert what_stands(target) == before


def test_every_output_flag_is_tried_here():
    from test_output_failure_corpus import output_flags

    flags = {f"{words} {flag}" for words, flag in output_flags(cli.build_parser())}
    assert flags - {"bench --out"} == set(OUTPUTS)  # a folder's kinds: the next test


@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "stdout link"])
def test_an_output_folder_or_exercise_folder_that_is_not_one_is_named_for_what_it_is(
    kind, tmp_path, capsys
):
    make, words = KINDS[kind]
    target = make(tmp_path / "out")
    before = what_stands(target)
    refused(["bench", "memory", "--quick", "--out", str(target)], capsys, str(target), words)
    refused(["exercises", "init", "1", str(target)], capsys, str(target), words)
    assert what_stands(target) == before


@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "stdout link"])
def test_a_file_written_where_no_flag_was_checked_is_refused_and_left(kind, tmp_path):
    """``atomic_write`` itself refuses, for the files no flag names: a student's report.json,
    a gradebook beside the class."""
    make, words = KINDS[kind]
    target = make(tmp_path / "report.json")
    before = what_stands(target)
    with pytest.raises(OSError, match=f"{target}: it is {words}"):
        atomic_write.write_text(target, "{}\n")
    assert what_stands(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary left


def test_the_default_report_over_a_fifo_is_not_written_and_the_check_says_so(tmp_path, capsys):
    mine = exercise_folder(tmp_path)
    target = fifo(mine / "report.json")
    status = cli.main(["exercises", "check", "1", str(mine)])
    out = capsys.readouterr().out
    assert status == 3 and "no report written" in out and "a FIFO" in out
    assert stat.S_ISFIFO(os.lstat(target).st_mode)


def test_a_link_to_a_regular_file_is_still_replaced_and_its_file_left(tmp_path):
    """The rule judges what a link points to, and still replaces the link: nothing is written
    through it (``atomic_write``)."""
    kept = tmp_path / "kept.txt"
    kept.write_text("keep me\n")
    (tmp_path / "out.json").symlink_to(kept)
    assert "symbolic link" in atomic_write.write_text(tmp_path / "out.json", "{}\n")
    assert kept.read_text() == "keep me\n" and (tmp_path / "out.json").read_text() == "{}\n"


def graded(tmp_path: Path, name: str) -> tuple[list[str], Path]:
    """``(argv, path that must be left)`` for each way to name an input as an output."""
    mine = exercise_folder(tmp_path)
    (mine / "helpers.py").write_text("def round_up(a, b):\n    return -(-a // b)\n")
    (tmp_path / "link").symlink_to(mine, target_is_directory=True)
    check = ["exercises", "check", "1"]
    cases = {
        "--json over the graded file": ([*check, str(mine), "--json", f"{mine}/memory.py"], mine),
        "--json over their other code": ([*check, str(mine), "--json", f"{mine}/helpers.py"], mine),
        "--json through another spelling": (
            [*check, "--path", str(mine), "--json", f"{tmp_path}/link/./memory.py"],
            mine,
        ),
        "--gradescope over the graded file": (
            [*check, str(mine), "--gradescope", f"{mine}/memory.py"],
            mine,
        ),
        "--gradescope over the default report": (
            [*check, str(mine), "--gradescope", f"{mine}/report.json"],
            mine,
        ),
        "--json and --gradescope one file": (
            [
                *check,
                "--solution",
                "--json",
                f"{tmp_path}/r.json",
                "--gradescope",
                f"{tmp_path}/r.json",
            ],
            tmp_path,
        ),
    }
    return cases[name]


GRADED_CASES = {
    "--json over the graded file": ("--json", "memory.py", "code that is graded"),
    "--json over their other code": ("--json", "helpers.py", "code that is graded"),
    "--json through another spelling": ("--json", "memory.py", "code that is graded"),
    "--gradescope over the graded file": ("--gradescope", "memory.py", "code that is graded"),
    "--gradescope over the default report": ("--gradescope", "report.json", "the report"),
    "--json and --gradescope one file": ("--gradescope", "--json", "r.json", "its own file"),
}


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file at or below ``path``, by name, with its content."""
    if path.is_file():
        return {str(path): path.read_bytes()}
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", GRADED_CASES)
def test_a_report_named_for_a_file_check_reads_or_writes_is_refused_before_grading(
    case, tmp_path, capsys
):
    argv, kept = graded(tmp_path, case)
    before = snapshot(kept)
    refused(argv, capsys, *GRADED_CASES[case])
    assert snapshot(kept) == before  # nothing graded, nothing written, no report.json


def test_solution_reports_are_kept_off_the_library_modules_it_grades():
    """Tried on the rule, not the command: with the rule broken, the command would write its
    report over ``minipaged/memory.py`` of the checkout running the test."""
    import minipaged.memory
    from minipaged.grader.student_folder import graded_code
    from minipaged.output_paths import check_outputs_apart

    module = Path(minipaged.memory.__file__).resolve()
    library = graded_code(1, None, True)
    assert [path for _, path in library] == [module]
    with pytest.raises(ValueError, match=rf"--json {module} would replace .*a library module"):
        check_outputs_apart([("--json", module)], library)


def test_tui_refuses_a_screenshot_over_its_trace_or_the_exercise_it_runs(tmp_path, capsys):
    trace = tmp_path / "run.jsonl"
    trace.write_text('{"format": "minipaged-trace"}\n')
    screenshot = ["tui", "--steps", "1", "--screenshot"]
    refused([*screenshot, str(trace), "--trace", str(trace)], capsys, "--screenshot", "trace")
    assert trace.read_text() == '{"format": "minipaged-trace"}\n'
    mine = exercise_folder(tmp_path, 2, "ex02")
    before = snapshot(mine)
    code = str(mine / EXERCISES[2].files[0])
    refused([*screenshot, code, "--exercise", "2", "--path", str(mine)], capsys, code)
    assert snapshot(mine) == before


def test_trace_record_refuses_to_write_over_a_file_of_its_model(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"kept": true}\n')
    argv = ["trace", "record", str(model / "config.json"), "--model", str(model)]
    refused([*argv, "--prompt", "It is"], capsys, "config.json", "a file of the model")
    assert (model / "config.json").read_text() == '{"kept": true}\n'


def test_outputs_apart_from_each_other_and_the_inputs_pass(tmp_path):
    from minipaged.output_paths import check_outputs_apart

    (tmp_path / "memory.py").write_text("")
    (tmp_path / "out.json").symlink_to(tmp_path / "memory.py")  # replaced, not followed
    outputs = [("--json", tmp_path / "a.json"), ("--gradescope", tmp_path / "out.json")]
    check_outputs_apart([*outputs, ("--none", None)], [("graded", tmp_path / "memory.py")])
