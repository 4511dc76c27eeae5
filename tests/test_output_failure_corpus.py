"""A command asked to write a file that it then cannot write exits non-zero, naming the path and
why, whatever the file: every output flag of every subcommand (found in the parser, so a new
one must join), and the files written without a flag (the default report, a batch's gradebook,
an exercise's starter files). The flags' paths pass their checks where they are typed; the disk
then fills up as the file is put in place, as it can on a shared machine."""

from __future__ import annotations

import argparse
import errno
import os
import types

import pytest

from minipaged import atomic_write, cli
from minipaged.grader.command import UNSAVED

FULL = os.strerror(errno.ENOSPC)


def output_flags(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(subcommand words, flag)`` for every argument whose value is a file or folder the
    command writes (``output_paths.output_file`` / ``output_folder``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from output_flags(sub, (*path, name))
        elif getattr(action.type, "__name__", "") in ("output_file", "output_folder"):
            yield " ".join(path), (action.option_strings or [action.dest])[0]


def argv(case: str, tmp_path) -> tuple[list[str], str]:
    """The command line of ``case`` and the path whose write must fail."""
    if case == "exercises check --json":
        return ["exercises", "check", "1", "--solution", "--json", f"{tmp_path}/r.json"], "r.json"
    if case == "exercises check --gradescope":
        out = f"{tmp_path}/results.json"
        return ["exercises", "check", "1", "--solution", "--gradescope", out], "results.json"
    if case == "exercises check DIR (its report.json)":
        assert cli.main(["exercises", "init", "1", str(tmp_path / "mine")]) == 0
        return ["exercises", "check", "1", str(tmp_path / "mine")], "report.json"
    if case.startswith("exercises check --batch"):
        assert cli.main(["exercises", "init", "1", str(tmp_path / "class" / "ada")]) == 0
        words = ["exercises", "check", "1", "--batch", str(tmp_path / "class")]
        return words, "report.json" if "report.json" in case else "gradebook"
    if case == "exercises init DIR":
        return ["exercises", "init", "1", str(tmp_path / "new")], "new"
    if case == "trace record file":
        trace = str(tmp_path / "run.jsonl")
        return ["trace", "record", trace, "--prompt", "It is", "--max-tokens", "2"], "run.jsonl"
    if case == "tui --screenshot":
        return ["tui", "--steps", "1", "--screenshot", str(tmp_path / "a.svg")], "a.svg"
    if case == "bench --out":
        return ["bench", "memory", "--quick", "--out", str(tmp_path / "out")], "out"
    raise AssertionError(f"no command line for {case}")


WITHOUT_A_FLAG = [
    "exercises check DIR (its report.json)",
    "exercises check --batch (its gradebook)",
    "exercises check --batch (only a student's report.json)",
    "exercises init DIR",
]
ONLY = {"exercises check --batch (only a student's report.json)": "report.json"}
"""Cases where only the file of that name cannot be written: the batch's other outputs can."""
CASES = [f"{words} {flag}" for words, flag in output_flags(cli.build_parser())] + WITHOUT_A_FLAG


def test_every_output_flag_is_a_case_here(tmp_path):
    for case in CASES:  # a flag added to a subcommand without a command line here fails
        if case not in WITHOUT_A_FLAG:
            argv(case, tmp_path)


@pytest.fixture
def fill_the_disk(monkeypatch):
    """Call it, and every file ``atomic_write`` puts in place from then on fails as on a full
    disk (its temporary file was made: the flags' checks pass, then the space runs out)."""

    def fill(only: str | None = None) -> list[str]:
        """From now on, every file (``only``: every file of that name) fails to be put in
        place; returns the list of the paths refused, filled as they are."""
        refused = []

        def no_space(source, target, *args, **kwargs):
            if only is not None and os.path.basename(target) != only:
                return os.replace(source, target, *args, **kwargs)
            refused.append(str(target))
            raise OSError(errno.ENOSPC, FULL, str(target))

        fake = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os)})
        fake.replace, fake.link = no_space, no_space
        monkeypatch.setattr(atomic_write, "os", fake)
        return refused

    return fill


@pytest.mark.parametrize("case", CASES)
def test_a_file_that_cannot_be_written_ends_the_command_non_zero_naming_it(
    case, tmp_path, capsys, fill_the_disk
):
    words, expected = argv(case, tmp_path)
    refused = fill_the_disk(ONLY.get(case))
    status = cli.main(words)
    printed = capsys.readouterr()
    said = printed.out + printed.err
    assert status != 0, f"{case} exited 0 though it wrote nothing:\n{said[-600:]}"
    if case.startswith("exercises check"):  # not 1, a failed criterion
        assert status == UNSAVED, f"{case} exited {status}"
    if "--batch" in case:  # each output the batch could not write is named, its and theirs
        unnamed = [path for path in refused if path not in said.replace("\n", "")]
        assert refused and not unnamed, f"{case} did not name {unnamed}: {said[-600:]}"
    lines = [line for line in said.splitlines() if FULL in line]
    assert lines, f"{case} did not say why: {said[-600:]}"
    assert expected in lines[-1], f"{case} did not name {expected}: {lines[-1]}"
    assert "Traceback" not in said


@pytest.mark.parametrize(
    "words",
    [["demo", "--no-pause"], ["exercises", "list"], ["simulate", "--requests", "3", "--json"]],
    ids=" ".join,
)
def test_a_reader_that_closes_the_output_ends_the_command_quietly(words):
    """``minipaged ... | true``: the reader is gone before the command writes; the command stops
    with status 1 and no error on the terminal (``simulate --json`` said "[Errno 32] Broken
    pipe"). The reader leaves before the command starts: each command's output fits in a pipe
    (1.7 to 14 KB), so a reader that read a byte first often left after the command's last
    write, and a command that did not handle a closed output passed."""
    import subprocess
    import sys

    command = [sys.executable, "-c", "import sys; from minipaged import cli; sys.exit(cli.main())"]
    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader: every write to the pipe fails with EPIPE
    try:
        done = subprocess.run(
            [*command, *words], stdout=write_end, stderr=subprocess.PIPE, timeout=300
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr.decode()) == (cli.OUTPUT_CLOSED, "")
