"""Code that runs but was never on disk: what a student's code compiles while it is graded
(``exec(base64.b64decode(...))``, ``compile`` and ``types.FunctionType``, a module written to
the temporary folder and imported, a loader given a source string) is judged like their files.

``copies`` (``minipaged.grader.library_copies``) reads the student's folder before anything runs;
a copy of the library's solution kept encoded, or generated, is not there to read. So in the
grading child an audit hook (``watch``) sees every ``compile`` while a frame of the student's
code is on the stack (a frame of a file that is neither the library's nor the Python
installation's: their folder, the temporary folder, ``"<string>"``), and records the source
compiled. The grader hears each distinct source once (``minipaged.grader.notices``) and
judges it with the same ``copy_finder`` as the files (``minipaged.grader.compiled_copies``),
and a copy fails the call that compiled it, saying which line did, or, compiled while their
files were imported, every criterion.

What the grader cannot read it refuses: while the student's code is on the stack, a code
object that runs (``exec``, ``types.FunctionType``, a function's ``__code__`` set to it) must be
one compiled from a source the hook recorded, or from the file it names (``provenance``), or be
installed code imported by the import system; and what ``marshal.loads`` makes, whoever calls
it, is judged as it is made (``minipaged.grader.made_code``: raw memory binds a code object
with no event), as is a code object built by hand. Where the bytes come from does not matter:
brought from home, or carried out of the grading child that keeps a library function
(``Exercise.handed_over``) to the next one (their folder is read-only to it where Landlock
confines it; a System V shared-memory segment, which Landlock does not cover, outlives it).
The library's and the standard library's own run-time code (``dataclasses``, ``namedtuple``,
torch, Numba) compiles with no student frame on the stack, or from a source the hook saw:
neither is refused, and what a student's ``@dataclass`` compiles is judged and found to be no
copy. Once their code has run, code compiled or run with no frame of theirs on the stack is
theirs all the same (``set_off``: a ``weakref.finalize`` running ``exec`` as the child forgets
their objects ran an encoded copy of ``fork`` unheard, ``hostile_corpus.SET_OFF_BY_THE_GRADER``).

The hook calls only what it took before the student's code loaded (``provenance.private``),
and tells the grader of each source the moment it is compiled, before the code can run, on a
pipe of its own (``minipaged.grader.notices``), as it tells of each refusal: what is told
cannot be taken back, and an answer the student's code forges on the channel carries none of
it. A process the student's code forks may not compile (its code would run out of the
grader's sight); its refusal is told to the grader too, which fails the call with its reason.
"""

from __future__ import annotations

import _thread
import ast
import os
import sys
import tempfile
import threading
from hashlib import sha256
from pathlib import Path
from types import CodeType, FunctionType

from minipaged.grader.delegation import LIBRARY_FOLDERS, LibraryDelegation, _stub
from minipaged.grader.interpreters import python_finder
from minipaged.grader.library_copies import _fingerprint
from minipaged.grader.made_code import hand_made_judge, loaded_judge, trusted_roots
from minipaged.grader.native_calls import ANYONES, EXTENSION, NATIVE, native_judge, seal_symbols
from minipaged.grader.notices import COMPILED, refusal, refusal_not_raised
from minipaged.grader.provenance import (
    PRIVATE,
    getframe,
    plain_constants,
    private,
    provenance,
    walk,
)

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
"""Audit events of a program started: another Python there would run code no hook sees
(``minipaged.grader.interpreters`` tells a Python by what its file is)."""

_MODES = ("exec", "eval", "single")

IMPORT_SYSTEM = (
    "<frozen importlib._bootstrap>",
    "<frozen importlib._bootstrap_external>",
    "<frozen zipimport>",
)
"""Where the import system runs a module's code. What it runs while the student's code is on the
stack must still be what the file it names holds (``provenance``): a ``.pyc`` of theirs can
name a library file."""

