"""Code that runs but was never on disk: what a student's code compiles while it is graded
(``exec(base64.b64decode(...))``, ``compile`` and ``types.FunctionType``, a module written to
the temporary folder and imported, a loader given a source string) is judged like their files.

``copies`` (``minipaged.grader.delegation``) reads the student's folder before anything runs;
a copy of the library's solution kept encoded, or generated, is not there to read. So in the
grading child an audit hook (``watch``) sees every ``compile`` while a frame of the student's
code is on the stack (a frame of a file that is neither the library's nor the Python
installation's: their folder, the temporary folder, ``"<string>"``), and records the source
compiled. Each answer of the child carries the sources recorded since the last one (each
distinct source once); the grader judges them with the same ``copy_finder`` as the files
(``Judge``), and a copy fails the call that compiled it, saying which line did, or, compiled
while their files were imported, every criterion.

What the grader cannot read it refuses: while the student's code is on the stack, a code
object that runs (``exec``, ``types.FunctionType``) must be one compiled from a source the hook
recorded, or from the file it names (``provenance``), or be installed code imported by the
import system; a code object loaded from bytes (``marshal.loads``, a ``.pyc`` of their own) or
built by hand is none of these. The library's and the standard library's own run-time code
(``dataclasses``, ``namedtuple``, torch, Numba) compiles with no student frame on the stack,
or from a source the hook saw: neither is refused, and what a student's ``@dataclass`` compiles
is judged and found to be no copy.

The hook calls only what it took before the student's code loaded (``provenance.private``),
and hands its record to the child's answer alone (as ``delegation``'s stubs get the library's
functions): a student's code that empties it must forge the answer, which the grader refuses.
"""

from __future__ import annotations

import ast
import os
import sys
import sysconfig
from hashlib import sha256
from pathlib import Path
from types import CodeType

from minipaged.grader.delegation import (
    _LIBRARY,
    LibraryDelegation,
    _fingerprint,
    copy_finder,
    write_your_own,
)
from minipaged.grader.exercises import exercise
from minipaged.grader.provenance import PRIVATE, audit, getframe, private, provenance, walk

MAX_RECORDED = 16 * 2**20
"""The most bytes of source a student's code may compile at run time in one grading process."""

UNREADABLE = (
    "your code runs code the grader cannot read ({}): it grades Python source, so write your "
    "functions as source in your files (a code object loaded from bytes with marshal, from a "
    ".pyc file, or built by hand, is refused)"
)

ELSEWHERE = (
    "your code {}: the grader reads the code your functions run, and cannot follow it there; "
    "compute in your own functions, in the grading process"
)

STARTS = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.system")
"""Audit events of a program started: another Python there would run code no hook sees."""

_COLLECT = "minipaged.grader.runtime_code.collect"
"""The audit event by which the child's answer asks for the sources recorded since the last."""

_MODES = ("exec", "eval", "single")

IMPORT_SYSTEM = (
    "<frozen importlib._bootstrap>",
    "<frozen importlib._bootstrap_external>",
    "<frozen zipimport>",
)
"""Where the import system runs a module's code. What it runs while the student's code is on the
stack must still be what the file it names holds (``provenance``): a ``.pyc`` of theirs can
name a library file."""

RECORDED = ("compile", "exec", "function.__new__", "marshal.loads", "marshal.load")
"""Audit events of code compiled, loaded or run."""


def trusted_roots(folder: Path) -> tuple[str, ...]:
    """The folders whose files are installed code: the library, the Python installation and
    its packages (as named, and with links resolved)."""
    paths = set(_LIBRARY)
    for path in [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]:
        paths.add(path.rstrip(os.sep) + os.sep)
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_paths()[name].rstrip(os.sep) + os.sep)
    paths |= {os.path.realpath(p) + os.sep for p in paths}
    inside = str(folder.resolve()) + os.sep
    return tuple(p for p in paths if not inside.startswith(p)) + ("<frozen ",)


