"""What a grading child pays for before it grades: it imports the library modules its exercise
hides (``Exercise.hidden``, guarded before the student's code loads). Torch's import takes
seconds of CPU, so an exercise that grades no tensor code must not pull it in through an
annotation: exercise 05's scheduler once did, through ``minipaged.sequence``, and every
exercise 05 grading (a student's, and the suite's dozens) paid for it."""

from __future__ import annotations

import subprocess
import sys

from minipaged.grader.exercises import EXERCISES

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
