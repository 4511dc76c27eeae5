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
import dataclasses
import importlib
import importlib.util
import inspect
import linecache
import os
import sys
from collections.abc import Callable, Iterator
from hashlib import sha256
from pathlib import Path
from types import CodeType, FunctionType

from minipaged.grader import similarity
from minipaged.grader.exercises import Exercise
from minipaged.grader.provenance import (
    audit,
    getframe,
    plain_constants,
    private,
    provenance,
    share,
    walk,
)

MAX_FILES, MAX_BYTES = 200, 2**20
"""The most files, and bytes per file, of a student's folder that ``copies`` reads."""

LONG_BYTECODE = 400
"""A function the library's, bytecode and names and all, is a copy if it also carries the
library's docstring where the starter's differs; or, where they do not differ, if its bytecode
is at least this long (a dozen lines or so). A short answer may well match the library's
exactly: ``2 * self.num_layers * self.num_kv_heads * ...`` is the only way to write it."""


class LibraryDelegation(BaseException):
    """A student's code reached a library function the exercise grades. A BaseException, so
    that a student's ``except Exception`` around ``super()`` cannot hide it."""


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


def _copy_finder(prints: dict):
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
    library_copied = _copy_finder(dict(Library(ex).prints))  # made once, for every source
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


_HAND_OVER = "minipaged.grader.delegation.hand-over"
"""The audit event by which a stub asks for the library function it stands for."""

_SEARCHES = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")
"""Audit events of a search through the interpreter's objects, which would find that function."""


def guard(ex: Exercise, folder: Path, refused=LibraryDelegation, stubs_refused=None) -> None:
    """In a grading child, before the student's code loads: stub every graded function (and
    every answer of the exercise, ``Exercise.answers``), and refuse any later read or run of
    their modules' source, any search of the interpreter's objects, and any function rebuilt
    from their code.

    The library's functions are kept by one audit hook (``hand_over``) and nowhere else a
    student's code can reach: not in a stub's closure, module or class, not in a traceback (that
    hook never raises), not through ``gc`` (the other hook refuses it), not from a frame of the
    hooks (they call nothing a student's code can rebind: ``provenance.private``). A stub asks
    for its function with an audit event; the hook checks that the asking frame runs the stubs'
    code and that its caller may use the library's version (``_allowed``), and hands the
    function over in a list the stub empties as it calls it. ``refused(message)`` makes each
    refusal (``minipaged.grader.notices.refusal``'s tells the grader of it first);
    ``stubs_refused``, the stubs' (``refused`` where None): a stub is within a student's reach,
    and so is what its closure holds, so a grading child gives the stubs a ``refused`` (and a
    ``tell``) of their own, which the hooks never call."""
    folder = str(folder.resolve())
    library = Library(ex)
    guarded, stubs, originals = set(), {}, {}
    names = ex.graded + ex.answers
    for name in names:
        owner, attribute, value = ex.lookup(name)
        module = sys.modules[name.partition(":")[0]]
        guarded |= {module.__file__, importlib.util.cache_from_source(module.__file__)}
    guarded = frozenset(os.path.realpath(f) for f in guarded)
    genuine = provenance([f for f in guarded if f.endswith(".py")])
    for name in names:
        owner, attribute, value = ex.lookup(name)
        original = value.fget if isinstance(value, property) else value
        stub = _stub(name, original, ex.number, name in ex.answers, stubs_refused or refused)
        originals[name] = (original, _allowed(ex, ex.file_of(name), folder, genuine))
        setattr(owner, attribute, property(stub) if isinstance(value, property) else stub)
        stubs[id(value)] = getattr(owner, attribute) if isinstance(value, property) else stub
    _replace_aliases(stubs)
    files = frozenset((found.st_dev, found.st_ino) for found in map(_stat, guarded) if found)
    for path in guarded:  # tracebacks read no source line, and neither can a student's code
        linecache.cache[path] = (0, None, [], path)
    codes = frozenset(c for o, _ in originals.values() for c in _codes(o))
    message = (
        f"exercise {ex.number:02d} grades your own code; it may not read or run the library's "
        "{}: write it yourself, from the starter"
    )
    copied, refusal, stub_code = _copy_finder(library.prints), refused, _STUB_CODE
    stat_of = private(_stat)
    searches, hand_over_event, library_folders = _SEARCHES, _HAND_OVER, _LIBRARY

    def audit(event: str, args: tuple) -> None:
        if event == "open" and (type(args[0]) is str or type(args[0]) is bytes):
            # The file itself, by its inode: os.path's realpath and basename are the standard
            # library's Python, which a student's code rebinds (posixpath.abspath made every
            # path a path of no library file), and a link can name it otherwise.
            found = stat_of(args[0])
            if found and (found.st_dev, found.st_ino) in files:
                path = args[0] if type(args[0]) is str else args[0].decode(errors="replace")
                raise refusal(message.format(path.rpartition("/")[2]))
        elif event == "exec" and type(args[0]) is CodeType:
            found = copied(args[0])
            if found:
                raise refusal(message.format("code") + f" ({found})")
        elif event in searches:
            raise refusal(message.format("functions by searching the interpreter"))
        elif (
            event == "function.__new__"
            and type(args[0]) is CodeType
            and plain_constants(args[0])
            and args[0] in codes  # taken from a frame of the library's function
        ):
            raise refusal(message.format("functions, rebuilt from their code"))
        elif (
            event == "object.__setattr__"
            and type(args[0]) is FunctionType
            and args[1] == "__code__"
            and args[0].__code__.co_filename.startswith(library_folders)
        ):
            raise refusal(f"your code may not rewrite the library's {args[0].__qualname__}")

    def hand_over(event: str, args: tuple) -> None:
        if event != hand_over_event or len(args) != 2:
            return
        name, box = args
        asking = getframe(1)
        if asking.f_code is stub_code and type(name) is str and type(box) is list:
            original, allowed = originals.get(name, (None, None))
            if original is not None and allowed(asking.f_back):
                box.append(original)

    sys.addaudithook(private(audit))
    sys.addaudithook(private(hand_over))


