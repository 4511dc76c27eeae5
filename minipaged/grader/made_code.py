"""Code judged where it is made: a code object that comes into being from bytes while a
student's code is on the stack, in a grading child, is judged at that moment, not only where
it is bound or run.

A student's code that reads and writes raw memory (numpy's ``__array_interface__`` on a
function's address) binds any code object to a function's ``func_code`` with no audit event,
and no hook in the process can stop that write (``minipaged.grader.delegation`` says what raw
memory reaches). The code object has to exist first, though, and each way Python offers to
make one raises an event ``runtime_code.watch`` hears, in the main thread or in any thread the
student's code started (a pool's worker calling ``marshal.loads`` has no frame of theirs on its
stack): ``compile`` (text: recorded and judged by the copy finder), ``code.__new__``
(``CodeType(...)``, ``code.replace``: ``hand_made_judge``), and ``marshal.loads``, whoever
calls it (the import system's own ``_compile_bytecode`` included: it loads bytes handed to it
as readily as a ``.pyc``; and ``PyMarshal_ReadObjectFromString``, called from a Numba
``@intrinsic``, raises it too).

``loaded_judge`` judges what ``marshal.loads`` makes: each code object must not be a copy of a
graded library function under any name (``library_copies.library_copy_finder``'s
fingerprints) and must be readable as what it claims (``runtime_code``'s ``readable``: a source
recorded, or the file it names holds it). An installed package's module, loaded from the
``.pyc`` the import system keeps beside its source, is its own file's code: those bytes, read
again, are taken as they are, without compiling the source (a late ``import numpy`` stays fast).
The library's own files are never taken so: their code is judged by fingerprint and file.
"""

from __future__ import annotations

import io
import marshal
import os
import sys
import sysconfig
from pathlib import Path
from types import CodeType

from minipaged.grader.code_shapes import shaper
from minipaged.grader.delegation import LIBRARY_FOLDERS
from minipaged.grader.provenance import private

LOADED = "marshal.loads"

MADE_BY_HAND = (
    "your code may not build a code object by hand (types.CodeType, code.replace) while it is "
    "graded: the grader grades Python source; write your functions as source in your files"
)

COPY = "your code loaded a copy of the library's solution from bytes ({}): write your own"

BUILT_COPY = (
    "your code built a copy of the library's solution as a code object ({}), with types.CodeType "
    "or code.replace, whoever called them: write your own"
)

CACHE_HEADER = 16
"""Bytes before the marshalled code in a ``.pyc`` (PEP 552)."""


def trusted_roots(folder: Path) -> tuple[str, ...]:
    """The folders whose files are installed code: the library, the Python installation and
    its packages (as named, and with links resolved)."""
    paths = set(LIBRARY_FOLDERS)
    for path in [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]:
        paths.add(path.rstrip(os.sep) + os.sep)
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_paths()[name].rstrip(os.sep) + os.sep)
    paths |= {os.path.realpath(p) + os.sep for p in paths}
    inside = str(folder.resolve()) + os.sep
    return tuple(p for p in paths if not inside.startswith(p)) + ("<frozen ",)


def loaded_judge(readable, installed, library: tuple[str, ...], copied, refused, unreadable):
    """``judged(data, theirs)``: refuse what ``marshal.loads(data)`` makes, while the student's
    frame ``theirs`` is on the stack, unless every code object in it is readable (see the
    module's docstring). ``readable(code, theirs)`` and ``installed(path)``: the runtime hook's;
    ``library``: the library's folders; ``copied(code)``: a graded function ``code`` copies,
    or None; ``refused(message)``: the refusal to raise; ``unreadable``: its message, with a
    place for what was loaded. Every name is taken now, before any student code runs."""
    loads, read_file, tag = marshal.loads, io.open, sys.implementation.cache_tag
    code_type, header, copy, loaded = CodeType, CACHE_HEADER, COPY, LOADED

    def codes_in(value, depth: int = 0):
        """The code objects ``value`` holds: itself, or inside tuples, lists, sets, dicts."""
        kind = type(value)
        if kind is code_type:
            yield value
        elif depth < 16 and kind in (tuple, list, set, frozenset):
            for item in value:
                yield from codes_in(item, depth + 1)
        elif depth < 16 and kind is dict:
            for item in value.items():
                yield from codes_in(item, depth + 1)

    def cached(path: str, data: bytes) -> bool:
        """Whether ``data`` is what the ``.pyc`` kept beside the installed file ``path`` holds
        (paths joined by hand: a student's code can rebind ``os.path``'s Python)."""
        folder, _, name = path.rpartition("/")
        if not name.endswith(".py") or folder.startswith(library):
            return False
        kept = f"{folder}/__pycache__/{name[:-3]}.{tag}.pyc"
        if not installed(kept):
            return False
        try:
            with read_file(kept, "rb") as f:
                return f.read()[header:] == data
        except OSError:
            return False

    def judged(data, theirs) -> None:
        try:
            made = loads(data)
        except Exception:  # not marshal data: the student's own call fails as it would
            return
        for code in codes_in(made):
            where = code.co_filename
            if type(where) is str and installed(where) and cached(where, data):
                continue  # an installed module's own .pyc, as the import system keeps it
            found = copied(code)
            if found:
                raise refused(copy.format(found))
            if not readable(code, theirs):
                raise refused(unreadable.format(f"{code.co_qualname}, {loaded}"))

    codes_in, cached = private(codes_in), private(cached)  # each then calls the rebuilt one
    return private(judged)


def hand_made_judge(installed, shapes: frozenset, refused):
    """``judged(args, caller)``: refuse a code object being made by ``types.CodeType`` or
    ``code.replace`` (the ``code.__new__`` event's ``args``: its bytecode first) while the
    student's code is on the stack, if its bytecode has the shape of a graded library
    function's (``shapes``: ``library_copies.Library``'s, ``minipaged.grader.code_shapes``:
    its docstring dropped, its constants, names and locals renumbered or renamed, its lines
    changed, it is still the library's), whoever calls (an installed trampoline: ``pickle``'s
    Python unpickler); or if the student's own code (``caller``, the innermost Python frame)
    makes it, by hand. An installed caller's is left to be judged where it runs (hypothesis's
    ``impersonate`` relabels a function's code)."""
    shape, built, by_hand = shaper(), BUILT_COPY, MADE_BY_HAND

    def judged(args, caller) -> None:
        bytecode = args[0] if args and type(args[0]) is bytes else b""
        if shape(bytecode) in shapes:
            name = args[2] if len(args) > 2 and type(args[2]) is str else "a function"
            raise refused(built.format(f"{name[:80]}, in the shape of the library's bytecode"))
        if not installed(caller.f_code.co_filename):
            raise refused(by_hand)

    return private(judged)
