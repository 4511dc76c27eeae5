"""Keeping the library's solution out of a student's reach while their code is graded.

Each exercise mirrors library code, so the library's own functions would pass its checks.
``Exercise.graded`` names the library functions an exercise asks the student to write (for
exercise 04, ``minipaged.block_manager:BlockManager.append_slot``). Three guards keep them out:

- ``copies(exercise, folder)``, in the grader, before any of the student's code runs: every
  ``.py`` file of the folder is compiled (never run) and each function in it compared with the
  graded functions; one that is the library's, bytecode and names and all, or the library's
  shape in disguise (renamed, reordered, its docstrings and comments changed:
  ``minipaged.grader.similarity``), fails the exercise.
- ``guard(exercise, folder)``, in the child, before the student's code is imported: each graded
  function is replaced by a stub that raises ``LibraryDelegation`` when a student's code reaches
  it (a re-export, or ``super()`` from the student's own version), and the graded modules'
  files can no longer be opened or re-executed (``importlib.reload``, ``spec_from_file_location``,
  ``exec`` of their source: an audit hook refuses them).
- The stub lets one part of the student's work use the library's version of another part graded
  apart (exercise 05's scheduler calls the library's ``swap_out``): it refuses only when no
  student code is on the stack, or when the student's own function of the same file is.

A determined student can still rewrite a copy beyond recognition or attack the child itself;
what the grader then judges is still only the data their code returns (``minipaged.grader.wire``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import linecache
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import CodeType

from minipaged.grader import similarity
from minipaged.grader.exercises import Exercise

MAX_FILES, MAX_BYTES = 200, 2**20
"""The most ``.py`` files, and bytes per file, of a student's folder that ``copies`` reads."""

LONG_BYTECODE = 400
"""A function the library's, bytecode and names and all, is a copy if it also carries the
library's docstring where the starter's differs; or, where they do not differ, if its bytecode
is at least this long (a dozen lines or so). A short answer may well match the library's
exactly: ``2 * self.num_layers * self.num_kv_heads * ...`` is the only way to write it."""


class LibraryDelegation(BaseException):
    """A student's code reached a library function the exercise grades. A BaseException, so
    that a student's ``except Exception`` around ``super()`` cannot hide it."""


def _lookup(name: str):
    """``(owner, attribute, value)`` of ``module:Qual.name``, importing the module."""
    module_name, _, qualname = name.partition(":")
    owner = importlib.import_module(module_name)
    *path, attribute = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, attribute, owner.__dict__[attribute]


def _functions(paths) -> dict[str, CodeType]:
    """Every function compiled (not run) from the files ``paths``, by qualified name."""
    found = {}
    for path in paths:
        for code in _walk(compile(path.read_text(), str(path), "exec")):
            found.setdefault(code.co_qualname, code)
    return found


def _fingerprint(code: CodeType) -> str:
    """A digest of a function's bytecode, names and constants without its docstring or line
    numbers: a grading child keeps no copy of the library's bytecode for a student to rebuild."""
    return hashlib.sha256(repr(_code_parts(code)).encode()).hexdigest()


def _code_parts(code: CodeType) -> tuple:
    consts = tuple(_code_parts(c) if isinstance(c, CodeType) else c for c in code.co_consts[1:])
    return (code.co_code, code.co_names, code.co_varnames, consts)