def watch(folder: Path, answering: CodeType) -> None:
    """In a grading child, before the student's code loads: record the sources compiled while
    their code is on the stack, and refuse code that runs from no source (see the module's
    docstring). ``answering``: the code of the child's answer, the one caller ``collect``
    hands the record to."""
    inside = str(folder.resolve()) + os.sep
    roots = trusted_roots(folder)
    genuine = provenance()
    seen: set[str] = set()  # digests of the sources recorded
    unchecked: list[tuple[bytes, str]] = []  # recorded, not yet compiled into ``known``
    known: set[str] = set()  # fingerprints of every code object the recorded sources make
    pending: list[list[str]] = []  # [where, filename, source] not yet sent
    state = {"bytes": 0, "busy": False}
    unparse, collect_code = ast.unparse, collect.__code__
    owner, getpid = os.getpid(), os.getpid
    pythons = {os.path.basename(sys.executable), os.path.basename(os.path.realpath(sys.executable))}

    def python_in(value) -> bool:
        """Whether a program's name or arguments (``STARTS``' events) name a Python."""
        if type(value) in (list, tuple):
            return any(python_in(item) for item in value)
        if type(value) is bytes:
            value = value.decode(errors="replace")
        if type(value) is not str:
            value = str(getattr(value, "__fspath__", lambda: "")())
        words = value.replace("/", " ").replace("\t", " ").split()
        return any(word.startswith("python") or word in pythons for word in words)

    def installed(where) -> bool:
        return type(where) is str and where.startswith(roots) and not where.startswith(inside)

    def student_frame(frame):
        """The innermost frame of the student's code on ``frame``'s stack, or None."""
        while frame is not None:
            if not installed(frame.f_code.co_filename):
                return frame
            frame = frame.f_back
        return None

    def record(source: bytes, filename, frame) -> None:
        digest = sha256(source).hexdigest()
        if digest in seen:
            return
        state["bytes"] += len(source)
        if state["bytes"] > MAX_RECORDED:
            raise LibraryDelegation(
                f"your code compiled more than {MAX_RECORDED // 2**20} MiB of source at run "
                "time: the grader reads what it compiles, and stops there"
            )
        seen.add(digest)
        name = filename if type(filename) is str else repr(type(filename))
        unchecked.append((source, name))
        where = frame.f_code.co_filename
        where = where[len(inside) :] if where.startswith(inside) else where
        pending.append([f"{where}:{frame.f_lineno}", name[:200], source.decode(errors="replace")])

    def readable(code: CodeType, theirs) -> bool:
        """Whether ``code`` comes from a source the grader reads: one recorded, or its file."""
        fingerprint = _fingerprint(code)
        while unchecked and fingerprint not in known:
            source, filename = unchecked.pop()
            for mode in _MODES:
                for flags in (0, 0x1000000):  # and under ``from __future__ import annotations``
                    try:
                        top = compile(source, filename, mode, flags, dont_inherit=True)
                    except Exception:  # not Python in this mode
                        continue
                    known.update(_fingerprint(c) for c in walk(top))
        if fingerprint in known:
            return True
        if not genuine(code):
            return False
        if not installed(code.co_filename):  # a file of theirs, or one written while graded
            with open(code.co_filename, "rb") as f:
                record(f.read(MAX_RECORDED + 1), code.co_filename, theirs)
        return True

    def hook(event: str, args: tuple) -> None:
        if event == _COLLECT:
            asking = getframe(1)
            if asking.f_code is collect_code and asking.f_back.f_code is answering:
                args[0].append(pending[:])
                pending.clear()
            return
        if event not in RECORDED and event not in STARTS:
            return
        if state["busy"]:  # the hook's own compiling
            return
        caller = getframe(1)
        theirs = student_frame(caller)
        if theirs is None:
            return
        state["busy"] = True
        try:
            if event in STARTS:
                if python_in(list(args[:2])):
                    raise LibraryDelegation(ELSEWHERE.format("starts a Python interpreter"))
            elif event == "compile":
                if getpid() != owner:  # its record would never reach the grader
                    raise LibraryDelegation(ELSEWHERE.format("compiles code in a forked process"))
                source = args[0]
                if type(source) is str:
                    source = source.encode()
                elif type(source) is not bytes:  # a syntax tree: what it reads as
                    source = unparse(source).encode()
                record(source, args[1], theirs)
            elif event.startswith("marshal"):
                if not installed(caller.f_code.co_filename):
                    raise LibraryDelegation(UNREADABLE.format("marshal.loads"))
            elif type(args[0]) is CodeType:
                code = args[0]
                imported = event == "exec" and caller.f_code.co_filename in IMPORT_SYSTEM
                if imported and installed(code.co_filename) and genuine(code):
                    return  # the import system running installed code (a late import)
                if not readable(code, theirs):
                    raise LibraryDelegation(UNREADABLE.format(f"{code.co_qualname}, {event}"))
        finally:
            state["busy"] = False

    # Each rebuilt over names taken now; the closures above then call the rebuilt ones.
    installed, student_frame, record = private(installed), private(student_frame), private(record)
    readable, python_in = private(readable), private(python_in)
    sys.addaudithook(private(hook))


def collect() -> list[list[str]]:
    """In the child's answer: the sources recorded since the last answer, as
    ``[where, filename, source]``."""
    box: list = []
    audit(_COLLECT, box)
    return box[0] if box else []


class Judge:
    """In the grader: judges what a child's answers say the student's code of exercise
    ``number`` compiled."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.copied = None  # ``copy_finder``, made at the first record

    def __call__(self, compiled) -> str:
        """Why one of ``compiled`` (``[where, filename, source]``, from the child) copies the
        library's solution, or ``""``."""
        for entry in compiled if type(compiled) is list else []:
            if type(entry) is not list or len(entry) != 3 or {type(e) for e in entry} != {str}:
                continue
            if self.copied is None:
                self.copied = copy_finder(exercise(self.number))
            where, filename, source = entry
            found = self.copied(source, filename)
            if found:
                return (
                    f"code your {where} compiled at run time (as {filename!r}): {found}. "
                    f"{write_your_own(exercise(self.number))}"
                )
        return ""


PRIVATE |= {
    "LibraryDelegation": LibraryDelegation,
    "MAX_RECORDED": MAX_RECORDED,
    "UNREADABLE": UNREADABLE,
    "_COLLECT": _COLLECT,
    "_MODES": _MODES,
    "ELSEWHERE": ELSEWHERE,
    "STARTS": STARTS,
    "RECORDED": RECORDED,
    "IMPORT_SYSTEM": IMPORT_SYSTEM,
}
"""What the hook's functions see as globals, beside ``provenance``'s and ``delegation``'s."""