WATCHING = {
    "sys.settrace": "set a trace function (sys.settrace, threading.settrace)",
    "sys.setprofile": "set a profile function (sys.setprofile, threading.setprofile)",
    "sys.addaudithook": "add an audit hook (sys.addaudithook)",
    "sys._current_frames": "read the frames of other threads (sys._current_frames)",
    "sys.monitoring.register_callback": "register a monitoring callback (sys.monitoring)",
}
"""Audit events of a student's code setting itself up to watch the grading process's own
code run: the frames it would see hold what the grader keeps from it (a library function
handed over to a stub, ``minipaged.grader.delegation``; a profile function that read one off a
stub's frame passed exercise 05's swap criteria with the library's ``_move``)."""

WATCHED = (
    "your code may not {} while it is graded: it would see the grading process's own code "
    "run, and what that code keeps from your code"
)

RECORDED = ("compile", "exec", "function.__new__", "marshal.loads", "marshal.load", "code.__new__")
"""Audit events of code compiled, loaded or run."""

SET_OFF_BY = "finalizer or callback (a __del__, a weakref.finalize, a weak reference's callback)"
"""What ran code of the student's in the main thread with no frame of theirs on the stack, as
the notice tells it ("code your finalizer or callback ... compiled at run time"): the line is
the grader's, where it let go of their objects, and is not told."""

SET_OFF = ("compile", "exec", "function.__new__")
"""Audit events of code compiled or run that no frame of the student's may be on the stack of,
and still be theirs (``watch``'s ``set_off``)."""

GUARDS_FRAME = (
    "your code may not read a frame of the grader's own guards (a traceback's tb_frame, of an "
    "exception raised through them): it holds what the grader keeps from your code; read the "
    "frames of your own code only"
)
"""The refusal of a traceback's frame that runs a guard's code (``guards_codes``): its
``f_locals`` and ``f_globals`` hold the hooks' state: the hand-over hook's frame, off a
``RecursionError`` raised in it, held every library function it keeps (``originals``), and
the runtime hook's its ``busy`` set, in which a thread's compiling goes unseen."""

INSIDE_A_GUARD = (
    "your code may not run inside one of the grader's guards (a function of Python's that a "
    "guard calls, replaced by your code, took a frame, compiled or ran code there): the "
    "guards' frames hold what the grader keeps from your code, and what runs there is unseen"
)
"""The refusal of code that runs inside a guard's call and takes a frame or acts (compiles,
runs code): ``ast.unparse``, which the runtime hook calls on a syntax tree compiled, ran a
student's ``ast._Unparser`` with the hook's frame a few ``f_back`` away, and its ``f_locals``
held the hook's state (its table of what the student's code may not do: emptied, a trace
function was then set unrefused); and what it compiled there the hook, busy, never saw."""

FRAME_READS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
"""Attributes that give a frame, each read an ``object.__getattr__`` event (not ``_getframe``)."""


def guards_codes() -> frozenset:
    """The code of every function of the guards' hooks (the modules ``names`` lists), each
    compiled inside them included; not a stub's, whose frame holds only its caller's."""
    names = ("code_shapes", "delegation", "interpreters", "made_code", "native_calls")
    names += ("notices", "provenance", "runtime_code")
    modules = [sys.modules[f"minipaged.grader.{name}"] for name in names]  # all imported here
    return frozenset(
        code
        for module in modules
        for value in vars(module).values()
        if type(getattr(value, "__code__", None)) is CodeType
        for code in walk(value.__code__)
    ) - frozenset(walk(_stub.__code__))


