"""Whether a student's function is the library's solution in disguise: the same code with its
identifiers renamed, its docstrings and comments changed or dropped, its functions reordered.

Each function is reduced to its *shape*: the syntax tree walked depth first, one token per node
(``FunctionDef``, ``For``, ``BinOp``, ``FloorDiv`` ...), every identifier (a variable, an
argument, an attribute) replaced by the order it first appears in (``n0``, ``n1`` ...), numbers
kept, strings reduced to ``str``, docstrings left out; the function's own name is not part of
it, nor is where in the file it stands. Two shapes are compared with ``difflib``'s ratio
(twice the matching tokens over both lengths: 1.0 for the same shape), less what every student
is given: the tokens of the graded function that match its version in the exercise's starter
(the signature, a nested function and its ``return``) are taken out of the matches and of both
lengths (``alike``). A copy still scores 1.0; an honest answer no longer scores for the lines
it was handed. Exercise 05's right answer in ``tests/student_answers`` reached 0.858 against
``Scheduler._preempt`` without this, and 0.844 with it: the rest is its statement, which names
every step in order.

A graded library function whose shape has at least ``MIN_TOKENS`` tokens is *matched* by a
student's function of ratio ``THRESHOLD`` or more. Shorter functions are left out: there are
few ways to write ``return -(-num_tokens // block_size)``, and a short function's shape is
like many others' (the library's ``incref`` and ``decref``, 106 and 136 tokens, are 0.87
alike). The numbers were measured (``tests/test_grader_similarity.py``): the honest answers
the project knows (the starters, the test suite's answers written into them) and the library's
other functions reach at most ``HONEST_MAX`` against a graded function this long; a disguised
copy scores 1.0, and one with a statement added to every function still above ``THRESHOLD``.
Exercises 01 and 02, whose graded functions are all shorter, are left to the exact
comparison of ``minipaged.grader.library_copies``.

Variables and attributes are numbered apart, in one count: with one number for a name,
a copy that renamed a local named like an attribute (``table = self.table(seq_id)``: the
local ``v1`` and the attribute ``table`` now two names) shifted every number after it, and a
disguised ``BlockManager.free`` scored 0.569; numbered apart, it scores 1.0, and the honest
answers no more than before (0.844). Two counts, one for variables and one for attributes,
were measured too: an honest answer then reaches 0.899 (exercise 05's ``_preempt``), no
margin.

A copy that adds statements doing nothing (a new variable at the top of each function, a
store never read, a string, ``pass``) or reorders statements that could run in either order
shifts every number after them: such copies scored 0.59 to 0.82. So a shape is taken of the
function's ``essential`` statements: those that do nothing are left out, and each block's
statements are put in one order among those that compute the same (``_Ordering``). Such
copies now score 1.0; the honest answers score less than before (0.79 at most, exercise 05's
``_preempt`` answered as the TUI's tests answer it: its statement dictates the steps, not
their order).
"""

from __future__ import annotations

import ast
import copy
import difflib
import importlib.util
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MIN_TOKENS = 140
"""The shortest graded function (in tokens of its shape) compared: a dozen lines or so."""

THRESHOLD = 0.9
"""The ratio from which a student's function is the library's in disguise."""

HONEST_MAX = 0.85
"""At least the highest ``alike`` the honest answers the project knows reach (measured by
the tests: 0.79, exercise 05's ``_preempt``, whose docstring dictates every step; 0.756,
exercise 10's ``tree_reduce``; 0.844 before statements were put in one order). The closest
disguised copy of each exercise scores 0.94 or more."""

DICTATED = frozenset({"cuda_kernels.cache_ops:reshape_and_cache_kernel"})
"""Graded functions long enough to compare whose statement dictates every line: an answer
written honestly from exercise 09's hints (read the slot, return when it is negative, block
and offset, a loop of stride blockDim.x over the token's values) reaches 0.956 against it, no
matter who writes it. Left, like exercises 01 and 02, to the exact comparison."""


class _Shape(ast.NodeVisitor):
    """The tokens of one function's shape (see the module's docstring)."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.names: dict[tuple[str, str], str] = {}

    def name(self, identifier: str, kind: str) -> None:
        """``identifier``'s number: a variable and an attribute of the same name (``table =
        self.table(seq)``) are two names, so that renaming the variable alone changes nothing
        after it."""
        self.tokens.append(self.names.setdefault((kind, identifier), f"n{len(self.names)}"))

    def generic_visit(self, node: ast.AST) -> None:
        self.tokens.append(type(node).__name__)
        for field, value in ast.iter_fields(node):
            if isinstance(node, ast.keyword) and field == "arg":
                # f(scale=scale): the keyword is the callee's name, not one the writer chose,
                # so renaming the variable must not change how the keyword reads
                self.tokens.append("keyword")
            elif field in ("id", "arg", "attr") or (field == "name" and not _defines(node)):
                if isinstance(value, str):
                    self.name(value, "attribute" if field == "attr" else "variable")
            elif isinstance(value, list):
                if field == "body" and value and _is_docstring(value[0]):
                    value = value[1:]
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)
            elif isinstance(node, ast.Constant) and field == "value":
                self.tokens.append("str" if isinstance(value, str | bytes) else repr(value))


def _defines(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def shape(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The tokens of ``function``'s shape, its statements without effect left out
    (``essential``)."""
    visitor = _Shape()
    visitor.visit(essential(function))
    return visitor.tokens


