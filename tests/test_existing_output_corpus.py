"""A file already where an output goes, that the command did not write. Every output is put in
place of its name (``minipaged.atomic_write``), so ``minipaged trace record notes.txt``
replaced the notes without a word, and so did ``tui --screenshot diagram.svg`` and
``exercises check --json notes.json``. Now each output replaces only what the command wrote
itself (a trace, a terminal's SVG, a report: ``output_paths.check_replaceable``), or anything
with ``--force``; refused before any work, in one line that names the path and both ways out,
with status 2, the file left as it was and nothing else made. A file with nothing to lose (an
empty one, a symbolic link, which is replaced and its target left alone) is replaced as
before."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from test_output_failure_corpus import output_flags
from test_output_paths_corpus import OUTPUTS, refused

from minipaged import cli, trace
from minipaged.grader.report_files import is_report
from minipaged.output_paths import HEAD_BYTES, check_replaceable
from tui.command import keep_spaces
from tui.shown_run import is_screenshot

NOT_OURS = {
    "notes": b"my notes, named like an output\n",
    "a JSON config": b'{"hidden_size": 64, "vocab_size": 2048}\n',
    "binary": bytes(range(256)) * 8,
    "another program's SVG": b'<svg xmlns="http://www.w3.org/2000/svg"><circle r="4"/></svg>\n',
    "a JSON line of another format": b'{"format": "other-trace", "version": 2}\n{}\n',
    "a report of another tool": b'{"score": 10, "tests": []}\n',
}
"""Files no minipaged command wrote, one of each kind an output could be mistaken for."""


def test_every_file_output_is_tried_here():
    flags = {f"{words} {flag}" for words, flag in output_flags(cli.build_parser())}
    assert flags - {"bench --out"} == set(OUTPUTS)  # a folder is made, not replaced


@pytest.mark.parametrize("content", NOT_OURS)
@pytest.mark.parametrize("output", OUTPUTS)
def test_a_file_the_command_did_not_write_is_refused_naming_it_and_force(
    output, content, tmp_path, capsys
):
    target = tmp_path / "out"
    target.write_bytes(NOT_OURS[content])
    line = refused(OUTPUTS[output](tmp_path, target), capsys, str(target), "--force")
    assert "is there and is not" in line and "name another file" in line
    assert target.read_bytes() == NOT_OURS[content]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary file either


def test_force_replaces_a_file_that_is_no_trace(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_bytes(NOT_OURS["notes"])
    argv = ["trace", "record", str(target), "--prompt", "It is", "--max-tokens", "2"]
    assert cli.main([*argv, "--force"]) == 0, capsys.readouterr().err
    assert trace.load(target).steps
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_trace_is_recorded_again_over_a_trace_without_force(tmp_path, capsys):
    target = tmp_path / "run.jsonl"
    argv = ["trace", "record", str(target), "--prompt", "It is", "--max-tokens", "2"]
    assert cli.main(argv) == 0
    first = target.read_bytes()
    assert cli.main([*argv, "--max-tokens", "3"]) == 0, capsys.readouterr().err
    assert target.read_bytes() != first and trace.load(target).steps


@pytest.mark.parametrize("what", ["an empty file", "a link to notes"])
def test_what_has_nothing_to_lose_is_replaced_without_force(tmp_path, capsys, what):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(NOT_OURS["notes"])
    target = tmp_path / "run.jsonl"
    if what == "an empty file":
        target.touch()
    else:
        target.symlink_to(notes)
    argv = ["trace", "record", str(target), "--prompt", "It is", "--max-tokens", "2"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert not target.is_symlink() and trace.load(target).steps
    assert notes.read_bytes() == NOT_OURS["notes"]  # the link's target is left alone


def test_force_means_a_screenshot_and_is_refused_without_one(capsys):
    line = refused(["tui", "--force"], capsys, "--force", "--screenshot")
    assert "is for" in line


def test_force_is_not_taken_beside_batch_whose_gradebook_has_its_own_rule(tmp_path, capsys):
    refused(["exercises", "check", "1", "--batch", str(tmp_path), "--force"], capsys, "--batch")


def test_what_each_command_writes_is_what_it_may_replace():
    """Each rule recognises the command's own output: a trace's header line (however long
    its prompts), Rich's SVG as the TUI saves it, a report and Gradescope's results."""
    from rich.console import Console

    from minipaged.grader.gradebook import gradescope

    line = trace.header_line({"prompts": ["x" * HEAD_BYTES]}, trace.KEYFRAME_EVERY)
    assert trace.starts_a_trace(line.encode()[:HEAD_BYTES])
    assert trace.starts_a_trace(trace.header_line({}, 4).encode() + b'{"step": 1}\n')
    console = Console(record=True, width=20, file=io.StringIO())
    console.print("It is")
    assert is_screenshot(keep_spaces(console.export_svg()).encode())
    report = {
        "exercise": 1,
        "title": "t",
        "graded": "x",
        "graded_at": "now",
        "minipaged_version": "0",
        "seconds": 1.0,
        "confinement": "",
        "score": 1,
        "max_score": 2,
        "criteria": [],
    }
    assert is_report(json.dumps(report, indent=2).encode())
    assert is_report(json.dumps(gradescope(report), indent=2).encode())
    for content in NOT_OURS.values():
        assert not (trace.starts_a_trace(content) or is_screenshot(content) or is_report(content))


def test_a_file_that_cannot_be_read_is_refused_saying_so(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    target = tmp_path / "run.jsonl"
    target.write_bytes(NOT_OURS["notes"])
    target.chmod(0)
    with pytest.raises(ValueError, match=r"cannot be read \(Permission denied\).*--force"):
        check_replaceable("the trace", Path(target), "a minipaged trace", bool, force=False)
    check_replaceable("the trace", Path(target), "a minipaged trace", bool, force=True)


def test_the_graded_folders_own_report_is_replaced_whatever_stands_there(tmp_path, capsys):
    """``report.json`` in the graded folder is the grader's: a report a student planted there
    (claiming every point) must be replaced by the real one, never kept by this rule."""
    folder = tmp_path / "mine"
    assert cli.main(["exercises", "init", "1", str(folder)]) == 0
    planted = b'{"score": 100, "passed": true}\n'
    (folder / "report.json").write_bytes(planted)
    assert cli.main(["exercises", "check", "1", str(folder)]) in (0, 1)
    report = json.loads((folder / "report.json").read_text())
    assert "minipaged_version" in report and "Traceback" not in capsys.readouterr().err
