"""The library's solution in disguise is refused as such, and the honest answers the project
knows are not: the false-positive margin of ``minipaged.grader.similarity``, measured.

A disguise renames every variable and argument, drops docstrings and comments (``ast.unparse``
keeps none) and writes the functions in reverse order; an edited one also ends every function
with a statement of its own, adds statements that do nothing, or reorders statements that
could run in either order (``EDITS``).
Honest answers: the exercises' starters, exercise 05's starter with the test
suite's answers written in (``test_tui_exercise.WRITTEN``, ``test_grader_integrity.OWN_PREEMPT``),
and the library's other functions, written in the same style for other purposes.
"""

from __future__ import annotations

import ast
import importlib.util
from collections import Counter
from pathlib import Path

import pytest
import test_grader_integrity
import test_tui_exercise

from minipaged.grader import similarity
from minipaged.grader.exercises import EXERCISES, TUTORIALS
from minipaged.grader.grading import grade
from minipaged.grader.library_copies import copies
from minipaged.grader.report import FAIL

ANSWERS = Path(__file__).parent / "student_answers"

COMPARED = [n for n, ex in EXERCISES.items() if similarity.library_shapes(ex)]
"""The exercises with a graded function long enough to compare (not 01, 02 and 06)."""


EDITS = (
    "disguised",
    "disguised-and-edited",
    "disguised-with-dead-statements",
    "disguised-and-reordered",
)
"""How a copy is disguised beyond renaming: not at all, a last statement of its own in every
function, statements that do nothing in every function (a new variable at the top, a store
never read, a string and a ``pass`` between the statements), or each pair of neighbouring
assignments that can run in either order swapped; the last two move every name's number."""


