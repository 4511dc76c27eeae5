"""The processes grading a student's work, found by their command lines in ``/proc``: what a
test of a command's end looks for, since a grading process runs in a session of its own and
outlives a command that ends without ending it."""

from __future__ import annotations

from pathlib import Path


def processes_naming(*words: str) -> list[int]:
    """The processes whose command line has any of ``words`` as one of its arguments."""
    named = {word.encode() for word in words}
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if named & set((entry / "cmdline").read_bytes().split(b"\0")):
                    pids.append(int(entry.name))
            except OSError:  # it ended as we looked
                continue
    return pids


def grading_processes(folder: Path, children_only: bool = False) -> list[int]:
    """The processes grading ``folder``: the batch's grading process (``--path=FOLDER``) and
    its grading children (``--path FOLDER``), or only the children."""
    return processes_naming(str(folder), *(() if children_only else (f"--path={folder}",)))


def grading_children_in(temp: Path) -> list[int]:
    """The grading children whose temporary folder (``--temp``) is in ``temp``."""
    return processes_naming(*(str(folder) for folder in temp.glob("minipaged-grading-*")))
