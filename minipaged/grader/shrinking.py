"""Shrinking a program that broke a property: hypothesis runs the same programs again, now
shrinking the failing one, so that the student reads the shortest program that fails.

Shrinking is bounded by a count, ``SHRINK_RUNS`` programs, so that the program reported does
not depend on how busy the machine is; and, as a safety net for programs so slow that even that
many take too long, by ``SHRINK_SECONDS`` of the student's time. Where the student's code runs
in a grading child that is a clock like the criterion's (``RemoteStudent.clock``): the waits
for a CPU others held, the grader's own work (hypothesis drawing and shrinking, the checks) and
the child's are not counted, so a loaded machine does not cut shrinking short. Where it runs in
the grader's process (the tests' trusted stand-ins), it is the process's CPU time, which a
loaded machine does not eat either (as ``grading.run_criteria``'s own limit).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

from minipaged.grader.time_limit import TimeLimitExceeded, time_limit

SHRINK_RUNS = 300
"""How many programs hypothesis may run while shrinking a failing one. A count, not a time, so
that the program reported does not depend on how busy the machine is."""

SHRINK_SECONDS = 20.0
"""A safety net for programs so slow that even ``SHRINK_RUNS`` of them take too long: seconds of
the student's time (see above), not of the wall clock."""


class ShrinkBudgetSpent(BaseException):
    """Stops hypothesis once shrinking has run ``SHRINK_RUNS`` programs or ``SHRINK_SECONDS`` of
    the student's time (a BaseException, so that hypothesis does not take it for a failure of
    the program)."""


class ShrinkBudget:
    """What shrinking may still spend: ``runs_left`` programs, until ``clock`` (a
    ``CriterionClock``, or None: the process's CPU time bounds it instead) expires."""

    def __init__(self, clock) -> None:
        self.runs_left, self.clock = SHRINK_RUNS, clock
        self.failures: list[tuple[list[str], AssertionError]] = []  # (program, what it broke)

    def spend(self) -> None:
        """A program starts: raise ``ShrinkBudgetSpent`` if none may."""
        if self.runs_left <= 0 or (self.clock is not None and self.clock.expired()):
            raise ShrinkBudgetSpent
        self.runs_left -= 1


def shrink(cls, run: Callable[[], None], failure: BaseException, program: list[str]):
    """Run ``run`` (the same programs of the state machine ``cls``, now shrinking) within a
    ``ShrinkBudget`` kept in ``cls.budget``. Returns the shortest failure of the same kind as
    ``failure`` and its program; the original ones when shrinking ends in anything else, such
    as hypothesis's own ``FlakyStrategyDefinition`` (a student's code that behaves differently
    on a rerun)."""
    cls.budget, finished = ShrinkBudget(cls.clock(SHRINK_SECONDS)), None
    failures = cls.budget.failures
    try:
        cpu_time = cls.budget.clock is None
        with time_limit(SHRINK_SECONDS, cpu=True) if cpu_time else nullcontext() as cpu:
            run()
    except ShrinkBudgetSpent:
        pass
    except TimeLimitExceeded as error:
        if cpu is None or error is not cpu:
            raise
    except Exception as error:
        finished = first_assertion(error) or error
    finally:
        cls.budget = None
    if finished is not None and type(finished) is type(failure):
        return finished, cls.last_program
    seen = [(len(p), i) for i, (p, e) in enumerate(failures) if type(e) is type(failure)]
    if seen:
        program, failure = failures[min(seen)[1]]
    return failure, program


def first_assertion(error: BaseException) -> AssertionError | None:
    """The earliest AssertionError that ``error`` was raised while handling, if any. When a
    property fails, hypothesis still runs ``teardown``, which may crash on the broken state
    (freeing a block twice, say); the property's failure is the one to report."""
    first = None
    while error is not None:
        if isinstance(error, AssertionError):
            first = error
        error = error.__context__
    return first
