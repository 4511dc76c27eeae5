"""Every statement of every function a student writes is run by some criterion when the
library's solution is graded: a path of the solution no check reaches is a path where a
student's bug would pass unseen. Measured per criterion with ``sys.settrace`` over the graded
functions of the exercises graded in this process (08-11 run in a simulator child; their
kernels are covered by the mutants of ``test_grader_mutants``)."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap

import pytest

from minipaged.grader.exercises import EXERCISES
from minipaged.grader.grading import run_criteria
from minipaged.grader.student import load_solution

IN_PROCESS = [
    n for n, ex in EXERCISES.items() if all(c.runs_in == "process" for c in ex.criteria())
]

UNREACHED_BY_DESIGN = {
    "minipaged.memory:ModelShape.kv_bytes": "a negative L, which the exercise does not ask about",
    "minipaged.allocator:BlockAllocator.__init__": "the pool-size check the starter writes",
    "minipaged.block_manager:BlockManager.append_slot": "prefix caching's token_ids (exercise 12)",
}
"""Graded functions with a statement no criterion reaches, and why that is right."""


def statement_lines(function) -> dict[int, str]:
    """The first line of each statement in ``function``'s body (its docstring left out), with
    its text."""
    lines, start = inspect.getsourcelines(function)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    found = {}
    for node in ast.walk(tree.body[0]):
        if isinstance(node, ast.stmt) and node is not tree.body[0]:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            found[start + node.lineno - 1] = lines[node.lineno - 1].strip()
    return found


def graded_function(name: str):
    module, _, qualname = name.partition(":")
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    found = found.fget if isinstance(found, property) else found
    return inspect.unwrap(found)  # the function itself, past a decorator's checks


@pytest.mark.slow
@pytest.mark.parametrize("number", IN_PROCESS)
def test_every_statement_of_the_solution_is_reached_by_a_criterion(number):
    ex = EXERCISES[number]
    functions = {name: graded_function(name) for name in ex.graded}
    files = {f.__code__.co_filename for f in functions.values()}
    reached: set[tuple[str, int]] = set()

    def trace(frame, event, arg):
        if frame.f_code.co_filename not in files:
            return None

        def line(frame, event, arg):
            if event == "line":
                reached.add((frame.f_code.co_filename, frame.f_lineno))
            return line

        return line

    student = load_solution(ex.solution)
    statements = {name: statement_lines(function) for name, function in functions.items()}

    def unreached() -> dict[str, list[str]]:
        return {
            name: [
                text
                for lineno, text in statements[name].items()
                if (function.__code__.co_filename, lineno) not in reached
            ]
            for name, function in functions.items()
            if name not in UNREACHED_BY_DESIGN
        }

    for criterion in ex.criteria():  # until every statement is reached: the rest add none
        sys.settrace(trace)
        try:
            # Tracing every line runs the checks several times slower: the criterion's 30 s,
            # a limit for students' code, is not what this test measures (exercise 06's
            # stateful machine ran past it under the tracer on a machine at a load of 10).
            run_criteria([criterion], student, check_seconds=600)
        finally:
            sys.settrace(None)
        if not any(unreached().values()):
            return
    missed = {name: lines for name, lines in unreached().items() if lines}
    assert not missed, f"exercise {number}: statements no criterion reaches: {missed}"