def _codes(function) -> Iterator[CodeType]:
    """The code of a graded function (a Numba kernel's Python function), and every function
    compiled inside it."""
    # unwrap: the function itself, past a decorator (the attention entry points' checks)
    code = getattr(inspect.unwrap(getattr(function, "py_func", function)), "__code__", None)
    if type(code) is CodeType:
        yield from walk(code)


def _replace_aliases(stubs: dict) -> None:
    """Put each stub wherever the library holds the function it replaces under another name: a
    module's attribute (``from minipaged.memory import slot``) or a field of a frozen record in
    a module's table (``minipaged.invariants.INVARIANTS``)."""
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith(("minipaged.", "cuda_kernels.")):
            continue
        for attribute, value in list(vars(module).items()):
            if id(value) in stubs and not isinstance(value, type):
                setattr(module, attribute, stubs[id(value)])
            elif type(value) in (tuple, list):
                for record in value:
                    if not dataclasses.is_dataclass(record) or isinstance(record, type):
                        continue
                    for field in dataclasses.fields(record):
                        held = getattr(record, field.name)
                        if id(held) in stubs:
                            object.__setattr__(record, field.name, stubs[id(held)])


def _stub(name: str, original, number: int, answer: bool = False, refused=LibraryDelegation):
    """A stand-in for the graded library function ``name`` of exercise ``number`` (or, with
    ``answer``, one of its answers): it runs the library's function where ``guard``'s hook
    hands it over, and otherwise refuses."""
    short = name.rpartition(".")[2].rpartition(":")[2]
    refusal, event = refused, _HAND_OVER
    said = (
        f"exercise {number:02d} grades your own work; it may not call the library's "
        f"{name.replace(':', '.')}, which computes what the checks expect"
        if answer
        else f"exercise {number:02d} grades your {short}; it may not call the library's"
    )

    def stub(*args, **kwargs):
        box = []
        audit(event, name, box)
        if box:
            return box.pop()(*args, **kwargs)  # held by no name a frame shows while it runs
        raise refusal(said)

    stub = private(stub)
    stub.__name__ = stub.__qualname__ = short
    markers = getattr(original, "__dict__", {})  # hypothesis's @invariant() marks, say
    stub.__dict__.update({k: v for k, v in markers.items() if k != "__wrapped__"})
    return stub


_STUB_CODE = _stub("", None, 0).__code__
"""The code every stub runs: the only code ``guard``'s hook hands a library function to."""


def _stat(path, stat=os.stat):
    """``os.stat(path)`` (a default, which a ``private`` copy keeps), or None: no such file."""
    try:
        return stat(path)
    except (OSError, ValueError):
        return None


def _allowed(ex: Exercise, stem: str | None, folder: str, genuine):
    """Whether a caller may use the library's version of a graded function that the student's
    file ``stem`` mirrors (``None``: an answer of the exercise, no file's): the library's own
    infrastructure may (the library's ``BlockManager`` making its allocators, in exercise 02),
    and so may another graded file of the exercise (exercise 05's scheduler using the library's
    ``swap_out``); the student's file ``stem`` (``super()``, a wrapper), any other file of
    theirs, the grader itself (a re-export: the student's name is the library's), and code that
    is not what its file holds (``genuine``: compiled under the library's file name, or as
    ``"<string>"``) may not."""
    mine = os.path.join(folder, f"{stem}.py") if stem is not None else None
    others = frozenset(os.path.join(folder, f"{s}.py") for s in ex.solution) - {mine}
    theirs_prefix, library, grader = folder + os.sep, _LIBRARY, _GRADER

    def allowed(caller) -> bool:
        theirs, frame = [], caller
        while frame is not None:
            code = frame.f_code
            where = code.co_filename
            if type(where) is str and where.startswith(theirs_prefix):
                theirs.append(where)
            elif not genuine(code):
                return False
            frame = frame.f_back
        if theirs:
            return mine is not None and mine not in theirs and set(theirs) <= others
        where = caller.f_code.co_filename
        return where.startswith(library) and not where.startswith(grader)

    return private(allowed)


_LIBRARY = tuple(
    os.path.dirname(importlib.util.find_spec(package).origin) + os.sep
    for package in ("minipaged", "cuda_kernels")
)
_GRADER = os.path.dirname(__file__) + os.sep

share(_fingerprint, _code_parts, _docstring)
"""The fingerprints a grading child's audit hook takes, over names a student cannot rebind."""
