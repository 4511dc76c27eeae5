"""How much a grading child has written to disk, against ``Limits.disk_gib``.

``RLIMIT_FSIZE`` caps each file a student's code writes, not how many: a loop that writes
file after file of the largest size would fill the disk the grader, and every other student
graded on the machine, share. A child may write only in the student's folder and its own
temporary folder (Landlock, where Linux offers it); ``DiskQuota`` measures both while the
grader waits for an answer, and says when they have grown past the quota since the child
started (each child starts with an empty temporary folder: ``GradingChild.start``).
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_ENTRIES = 100_000
"""The most files and folders a child may make."""


class DiskQuota:
    """The bytes of ``folders`` beyond what they held at ``begin()``, at most ``gib`` GiB, and
    at most ``MAX_ENTRIES`` new files and folders."""

    def __init__(self, folders: list[Path], gib: float) -> None:
        self.folders, self.allowed = folders, int(gib * 2**30)
        self.start, self.start_entries = 0, 0

    def begin(self) -> None:
        """Measure from now on (a new child)."""
        self.start, self.start_entries = self._measure()

    def _measure(self) -> tuple[int, int]:
        size, entries = 0, 0
        for folder in self.folders:
            more, counted = _measured(folder, self.start_entries + MAX_ENTRIES)
            size, entries = size + more, entries + counted
        return size, entries

    def exceeded(self) -> str:
        """Why the folders are past the quota, or ``""``."""
        size, entries = self._measure()
        if entries - self.start_entries > MAX_ENTRIES:
            return f"your code made more than {MAX_ENTRIES} files and folders"
        if size - self.start > self.allowed:
            return (
                f"your code wrote more than {self.allowed / 2**30:g} GiB of files (in your "
                "folder and its temporary folder)"
            )
        return ""


def _measured(folder: Path, most: int) -> tuple[int, int]:
    """The bytes on disk below ``folder`` (links not followed) and the entries counted, the
    count stopping past ``most``."""
    size, entries, stack = 0, 0, [str(folder)]
    while stack and entries <= most:
        try:
            with os.scandir(stack.pop()) as found:
                for entry in found:
                    entries += 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        size += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:  # gone, or unreadable, meanwhile
            continue
    return size, entries
