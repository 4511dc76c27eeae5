"""The path a GPU criterion takes, exercised on a machine without one, and kernels that hang or
crash in the simulator failing only their criterion.

What runs here: the device selection (``grading._no_gpu_reason`` told a GPU is there, as on a
GPU machine), the child the GPU criteria get (no simulator, no address-space limit, the GPU's
device files writable, reads and writes confined), its own probe of torch's and Numba's CUDA
before any student code, and the verdict when that probe fails (blocked, with the cause: not
the student's failure, not a crash). What cannot: a kernel compiled for and launched on a GPU,
its timing against the library's, a GPU hang or an illegal address (a GPU machine's run of
``test_exercises``'s solution-and-starter test covers the first two).
"""

from __future__ import annotations

import shutil
import time

import pytest
import torch

from minipaged.grader import ex11_decode_kernel, grading
from minipaged.grader.exercises import EXERCISES, TUTORIALS
from minipaged.grader.grading import Limits, grade
from minipaged.grader.proxies import Proxy
from minipaged.grader.remote import GradingChild
from minipaged.grader.report import BLOCKED, FAIL

pytest.importorskip("numba")


def starter(number: int, folder):
    shutil.copytree(TUTORIALS / EXERCISES[number].folder / "starter", folder)
    return folder


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the real path runs")
def test_a_gpu_criterion_whose_grading_process_cannot_use_a_gpu_is_blocked(tmp_path, monkeypatch):
    """The grader is told there is a GPU; the child made for the GPU criteria finds it cannot
    use one: those criteria are blocked with the cause, within seconds, and nothing crashes."""
    monkeypatch.setattr(grading, "_no_gpu_reason", lambda: "")
    gpu = [c for c in ex11_decode_kernel.CRITERIA if c.runs_in == "gpu"]
    monkeypatch.setattr(ex11_decode_kernel, "CRITERIA", tuple(gpu))
    start = time.monotonic()
    report = grade(11, starter(11, tmp_path / "ex11"), limits=Limits(check_seconds=10.0))
    assert time.monotonic() - start < 120
    [result] = report.results
    assert result.outcome == BLOCKED
    assert result.message.startswith("needs a CUDA GPU that the grading process can use")
    assert "CUDA" in result.message.partition("(")[2]  # torch's or Numba's own words
    assert (
        report.confinement.startswith("confined by Landlock") or "unconfined" in report.confinement
    )


def test_the_gpu_child_runs_without_the_simulator_and_without_a_memory_limit(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # the grader's own may simulate
    gpu = GradingChild(11, "gpu", None, Limits(memory_gib=2.0), Proxy)
    simulated = GradingChild(11, "simulator", None, Limits(memory_gib=2.0), Proxy)
    try:
        assert "NUMBA_ENABLE_CUDASIM" not in gpu._environment()
        assert simulated._environment()["NUMBA_ENABLE_CUDASIM"] == "1"
        assert "--memory-gib" not in gpu.command() and "--gpu" in gpu.command()
        assert "--memory-gib" in simulated.command() and "--gpu" not in simulated.command()
    finally:
        gpu.close()
        simulated.close()


KERNELS = {
    4: "while True:\n        pass",  # one pair: a kernel that never ends
    6: "key_pool[key_pool.shape[0] + 5, 0, 0, 0] = 1.0",  # several pairs: past the end
    3: "import ctypes\n    ctypes.string_at(8)",  # blocks larger than T: native memory
}
"""Exercise 08's kernel, by the number of blocks in its pools (each criterion has its own)."""


def test_a_kernel_that_hangs_writes_past_an_array_or_crashes_fails_only_its_criterion(tmp_path):
    folder = starter(8, tmp_path / "ex08")
    todo = 'raise NotImplementedError("exercise 08: copy block src onto block dst")'
    body = "\n    ".join(
        f"if key_pool.shape[0] == {n}:\n        " + code.replace("\n", "\n    ")
        for n, code in KERNELS.items()
    )
    source = (folder / "cache_ops.py").read_text()
    (folder / "cache_ops.py").write_text(source.replace(todo, body))
    report = grade(8, folder, limits=Limits(check_seconds=8.0))
    failed = {r.name: r.message for r in report.results if r.outcome == FAIL}
    assert failed["one_pair"].startswith("your code ran past 8 s in one_pair:")
    assert "past" in failed["several_pairs"] or "index" in failed["several_pairs"].lower()
    assert failed["blocks_larger_than_the_threads"].startswith(
        "the grading process crashed (SIGSEGV) in native code"
    )
