"""Every command a reader is told to type runs as written and does what the page says.

The pages are the README, every page under ``docs/`` and every Markdown file under
``tutorials/`` (the exercises' statements and hints). Their commands are the lines of each
```` ```bash ````, ```` ```sh ````, ```` ```shell ```` and ```` ```console ```` fence (in a
console fence, the lines after ``$``). The conventions:

- A page's fences run in order as one shell session, as a student at one terminal would type
  them, in a fresh folder that looks like the clone's root (a link to each of its top-level
  files and folders), so that a file one command writes (``run.jsonl``) is there for the next.
- The commands are the project's, from a ``.venv/bin`` of stand-ins first on ``PATH``:
  ``minipaged``, ``python`` and ``python3`` are this checkout's, except where a command would
  wait for a person or take minutes: ``minipaged tui`` takes a screenshot of its first step
  (``--screenshot``, ``--steps 1``) instead of opening the interactive app, ``python -m pytest``
  only collects its tests (``--collect-only``), ``make`` prints what it would run (``make -n``),
  and ``python`` alone reads an empty input. ``pip`` is refused: a test installs nothing.
- Each command must end with status 0, but ``minipaged exercises check`` of work not yet done,
  whose status 1 (a criterion failed) is what the pages promise; a count a command's comment
  promises (``# 0 pass, 8 fail``) must be printed.
- ``<!-- commands-not-run: REASON -->`` on the line before a fence leaves it out, for REASON
  (it installs packages, runs on Gradescope's machine, takes many minutes); each
  ``minipaged`` and ``python -m minipaged.train`` command in it is still read by the command
  line's parser: its subcommands and every option it names must exist, so a renamed option
  or a removed subcommand fails here too.
- ``<!-- commands-need-a-gpu -->`` on the line before a fence runs it only where PyTorch sees
  a CUDA GPU: elsewhere (CI, most laptops) what it checks ("both libraries see the GPU") is
  not there to see, and the session goes on without it.
- ``<!-- run-in-shell -->`` marks a fence whose output the page shows: ``test_docs.py`` runs
  it and compares.

A renamed option, a removed subcommand, a scenario that is gone, or a file a later command
needs that an earlier one no longer writes, fails the page's test with the command and its
error.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from minipaged import train
from minipaged.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))  # read the fences as the site's build does
from markdown_fences import fence_spans  # noqa: E402

NOT_RUN = re.compile(r"^<!-- commands-not-run: (?P<reason>\S.*?) -->$")
NEEDS_A_GPU = "<!-- commands-need-a-gpu -->"
SHELLS = {"bash", "sh", "shell", "console"}
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "tutorials").rglob("*.md")]
)
TIMEOUT_S = 900
"""A whole page's commands: a few generations, screenshots and gradings on two busy cores."""


@dataclass(frozen=True)
class Block:
    """A shell fence of a page: where it starts (its first command's line), its lines, why it
    is not run (None: it is), and whether it needs a GPU."""

    page: str
    line: int
    commands: tuple[str, ...]
    not_run: str | None
    needs_a_gpu: bool = False


def blocks(path: Path) -> list[Block]:
    """The shell fences of the page at ``path``, less those ``test_docs.py`` runs."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for fence in fence_spans(lines, path.relative_to(ROOT).as_posix()):
        if fence.language not in SHELLS or fence.runs_in_shell:
            continue
        previous = next((s.strip() for s in reversed(lines[: fence.line - 2]) if s.strip()), "")
        marked = NOT_RUN.match(previous)
        commands = fence.body
        if fence.language == "console":
            commands = tuple(s.removeprefix("$ ") for s in commands if s.startswith("$ "))
        reason = marked and marked["reason"]
        found.append(Block(fence.page, fence.line, commands, reason, previous == NEEDS_A_GPU))
    return found


BLOCKS = {path.relative_to(ROOT).as_posix(): blocks(path) for path in PAGES}
RUN = sorted(page for page, found in BLOCKS.items() if any(b.not_run is None for b in found))
NOT_RUN_BLOCKS = [
    pytest.param(block, id=f"{block.page}:{block.line}")
    for found in BLOCKS.values()
    for block in found
    if block.not_run is not None
]


def test_the_pages_have_the_commands_this_test_runs():
    """The search finds the pages a student follows; a marker that names no reason is none."""
    assert {"README.md", "docs/course/index.md", "tutorials/README.md"} <= set(RUN)
    assert sum(len(found) for found in BLOCKS.values()) >= 25
    for path in PAGES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "commands-not-run" in line:
                assert NOT_RUN.match(line.strip()), f"{path}:{number}: give the reason: {line}"


def stand_ins(folder: Path, shots: Path) -> Path:
    """The ``.venv/bin`` of the conventions, in ``folder``; returns it."""
    real = Path(sys.executable).parent
    make = shutil.which("make") or "make"
    scripts = {
        "minipaged": f"""
if [ "$1" = tui ] && [[ " $* " != *" --screenshot"* && " $* " != *" --serve"* ]] \\
    && [[ " $* " != *" -h "* && " $* " != *" --help "* ]]; then
  set -- "$@" --screenshot "$(mktemp --suffix=.svg -p {shots} -u)" --steps 1
fi
exec {real}/minipaged "$@"
""",
        "python": f"""
