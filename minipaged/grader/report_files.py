"""Where ``minipaged exercises check`` writes one submission's reports, and what they must not
replace: the report (``--json``, or ``report.json`` in the graded folder) and Gradescope's
results (``--gradescope``) are checked apart from each other and from the code graded before
anything runs (``output_paths.check_outputs_apart``, given ``student_folder.graded_code``):
``--json memory.py`` would put the report in place of the student's code, and
``--gradescope`` naming the report's file would leave one of the two. A file already at a
name typed with ``--json`` or ``--gradescope`` is replaced only when minipaged wrote it, or
``--force`` says so (``check_reports_replaceable``): ``--json notes.json`` replaced the notes.
``report.json`` in the graded folder is the grader's own and always replaced: a report a
student put there must never be the one read."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from minipaged import atomic_write
from minipaged.output_paths import check_replaceable
from minipaged.replaceable import OutputKind


def save(console: Console, number: int, target: Path, document: dict, force: bool = False) -> bool:
    """Write ``document`` as JSON to ``target`` (whole, replacing and never following a link
    there; over a file that is no report only with ``force``), and say where; or say why it
    could not be written, and return False."""
    try:
        text = json.dumps(document, indent=2) + "\n"
        note = atomic_write.write_text(target, text, replaces=REPORT, force=force)
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


def is_report(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, starts a JSON report minipaged wrote: a report
    (``Report.to_dict``) or Gradescope's results made of one (``gradebook.gradescope``), each
    of which names its ``minipaged_version``."""
    return head.lstrip().startswith(b"{") and b'"minipaged_version"' in head


REPORT = OutputKind("a report minipaged wrote", is_report)
"""What a report or Gradescope's results may replace without ``--force``."""


def check_reports_replaceable(outputs: list[tuple[str, Path | None]], force: bool) -> None:
    """Refuse, before anything is graded, each of ``outputs`` (``(flag, path)``) where a file
    stands that is no report minipaged wrote, unless ``force``."""
    for named, path in outputs:
        check_replaceable(named, path, REPORT.name, REPORT.recognizes, force)
