"""Copies of the library's solution that a student's code compiled at run time, judged in the
grader from what the grading child told of them.

The child's runtime hook (``minipaged.grader.runtime_code.watch``) tells the grader every
source the student's code compiles, the moment it is compiled (``minipaged.grader.notices``);
``Judge`` reads each with the same ``copy_finder`` as the files of their folder
(``minipaged.grader.library_copies``), in the grader, where the library's code and its shape
are, and never in the child, which keeps only fingerprints.
"""

from __future__ import annotations

from minipaged.grader.exercises import exercise
from minipaged.grader.library_copies import copy_finder, write_your_own


class Judge:
    """In the grader: judges what a child's answers say the student's code of exercise
    ``number`` compiled."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.copied = None  # ``copy_finder``, made at the first record

    def __call__(self, compiled) -> str:
        """Why one of ``compiled`` (``[where, filename, source]``, told by the child) copies the
        library's solution, or ``""``."""
        for entry in compiled if type(compiled) is list else []:
            if type(entry) is not list or len(entry) != 3 or {type(e) for e in entry} != {str}:
                continue
            if self.copied is None:
                self.copied = copy_finder(exercise(self.number))
            where, filename, source = entry
            found = self.copied(source, filename)
            if found:
                return (
                    f"code your {where} compiled at run time (as {filename!r}): {found}. "
                    f"{write_your_own(exercise(self.number))}"
                )
        return ""
