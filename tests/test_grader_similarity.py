"""The library's solution in disguise is refused as such, and the honest answers the project
knows are not: the false-positive margin of ``minipaged.grader.similarity``, measured.

A disguise renames every variable and argument, drops docstrings and comments (``ast.unparse``
keeps none) and writes the functions in reverse order; an edited one also ends every function
with a statement of its own. (One that adds a new variable at the top of each function shifts
every name's canonical number and can slip below the threshold: a limit of the method.)
Honest answers: the exercises' starters, exercise 05's starter with the test
suite's answers written in (``test_tui_exercise.WRITTEN``, ``test_grader_integrity.OWN_PREEMPT``),
and the library's other functions, written in the same style for other purposes.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
import test_grader_integrity
import test_tui_exercise

from minipaged.grader import similarity
from minipaged.grader.delegation import copies
from minipaged.grader.exercises import EXERCISES, TUTORIALS
from minipaged.grader.grading import grade
from minipaged.grader.report import FAIL

ANSWERS = Path(__file__).parent / "student_answers"

COMPARED = [n for n, ex in EXERCISES.items() if similarity.library_shapes(ex)]
"""The exercises with a graded function long enough to compare (not 01, 02 and 06)."""


class _Rename(ast.NodeTransformer):
    """Every variable and argument renamed, docstrings dropped, an optional last statement."""

    def __init__(self, extra: bool) -> None:
        self.names: dict[str, str] = {}
        self.local: set[str] = set()  # the variables the function being renamed assigns
        self.extra = extra

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
        if self.extra:
            node.body.append(ast.Pass())
        self.names, self.local = outer
        return node


def disguised(module: str, extra: bool = False) -> str:
    """Library ``module`` disguised (see the module's docstring)."""
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    tree = _Rename(extra).visit(tree)
    for node in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
        node.body = list(reversed(node.body))
    future = [s for s in tree.body if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    tree.body = future + [s for s in tree.body if s not in future]
    return ast.unparse(ast.fix_missing_locations(tree))


@pytest.mark.parametrize("extra", [False, True], ids=["disguised", "disguised-and-edited"])
@pytest.mark.parametrize("number", COMPARED)
def test_a_disguised_copy_is_named_as_the_librarys_solution(number, extra, tmp_path):
    ex = EXERCISES[number]
    for stem, module in ex.solution.items():
        (tmp_path / f"{stem}.py").write_text(disguised(module, extra))
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
    worst = (0.0, "", "")
    for number in COMPARED:
        for name, graded in similarity.library_shapes(EXERCISES[number]).items():
            for where, function in honest:
                mine = similarity.shape(function)
                most = similarity._discounted(min(len(mine), len(graded.tokens)), len(mine), graded)
                if most > worst[0]:
                    worst = max(worst, (similarity.alike(mine, graded), name, where))
    assert worst[0] <= similarity.HONEST_MAX, worst


@pytest.mark.parametrize("number", COMPARED)
def test_every_graded_function_in_disguise_scores_well_above_the_most_alike_honest_answer(number):
    """Each graded function of each exercise, disguised (and edited), scores ``MARGIN`` or
    more above ``HONEST_MAX``: not only the module as a whole is refused, each copied function
    is (a disguised ``BlockManager.free`` alone once scored 0.569: its local ``table`` was
    numbered with the attribute ``self.table``)."""
    shapes = similarity.library_shapes(EXERCISES[number])
    for extra in (False, True):
        best = dict.fromkeys(shapes, 0.0)
        for module in EXERCISES[number].solution.values():
            for _, name, ratio in similarity.matches(ast.parse(disguised(module, extra)), shapes):
                best[name] = max(best[name], ratio)
        assert min(best.values()) >= similarity.HONEST_MAX + MARGIN, (number, extra, best)


MARGIN = 0.09
"""How far the lowest copy's score stays above the highest honest one's."""
