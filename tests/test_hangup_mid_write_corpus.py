"""A closed terminal (SIGHUP) and Ctrl-\\ (SIGQUIT) sent to the commands that write a file, at
the moment their file is half written: ``tui --screenshot`` as it saves the screen, ``bench`` as
it holds its page (its lock taken before the first benchmark), ``python -m minipaged.train`` as
it saves the checkpoint, and ``exercises check`` as it writes its report. Ctrl-C and ``kill``
had been tried on some of them (``test_interrupted_output_corpus``,
``test_train_end_corpus``, ``test_grading_ends_corpus``), these two on none of the writes.
Each must end as Ctrl-C does (``minipaged.ending_signals``): one line naming the signal, status
128 + its number, the file that was there left as it was, and no hidden ``.name.XXXX`` beside
it. Each signal is real, sent to a real process, while the write is stalled half way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from stuck import STUCK_AFTER_S

from minipaged import ending_signals
from minipaged.study.bench import PAGE

HANGUPS = [signal.SIGHUP, signal.SIGQUIT]

# Child code: `python -c STALL FILE_NAME MODULE ARGS...` runs MODULE's main with ARGS, and the
# write of FILE_NAME stalls with half of its content in its temporary file: the moment a
# signal must leave no trace of.
STALL = """
import os, sys, time
from minipaged import atomic_write
name, module = sys.argv[1], sys.argv[2]
made = atomic_write.Replacement.__init__

def stalled(self, path, *args, **kwargs):
    made(self, path, *args, **kwargs)
    if os.path.basename(str(path)) == name:
        self.file.write(b"half" if "b" in self.file.mode else "half")
        self.file.flush()
        print("writing", file=sys.stderr, flush=True)
        time.sleep(STUCK)

atomic_write.Replacement.__init__ = stalled
if module == "train":
    from minipaged import train
    train.main(sys.argv[3:])
else:
    from minipaged import cli
    sys.exit(cli.main(sys.argv[3:]))
"""


def stall(name: str, module: str, argv: list[str]) -> subprocess.Popen:
    """Start ``minipaged ARGV`` (``module`` "cli") or ``python -m minipaged.train ARGV``
    ("train"), and return once it stalls half way through writing the file ``name``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = STALL.replace("STUCK", repr(STUCK_AFTER_S))
    process = subprocess.Popen(
        [sys.executable, "-c", code, name, module, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    line = process.stderr.readline()
    if line != b"writing\n":
        process.kill()
        pytest.fail(f"{argv} ended before it wrote {name}: {line + process.stderr.read()!r}")
    return process


def end_each(
    tmp_path: Path, prepare: Callable[[Path], tuple[str, str, list[str]]], command: str
) -> dict[int, Path]:
    """For each signal of ``HANGUPS``, all at once, in a folder of its own: ``prepare`` it (the
    file name to stall, the module, the arguments), stall the command there and send the
    signal; check each ended as by Ctrl-C. Returns each signal's folder."""
    folders, processes = {}, {}
    try:
        for number in HANGUPS:
            folders[number] = tmp_path / signal.Signals(number).name
            folders[number].mkdir()
            processes[number] = stall(*prepare(folders[number]))
        for number, process in processes.items():
            process.send_signal(number)
        for number, process in processes.items():
            _, err = process.communicate(timeout=STUCK_AFTER_S)
            assert process.returncode == 128 + number, (number, process.returncode, err)
            said = f"minipaged {command}: {ending_signals.ENDING[number]}"
            assert err.decode().splitlines() == [said], err
    finally:
        for process in processes.values():
            process.kill()
    return folders


def files(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` and its bytes, hidden ones too."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_tui_screenshot_ended_as_it_saves_leaves_the_old_screenshot_alone(tmp_path):
    old = b'<svg class="rich-terminal" width="1"></svg>\n'  # a screenshot a run wrote before

    def prepare(folder: Path):
        (folder / "shot.svg").write_bytes(old)
        return "shot.svg", "cli", ["tui", "--steps", "1", "--screenshot", str(folder / "shot.svg")]

    for folder in end_each(tmp_path, prepare, "tui").values():
        assert files(folder) == {"shot.svg": old}


def test_bench_ended_as_it_holds_its_page_leaves_the_page_and_plots_alone(tmp_path):
    page = b"# Benchmark results\n\n## Memory\n\nmeasured before\n"
    assert PAGE.recognizes(page)

    def prepare(folder: Path):
        (folder / "index.md").write_bytes(page)
        return "index.md", "cli", ["bench", "memory", "--out", str(folder)]

    for folder in end_each(tmp_path, prepare, "bench").values():
        assert files(folder) == {"index.md": page}


def test_train_ended_as_it_saves_the_checkpoint_leaves_no_file_of_it(tmp_path):
    def prepare(folder: Path):
        corpus = folder / "corpus.txt"
        corpus.write_text("".join(f"Paragraph {i}, said she.\n" for i in range(400)))
        small = ["--steps", "1", "--vocab-size", "300", "--context", "16", "--batch-size", "1"]
        small += ["--dim", "16", "--heads", "2", "--kv-heads", "1", "--layers", "1"]
        small += ["--intermediate", "16", "--eval-every", "1"]
        argv = ["--corpus", str(corpus), "--out", str(folder / "m"), *small]
        return "model.safetensors", "train", argv

    for folder in end_each(tmp_path, prepare, "train").values():
        assert set(files(folder)) == {"corpus.txt"}, "a file of the checkpoint was left"


def test_exercises_check_ended_as_it_writes_its_report_leaves_the_old_report(tmp_path):
    old = b'{"minipaged_version": "0", "score": 1}\n'  # a report a check wrote before

    def prepare(folder: Path):
        (folder / "report.json").write_bytes(old)
        argv = ["exercises", "check", "1", "--solution", "--json", str(folder / "report.json")]
        return "report.json", "cli", argv

    for folder in end_each(tmp_path, prepare, "exercises check").values():
        assert files(folder) == {"report.json": old}