def _raw_shape(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The tokens of ``function``'s whole tree, every statement kept: no fewer than its
    shape's."""
    visitor = _Shape()
    visitor.visit(function)
    return visitor.tokens


_EFFECTS = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)
"""What makes an expression do something besides being computed."""


def essential(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
    """A copy of ``function`` without the statements a disguise adds to move every name's
    number: ``pass``, an expression statement that only computes (a string, a name,
    ``x + 1``), and a store into variables the function never reads (``unused = len(q)``,
    its call too: a shape is compared, not run); again until none is left, as a store may
    feed only another that goes."""
    function = copy.deepcopy(function)
    while _Pruned(_read(function)).prune(function):
        pass
    _Ordering().visit(function)
    return function


_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)


class _Ordering(ast.NodeVisitor):
    """Puts each block of statements of a function in one order among those that compute
    the same: each statement keeps its place after those it depends on (one of the two
    writes a name the other reads or writes, or both call something, or one is not a simple
    statement); of the statements free to go next, the one of least shape goes first, names
    read as the order they first appear in so far (``k = keys[i]`` before ``v = values[i]``
    where ``keys`` came first), names not seen yet as one. A copy that reorders independent
    statements reads as written."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name | ast.arg):
            self.seen.setdefault(getattr(node, "id", None) or node.arg, len(self.seen))
        for field, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                if not isinstance(node, ast.ClassDef):
                    value = self.ordered(value)
                    setattr(node, field, value)
                for statement in value:
                    self.visit(statement)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def ordered(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        left, ordered = list(statements), []
        while left:
            ready = [s for i, s in enumerate(left) if all(_independent(p, s) for p in left[:i])]
            first = min(ready, key=self.key)  # the earliest of equal keys
            ordered.append(first)
            left = [s for s in left if s is not first]
            self.number(first)  # before the next is chosen
        return ordered

    def number(self, statement: ast.stmt) -> None:
        if isinstance(statement, _SIMPLE):
            for node in ast.walk(statement):
                if isinstance(node, ast.Name):
                    self.seen.setdefault(node.id, len(self.seen))

    def key(self, statement: ast.stmt) -> tuple[str, list[int]]:
        names = [n.id for n in ast.walk(statement) if isinstance(n, ast.Name)]
        return _key(statement), [self.seen.get(name, len(self.seen)) for name in names]


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    if not (isinstance(a, _SIMPLE) and isinstance(b, _SIMPLE)) or (_acts(a) and _acts(b)):
        return False
    (read_a, wrote_a), (read_b, wrote_b) = _uses(a), _uses(b)
    return not (wrote_a & (read_b | wrote_b) or wrote_b & read_a)


def _uses(statement: ast.stmt) -> tuple[set[str], set[str]]:
    """The names ``statement`` reads and writes (a write into ``x.a`` or ``x[i]`` writes x)."""
    targets = getattr(statement, "targets", None) or [getattr(statement, "target", None)]
    wrote = {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}
    read = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)} - wrote
    if isinstance(statement, ast.AugAssign):
        read |= wrote
    return read, wrote


def _key(statement: ast.stmt) -> str:
    return " ".join(type(n).__name__ for n in ast.walk(statement))


def _read(function: ast.AST) -> set[str] | None:
    """Every variable name ``function`` reads, in nested functions too (a closure's), or None
    where it may read any (``locals()``, ``vars()``, ``eval``, ``exec``)."""
    read = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            read.add(node.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            read.add(node.target.id)
        elif isinstance(node, ast.Global | ast.Nonlocal):  # stores seen outside
            read.update(node.names)
    return None if read & {"locals", "vars", "eval", "exec"} else read


class _Pruned:
    """One pass of ``essential``'s pruning, given the names the function reads."""

    def __init__(self, read: set[str] | None) -> None:
        self.read = read
        self.changed = False

    def prune(self, tree: ast.AST) -> bool:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):  # its stores are attributes, read elsewhere
                continue
            for field in ("body", "orelse", "finalbody"):
                statements = getattr(node, field, None)
                if isinstance(statements, list) and statements:
                    kept = [s for s in (self.kept(s) for s in statements) if s is not None]
                    setattr(node, field, kept)
        return self.changed

    def kept(self, statement: ast.AST) -> ast.AST | None:
        """``statement``, what is left of it, or None where it does nothing."""
        if not isinstance(statement, ast.stmt):
            return statement
        if isinstance(statement, ast.Pass) or (
            isinstance(statement, ast.Expr) and not _acts(statement.value)
        ):
            self.changed = True
            return None
        targets = (
            statement.targets
            if isinstance(statement, ast.Assign)
            else [statement.target]
            if isinstance(statement, ast.AnnAssign) and statement.value is not None
            else None
        )
        if targets is None or not all(self.dead(t) for t in targets):
            return statement
        self.changed = True
        return None

    def dead(self, target: ast.AST) -> bool:
        """Whether ``target`` stores only into variables never read."""
        if isinstance(target, ast.Name):
            return self.read is not None and target.id not in self.read
        if isinstance(target, ast.Tuple | ast.List):
            return all(self.dead(t) for t in target.elts)
        return False


