"""What the grader raises when a request to a grading child (``minipaged.grader.remote``)
does not come back as an answer: the child ended (``ChildGone`` and its kinds), or the
student's code left the call in a way a check must see as a failure, never as the end of
the grader (``StudentExit``, ``StudentBaseException``) nor as the end of a loop of the checks
(``StudentStopIteration``)."""

from __future__ import annotations


class ChildGone(BaseException):
    """The grading child ended, or sent what is not an answer, during a criterion: the message
    says why, in words a student can act on. A BaseException, so that no check swallows it."""


class Blocked(ChildGone):
    """The child's criteria cannot run at all, for a reason found before any student code
    ran: they are blocked, not failed, and no other child is started for them."""


class DeviceUnusable(Blocked):
    """A child for the GPU criteria found, before any student code ran, that it cannot use the
    GPU (``minipaged.grader.child_setup.gpu_problem``): those criteria are blocked, not failed."""


class GraderFault(Blocked):
    """The grading child failed while it started, before any student code ran (an exercise's
    definition naming a function the library lacks, a broken install): the grader's fault,
    said as such, never "your code"."""

    def __init__(self, what: str, output: str = "") -> None:
        """``what`` went wrong ("it ended with exit status 1"); ``output``: what it printed."""
        super().__init__(
            f"the grader could not start its grading process, before any of your code ran "
            f"({what}): a fault of the grader's or of its installation, not of your code. "
            "Tell whoever runs the grader" + (f"\n{output}" if output else "")
        )


class WallClockSpent(ChildGone):
    """The grading of the whole submission ran past ``Limits.wall_seconds``."""


class StudentExit(Exception):
    """The student's code called ``sys.exit(code)`` (``SystemExit`` in the child)."""

    def __init__(self, code) -> None:
        super().__init__(code)
        self.code = code


class StudentBaseException(Exception):
    """The student's code raised a ``BaseException`` that is not an ``Exception``
    (``KeyboardInterrupt``, or one of its own): here, only a failure of the criterion."""


class StudentStopIteration(Exception):
    """The student's code raised ``StopIteration`` or ``StopAsyncIteration`` (or a subclass):
    raised in the grader as itself, it would end the loop of a check that called the code
    (``map``, a generator, ``next``) as if the loop were done, its remaining cases unchecked.
    Here, only a failure of the call that raised it."""

    PROTOCOL = (StopIteration, StopAsyncIteration)
    """Python's exceptions that a loop takes for its end, not for an error."""
