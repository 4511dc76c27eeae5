"""Checks for exercise 06: write the invariants.

The student's ``properties.py`` defines ``BlockManagerMachine``, a subclass of
``minipaged.grader.properties.BlockManagerProgram`` (which drives random programs and asserts
nothing) with the student's ``@invariant`` methods and ``after_all_freed``. Graded three
ways: no false alarm on the library's ``BlockManager``; each of the five rules on its own, on
hand-built states that break that rule alone (``minipaged.grader.broken_states``); and a
failed assertion against every member of the bug zoo (``minipaged.grader.bug_zoo``), each of
which breaks rules silently, the way real code does.
"""

from __future__ import annotations

from minipaged.block_manager import BlockManager
from minipaged.grader import bug_zoo
from minipaged.grader.broken_states import BROKEN_STATES, BrokenState
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


RULES = {
    1: "R[p] equals the number of block tables holding p, in each pool",
    2: "p is on the free list iff R[p] = 0, and at most once, in each pool",
    3: "the block the last token was written into has R[p] = 1",
    4: "every sequence reads back exactly the tokens it wrote",
    5: "after_all_freed: once every sequence is freed, every block of both pools is free",
}
"""Exercise 06's rules, numbered as its README numbers them."""


def missed(student, state: BrokenState) -> str:
    """``""`` when the student's properties fail an assert on ``state``, else why not. Rules
    1 to 4 run every ``@invariant``; rule 5 runs ``after_all_freed``, as a program's end does."""
    machine = _machine(student)()
    machine.manager, machine.kv, machine.last_write = state.build()
    machine.program, machine.next_seq = [f"the hand-built state {state.name}"], 10
    try:
        if state.rule == 5:
            machine.after_all_freed()
        else:
            for inv in machine.invariants:
                if all(holds(machine) for holds in inv.preconditions):
                    inv.function(machine)
    except AssertionError:
        return ""
    except NotImplementedError:
        raise
    except Exception as error:
        return (
            f"{state.fault}; your properties crashed with {type(error).__name__}: {error}"
            f"{student.where(error)} instead of failing an assert"
        )
    return state.fault


def grades_rule(rule: int):
    """A check that the student's properties catch every state that breaks only ``rule``."""

    def check(student):
        problems = [m for s in BROKEN_STATES if s.rule == rule and (m := missed(student, s))]
        if problems:
            where = "after_all_freed" if rule == 5 else "an @invariant"
            raise CheckFailed(
                f"not checked completely: on a state that breaks rule {rule} alone, {where} "
                "must fail an assert, and yours passed these:\n- " + "\n- ".join(problems)
            )

    check.__name__ = f"check_rule_{rule}_on_its_own"
    check.__doc__ = f"rule {rule} on its own: {RULES[rule]}"
    return check


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


CRITERIA = (
    (Criterion(check_no_false_alarm),)
    + tuple(Criterion(grades_rule(rule)) for rule in RULES)
    + tuple(Criterion(catches(member)) for member in bug_zoo.BUG_ZOO)
)
