"""Checks for exercise 08: write the invariants.

The student's ``properties.py`` defines ``BlockManagerMachine``, a subclass of
``minipaged.grader.properties.BlockManagerProgram`` (which drives random programs and asserts
nothing) with the student's ``@invariant`` methods and ``after_all_freed``. Graded two ways:
no false alarm on the library's ``BlockManager``, and a failed assertion against every member
of the bug zoo (``minipaged.grader.bug_zoo``), each of which breaks one rule silently.
"""

from __future__ import annotations

from minipaged.block_manager import BlockManager
from minipaged.grader import bug_zoo
from minipaged.grader.properties import run_programs
from minipaged.grader.report import CheckFailed, Criterion


def _machine(student):
    return student.properties.BlockManagerMachine


def check_no_false_alarm(student):
    """your properties hold on every random program against the library's BlockManager"""
    try:
        run_programs(_machine(student), BlockManager, max_examples=60)
    except AssertionError as error:
        raise CheckFailed(
            f"a property{student.where(error)} failed on the library's BlockManager, which "
            f"keeps every rule: {error}"
        ) from None


def catches(member: type[BlockManager]):
    """A check that the student's properties fail an assertion against ``member``."""

    def check(student):
        try:
            run_programs(_machine(student), member, max_examples=100, shrink=False)
        except AssertionError:
            return
        except NotImplementedError:
            raise
        except Exception as error:
            raise CheckFailed(
                f"against {member.__name__}, a program crashed with {type(error).__name__} "
                f"before any property failed: {str(error).splitlines()[0]}\nYour properties "
                "must fail an assert as soon as the state is wrong, before it crashes"
            ) from None
        raise CheckFailed(
            f"100 random programs against {member.__name__} broke none of your properties. "
            f"Its bug: {' '.join(member.__doc__.split())}"
        )

    check.__name__ = f"check_catches_{member.__name__}"
    check.__doc__ = f"your properties catch {member.__name__}: {member.__doc__.split(':')[0]}"
    return check


CRITERIA = (Criterion(check_no_false_alarm),) + tuple(
    Criterion(catches(member)) for member in bug_zoo.BUG_ZOO
)
