"""A peer's test of DESIGN.md's command line: ``minipaged tui``, ``generate``, ``simulate``,
``bench``, ``trace`` (record / replay) and ``exercises``.

Each command's ``--help`` and one real run, in-process through ``minipaged.cli.main(argv)``
(which returns the exit status), with the sizes the docs' command-line page offers for tests
(``bench --quick``, a small ``simulate``, a screenshot of the TUI's second step).
"""

from __future__ import annotations

import json

import pytest

from minipaged import cli

COMMANDS = ("tui", "generate", "simulate", "bench", "trace", "exercises")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: minipaged {command}")


def test_the_top_level_help_lists_the_six_commands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


def test_generate_prints_the_text_and_the_memory_summary(capsys):
    status = cli.main(
        [
            "generate",
            "--prompt",
            "Emma",
            "--max-tokens",
            "4",
            "--n",
            "2",
            "--backend",
            "torch",
            "--block-size",
            "4",
        ]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert "Emma" in out
    assert "fork" in out.lower()


def test_trace_records_a_run_and_replays_it(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    record = [
        "trace",
        "record",
        str(path),
        "--prompt",
        "Emma",
        "--n",
        "2",
        "--max-tokens",
        "3",
        "--backend",
        "torch",
    ]
    assert cli.main(record) == 0
    lines = path.read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    capsys.readouterr()
    assert cli.main(["trace", "replay", str(path)]) == 0
    assert "fork" in capsys.readouterr().out.lower()


def test_simulate_compares_the_allocators(capsys):
    assert cli.main(["simulate", "--requests", "20"]) == 0
    out = capsys.readouterr().out.lower()
    for allocator in ("static", "orca", "paged"):
        assert allocator in out


def test_bench_quick_prints_a_table(tmp_path, capsys):
    assert cli.main(["bench", "memory", "--quick", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip()


def test_exercises_list_and_init(tmp_path, capsys):
    assert cli.main(["exercises", "list"]) == 0
    assert capsys.readouterr().out.strip()
    assert cli.main(["exercises", "init", "1", str(tmp_path / "ex1")]) == 0
    assert any((tmp_path / "ex1").iterdir())


def test_tui_writes_a_screenshot_of_a_step(tmp_path):
    out = tmp_path / "step.svg"
    assert cli.main(["tui", "--screenshot", str(out), "--steps", "2"]) == 0
    assert out.read_text().lstrip().startswith("<svg")


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--prompt", "Emma", "--block-size", "0"],
        ["generate", "--prompt", "Emma", "--preemption", "evict"],
        ["frobnicate"],
        ["trace", "replay", "no-such-file.jsonl"],
    ],
)
def test_bad_usage_is_status_two_and_one_line(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "Traceback" not in err
