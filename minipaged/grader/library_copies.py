"""Whether a student's folder, or code their code compiles, copies a graded library function:
the library's compiled code (a fingerprint of its bytecode, names and constants, and its
docstring), or its shape in disguise (``minipaged.grader.similarity``).

``copies`` judges the folder in the grader, before any of the student's code runs;
``copy_finder`` judges code compiled at run time (``minipaged.grader.runtime_code``'s
``Judge``, in the grader too). In a grading child only fingerprints are kept
(``Library.prints``, ``library_copy_finder``): hashes and docstrings, never the library's
code, its syntax tree or its shape, which a student's code reading the child's memory would
rebuild the solution from.
"""

from __future__ import annotations

import ast
import dis
import importlib.util
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from types import CodeType

from minipaged.grader import similarity
from minipaged.grader.code_shapes import shape
from minipaged.grader.exercises import Exercise
from minipaged.grader.provenance import plain_constants, private, share, walk

MAX_FILES, MAX_BYTES = 200, 2**20
"""The most files, and bytes per file, of a student's folder that ``copies`` reads."""

LONG_BYTECODE = 400
"""A function the library's, bytecode and names and all, is a copy if it also carries the
library's docstring where the starter's differs; or, where they do not differ, if its bytecode
is at least this long (a dozen lines or so). A short answer may well match the library's
exactly: ``2 * self.num_layers * self.num_kv_heads * ...`` is the only way to write it."""


LONG_SHAPE = 32
"""The fewest instructions a graded function (or one inside it) has for its bytecode's shape
to mark a copy built by hand (``minipaged.grader.code_shapes``): a shorter one is written
the library's way by honest students (``tests/student_answers`` holds answers of up to 23
instructions in the shape of a graded function's: ``return list(self._free)``, a sum over a
comprehension)."""


def _functions(paths) -> dict[str, CodeType]:
    """Every function compiled (not run) from the files ``paths``, by qualified name."""
    found = {}
    for path in paths:
        for code in walk(compile(path.read_text(), str(path), "exec")):
            found.setdefault(code.co_qualname, code)
    return found


def _fingerprint(code: CodeType) -> str:
    """A digest of a function's bytecode, names and constants without its docstring or line
    numbers: a grading child keeps no copy of the library's bytecode for a student to rebuild.
    Only of code whose constants ``compile`` made (``provenance.plain_constants``)."""
    return sha256(repr(_code_parts(code)).encode()).hexdigest()


def _code_parts(code: CodeType) -> tuple:
    consts = tuple(_code_parts(c) if type(c) is CodeType else c for c in code.co_consts[1:])
    return (code.co_code, code.co_names, code.co_varnames, consts)


def _docstring(code: CodeType):
    return code.co_consts[0] if code.co_consts and type(code.co_consts[0]) is str else None


class Library:
    """The graded functions of one exercise: their code, by fingerprint, and whether a match
    must also carry the library's docstring to count as a copy."""

    def __init__(self, ex: Exercise) -> None:
        self.exercise = ex
        starter = _functions(ex.starter / f"{stem}.py" for stem in ex.solution)
        library = _functions(Path(importlib.util.find_spec(m).origin) for m in ex.solution.values())
        self.prints: dict[str, tuple[str, object]] = {}
        for name in ex.graded:
            code = library.get(name.partition(":")[2])
            if code is None:
                continue
            doc, starter_code = _docstring(code), starter.get(code.co_qualname)
            evidence = starter_code is None or doc != _docstring(starter_code)
            if evidence:  # the library's own docstring marks a copy
                self.prints[_fingerprint(code)] = (name, doc)
            elif len(code.co_code) >= LONG_BYTECODE:  # too long to match by chance
                self.prints[_fingerprint(code)] = (name, None)
        # The shape of each graded function's bytecode and of those inside it, long enough to
        # be no honest answer's (``LONG_SHAPE``): a code object a student's code builds by hand
        # (``code.__new__``) in one of these is a copy, whatever its names, constants and lines
        # (``minipaged.grader.code_shapes``)
        self.shapes = frozenset(
            shape(inner.co_code)
            for name in ex.graded
            if name.partition(":")[2] in library
            for inner in walk(library[name.partition(":")[2]])
            if sum(1 for _ in dis.get_instructions(inner)) >= LONG_SHAPE
        )


def library_copy_finder(prints: dict):
    """``copied(code)``: the library function ``code`` (or a function inside it) copies, if
    any, by the fingerprints ``prints`` (``Library.prints``); the form a grading child's audit
    hook keeps, out of the reach of a student's code."""

    def copied(code: CodeType) -> str | None:
        if not plain_constants(code):  # built by hand, not compiled: no copy of anything
            return None
        for inner in walk(code):
            found = prints.get(_fingerprint(inner))
            if found and (found[1] is None or _docstring(inner) == found[1]):
                return (
                    f"{inner.co_qualname} is a copy of the library's {found[0].replace(':', '.')}"
                )
        return None

    return private(copied)


def copies(ex: Exercise, folder: Path) -> str:
    """Why the student's ``folder`` holds a copy of a graded library function, or ``""``: the
    library's compiled code, or its shape in disguise (``minipaged.grader.similarity``)."""
    copied = copy_finder(ex)
    # Every file, not only .py: a copy kept as notes.txt is read and run by a line of code.
    files = sorted(p for p in folder.rglob("*") if not p.is_symlink() and p.is_file())
    for path in files[:MAX_FILES]:  # a link (/dev/zero behind it never ends) is not followed
        try:
            with open(path, "rb") as f:
                source = f.read(MAX_BYTES + 1)
        except OSError:  # unreadable here: unreadable to their code too
            continue
        if len(source) > MAX_BYTES:
            continue
        found = copied(source, str(path))
        if found:
            return f"{path.relative_to(folder)}: {found}. {write_your_own(ex)}"
    return ""


def write_your_own(ex: Exercise) -> str:
    return f"Exercise {ex.number:02d} grades your own code: write it yourself, from the starter"


_FINDERS: dict[int, tuple[Exercise, Callable]] = {}
"""``copy_finder``'s, by exercise number, with the exercise each was made for."""


def copy_finder(ex: Exercise):
    """``copied(source, filename)``: which graded library function of ``ex`` the Python
    ``source`` copies (its compiled code, or its shape in disguise), or ``""``; ``""`` too for
    what is not Python. Judges a file of the student's folder (``copies``) as well as code
    their code compiled at run time (``minipaged.grader.runtime_code``). Made once for each
    exercise in a process (0.1-0.3 s: the library it compares with does not change), not
    once for each submission, each child and each file."""
    made = _FINDERS.get(ex.number)
    if made is None or made[0] is not ex:
        made = _FINDERS[ex.number] = (ex, _made_finder(ex))
    return made[1]


def _made_finder(ex: Exercise):
    library_copied = library_copy_finder(dict(Library(ex).prints))  # made once, for every source
    shapes = similarity.library_shapes(ex)

    def copied(source: bytes | str, filename: str) -> str:
        try:
            tree = ast.parse(source, filename)  # parsed once: compiled, and compared by shape
            code = compile(tree, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return ""  # the import reports it
        found = library_copied(code)
        if found:
            return found
        return "; ".join(
            f"{mine} matches the library's solution ({theirs.replace(':', '.')}, "
            f"{ratio:.0%} alike once names, docstrings and order are set aside)"
            for mine, theirs, ratio in similarity.matches(tree, shapes)
        )

    return copied


share(_fingerprint, _code_parts, _docstring)
"""The fingerprints a grading child's audit hook takes, over names a student cannot rebind."""
