"""What a grading child pays for before it grades: it imports the library modules its exercise
hides (``Exercise.hidden``, guarded before the student's code loads). Torch's import takes
seconds of CPU, so an exercise that grades no tensor code must not pull it in through an
annotation: exercise 05's scheduler once did, through ``minipaged.sequence``. (Exercise 05's
checks import torch themselves, through ``minipaged.sampling``: the child loads them before the
student's files, on the grader's time, as it does every exercise's checks.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from minipaged.grader.exercises import EXERCISES, TUTORIALS
from minipaged.grader.grading import grade

WITHOUT_TENSORS = (1, 2, 3, 4, 5, 6, 12, 13)
"""The exercises on the allocator's, the scheduler's and the caches' side: no tensor code."""

PROBE = """import importlib, sys
for number, modules in {hidden!r}:
    for module in modules:
        importlib.import_module(module)
        if "torch" in sys.modules:
            sys.exit(f"exercise {{number:02d}}: importing {{module}} imports torch")
"""


def probe(numbers: tuple[int, ...]) -> subprocess.CompletedProcess:
    """A fresh interpreter importing exercises ``numbers``' hidden modules, as their children do."""
    hidden = [(n, EXERCISES[n].hidden) for n in numbers]
    code = PROBE.format(hidden=hidden)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_an_exercise_without_tensor_code_grades_without_importing_torch():
    done = probe(WITHOUT_TENSORS)
    assert done.returncode == 0, done.stderr


def test_the_probe_sees_torch_where_an_exercise_grades_tensors():
    """The probe can fail: exercise 07's attention needs torch."""
    done = probe((7,))
    assert "exercise 07: importing minipaged.attention imports torch" in done.stderr


CHECKS_LOADED = """
import sys as _sys
if "{checks}" not in _sys.modules:
    raise ImportError("the grader's checks were not loaded before this file")
"""


@pytest.mark.parametrize("number", (1, 5))
def test_the_checks_load_before_the_students_files(number, tmp_path):
    """Importing a student's files is timed (``check_seconds``); the exercise's checks, which
    the child imports anyway, load before it, so their cost (exercise 05's: torch) is not
    charged to the student's import. A hand-in whose file imported the checks timed out at
    the suite's 4 s limit on a busy machine when it was."""
    ex = EXERCISES[number]
    folder = tmp_path / "hand-in"
    folder.mkdir()
    for name in ex.files:
        text = (TUTORIALS / ex.folder / "starter" / name).read_text()
        (folder / name).write_text(text + CHECKS_LOADED.format(checks=ex.checks))
    report = grade(number, folder, first_failure=True)
    said = [r.message for r in report.results]
    assert not any("were not loaded before" in m for m in said), said


LIBRARY_LOADED = """
import sys as _sys
_missing = [m for m in {loaded!r} if m not in _sys.modules]
_early = [m for m in ("antigravity", "this", "helpers") if m in _sys.modules]
if _missing or _early:
    raise ImportError(f"not loaded before this file: {{_missing}}; loaded for it: {{_early}}")


def _named_later():  # imports inside a function count too: the file names them
    import antigravity  # not the library's: never imported for the student
    import numpy.linalg
    import this
    import torch

    import helpers  # the student's own module, not on the path before their files
    from minipaged import attention
    from minipaged.grader.properties import BlockManagerProgram
{numba}
"""


def test_the_library_modules_a_students_file_names_load_before_it(tmp_path):
    """An exercise 01 hand-in that names torch, numpy, Numba and library modules finds them
    loaded as its import starts (their import is the library's work, seconds of CPU, not the
    student's timed import), and finds nothing else loaded for it: a module outside the
    library's packages may do anything as it loads, and is the student's to import."""
    loaded = ["torch", "numpy.linalg", "minipaged.attention", "minipaged.grader.properties"]
    numba = ""
    if importlib.util.find_spec("numba") is not None:
        loaded.append("numba")
        numba = "    from numba import njit\n"
    ex = EXERCISES[1]
    folder = tmp_path / "hand-in"
    folder.mkdir()
    text = (TUTORIALS / ex.folder / "starter" / "memory.py").read_text()
    (folder / "memory.py").write_text(text + LIBRARY_LOADED.format(loaded=loaded, numba=numba))
    report = grade(1, folder, first_failure=True)
    said = [r.message for r in report.results]
    assert not any("loaded before this file" in m for m in said), said
    assert "still running" not in said[0]