def watch(folder: Path, tell, copied=None, shapes=frozenset()) -> None:
    """In a grading child, before the student's code loads: tell the grader the sources
    compiled while their code is on the stack, and refuse code that runs from no source (see
    the module's docstring). ``tell``: ``minipaged.grader.notices.teller``'s; ``copied`` and
    ``shapes``: ``library_copies.Library``'s, for code made from bytes (``made_code``)."""
    inside = str(folder.resolve()) + os.sep
    roots = trusted_roots(folder)
    genuine = provenance()
    seen: set[str] = set()  # digests of the sources recorded
    unchecked: list[tuple[bytes, str]] = []  # recorded, not yet compiled into ``known``
    known: set[str] = set()  # fingerprints of every code object the recorded sources make
    state = {"bytes": 0, "ran": False}  # ran: code of theirs has run in this process
    busy: set[int] = set()  # the threads in the hook: only the guards' code acts there
    looking: set[int] = set()  # the threads looking at frames here: only C code runs then
    thread, guards = _thread.get_ident, guards_codes()
    main = thread()  # the grading child's own thread, which loads the student's code
    unparse, refused = ast.unparse, refusal(tell)
    owner, getpid = os.getpid(), os.getpid
    runs_python = python_finder(LIBRARY_FOLDERS)
    watching, watched = dict(WATCHING), WATCHED
    bootstrap = threading.Thread._bootstrap_inner.__code__

    def installed(where) -> bool:
        return type(where) is str and where.startswith(roots) and not where.startswith(inside)

    def mine(where) -> bool:
        return type(where) is str and where.startswith(inside)

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
            raise refused(
                f"your code compiled more than {MAX_RECORDED // 2**20} MiB of source at run "
                "time: the grader reads what it compiles, and stops there"
            )
        name = filename if type(filename) is str else repr(type(filename))
        where = frame.f_code.co_filename
        where = where[len(inside) :] if where.startswith(inside) else where
        if installed(where):  # no frame of theirs on the stack: say what ran it, not the line
            told = "thread" if thread() != main else SET_OFF_BY
        else:
            told = f"{where}:{frame.f_lineno}"
        tell(COMPILED, told, name[:200], source.decode(errors="replace"))
        seen.add(digest)  # told: never again
        unchecked.append((source, name))

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
        if thread() in looking:  # this hook's own look at frames
            return
        if thread() in busy:  # inside this hook's work: is it the guards' own act?
            acted_inside()
            return
        watch = watching.get(event)
        if event == "sys._getframe" or event == "object.__getattr__":
            read = "sys._getframe" if event == "sys._getframe" else args[1]
            if read == "sys._getframe" or read in frame_reads:
                frame_read(args[0] if read == "tb_frame" else None)
            return
        # A function's code replaced runs code with no exec (a name is compared only if a str:
        # a subclass's __eq__ would run the student's code here)
        code_set = (
            event == "object.__setattr__"
            and type(args[0]) is FunctionType
            and type(args[1]) is str
            and args[1] == "__code__"
            and type(args[2]) is CodeType
        )
        if (
            event not in RECORDED
            and event not in STARTS
            and event not in NATIVE
            and not watch
            and not code_set
        ) or (event == extension and args[1] is None):  # an import statement's: no file
            return
        caller = getframe(1)
        # The grader runs Python in the main thread alone: another one the student's code
        # started, and what runs there is theirs (a pool's worker calling marshal.loads has
        # no frame of their files on its stack)
        theirs = student_frame(caller) if thread() == main else caller
        made = args[2] if code_set else args[0] if event in RECORDED and args else None
        if not state["ran"] and type(made) is CodeType and mine(made.co_filename):
            state["ran"] = True  # their first module runs
        if theirs is None and state["ran"] and (code_set or event in SET_OFF):
            theirs = set_off(caller, args[1] if event == "compile" else made)
        # threading.settrace and threading.setprofile set a function each new thread installs
        # as it starts, before any student frame is on its stack; the library sets none.
        starting = caller.f_code is bootstrap
        if theirs is None and not (watch and starting) and event not in anyones:
            return
        busy.add(thread())
        try:
            if watch:
                raise refused(watched.format(watch))
            if event in STARTS:
                started = runs_python(args)
                if started:
                    raise refused(ELSEWHERE.format(started))
            elif event in NATIVE:
                native(event, args, theirs)
            elif event == "compile":
                if getpid() != owner:  # what it compiles would run apart from the answers
                    raise refused(ELSEWHERE.format("compiles code in a forked process"))
                source = args[0]
                if type(source) is str:
                    source = source.encode()
                elif type(source) is not bytes:  # a syntax tree: what it reads as
                    source = unparse(source).encode()
                record(source, args[1], theirs)
            elif event.startswith("marshal"):  # made now: judged now, whoever calls it
                if event != "marshal.loads" or not installed(caller.f_code.co_filename):
                    raise refused(UNREADABLE.format(event))
                judged(args[0], theirs)
            elif event == "code.__new__":  # whoever makes it (marshal's C, a Numba intrinsic)
                made_by_hand(args, caller)
            elif code_set:
                code, own = args[2], args[0].__code__
                plain = plain_constants(code)  # else built by hand: its repr may run their code
                # The same code under another file name or line (hypothesis's ``impersonate``)
                # runs nothing new
                same = plain and plain_constants(own) and _fingerprint(code) == _fingerprint(own)
                if not same and not (plain and readable(code, theirs)):
                    what = f"{code.co_qualname}, set as a function's __code__"
                    raise refused(UNREADABLE.format(what))
            elif type(args[0]) is CodeType:
                code = args[0]
                imported = event == "exec" and caller.f_code.co_filename in IMPORT_SYSTEM
                if imported and installed(code.co_filename) and genuine(code):
                    return  # the import system running installed code (a late import)
                if not readable(code, theirs):
                    raise refused(UNREADABLE.format(f"{code.co_qualname}, {event}"))
        finally:
            busy.discard(thread())

    def set_off(caller, compiled):
        """``caller``, where code (``compiled``: a file name, or a code object) is compiled or
        run by the interpreter for the student's code (a finalizer, a callback) with none of
        theirs on the stack; None for the import system's work on an installed file."""
        if caller.f_code.co_filename not in IMPORT_SYSTEM:
            return caller
        where = compiled.co_filename if type(compiled) is CodeType else compiled
        return None if installed(where) else caller

    def acted_inside() -> None:
        """Refuse an audited act (a compile, a frame taken) inside this hook's work by code
        that is not the guards' own: a function of Python's the hook calls (``ast.unparse``),
        replaced by the student's code, runs there, where the hook records nothing."""
        looking.add(thread())
        try:
            if getframe(2).f_code not in guards:  # 0: here, 1: the hook, 2: who acted
                raise refused(inside_a_guard)
        finally:
            looking.discard(thread())

    def frame_read(traceback) -> None:
        """Refuse a frame to code that a guard's call runs (``INSIDE_A_GUARD``), and a guard's
        frame off ``traceback`` to the student's code (``GUARDS_FRAME``)."""
        looking.add(thread())  # reading frames, and their code, raise events of their own
        try:
            reader = getframe(2)  # 0: here, 1: the hook, 2: the code taking the frame
            if reader.f_code not in guards:  # a guard's own look is its own
                below = reader.f_back
                while below is not None:
                    if below.f_code in guards:
                        raise refused(inside_a_guard)
                    below = below.f_back
            theirs = traceback is not None and student_frame(reader) is not None
            if theirs and traceback.tb_frame.f_code in guards:
                raise refused(guards_frame_refused)
        finally:
            looking.discard(thread())

    # Each rebuilt over names taken now; the closures above then call the rebuilt ones.
    guards_frame_refused, inside_a_guard, frame_reads = GUARDS_FRAME, INSIDE_A_GUARD, FRAME_READS
    installed, student_frame, record = private(installed), private(student_frame), private(record)
    set_off, mine = private(set_off), private(mine)
    readable, frame_read, acted_inside = (
        private(readable),
        private(frame_read),
        private(acted_inside),
    )
    copied = copied or (lambda code: None)  # no copy finder: nothing is a copy
    judged = loaded_judge(readable, installed, LIBRARY_FOLDERS, copied, refused, UNREADABLE)
    made_by_hand = hand_made_judge(installed, shapes, refused)
    temp = str(Path(tempfile.gettempdir()).resolve()) + os.sep  # the child's own: TMPDIR
    native, anyones = native_judge(roots, (inside, temp), refused, ELSEWHERE), ANYONES
    extension, state["stand-ins"] = EXTENSION, seal_symbols(refusal_not_raised(tell))
    sys.addaudithook(private(hook))


PRIVATE |= {
    "LibraryDelegation": LibraryDelegation,
    "MAX_RECORDED": MAX_RECORDED,
    "UNREADABLE": UNREADABLE,
    "_MODES": _MODES,
    "ELSEWHERE": ELSEWHERE,
    "COMPILED": COMPILED,
    "STARTS": STARTS,
    "NATIVE": NATIVE,
    "RECORDED": RECORDED,
    "SET_OFF": SET_OFF,
    "SET_OFF_BY": SET_OFF_BY,
    "IMPORT_SYSTEM": IMPORT_SYSTEM,
}
"""What the hook's functions see as globals, beside ``provenance``'s and ``delegation``'s."""
