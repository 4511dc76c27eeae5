"""``minipaged tui --exercise N`` runs, headless, for every N its help names, on a folder
``exercises init`` made, filled with the solution as a student would hand it in (and with
``--solution``, the library's own code, for one N); without the student's code it shows one
screen that says what to write and how to start. Each run records a grading child's run of
the model, so this file takes minutes.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest
from test_exercises import as_written_by_a_student

from minipaged import cli
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.grading import grade
from minipaged.models import model_directory
from tui.command import tui_parser

pytestmark = [
    pytest.mark.skipif(
        not (model_directory("tiny") / "model.safetensors").is_file(),
        reason="the embedded tiny model is not built (python -m minipaged.train)",
    ),
    # The library's code handed in as a student's: the copy check that would refuse it is off.
    pytest.mark.usefixtures("library_code_allowed"),
]


def named_in_the_help() -> list[int]:
    """The exercises ``minipaged tui --help`` says it runs: "(2, 3, 4, 5 or 12)"."""
    flag = next(a for a in tui_parser()._actions if "--exercise" in a.option_strings)
    listed = re.search(r"\(([\d, or]+)\)", flag.help).group(1)
    return [int(n) for n in re.findall(r"\d+", listed)]


HELPED = named_in_the_help()


def test_the_help_names_the_exercises_that_declare_a_tui_run():
    assert [n for n, ex in EXERCISES.items() if ex.tui is not None] == HELPED
    assert len(HELPED) >= 5


def test_an_exercise_the_tui_does_not_run_is_refused_in_one_line(capsys):
    assert cli.main(["tui", "--exercise", "7"]) == 2
    err = capsys.readouterr().err
    assert "the TUI runs the code of exercises 2, 3, 4, 5 or 12, got 7" in err


def shoot(tmp_path: Path, capsys, *flags: str) -> str:
    out = tmp_path / "shot.svg"
    assert cli.main(["tui", *flags, "--screenshot", str(out), "--size", "100x30"]) == 0
    assert "wrote" in capsys.readouterr().out
    return out.read_text()


@pytest.mark.slow
def test_tui_exercise_runs_the_solution(tmp_path, capsys):
    """``--solution`` is one path for every exercise: the grading child loads the library's
    modules as the student's code (``tests/test_exercises.py`` grades every exercise's solution
    that way) and runs the exercise's scenario (run for every exercise the help names by the
    folder test below). So one exercise, the last, shows the flag reaches the run: a grading
    child that looked for a student's folder instead would stop with nothing to run."""
    number = HELPED[-1]
    svg = shoot(tmp_path, capsys, "--exercise", str(number), "--solution", "--steps", "1000")
    text = screen_text(svg)
    assert "[the solution]" in text and "your code" not in text


SWAP = """seqs = [seqs] if isinstance(seqs, int) else list(seqs)
        return self.move(seqs, "device", "host")

    def move(self, seqs, source, target):
        if self.host is None:
            raise ValueError("this manager has no host pool to swap with (num_cpu_blocks=0)")
        src = self.device if source == "device" else self.host
        dst = self.host if target == "host" else self.device
        if any(self.table(s).pool != source for s in seqs):
            raise ValueError(f"a sequence of {seqs} is not in {source} memory")
        if len({b for s in seqs for b in self.table(s).blocks}) > dst.num_free:
            raise OutOfBlocks(f"{target} memory cannot take the blocks of {seqs}")
        moved = {}
        for s in seqs:
            table = self.table(s)
            for b in table.blocks:
                if b in moved:
                    dst.incref(moved[b])
                else:
                    moved[b] = dst.allocate()
            for b in reversed(table.blocks):
                src.decref(b)
            table.blocks = [moved[b] for b in table.blocks]
            table.pool = target
        return list(moved.items())"""
SWAP_IN = """seqs = [seqs] if isinstance(seqs, int) else list(seqs)
        return self.move(seqs, "host", "device")"""
PREEMPT = """bm = self.block_manager
        ids = [seq.seq_id for seq in group.seqs]
        swap = (self.preemption == "swap" or len(ids) > 1) and bm.can_swap_out(ids)
        bm.record(Preempt(group.request_id, tuple(ids), "swap" if swap else "recompute"))
        if swap:
            out.blocks_to_swap_out += bm.swap_out(ids)
            group.status = Status.SWAPPED
            _insert_by_arrival(self.swapped, group)
        else:
            for seq_id in ids:
                bm.free(seq_id)
            group.status = Status.WAITING
            _insert_by_arrival(self.waiting, group)
        out.preempted.append(group)"""
WRITTEN = {
    5: {
        'raise NotImplementedError("exercise 05: move the tables to the host pool")': SWAP,
        'raise NotImplementedError("exercise 05: move the tables back to the device pool")': (
            SWAP_IN
        ),
        'raise NotImplementedError("exercise 05: swap the group out, or free it to recompute")': (
            PREEMPT
        ),
    }
}
"""Answers written into the starter where the library's whole module would be refused as a
copy (exercise 05's ``_preempt`` is too long to match by chance)."""


def fill_with_the_solution(number: int, folder: Path) -> None:
    """Every file of ``folder`` (made by ``exercises init``) solved as a student would hand it
    in: the starter with its answers written in, or the library's module in their words."""
    for stem, module in EXERCISES[number].solution.items():
        path = folder / f"{stem}.py"
        if number in WRITTEN:
            source = path.read_text()
            for todo, answer in WRITTEN[number].items():
                source = source.replace(todo, answer)
            path.write_text(source)
        else:
            library = Path(importlib.import_module(module).__file__).read_text()
            path.write_text(as_written_by_a_student(library))


def test_exercise_05_filled_in_passes_its_checks(tmp_path):
    assert cli.main(["exercises", "init", "5", str(tmp_path / "ex05")]) == 0
    fill_with_the_solution(5, tmp_path / "ex05")
    assert grade(5, tmp_path / "ex05").passed


@pytest.mark.slow
@pytest.mark.parametrize("number", HELPED)
def test_tui_exercise_runs_a_folder_init_made_filled_with_the_solution(number, tmp_path, capsys):
    folder = tmp_path / f"ex{number:02d}"
    assert cli.main(["exercises", "init", str(number), str(folder)]) == 0
    fill_with_the_solution(number, folder)
    capsys.readouterr()
    here = Path.cwd()
    os.chdir(folder)  # as the README says: run it inside the folder
    try:
        text = screen_text(shoot(tmp_path, capsys, "--exercise", str(number), "--steps", "1000"))
    finally:
        os.chdir(here)
    assert f"exercise {number:02d}" in text
    assert "your code" not in text  # nothing stopped it
    assert capsys.readouterr().err == ""


def screen_text(svg: str) -> str:
    """The characters of a screenshot, spaces collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", svg).replace("&#160;", " ").split())


def test_tui_exercise_without_the_students_code_says_what_to_write(tmp_path, capsys):
    folder = tmp_path / "ex02"
    assert cli.main(["exercises", "init", "2", str(folder)]) == 0
    capsys.readouterr()
    out = tmp_path / "shot.svg"
    args = ["tui", "--exercise", "2", "--path", str(folder), "--screenshot", str(out)]
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "asks you to write BlockAllocator.__init__ in allocator.py" in err
    text = screen_text(out.read_text())
    assert "Your code is not written yet" in text
    assert "minipaged exercises init 2 ex02" in text
    assert "minipaged tui --exercise 2 --solution" in text
