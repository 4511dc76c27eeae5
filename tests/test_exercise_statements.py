"""What the exercises' statements (README and starter docstrings) claim agrees with what their
checks hold the student to: every error a check demands is one the statement names, every
error the tasks ask for is one a check demands, and every order or return value the tasks
state ("last block first", "in arrival order", "returns `[]`") is one a check looks at.

A claim is found by its words, and the checks' text is searched for the same thing, so a
statement and a check that drift apart fail here; the README's "Hints" are advice, not claims,
and are left out.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from minipaged.grader.exercises import EXERCISES, TUTORIALS

ERRORS = re.compile(r"\b(ValueError|KeyError|IndexError|TypeError|OutOfBlocks)\b")

ORDERS = {
    # a claim the tasks may make -> what a check that holds it must mention
    r"last block first": r"last block first|\[2, 1, 0\]",
    r"arrival order|by arrival": r"arrival order",
    r"first free block|front of the free list": r"first free block|free list",
    r"oldest first|least recently": r"oldest first|evict",
    r"returns? `\[\]`|\(return \[\]\)": r"\[\]",
    r"`True`|`False`|True if|Return True": r"True|False",
    r"\(from, to\)|\(device, host\)": r"\(device, host\)",
}
"""Claims of order and of return values, and the words a check that tests them uses."""

EXEMPT = {
    (1, "IndexError"): "the check names IndexError as the wrong answer, to say why",
    (7, "ValueError"): "the README says the checks never pass L = 0, which the library refuses",
}


def statement(number: int) -> tuple[str, str]:
    """The README and the starter files of ``number``: (all of it, its claims: the README
    without its hints, and the starters' docstrings)."""
    ex = EXERCISES[number]
    readme = (TUTORIALS / ex.folder / "README.md").read_text()
    starters = "".join((ex.starter / name).read_text() for name in ex.files)
    claims = readme.partition("## Hints")[0] + readme.partition("## See it run")[2] + starters
    return readme + starters, claims


def checks_text(number: int) -> str:
    """The source of ``number``'s checks and of the grader modules they import from."""
    module = importlib.import_module(EXERCISES[number].checks)
    helpers = {
        m
        for m in vars(module).values()
        if inspect.ismodule(m) and m.__name__.startswith("minipaged.grader.ex")
    }
    return "".join(inspect.getsource(m) for m in {module} | helpers)


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_every_error_a_check_demands_is_named_in_the_statement(number):
    everything, _ = statement(number)
    demanded = set(ERRORS.findall(checks_text(number))) - {e for (n, e) in EXEMPT if n == number}
    assert demanded <= set(ERRORS.findall(everything)), (
        f"exercise {number}'s checks demand {sorted(demanded)}, its statement names "
        f"{sorted(set(ERRORS.findall(everything)))}"
    )


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_every_error_the_tasks_ask_for_is_checked(number):
    _, claims = statement(number)
    asked = set(ERRORS.findall(claims)) - {e for (n, e) in EXEMPT if n == number}
    checked = set(ERRORS.findall(checks_text(number)))
    assert asked <= checked, f"exercise {number} asks for {sorted(asked - checked)}, unchecked"


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_every_order_or_return_value_the_tasks_state_is_checked(number):
    _, claims = statement(number)
    checks = checks_text(number)
    unchecked = [
        claim
        for claim, evidence in ORDERS.items()
        if re.search(claim, claims) and not re.search(evidence, checks)
    ]
    assert not unchecked, f"exercise {number} states {unchecked}, which no check looks at"
