"""Nothing is written where the user did not say, nor before the input is known good: every file
the command line writes goes through ``minipaged.atomic_write`` (a temporary file beside the
target, renamed into place), which never follows a symbolic link and leaves an old file as it
was when a command is refused."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch

from minipaged import atomic_write, cli
from minipaged.grader import grading
from minipaged.grader.command import MAX_SECONDS, limits_from
from minipaged.grader.grading import CPU_PER_WALL, cpu_seconds_for


def linked(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A symbolic link ``name`` in a folder of its own, pointing at a file outside it."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    folder = tmp_path / "here"
    folder.mkdir(exist_ok=True)
    link = folder / name
    link.symlink_to(outside)
    return link, outside


def test_a_write_replaces_a_link_and_leaves_its_target_alone(tmp_path):
    link, outside = linked(tmp_path, "a.txt")
    note = atomic_write.write_text(link, "new\n")
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert outside.read_text() == "precious\n"
    assert "was a symbolic link: replaced" in note


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write.replacing(path) as replacement:
        replacement.file.write("half")
        raise RuntimeError("refused")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_create_never_writes_through_a_dangling_link(tmp_path):
    folder = tmp_path / "here"
    folder.mkdir()
    (folder / "README.md").symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(FileExistsError):
        atomic_write.create(folder / "README.md", b"x")
    assert not (tmp_path / "elsewhere.md").exists()


def test_a_report_json_that_is_a_link_is_replaced_not_followed(tmp_path, capsys):
    link, outside = linked(tmp_path, "report.json")
    assert cli.main(["exercises", "check", "1", "--solution", "--json", str(link)]) == 0
    assert outside.read_text() == "precious\n"
    assert json.loads(link.read_text())["passed"] is True
    assert "was a symbolic link: replaced by the file" in capsys.readouterr().out


def test_a_report_in_a_folder_that_does_not_exist_is_refused_before_grading(tmp_path, capsys):
    target = tmp_path / "no" / "such" / "report.json"
    assert cli.main(["exercises", "check", "1", "--solution", "--json", str(target)]) == 2
    out, err = capsys.readouterr()
    assert "PASS" not in out and f"its folder {target.parent} does not exist" in err
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("directory", ["", "   "])
def test_init_refuses_an_empty_folder_name_and_writes_nothing(
    directory, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["exercises", "init", "1", directory]) == 2
    assert "got an empty name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_init_never_follows_a_link_out_of_the_folder(tmp_path, capsys):
    folder = tmp_path / "ex01"
    folder.mkdir()
    (folder / "memory.py").symlink_to(tmp_path / "escaped.py")  # dangling: exists() is False
    assert cli.main(["exercises", "init", "1", str(folder)]) == 2
    assert "already holds memory.py" in capsys.readouterr().err
    assert not (tmp_path / "escaped.py").exists()
    assert sorted(p.name for p in folder.iterdir()) == ["memory.py"]  # README not written either


def test_init_refuses_a_file_for_a_folder(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert cli.main(["exercises", "init", "1", str(tmp_path / "afile")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_a_refused_trace_record_leaves_the_existing_trace(tmp_path, capsys):
    existing = tmp_path / "run.jsonl"
    before = '{"format": "minipaged-trace", "version": 2, "model": "recorded before"}\n'
    existing.write_text(before)  # a trace: anything else is refused before the prompt is read
    assert cli.main(["trace", "record", str(existing), "--prompt", ""]) == 2
    assert "the prompt is empty" in capsys.readouterr().err
    assert existing.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]


def test_a_trace_recorded_to_a_link_replaces_the_link(tmp_path):
    link, outside = linked(tmp_path, "run.jsonl")
    args = ["trace", "record", str(link), "--prompt", "It is", "--max-tokens", "3"]
    assert cli.main(args) == 0
    assert outside.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text().startswith('{"format"')


def test_a_bench_plot_replaces_a_link(tmp_path):
    from minipaged.study.bench import plot

    link, outside = linked(tmp_path, "waste.svg")
    fig, _ = plot.figure()
    assert plot.save(fig, link.parent, "waste") == link
    assert outside.read_text() == "precious\n"
    assert link.read_text().startswith("<?xml")


@pytest.mark.slow
def test_a_tui_screenshot_replaces_a_link_and_refuses_a_missing_folder(tmp_path, capsys):
    link, outside = linked(tmp_path, "shot.svg")
    assert cli.main(["tui", "--screenshot", str(link), "--steps", "1"]) == 0
    assert outside.read_text() == "precious\n"
    assert "<svg" in link.read_text()
    missing = tmp_path / "nowhere" / "shot.svg"
    assert cli.main(["tui", "--screenshot", str(missing)]) == 2
    assert "its folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("memory", "seconds", "words"),
    [
        (1e12, 600.0, "--memory-limit must be between 1 GiB"),
        (0.0, 600.0, "--memory-limit must be between 1 GiB"),
        (-2.0, 600.0, "--memory-limit must be between 1 GiB"),
        (math.nan, 600.0, "got nan"),
        (4.0, 0.0, "--time-limit must be more than 0"),
        (4.0, -1.0, "--time-limit must be more than 0"),
        (4.0, math.nan, "--time-limit must be more than 0"),
        (4.0, 1e300, f"at most {MAX_SECONDS:g} seconds"),
    ],
)
def test_a_limit_the_machine_cannot_give_is_refused_in_one_line(memory, seconds, words):
    with pytest.raises(ValueError, match=words):
        limits_from(memory, seconds)


def test_inf_means_no_limit():
    limits = limits_from(math.inf, math.inf)
    assert (limits.memory_gib, limits.cpu_seconds, limits.wall_seconds) == (None, None, math.inf)
    assert limits_from(None, 60.0).memory_gib <= 8.0  # the default, or the machine's memory


@pytest.mark.parametrize("seconds", [0.001, 0.5, 1.0, 60.0, 600.0, MAX_SECONDS])
def test_the_command_line_and_the_library_cap_cpu_time_by_one_rule(seconds):
    """The CPU cap a typed --time-limit gets is the one ``Limits`` gets for the same wall
    time (the command line once gave 901 s where the library's default is 900)."""
    assert limits_from(None, seconds).cpu_seconds == cpu_seconds_for(seconds) >= 1
    default = grading.Limits()
    assert limits_from(None, default.wall_seconds).cpu_seconds == default.cpu_seconds
    assert cpu_seconds_for(seconds) >= CPU_PER_WALL * seconds


def test_check_with_no_limits_grades(capsys):
    args = ["exercises", "check", "1", "--solution", "--time-limit", "inf", "--memory-limit", "inf"]
    assert cli.main(args) == 0
    assert "8 pass, 0 fail" in capsys.readouterr().out


PACKAGES = ("minipaged", "cuda_kernels", "tui")
DIRECT_WRITE = re.compile(
    r"(?<!atomic_write)\.write_(text|bytes)\("  # pathlib's, not atomic_write's
    r"|\bopen\([^)]*[\"'][wax]b?\+?[\"']"  # open for writing
    r"|\bsave_file\(|torch\.save\(|\.tokenizer\.save\("  # safetensors, torch, tokenizers
    r"|\.savefig\((?!replacement\.file)|json\.dump\((?!.*sys\.stdout)"
)
PRIVATE_FOLDERS = {
    "minipaged/grader/child_process.py": "the child's output, in the grading folder mkdtemp made",
    "minipaged/grader/gradebook.py": "each grading's output, in the batch's TemporaryDirectory",
}
"""Files that write only inside a temporary folder they made themselves, which no one else can
have put a link into."""


def test_every_file_the_project_writes_goes_through_atomic_write():
    """The class of "a write that follows a link or leaves half a file": no module of the
    package writes a file directly, except into a temporary folder of its own."""
    root = Path(atomic_write.__file__).parents[1]
    direct = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name == "minipaged/atomic_write.py" or name in PRIVATE_FOLDERS:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if DIRECT_WRITE.search(line):
                    direct.append(f"{name}:{number}: {line.strip()}")
    assert direct == []


def test_a_saved_checkpoint_replaces_links_and_leaves_their_targets_alone(tmp_path):
    from minipaged.checkpoint import (
        CONFIG_FILE,
        TOKENIZER_FILE,
        WEIGHTS_FILE,
        load_model,
        model_directory,
        save_model,
    )
    from minipaged.tokenizer import Tokenizer

    model = load_model("tiny")
    tokenizer = Tokenizer(model_directory("tiny"))
    out = tmp_path / "copy"
    out.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    for name in (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE):
        (out / name).symlink_to(outside)
    save_model(model, tokenizer, out)
    assert outside.read_text() == "precious\n"
    for name in (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE):
        assert not (out / name).is_symlink()
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~_umask()
    reloaded = load_model(out)
    for (name, a), (_, b) in zip(
        model.state_dict().items(), reloaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