def _acts(expression: ast.AST) -> bool:
    return any(isinstance(n, _EFFECTS) for n in ast.walk(expression))


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function defined in ``tree``, at any depth (methods, nested functions)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def ratio(a: list[str], b: list[str]) -> float:
    """How alike two shapes are: 1.0 for the same."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@dataclass(frozen=True)
class Graded:
    """A graded library function's shape, and how many of its tokens match its version in the
    starter (``given``): the signature, a nested function and its ``return``, what every
    student is given before writing a line."""

    tokens: list[str]
    given: int


def _matching(a: list[str], b: list[str]) -> int:
    """How many tokens of ``a`` and ``b`` match, in difflib's matching blocks."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(size for _, _, size in matcher.get_matching_blocks())


def library_shapes(ex) -> dict[str, Graded]:
    """The shapes of exercise ``ex``'s graded library functions (``ex.graded``:
    ``"module:Qual.name"``) long enough to compare, by name, each with what its starter
    (``ex.starter``) gives."""
    shapes: dict[str, Graded] = {}
    trees: dict[str, ast.AST] = {}
    stems = {module: stem for stem, module in ex.solution.items()}
    for name in ex.graded:
        module, _, qualname = name.partition(":")
        if module not in trees:
            trees[module] = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
            starter = ex.starter / f"{stems[module]}.py"
            trees[stems[module]] = ast.parse(starter.read_text()) if starter.exists() else None
        found = _find(trees[module], qualname.split("."))
        if name in DICTATED or found is None:
            continue
        if len(tokens := shape(found)) >= MIN_TOKENS:
            starter = _find(trees[stems[module]], qualname.split("."))
            given = _matching(tokens, shape(starter)) if starter is not None else 0
            shapes[name] = Graded(tokens, given)
    return shapes


def alike(mine: list[str], library: Graded) -> float:
    """How alike a student's shape ``mine`` and a graded function are in what the student
    wrote: ``ratio``'s twice the matching tokens over both lengths, with the tokens the
    starter gives (``Graded.given``) taken out of the matches and of both lengths. 1.0 for the
    same shape, whatever the starter gives; an honest answer scores no higher for keeping the
    starter's signature."""
    return _discounted(_matching(mine, library.tokens), len(mine), library)


def _discounted(matching: int, length: int, library: Graded) -> float:
    rest = length + len(library.tokens) - 2 * library.given  # both, without what is given
    return max(0.0, 2 * (matching - library.given) / rest) if matching > library.given else 0.0


def _may_reach(most: int, library: Graded) -> bool:
    """Whether a shape of at most ``most`` tokens may be ``THRESHOLD`` alike to ``library``.
    ``alike`` grows with the shape's length up to the library's, and falls beyond it, its
    matches at most the shorter length: so its most is at the length nearest the library's."""
    length = min(most, len(library.tokens))
    return _discounted(length, length, library) >= THRESHOLD


def _find(tree: ast.AST, path: list[str]):
    for node in getattr(tree, "body", []):
        if _defines(node) and node.name == path[0]:
            return node if len(path) == 1 else _find(node, path[1:])
    return None


def matches(tree: ast.AST, library: dict[str, Graded]) -> list[tuple[str, str, float]]:
    """``(student function, library function, alike)`` for each function of ``tree`` that
    matches a graded library function (``library_shapes``), best first."""
    found = []
    counts = {name: Counter(graded.tokens) for name, graded in library.items()}
    for function in functions(tree):
        # Cheap upper bounds first: the shape's length (at most the whole function's, before
        # ``essential`` leaves statements out), then the tokens both shapes hold. The shape
        # and the full match are slow: a dataclass's generated __init__, compiled at run
        # time, is judged too, a hundred of them at a library module's import (profiled).
        most = len(_raw_shape(function))
        if not any(_may_reach(most, graded) for graded in library.values()):
            continue
        mine = shape(function)
        tally = Counter(mine)
        for name, graded in library.items():
            common = sum((tally & counts[name]).values())
            if _discounted(common, len(mine), graded) < THRESHOLD:
                continue
            alike = _discounted(_matching(mine, graded.tokens), len(mine), graded)
            if alike >= THRESHOLD:
                found.append((function.name, name, alike))
    return sorted(found, key=lambda match: -match[2])
