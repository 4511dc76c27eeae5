"""Where ``minipaged exercises check`` writes one submission's reports, and what they must not
replace: the report (``--json``, or ``report.json`` in the graded folder) and Gradescope's
results (``--gradescope``) are checked apart from each other and from the code graded before
anything runs (``output_paths.check_outputs_apart``): ``--json memory.py`` would put the
report in place of the student's code, and ``--gradescope`` naming the report's file would
leave one of the two."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from minipaged import atomic_write
from minipaged.grader.exercises import exercise
from minipaged.grader.student_folder import folder_of


def graded_code(number: int, path: Path | None, solution: bool) -> list[tuple[str, Path]]:
    """The code ``check`` grades, as ``check_outputs_apart``'s inputs: the library modules
    that solve exercise ``number`` (``solution``), or every ``.py`` file of the student's
    folder, theirs whether the exercise names it or their files import it."""
    if solution:  # the packages lie side by side, installed or in a checkout; none imported
        packages = Path(__file__).resolve().parents[2]
        modules = exercise(number).solution.values()
        files = [packages / f"{name.replace('.', '/')}.py" for name in modules]
        return [("a library module that is graded", file) for file in files]
    return [("code that is graded", file) for file in folder_of(number, path).glob("*.py")]


def save(console: Console, number: int, target: Path, document: dict) -> bool:
    """Write ``document`` as JSON to ``target`` (whole, replacing and never following a link
    there), and say where; or say why it could not be written, and return False."""
    try:
        note = atomic_write.write_text(target, json.dumps(document, indent=2) + "\n")
        console.print(f"report: {target}" + (f" ({note})" if note else ""), highlight=False)
        return True
    except OSError as error:  # an installed package's starter folder is not writable
        console.print(
            f"no report written ({error.strerror or error}: {target}); copy the exercise "
            f"out with `minipaged exercises init {number} DIR`, or pass --json FILE",
            markup=False,
            highlight=False,
        )
        return False
