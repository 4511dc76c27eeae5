"""Where ``minipaged exercises check`` writes one submission's reports, and what they must not
replace: the report (``--json``, or ``report.json`` in the graded folder) and Gradescope's
results (``--gradescope``) are checked apart from each other and from the code graded before
anything runs (``output_paths.check_outputs_apart``, given ``student_folder.graded_code``):
``--json memory.py`` would put the report in place of the student's code, and
``--gradescope`` naming the report's file would leave one of the two."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from minipaged import atomic_write


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
