"""The student's folder as the grader last judged it, judged again whenever it changed.

Before any of their code runs, the grader reads the student's folder for native code
(``minipaged.grader.native_files``) and for a copy of the library's solution (``copies``,
``minipaged.grader.library_copies``); either fails every criterion. Where Landlock confines
a grading child, the folder is read-only to it (``minipaged.grader.child``); where it does
not, their code may write there, and each grading child imports the files as they are when
it starts: a call that wrote a copy of the library's solution over its own file, then ended
its grading process, had the next child import the copy with none of the student's code on
the stack to see it compiled (7 of exercise 02's 8 criteria passed so). So a child starts
only after the folder is judged as it is then (``refused_now``): the same verdict, unless a
file was added, removed or written since (its inode, size, modification or change time
differ; the change time no one can set back).
"""

from __future__ import annotations

import os
from pathlib import Path

from minipaged.grader.exercises import Exercise
from minipaged.grader.library_copies import copies
from minipaged.grader.native_files import native_code

_JUDGED: dict[tuple[int, str], tuple[tuple, str]] = {}
"""By exercise and folder: the folder's state when last judged, and the verdict."""


def refused_now(ex: Exercise, folder: Path) -> str:
    """Why the folder as it is now is refused (native code in it, or a copy of the library's
    solution), or ``""``: judged again only if it changed since it was last judged."""
    key, state = (ex.number, str(folder)), _state(folder)
    judged = _JUDGED.get(key)
    if judged is None or judged[0] != state:
        _JUDGED[key] = judged = (state, native_code(folder) or copies(ex, folder))
    return judged[1]


def _state(folder: Path) -> tuple:
    """Every entry below ``folder`` (links not followed) with what changes when it is written."""
    found = []
    for top, folders, files in os.walk(folder):
        for name in folders + files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:  # gone as it was listed
                continue
            found.append((top, name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(sorted(found))
