"""Whether a program a student's code starts is a Python interpreter, judged by what the file
is, not by what it is called: another Python runs code no audit hook of the grading child sees
(``minipaged.grader.runtime_code``).

A name proves nothing: a copy of the interpreter under another name, ``/proc/self/exe``, a
link named ``cc``, ``sys.executable`` pointed elsewhere, the dynamic loader (``ld.so``) given
the interpreter as its argument, a script whose ``#!`` line names it, a program that embeds
one (``gdb -ex "python ..."``). So every word of a program started (the program, each
argument, each word of a shell's command) that names a file, as a path or found on ``PATH``,
is looked at: it is a Python if it is the running interpreter's own file (the same device and
inode, however it is reached), if it is an executable that carries CPython's entry point
(``Py_BytesMain``, ``Py_Main``: every build exports them, for extension modules) or names
``libpython`` (linked, or loaded by name), or if it is a script whose ``#!`` line names one.

The judge runs inside the student's process, so it reads only plain data with code of its
own, never code the student's can have replaced: ``posixpath.join`` or ``realpath`` (whose
module's names a student's code rebinds: a ``python3`` found on ``PATH`` was looked for where
it is not, and ``/usr/bin/python3`` taken for a library file), a ``str`` subclass whose
``encode`` names another program when ``subprocess`` runs it, an environment whose methods
answer one ``PATH`` here and another there. A program started with such a word, or with an
environment it cannot read so, is refused as what it is (``runs_python``'s answer).

What this cannot see is a command a shell builds as it runs (``sh -c "$(printf ...)"``):
those words are not in the command until the shell makes them.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import stat
import sys

from minipaged.grader.provenance import private

MARKERS = (b"Py_BytesMain\x00", b"Py_Main\x00", b"libpython")
"""Names only a CPython interpreter's executable (or its library) exports, and the library's
name, in a program that links it or loads it to run Python (``gdb``, ``vim``)."""

LARGEST = 2**30
"""Files larger than this are not read (no interpreter is)."""

SEPARATORS = " \t\n;|&()<>`'\"$="
"""What splits a shell's command into the words looked at."""

UNPLAIN = (
    "starts a program with {} where the grader reads a str or bytes (the program, an "
    "argument, its folder) or a dict of them (its environment), an object that can name "
    "another program when it runs than when the grader reads it"
)
"""What ``runs_python`` says of a program start it cannot read as plain data."""

PYTHON = "starts a Python interpreter"


def files_below(folders: tuple[str, ...]) -> frozenset:
    """``(device, inode)`` of every file below ``folders``, found now."""
    found, pending = set(), list(folders)
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                found.add((info.st_dev, info.st_ino))
    return frozenset(found)


