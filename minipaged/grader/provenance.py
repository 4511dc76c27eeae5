"""Whether running code is what it says it is, for the guards of a grading child
(``minipaged.grader.delegation``), which run while a student's code shares the process.

A frame's ``co_filename`` is whatever ``compile`` was told: a student's function compiled
with the library's file name, or as ``"<string>"``, claims to be code it is not.
``Provenance.genuine(code)`` compiles the file ``code`` names (once) and looks for ``code``
among the functions it holds; code equality compares bytecode, constants, names and line
numbers, so only the file's own functions match.

What the guards run must stay out of the student's reach while it runs: a student's code may
rebind ``sys._getframe``, ``os.path.realpath`` or ``builtins.isinstance``, and whatever the
guard calls then runs their code with the guard's frame, and the library functions it keeps,
one ``f_back`` away. ``private(function)`` rebuilds a function over a namespace of its own
(``sealed``): a copy of ``PRIVATE``, the names the guards need and the builtins, all taken
when this module is imported, before any student code runs. A copy, because ``PRIVATE`` is
within the student's reach (``provenance.PRIVATE``, a stub's ``__globals__``): a student's
code that put its own ``getframe`` there had the delegation guard hand it the library's
``fork`` (exercise 03 passed all eight criteria on the library's code), and one that put a
source of its own in ``AS_READ`` under a library file name made its code genuine. Each
function's namespace is reachable from that function alone; the guards' hooks, held by the
interpreter, are reachable from nothing (``runtime_code`` refuses a traceback's frame of
theirs).
"""

from __future__ import annotations

import builtins
import hashlib
import sys
import types
from types import CodeType, MappingProxyType

try:
    from _imp import get_frozen_object as frozen
except ImportError:  # not CPython: frozen modules are then not told apart
    frozen = None

getframe, audit = sys._getframe, sys.audit

PLAIN_CONSTANTS = (type(None), bool, int, float, complex, str, bytes, type(...), CodeType)
"""The constants ``compile`` makes; a code object holding anything else was built by hand
(``code.replace``), and hashing or showing its constants would run their methods."""


def plain_constants(code: CodeType, depth: int = 0) -> bool:
    """Whether ``code``'s constants, nested, are only what ``compile`` makes."""
    if depth > 32:
        return False
    return _plain(code.co_consts, depth)


def _plain(values, depth: int) -> bool:
    for value in values:
        kind = type(value)
        if kind is tuple or kind is frozenset:
            if depth > 32 or not _plain(value, depth + 1):
                return False
        elif kind is CodeType:
            if not plain_constants(value, depth + 1):
                return False
        elif kind not in PLAIN_CONSTANTS:
            return False
    return True


def walk(code: CodeType):
    """``code`` and every function compiled inside it."""
    yield code
    for const in code.co_consts:
        if type(const) is CodeType:
            yield from walk(const)


def provenance(files=(), without=frozenset()):
    """``genuine(code)``: whether ``code`` is a function of the file its ``co_filename`` names.
    ``files``: compile these now (the library modules a grading child can no longer read once
    it is confined), keeping none of the code ``without`` nor any code holding it (its
    module's, its class's): that code is no code of the file's as far as ``genuine`` tells,
    and the process keeps no copy of it; any other file is compiled the first time a code
    object names it."""
    known = {
        path: frozenset(c for c in codes_of(path) if without.isdisjoint(walk(c))) for path in files
    }

    def genuine(code: CodeType) -> bool:
        where = code.co_filename
        if type(where) is not str or not plain_constants(code):
            return False
        if where not in known:
            known[where] = codes_of(where)
        return code in known[where]

    return private(genuine)


def codes_of(path: str) -> frozenset:
    """Every code object compiled from the file ``path`` (or the frozen module
    ``<frozen name>``), as read before the child was confined where it was (``AS_READ``);
    none where it cannot be read."""
    try:
        if path.startswith("<frozen ") and path.endswith(">") and frozen:
            top = frozen(path[len("<frozen ") : -1])
        else:
            source = AS_READ.get(path)
            if source is None:
                with open(path, "rb") as f:
                    source = f.read()
            top = compile(source, path, "exec", dont_inherit=True)
    except Exception:  # no such file, unreadable, not Python: nothing there is genuine
        return frozenset()
    return frozenset(walk(top))


def _read_once():
    """``(view, seal)``: a read-only view of sources by path, and ``seal(sources)``, which
    fills it once. Once sealed, nothing but the view holds the sources (not ``seal``'s
    closure either), so no attribute or item reaches them to change; the collector does
    (``gc.get_referents`` of the view is the dict it views), and the delegation guard refuses
    the collector's searches (``delegation._SEARCHES``)."""
    held: dict | None = {}
    view = MappingProxyType(held)

    def seal(sources: dict[str, bytes]) -> None:
        nonlocal held
        if held is None:
            raise RuntimeError("the library's sources as read are sealed already: seal once")
        held.update(sources)
        held = None

    return view, seal


AS_READ, seal_as_read = _read_once()
"""Library sources read just before the grading child was confined, by path
(``minipaged.grader.confined_imports``, which seals them before any student code runs): read
from here, since Landlock's rule for such a file names the file that was there then, and a
file replaced since cannot be read."""

PRIVATE: dict = {
    "__builtins__": dict(vars(builtins)),
    "getframe": getframe,
    "sha256": hashlib.sha256,
    "audit": audit,
    "frozen": frozen,
    "AS_READ": AS_READ,
    "CodeType": CodeType,
    "FunctionType": types.FunctionType,
    "PLAIN_CONSTANTS": PLAIN_CONSTANTS,
}
"""What the guards' functions see as globals, taken at import, before any student code: the
template each ``sealed`` namespace copies, never a guard's namespace itself."""


def _over(function, space: dict):
    return types.FunctionType(
        function.__code__, space, function.__name__, function.__defaults__, function.__closure__
    )


def share(*functions) -> None:
    """Put ``functions`` in ``PRIVATE``, for the guards' functions to call by name: each
    ``sealed`` namespace gets a copy of its own of each."""
    PRIVATE.update({f.__name__: _over(f, PRIVATE) for f in functions})


def sealed() -> dict:
    """A namespace of ``PRIVATE``'s names as they are now, its builtins copied, and each
    function ``share`` put there rebuilt over it: what one guard function calls by name is
    then its own, whatever a student's code does to ``PRIVATE`` or to another's namespace."""
    space = dict(PRIVATE)
    space["__builtins__"] = dict(PRIVATE["__builtins__"])
    for name, value in PRIVATE.items():
        if type(value) is types.FunctionType and value.__globals__ is PRIVATE:
            space[name] = _over(value, space)
    return space


def private(function):
    """``function`` rebuilt over a ``sealed`` namespace of its own (the module's docstring)."""
    return _over(function, sealed())


share(plain_constants, _plain, walk, codes_of)