def _walk(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _walk(const)


def _docstring(code: CodeType):
    return code.co_consts[0] if code.co_consts and isinstance(code.co_consts[0], str) else None


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

    def copied(self, code: CodeType) -> str | None:
        """The library function ``code`` (or a function inside it) copies, if any."""
        for inner in _walk(code):
            found = self.prints.get(_fingerprint(inner))
            if found and (found[1] is None or _docstring(inner) == found[1]):
                return (
                    f"{inner.co_qualname} is a copy of the library's {found[0].replace(':', '.')}"
                )
        return None


def copies(ex: Exercise, folder: Path) -> str:
    """Why the student's ``folder`` holds a copy of a graded library function, or ``""``: the
    library's compiled code, or its shape in disguise (``minipaged.grader.similarity``)."""
    library = Library(ex)
    shapes = similarity.library_shapes(ex.graded)
    files = sorted(folder.rglob("*.py"))[:MAX_FILES]
    for path in files:
        if path.is_symlink() or not path.is_file():  # /dev/zero behind a link never ends
            continue
        with open(path, "rb") as f:
            source = f.read(MAX_BYTES + 1)
        if len(source) > MAX_BYTES:
            continue
        try:
            code = compile(source, str(path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # the import reports it
        found = library.copied(code)
        if not found:
            alike = similarity.matches(ast.parse(source), shapes)
            found = "; ".join(
                f"{mine} matches the library's solution ({theirs.replace(':', '.')}, "
                f"{ratio:.0%} alike once names, docstrings and order are set aside)"
                for mine, theirs, ratio in alike
            )
        if found:
            return (
                f"{path.relative_to(folder)}: {found}. Exercise {ex.number:02d} grades your "
                "own code: write it yourself, from the starter"
            )
    return ""


_HAND_OVER = "minipaged.grader.delegation.hand-over"
"""The audit event by which a stub asks for the library function it stands for."""

_SEARCHES = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")
"""Audit events of a search through the interpreter's objects, which would find that function."""


def guard(ex: Exercise, folder: Path) -> None:
    """In a grading child, before the student's code loads: stub every graded function, and
    refuse any later read or run of the graded modules' source, and any search of the
    interpreter's objects.

    The library's functions are kept by one audit hook (``hand_over``) and nowhere else a
    student's code can reach: not in a stub's closure, module or class, not in a traceback (that
    hook never raises), not through ``gc`` (the other hook refuses it). A stub asks for its
    function with an audit event; the hook checks that the asking frame runs the stubs' code and
    that its caller may use the library's version (``_allowed``), and hands the function over in
    a list the stub empties as it calls it."""
    folder = str(folder.resolve())
    library = Library(ex)
    stems = {n: stem for stem, module in ex.solution.items() for n in ex.graded_in(module)}
    guarded, stubs, originals = set(), {}, {}
    for name in ex.graded:
        owner, attribute, value = _lookup(name)
        original = value.fget if isinstance(value, property) else value
        stub = _stub(name, original, ex.number)
        originals[name] = (original, _allowed(ex, stems[name], folder))
        setattr(owner, attribute, property(stub) if isinstance(value, property) else stub)
        stubs[id(value)] = getattr(owner, attribute) if isinstance(value, property) else stub
        module = sys.modules[name.partition(":")[0]]
        guarded |= {module.__file__, importlib.util.cache_from_source(module.__file__)}
    for module in list(sys.modules.values()):  # the same functions under other names
        if getattr(module, "__name__", "").startswith(("minipaged.", "cuda_kernels.")):
            for attribute, value in list(vars(module).items()):
                if id(value) in stubs and not isinstance(value, type):
                    setattr(module, attribute, stubs[id(value)])
    guarded = {os.path.realpath(f) for f in guarded}
    basenames = {os.path.basename(f) for f in guarded}
    for path in guarded:  # tracebacks read no source line, and neither can a student's code
        linecache.cache[path] = (0, None, [], path)
    message = (
        f"exercise {ex.number:02d} grades your own code; it may not read or run the library's "
        "{}: write it yourself, from the starter"
    )

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], str | bytes | os.PathLike):
            path = os.fsdecode(args[0])
            if os.path.basename(path) in basenames and os.path.realpath(path) in guarded:
                raise LibraryDelegation(message.format(os.path.basename(path)))
        elif event == "exec" and isinstance(args[0], CodeType):
            found = library.copied(args[0])
            if found:
                raise LibraryDelegation(message.format("code") + f" ({found})")
        elif event in _SEARCHES:
            raise LibraryDelegation(message.format("functions by searching the interpreter"))

    def hand_over(event: str, args: tuple) -> None:
        if event != _HAND_OVER or len(args) != 2:
            return
        name, box = args
        asking = sys._getframe(1)
        if asking.f_code is _STUB_CODE and type(name) is str and type(box) is list:
            original, allowed = originals.get(name, (None, None))
            if original is not None and allowed(asking.f_back):
                box.append(original)

    sys.addaudithook(audit)
    sys.addaudithook(hand_over)


def _stub(name: str, original, number: int):
    """A stand-in for the graded library function ``name`` of exercise ``number``: it runs the
    library's function where ``guard``'s hook hands it over, and otherwise refuses."""
    short = name.rpartition(".")[2].rpartition(":")[2]

    def stub(*args, **kwargs):
        box = []
        sys.audit(_HAND_OVER, name, box)
        if box:
            return box.pop()(*args, **kwargs)  # held by no name a frame shows while it runs
        raise LibraryDelegation(
            f"exercise {number:02d} grades your {short}; it may not call the library's"
        )

    stub.__name__ = stub.__qualname__ = short
    markers = getattr(original, "__dict__", {})  # hypothesis's @invariant() marks, say
    stub.__dict__.update({k: v for k, v in markers.items() if k != "__wrapped__"})
    return stub


_STUB_CODE = _stub("", None, 0).__code__
"""The code every stub runs: the only code ``guard``'s hook hands a library function to."""


def _allowed(ex: Exercise, stem: str, folder: str):
    """Whether a caller may use the library's version of a graded function that the student's
    file ``stem`` mirrors: the library's own infrastructure may (the library's ``BlockManager``
    making its allocators, in exercise 02), and so may another graded file of the exercise
    (exercise 05's scheduler using the library's ``swap_out``); the student's file ``stem``
    (``super()``, a wrapper), any other file of theirs, and the grader itself (a re-export: the
    student's name is the library's) may not."""
    mine = os.path.join(folder, f"{stem}.py")
    others = {os.path.join(folder, f"{s}.py") for s in ex.solution} - {mine}

    def allowed(caller) -> bool:
        files, frame = [], caller
        while frame is not None:
            files.append(frame.f_code.co_filename)
            frame = frame.f_back
        theirs = [f for f in files if f.startswith(folder + os.sep)]
        return mine not in theirs and (
            (bool(theirs) and set(theirs) <= others) or (not theirs and _infrastructure(caller))
        )

    return allowed


_LIBRARY = tuple(
    os.path.dirname(importlib.util.find_spec(package).origin) + os.sep
    for package in ("minipaged", "cuda_kernels")
)
_GRADER = os.path.dirname(__file__) + os.sep


def _infrastructure(frame) -> bool:
    """Whether ``frame`` is the library's own code, not the grader's."""
    where = frame.f_code.co_filename
    return where.startswith(_LIBRARY) and not where.startswith(_GRADER)