def python_finder(unread: tuple[str, ...] = ()):
    """``runs_python(arguments)``: what the arguments of a program-start audit event
    (``subprocess.Popen``, ``os.exec``, ``os.posix_spawn``, ``os.system``) start that the
    grading child refuses (``PYTHON``, or ``UNPLAIN``'s), or ``""``. Made before any student
    code runs; calls only what it took then, and C functions on exact ``str``, ``bytes``,
    ``dict``. Files below the folders ``unread`` (the library's, whose guard refuses their
    reading) are judged by their inode only."""
    executable = os.path.realpath(sys.executable)
    found = os.stat(executable)
    interpreter = (found.st_dev, found.st_ino)
    library_files = files_below(unread)
    getenv = ctypes.CDLL(None).getenv  # the process's own environment, as a shell reads it
    getenv.restype = ctypes.c_char_p
    os_names, environ, defpath, pathsep = vars(os), os.environ, os.defpath, os.pathsep
    environ_type = type(environ)
    environ_mro = type.__getattribute__(environ_type, "__mro__")
    environ_own = tuple(object.__getattribute__(environ, "__dict__").items())
    environ_classes = tuple(
        (klass, tuple(type.__getattribute__(klass, "__dict__").items())) for klass in environ_mro
    )
    stat_of, is_file = os.stat, stat.S_ISREG
    mapped, readonly, markers, largest = mmap.mmap, mmap.ACCESS_READ, MARKERS, LARGEST
    separators, unplain, python, missing = SEPARATORS, UNPLAIN, PYTHON, object()

    def same(now, then: tuple) -> bool:
        """Whether the exact dict (or a class's ``__dict__``) ``now`` holds ``then``'s items,
        the same objects, and no more."""
        return len(now) == len(then) and all(now.get(key, missing) is value for key, value in then)

    def untouched(env) -> bool:
        """Whether ``env`` is ``os.environ`` as it was made: its own attributes, its class and
        every class of its method resolution, their methods (``get``, ``__getitem__``,
        ``decodevalue``: what ``subprocess`` reads its ``PATH`` with) the same objects."""
        if env is not environ or type(env) is not environ_type:
            return False
        if type.__getattribute__(environ_type, "__mro__") is not environ_mro:
            return False
        if not same(object.__getattribute__(env, "__dict__"), environ_own):
            return False
        return all(
            same(type.__getattribute__(klass, "__dict__"), items)
            for klass, items in environ_classes
        )

    def is_plain(value) -> bool:  # by identity: a class of the student's may answer ==
        return type(value) is str or type(value) is bytes

    def text(value) -> str:
        """``value`` as text; a ``TypeError`` naming its class (read by ``type.__repr__``, no
        method of the class's) where it is not an exact ``str`` or ``bytes``."""
        if type(value) is bytes:
            return value.decode(errors="replace")
        if type(value) is not str:
            raise TypeError(f"an object of {type.__repr__(type(value))}")
        return value

    def path_of(env) -> str:
        """The ``PATH`` of environment ``env``, read as plain data."""
        if env is None:
            return ""
        if type(env) is dict:
            found = ""
            for key, value in dict.items(env):  # subprocess encodes each: all must be plain
                for item in (key, value):
                    if not is_plain(item):
                        raise TypeError(f"an environment holding {type.__repr__(type(item))}")
                if key == "PATH" or key == b"PATH":
                    found = text(value)
            return found
        if untouched(env):
            value = dict.get(object.__getattribute__(env, "_data"), b"PATH", b"")
            return text(value)
        if env is environ:
            raise TypeError("os.environ, its methods or attributes changed,")
        raise TypeError(f"an environment of {type.__repr__(type(env))}")

    def words(value, depth: int) -> list[str]:
        """The words of ``value``: a string, bytes, or lists of them, nested."""
        if depth > 8:
            return []
        kind = type(value)
        if kind is list or kind is tuple:
            return [w for item in value for w in words(item, depth + 1)]
        if kind is int:  # os.execve on a file descriptor
            return [f"/proc/self/fd/{value}"]
        if value is None:
            return []
        value = text(value)  # a TypeError for anything else
        for separator in separators:
            value = value.replace(separator, " ")
        return value.split()

    def joined(folder: str, word: str) -> str:
        return word if word[:1] == "/" else folder + ("" if folder[-1:] == "/" else "/") + word

    def places(word: str, searched: list, folders: list) -> list[str]:
        """The files ``word`` may name: itself (and below each of ``folders``: the program's
        folder, a shell's ``cd``), where it holds a ``/``, else each folder of ``searched``'s
        ``PATH`` values."""
        if "/" in word:
            return [word] + [joined(f, word) for f in folders if word[:1] != "/"]
        found = {f for path in searched for f in path.split(pathsep) if f}
        return [joined(folder, word) for folder in found]

    def is_python(path: str, depth: int, searched: list) -> bool:
        """Whether the file ``path`` is a Python; a script's ``#!`` words are looked for on
        ``searched``, the ``PATH`` values the program start may search."""
        try:
            found = stat_of(path)
        except (OSError, ValueError):
            return False
        if (found.st_dev, found.st_ino) == interpreter:
            return True
        if not is_file(found.st_mode) or not 0 < found.st_size <= largest:
            return False
        if (found.st_dev, found.st_ino) in library_files:
            return False
        try:
            with open(path, "rb") as f, mapped(f.fileno(), 0, access=readonly) as data:
                if data[:2] == b"#!":  # a script: what its first line runs
                    line = data[: max(data.find(b"\n"), 0) or 512].decode(errors="replace")
                    return depth < 3 and any(
                        is_python(p, depth + 1, searched)
                        for w in words(line[2:], 0)
                        for p in places(w, searched, [])
                    )
                return data[:4] == b"\x7fELF" and any(data.find(m) >= 0 for m in markers)
        except (OSError, ValueError):
            return False

    def runs_python(arguments: tuple) -> str:
        environments = [a for a in arguments if type(a) is dict or type(a) is environ_type]
        try:
            current = os_names.get("environ")  # what subprocess and os.exec*p search
            searched = [defpath, text(getenv(b"PATH") or b""), path_of(current)]
            searched += [path_of(env) for env in environments]
            said = words([a for a in arguments if type(a) is not dict and a is not environ], 0)
        except TypeError as unread:
            return unplain.format(unread.args[0])
        said = [w for w in said if w[:1] != "-"]
        folders = [w for w in said if w[:1] == "/"]  # Popen's cwd, a shell's cd
        found = any(
            is_python(place, 0, searched)
            for word in said
            for place in places(word, searched, folders)
        )
        return python if found else ""

    same, untouched, is_plain = private(same), private(untouched), private(is_plain)
    text, path_of = private(text), private(path_of)
    words, joined, places, is_python = (
        private(words),
        private(joined),
        private(places),
        private(is_python),
    )
    return private(runs_python)
