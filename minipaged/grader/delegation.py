"""Keeping the library's solution out of a student's reach while their code is graded.

Each exercise mirrors library code, so the library's own functions would pass its checks.
``Exercise.graded`` names the library functions an exercise asks the student to write (for
exercise 04, ``minipaged.block_manager:BlockManager.append_slot``). Three guards keep them out:

- ``copies(exercise, folder)`` (``minipaged.grader.library_copies``), in the grader, before any
  of the student's code runs: a file of the folder holding the library's function, bytecode
  and names and all, or its shape in disguise, fails the exercise.
- ``guard(exercise, folder)``, in the child, before the student's code is imported: each graded
  function (and answer, ``Exercise.answers``) is replaced, wherever the library holds it, by a
  stub that raises ``LibraryDelegation`` when a student's code reaches it (a re-export, or
  ``super()`` from the student's own version), and the graded modules' files can no longer be
  opened or re-executed (``importlib.reload``, ``spec_from_file_location``, ``exec`` of their
  source: an audit hook refuses them).
- The stub lets one part of the student's work use the library's version of another part graded
  apart (exercise 05's scheduler calls the library's ``swap_out``): it refuses only when no
  student code is on the stack, or when the student's own function of the same file is.

The audit hooks are a tripwire, not a wall: code that reads and writes the process's memory
(``ctypes``; numpy's ``__array_interface__`` on a raw address) raises no audit event, and can
remove the hooks or walk the collector's own lists to any object alive. So the child keeps
alive only the library functions its own code calls while the student's is graded, each named
with why where its exercise is defined (``Exercise.handed_over``), and their code (``genuine``
judges the frames that ask for them by it); every other graded function and answer, and its
code, is garbage once ``guard`` returns (``holders.check_dropped`` checks it, and
``tests/test_grader_dropped.py`` searches the whole process). What such code can still reach,
and why it stays: exercise 02's ``BlockAllocator.__init__`` (the library's ``BlockManager``
makes its pools with it before the checks give it the student's), exercise 05's
``BlockManager.swap_out``, ``swap_in`` and ``_move`` (the student's scheduler is graded on the
library's block manager, so that a wrong ``swap_out`` of theirs fails only its own criteria),
and exercise 13's four formulas of ``memory.py`` (their ``recorded_waste.py`` computes with the
library's, as its starter says, for the same reason). Only the child of the criteria that
grade their work on the library's (``Criterion.on_the_library``: exercise 02's
``block_manager_runs_on_your_allocator``, 05's eight scheduler criteria, 13's four recorded
runs') keeps them; the other criteria's child keeps none. So a student reading memory can
pass with the library's code only a criterion of that child that grades what a kept function
computes: exercise 02's allocator under the library's manager with the library's ``__init__``
in their own, exercise 05's scheduler criteria with the library's ``swap_out`` in their
``_preempt`` (a swap is one of its two ways), and exercise 13's recorded runs with the
formulas, which the starter gives them anyway. A TUI run's child, which grades nothing, keeps
every one (the library's engine warms up and schedules around the student's code there).
Disk is walled apart (``minipaged.grader.readable``). A determined student can still rewrite
a copy beyond recognition; what the grader judges is still only the data their code returns
(``minipaged.grader.wire``).

Raw memory is within a student's reach in every child, ``ctypes`` or not: numpy's
``__array_interface__`` makes an array of any address, with no audit event (a function's
``func_code`` overwritten so ran another code unheard); ``np.ctypeslib`` is ``ctypes``, and
``_ctypes`` imported under another name raises ``ctypes``' audit events. What it finds: in a
child that keeps nothing, no library function nor its code (``check_dropped``), and no
expected value (the checks run in the grader and send only their questions:
``minipaged.grader.remote`` lists what a child holds). In the child ``on_the_library``, the
functions kept, which a frame of theirs reaches as well (an argument's ``__iter__``, one call
below the library's ``_move``), and which that child cannot hand to a later one: it writes
only its own temporary folder, which the grader empties. Raw memory binds a code object with
no event, but the code object must be made first, and each way to make one from bytes or text
is judged as it is made, whoever calls it, in any thread (``minipaged.grader.made_code``):
from bytes by fingerprint and by the file it names, built by ``types.CodeType`` by its
bytecode's shape (``minipaged.grader.code_shapes``: a copy with its constants, names and
locals renumbered or renamed keeps it). Python's C API makes code objects and functions with
no event (``PyCode_New*``, ``PyFunction_New``): looked up by name through ``ctypes`` it is
refused, and LLVM resolves it, for Numba's compiled code (an ``@intrinsic``) and llvmlite's
look-ups, to a stand-in that refuses it (``minipaged.grader.native_calls``); a library of the
student's own is refused in their folder (``minipaged.grader.native_files``) and wherever it
loads from. What raw memory still reaches unheard: the C API called at an address read from
memory (a ``ctypes`` call raises no event), and in every child the guards themselves: their
hooks removed, code the student brought encoded runs unheard. That
was theirs before it ran, judged only where it is source (their folder,
``minipaged.grader.library_copies``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import linecache
import os
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FunctionType

from minipaged.grader.exercises import Exercise
from minipaged.grader.holders import (
    check_dropped,
    held_functions,
    replace_aliases,
    replace_inside,
    swapped,
)
from minipaged.grader.library_copies import Library, library_copy_finder
from minipaged.grader.provenance import audit, getframe, plain_constants, private, provenance, walk


class LibraryDelegation(BaseException):
    """A student's code reached a library function the exercise grades. A BaseException, so
    that a student's ``except Exception`` around ``super()`` cannot hide it."""