def _swapped(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` with each pair of neighbouring assignments to a plain name, neither calling
    anything nor reading the other's name, swapped."""

    def alone(statement: ast.stmt) -> str | None:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        if not isinstance(statement.targets[0], ast.Name):
            return None
        calls = any(isinstance(n, ast.Call) for n in ast.walk(statement))
        return None if calls else statement.targets[0].id

    body, i = list(body), 0
    while i < len(body) - 1:
        first, second = alone(body[i]), alone(body[i + 1])
        names = [{n.id for n in ast.walk(s) if isinstance(n, ast.Name)} for s in body[i : i + 2]]
        if first and second and first not in names[1] and second not in names[0]:
            body[i], body[i + 1] = body[i + 1], body[i]
            i += 1
        i += 1
    return body


class _Rename(ast.NodeTransformer):
    """Every variable and argument renamed, docstrings dropped, and the ``edit`` (``EDITS``)."""

    def __init__(self, edit: str) -> None:
        self.names: dict[str, str] = {}
        self.local: set[str] = set()  # the variables the function being renamed assigns
        self.edit = edit

    def fresh(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}_{name[::-1].strip('_')}")

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in self.local:
            node.id = self.fresh(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        if node.arg != "self":
            node.arg = self.fresh(node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        outer = self.names, self.local  # a nested function keeps the names it closes over
        self.names = dict(self.names)
        stored = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
        stored = {n.id for n in stored if isinstance(n.ctx, ast.Store)}
        stored |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} - {"self"}
        self.local = self.local | {n for n in stored if not (n in __builtins__ or n[:1].isupper())}
        if node.body and similarity._is_docstring(node.body[0]):
            node.body = node.body[1:] or [ast.Pass()]
        for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            self.visit_arg(arg)
        node.body = [self.visit(statement) for statement in node.body]
        if self.edit == "disguised-and-edited":
            node.body.append(ast.Pass())
        elif self.edit == "disguised-with-dead-statements":
            top = ast.parse(f"first_{len(self.names)} = 0\nseen = len('{node.name}')").body
            between = ast.parse("'checked'\npass").body
            node.body = top + node.body[:1] + between + node.body[1:]
        elif self.edit == "disguised-and-reordered":
            for inner in ast.walk(node):
                for field in ("body", "orelse"):
                    if isinstance(getattr(inner, field, None), list):
                        setattr(inner, field, _swapped(getattr(inner, field)))
        self.names, self.local = outer
        return node


def disguised(module: str, edit: str = "disguised") -> str:
    """Library ``module`` disguised (see the module's docstring), with ``edit`` (``EDITS``)."""
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    tree = _Rename(edit).visit(tree)
    for node in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
        node.body = list(reversed(node.body))
    future = [s for s in tree.body if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    tree.body = future + [s for s in tree.body if s not in future]
    return ast.unparse(ast.fix_missing_locations(tree))


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("number", COMPARED)
def test_a_disguised_copy_is_named_as_the_librarys_solution(number, edit, tmp_path):
    ex = EXERCISES[number]
    for stem, module in ex.solution.items():
        (tmp_path / f"{stem}.py").write_text(disguised(module, edit))
    why = copies(ex, tmp_path)
    assert "matches the library's solution" in why, why
    assert "is a copy" not in why  # the exact comparison alone would have let it pass


def test_a_disguised_copy_fails_every_criterion_without_running(tmp_path):
    (tmp_path / "block_manager.py").write_text(disguised("minipaged.block_manager"))
    report = grade(4, tmp_path)
    assert {r.outcome for r in report.results} == {FAIL}
    expected = "matches the library's solution (minipaged.block_manager.BlockManager.append_slot"
    assert f"append_slot {expected}" in report.results[0].message


def honest_answers() -> list[tuple[str, ast.AST]]:
    """Every function of the honest answers the project knows, with where it is from: the
    whole answers of ``student_answers`` (right or wrong, each written apart from the
    library) among them."""
    found = []
    for path in sorted(ANSWERS.rglob("*.py")):
        found.append((str(path.relative_to(ANSWERS)), ast.parse(path.read_text())))
    for path in sorted(TUTORIALS.rglob("*.py")):
        found.append((str(path.relative_to(TUTORIALS)), ast.parse(path.read_text())))
    five = EXERCISES[5]
    for stem in five.solution:
        source = (TUTORIALS / five.folder / "starter" / f"{stem}.py").read_text()
        for todo, answer in test_tui_exercise.WRITTEN[5].items():
            source = source.replace(todo, answer)
        found.append((f"05 answered: {stem}.py", ast.parse(source)))
        if "    def _preempt(" in source:
            own = source[: source.index("    def _preempt(")] + test_grader_integrity.OWN_PREEMPT
            found.append(("05 OWN_PREEMPT", ast.parse(own)))
    return found


def test_honest_answers_are_not_flagged_and_the_margin_holds(tmp_path):
    """Against every graded function compared, no honest answer and no other library function
    is more alike than ``HONEST_MAX``, which stays below ``THRESHOLD``: the margin."""
    assert similarity.HONEST_MAX + 0.05 <= similarity.THRESHOLD
    honest = [(where, f) for where, tree in honest_answers() for f in similarity.functions(tree)]
    graded = {n for number in COMPARED for n in EXERCISES[number].graded}
    modules = {m for ex in EXERCISES.values() for m in ex.solution.values()}
    for module in sorted(modules):
        tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
        inside = set()  # a graded function, and the functions it holds, are not others
        for name in graded:
            if name.startswith(f"{module}:"):
                found = similarity._find(tree, name.partition(":")[2].split("."))
                inside |= {id(f) for f in similarity.functions(found)} if found else set()
        functions = [f for f in similarity.functions(tree) if id(f) not in inside]
        honest += [(f"{module}:{f.name}", f) for f in functions]
    # Each shape is taken once; the full match (difflib's, slow) runs only where the tokens
    # the two shapes have in common, an upper bound on its matches, could beat the worst yet.
    shapes = [(where, s, Counter(s)) for where, f in honest for s in [similarity.shape(f)]]
    worst = (0.0, "", "")
    for number in COMPARED:
        for name, graded in similarity.library_shapes(EXERCISES[number]).items():
            theirs = Counter(graded.tokens)
            for where, mine, counts in shapes:
                common = sum((counts & theirs).values())
                if similarity._discounted(common, len(mine), graded) > worst[0]:
                    worst = max(worst, (similarity.alike(mine, graded), name, where))
    assert worst[0] <= similarity.HONEST_MAX, worst


@pytest.mark.parametrize("number", COMPARED)
def test_every_graded_function_in_disguise_scores_well_above_the_most_alike_honest_answer(number):
    """Each graded function of each exercise, disguised (and edited), scores ``MARGIN`` or
    more above ``HONEST_MAX``: not only the module as a whole is refused, each copied function
    is (a disguised ``BlockManager.free`` alone once scored 0.569: its local ``table`` was
    numbered with the attribute ``self.table``)."""
    shapes = similarity.library_shapes(EXERCISES[number])
    for edit in EDITS:
        best = dict.fromkeys(shapes, 0.0)
        for module in EXERCISES[number].solution.values():
            for _, name, ratio in similarity.matches(ast.parse(disguised(module, edit)), shapes):
                best[name] = max(best[name], ratio)
        assert min(best.values()) >= similarity.HONEST_MAX + MARGIN, (number, edit, best)


MARGIN = 0.09
"""How far the lowest copy's score stays above the highest honest one's."""
