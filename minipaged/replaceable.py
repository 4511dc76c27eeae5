"""Which file an output may replace: the one rule for a file that stands where a writer puts its
own, from the command line and from Python alike.

Every output is put in place of its name (``minipaged.atomic_write``), so a writer replaced
whatever stood there: a user's notes named like a trace, a picture named like a screenshot,
another model's weights in the folder ``train --out`` named. Now each writer names the kind
of file it writes (an ``OutputKind``: ``trace.TRACE``, ``checkpoint_kinds.KINDS``), and a
file standing at its name is replaced only when it is of that kind, or when the user says
so: ``--force`` on the command line, ``force=True`` in Python. A command checks its outputs
before any work (``check_replaceable``); ``atomic_write.Replacement`` asks the same question
of every file it is about to replace, so a writer called from Python keeps the rule too
(``tests/test_existing_output_api_corpus.py`` finds every writer of the package, and checks
that each names its kind; the site's scripts under ``docs/``, which regenerate the site's own
committed files, are searched too and name their exemption there).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 1 << 20
"""The most of a file read to tell whose it is: a trace's header line, a report's first keys,
a screenshot's first tag all lie well inside it."""

PYTHON_FORCE = "pass force=True"
"""The way to replace anyway, in Python's words; the command line's is ``"give --force"``."""


@dataclass(frozen=True)
class OutputKind:
    """The kind of file a writer writes: ``name`` in a reader's words (``"a minipaged
    trace"``), and ``recognizes``, which reads a file's first ``HEAD_BYTES`` and says whether
    it is one, so that the writer may replace it without being told to."""

    name: str
    recognizes: Callable[[bytes], bool]


ANY_FILE = OutputKind("any file", lambda head: True)
"""For a writer whose name is its own whatever stands there (the graded folder's
``report.json``, which a student may have planted, is the grader's): say why where it is used.
The mechanism's default (``atomic_write``), where no kind is named."""


def check_replaceable(
    path: str | Path | None,
    kind: OutputKind,
    force: bool = False,
    named: str = "",
    way: str = PYTHON_FORCE,
) -> None:
    """Refuse an output ``path`` (typed as ``named``: ``"--json"``, ``"the trace"``; nothing
    for a path given in Python) where a file stands that is not of ``kind``: writing it would
    replace that file without a word. ``force`` replaces it anyway; ``way`` says how to ask for
    that (``"give --force"``). Nothing to lose is never refused: no file there, an empty one,
    or a symbolic link (replaced, and what it points to left alone); what is no regular file
    (a folder, a FIFO) is ``atomic_write.not_a_file``'s to refuse. Raises ``ValueError``
    naming the path and both ways out."""
    if path is None or force:
        return
    where = f"{named} {path}" if named else str(path)
    try:
        status = os.lstat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_size == 0:
            return
        with open(path, "rb") as file:
            head = file.read(HEAD_BYTES)
    except FileNotFoundError:
        return
    except OSError as error:
        raise ValueError(
            f"{where} is there and cannot be read ({error.strerror}) to tell whether it is "
            f"{kind.name}: name another file, or {way} to replace it"
        ) from None
    if not kind.recognizes(head):
        raise ValueError(
            f"{where} is there and is not {kind.name}, so writing it would replace that file: "
            f"name another file, or {way} to replace it"
        )