_HAND_OVER = "minipaged.grader.delegation.hand-over"
"""The audit event by which a stub asks for the library function it stands for."""

_SEARCHES = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")
"""Audit events of a search through the interpreter's objects, which would find that function."""


def guard(
    ex: Exercise, folder: Path, refused=LibraryDelegation, stubs_refused=None, keeping=None
) -> None:
    """In a grading child, before the student's code loads: stub every graded function (and
    every answer of the exercise, ``Exercise.answers``), and refuse any later read or run of
    their modules' source, any search of the interpreter's objects, and any function rebuilt
    from their code.

    The library's version is kept only of the functions the library's own code calls while
    the student's is graded (``Exercise.handed_over``; ``keeping``, the names to keep, where
    given); every other one is replaced wherever the library holds it
    (``holders.replace_aliases``) and is then garbage, which ``holders.check_dropped`` checks:
    no guard in the process stops code that reads and writes its memory (``ctypes``), so what
    is not needed must not exist. Those kept
    are held by one audit hook (``hand_over``) and nowhere else a student's code can reach
    without reading memory: not in a stub's closure, module or class, not in a traceback
    (that hook never raises), not through ``gc`` (the other hook refuses it), not from a frame
    of the hooks (they call nothing a student's code can rebind: ``provenance.private``). A
    stub asks for its function with an audit event; the hook checks that the asking frame runs
    the stubs' code and that its caller may use the library's version (``_allowed``), and
    hands the function over in a list the stub empties as it calls it. ``refused(message)``
    makes each refusal (``minipaged.grader.notices.refusal``'s tells the grader of it first);
    ``stubs_refused``, the stubs' (``refused`` where None): a stub is within a student's reach,
    and so is what its closure holds, so a grading child gives the stubs a ``refused`` (and a
    ``tell``) of their own, which the hooks never call."""
    folder = str(folder.resolve())
    library = Library(ex)
    names = ex.graded + ex.answers
    kept = frozenset(ex.handed_over if keeping is None else keeping)
    guarded = set()
    for name in names:
        ex.lookup(name)  # imports its module
        module = sys.modules[name.partition(":")[0]]
        guarded |= {module.__file__, importlib.util.cache_from_source(module.__file__)}
    guarded = frozenset(os.path.realpath(f) for f in guarded)
    # The code of what is dropped, and all code around it (its module's, its class's), is no
    # code that may run from the library's files: ``genuine`` keeps none of it.
    dropped = frozenset(c for n in names if n not in kept for c in _codes(_original(ex, n)))
    genuine = provenance([f for f in guarded if f.endswith(".py")], dropped)
    stubs, originals, gone, replaced = {}, {}, [], []
    for name in names:
        owner, attribute, value = ex.lookup(name)
        original = _original(ex, name)
        stub = _stub(name, original, ex.number, name in ex.answers, stubs_refused or refused)
        if name in kept:
            originals[name] = (original, _allowed(ex, ex.file_of(name), folder, genuine))
        else:
            gone += [(name, weakref.ref(f)) for f in held_functions(original)]
        setattr(owner, attribute, property(stub) if isinstance(value, property) else stub)
        stubs |= {id(f): stub for f in held_functions(original)}
        stubs[id(value)] = getattr(owner, attribute) if isinstance(value, property) else stub
        replaced += [value, *held_functions(original)]  # alive till replaced: no id is reused
    replace_aliases(stubs)
    del owner, value, original, stub, replaced  # this frame holds none of them
    check_dropped(gone)
    files = frozenset((found.st_dev, found.st_ino) for found in map(_stat, guarded) if found)
    for path in guarded:  # tracebacks read no source line, and neither can a student's code
        linecache.cache[path] = (0, None, [], path)
    codes = frozenset(c for o, _ in originals.values() for c in _codes(o))
    message = (
        f"exercise {ex.number:02d} grades your own code; it may not read or run the library's "
        "{}: write it yourself, from the starter"
    )
    copied, refusal, stub_code = library_copy_finder(library.prints), refused, _STUB_CODE
    stat_of = private(_stat)
    searches, hand_over_event, library_folders = _SEARCHES, _HAND_OVER, LIBRARY_FOLDERS

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


def _original(ex: Exercise, name: str):
    """The library's function ``name`` of ``ex`` (a property's getter)."""
    value = ex.lookup(name)[2]
    return value.fget if isinstance(value, property) else value


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
    # A function's marks (hypothesis's @invariant()), not a Numba dispatcher's state, which
    # holds the kernel's Python function
    markers = original.__dict__ if type(original) is FunctionType else {}
    wrapped = {id(f): stub for f in held_functions(original)}  # a mark holding it: the stub
    for key, mark in markers.items():
        if not key.startswith("__wrapped"):  # hypothesis's __wrapped_target too
            stub.__dict__[key] = swapped(mark, wrapped) or mark
            replace_inside(stub.__dict__[key], wrapped, set())
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
    theirs_prefix, library, grader = folder + os.sep, LIBRARY_FOLDERS, _GRADER

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


LIBRARY_FOLDERS = tuple(
    os.path.dirname(importlib.util.find_spec(package).origin) + os.sep
    for package in ("minipaged", "cuda_kernels")
)
"""The folders of the library's packages, each ending in a separator: what a file name starts
with when it is the library's own code (the grader's included). The one definition the
guards use (``made_code``, ``runtime_code``)."""

_GRADER = os.path.dirname(__file__) + os.sep
