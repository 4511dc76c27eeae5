"""A student's file named like a module Python or an installed package already has (``numpy.py``,
``rich.py``, ``random.py``, a ``hypothesis/`` package) is never imported for that name: their
``import numpy`` gets the installed numpy, and a helper they wrote there is missing however
right it is. The report says so, one line a file, naming the file and the rename
(``student_folder.shadowed_files``); a file of such a name that nothing imports says nothing."""

from __future__ import annotations

import io

import pytest
from exercise01_answers import answered
from rich.console import Console

from minipaged.grader.gradebook import gradescope
from minipaged.grader.grading import grade
from minipaged.grader.report import PASS
from minipaged.grader.student_folder import shadowed_files

HELPER = "def blocks_for(num_tokens, block_size):\n    return -(-num_tokens // block_size)\n"

CALL = "blocks_for(num_tokens, block_size)"

SHADOWING = ("numpy", "rich", "random", "hypothesis")
"""An installed package, the grader's own dependency, a module of Python's, and a package
folder: every kind of name a student's module can lose to."""


def _hand_in(tmp_path, name: str):
    """Exercise 01, right except that ``num_logical_blocks`` calls a helper of the student's
    file (or package) ``name``, which their import never reaches."""
    folder = answered(
        tmp_path / "hand-in",
        {"return M = ceil(L / B)": f"import {name}\n    return {name}.{CALL}"},
    )
    if name == "hypothesis":
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(HELPER)
    else:
        (folder / f"{name}.py").write_text(HELPER)
    return folder


@pytest.mark.parametrize("name", SHADOWING)
def test_a_file_named_like_an_installed_module_is_named_with_its_rename(tmp_path, name):
    folder = _hand_in(tmp_path, name)
    (said,) = shadowed_files(1, folder)
    shown = f"{name}/" if name == "hypothesis" else f"{name}.py"
    assert said.startswith(f"your {shown} is not what `import {name}` loads"), said
    assert f"rename it, e.g. to my_{name}" in said and "\n" not in said


def test_the_report_tells_it_beside_the_failure_it_causes(tmp_path):
    report = grade(1, _hand_in(tmp_path, "numpy"))
    failed = {r.name: r.message for r in report.results if r.outcome != PASS}
    assert "blocks_for" in failed["num_logical_blocks"], failed
    assert len(report.notes) == 1 and "your numpy.py is not what" in report.notes[0]
    printed = io.StringIO()
    report.render(Console(file=printed, width=200, color_system=None))
    assert "note: your numpy.py is not what `import numpy` loads" in printed.getvalue()
    assert report.to_dict()["notes"] == list(report.notes)
    assert f"\nnote: {report.notes[0]}" in gradescope(report.to_dict())["output"]


def test_a_file_nothing_imports_and_the_students_own_modules_say_nothing(tmp_path):
    folder = answered(tmp_path / "hand-in")
    (folder / "numpy.py").write_text(HELPER)  # a leftover no file imports
    (folder / "helpers.py").write_text("import memory\n")  # their own name: imported as theirs
    assert shadowed_files(1, folder) == []