if [ "$1" = -m ] && [ "$2" = pytest ]; then shift 2; set -- -m pytest --collect-only -q "$@"; fi
if [ $# -eq 0 ]; then exec {real}/python < /dev/null; fi
exec {real}/python "$@"
""",
        "make": f'exec {make} -n "$@"\n',
        "pip": 'echo "pip is not run here: mark the fence <!-- commands-not-run: ... -->" >&2\n'
        "exit 1\n",
    }
    scripts["python3"] = scripts["python"]
    bin_folder = folder / ".venv" / "bin"
    bin_folder.mkdir(parents=True)
    for name, body in scripts.items():
        script = bin_folder / name
        script.write_text("#!/bin/bash\n" + body)
        script.chmod(0o755)
    return bin_folder


def clone_root(folder: Path) -> None:
    """Make ``folder`` look like the clone's root: a link to each top-level entry but ``.venv``
    (the stand-ins') and what a command may write into."""
    for entry in ROOT.iterdir():
        if entry.name not in {".venv", ".git", "site", ".cache"}:
            (folder / entry.name).symlink_to(entry)


def session(page: str) -> tuple[str, dict[int, int]]:
    """The page's fences that run, as one bash script, and each script line's page line."""
    script = ["trap 'echo \"STATUS $? LINE $LINENO: $BASH_COMMAND\" >&2' ERR"]
    origin: dict[int, int] = {}
    for block in BLOCKS[page]:
        if block.not_run is not None or (block.needs_a_gpu and not gpu()):
            continue
        for offset, command in enumerate(block.commands):
            script.append(command)
            origin[len(script)] = block.line + offset
    return "\n".join(script) + "\n", origin


def gpu() -> bool:
    """Whether PyTorch sees a CUDA GPU here."""
    import torch

    return torch.cuda.is_available()


PROMISED_COUNT = re.compile(r"#.*?\b(\d+ pass, \d+ fail)\b")
"""A check's counts, promised in a command's comment."""

EXPECTED_FAILURE = re.compile(r"^minipaged exercises check (?!.*--solution)")
"""A check of unsolved work: status 1 is the outcome the pages promise."""


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN)
def test_every_command_on_the_page_runs_as_written(page, tmp_path):
    folder, shots = tmp_path / "clone", tmp_path / "shots"
    folder.mkdir()
    shots.mkdir()
    clone_root(folder)
    bin_folder = stand_ins(folder, shots)
    reports_before = set(ROOT.glob("tutorials/*/starter/report.json"))
    script, origin = session(page)
    env = {
        **os.environ,
        "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
    }
    try:
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    finally:  # a check of a starter in the checkout writes its report there (ignored by git)
        for report in set(ROOT.glob("tutorials/*/starter/report.json")) - reports_before:
            report.unlink()
    failed = []
    for status, line, command in re.findall(r"^STATUS (\d+) LINE (\d+): (.*)$", done.stderr, re.M):
        expected = status == "1" and EXPECTED_FAILURE.match(command) and "FAIL" in done.stdout
        if not expected:
            failed.append(f"{page}:{origin.get(int(line), '?')}: `{command}` ended with {status}")
    assert not failed, "\n".join(failed) + f"\n{done.stderr[-3000:]}"
    promised = [
        count
        for block in BLOCKS[page]
        if block.not_run is None
        for line in block.commands
        for count in PROMISED_COUNT.findall(line)
    ]
    for count in promised:
        assert count in done.stdout, f"{page}: no command printed the promised {count!r}"
    for shot in shots.iterdir():
        assert shot.read_text().lstrip().startswith("<svg"), f"{page}: {shot} is no screenshot"


def minipaged_commands(block: Block) -> list[tuple[argparse.ArgumentParser, list[str]]]:
    """Each ``minipaged`` and ``python -m minipaged.train`` command of ``block``, with the
    parser that reads it and its words."""
    found = []
    text = "\n".join(block.commands).replace("\\\n", " ")
    for line in text.splitlines():
        lexer = shlex.shlex(line.split(" # ")[0], posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        for i, word in enumerate(words):
            if word == "minipaged" or word.endswith("/minipaged"):
                found.append((build_parser(), _until_an_operator(words[i + 1 :])))
            elif word == "-m" and words[i + 1 : i + 2] == ["minipaged.train"]:
                found.append((train.build_parser(), _until_an_operator(words[i + 2 :])))
    return found


def _until_an_operator(words: list[str]) -> list[str]:
    end = next((i for i, w in enumerate(words) if set(w) <= set("|&;()<>")), len(words))
    return words[:end]


def unknown_words(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The subcommands and options of ``words`` that ``parser`` does not know."""
    unknown = []
    for word in words:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subparsers and not word.startswith("-"):
            if word not in subparsers[0].choices:
                return [*unknown, word]
            parser = subparsers[0].choices[word]
        elif word.startswith("--") and word.split("=")[0] not in parser._option_string_actions:
            unknown.append(word)
    return unknown


@pytest.mark.parametrize("block", NOT_RUN_BLOCKS)
def test_a_command_not_run_names_only_subcommands_and_options_that_exist(block):
    for parser, words in minipaged_commands(block):
        unknown = unknown_words(parser, words)
        assert not unknown, f"{block.page}:{block.line}: {' '.join(words)}: no {unknown}"


def test_the_parser_check_finds_a_renamed_option_and_a_removed_subcommand():
    block = Block(
        "x.md",
        1,
        (
            "minipaged exercises check 4 --path /a \\",
            "    --gradescope /b.json  # a comment --not-an-option",
            "for n in $(minipaged exercises list | grep -o x); do",
            "    minipaged exercises check $n --soluton",
            "done",
            "minipaged exercize list && python -m minipaged.train --stepz 3",
        ),
        "a reason",
    )
    found = [unknown_words(parser, words) for parser, words in minipaged_commands(block)]
    assert found == [[], [], ["--soluton"], ["exercize"], ["--stepz"]]
