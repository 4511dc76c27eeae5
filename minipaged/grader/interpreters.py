"""Whether a program a student's code starts is a Python interpreter, judged by what the file
is, not by what it is called: another Python runs code no audit hook of the grading child sees
(``minipaged.grader.runtime_code``).

A name proves nothing: a copy of the interpreter under another name, ``/proc/self/exe``, a
link named ``cc``, ``sys.executable`` pointed elsewhere, the dynamic loader (``ld.so``) given
the interpreter as its argument, a script whose ``#!`` line names it. So every word of a
program started (the program, each argument, each word of a shell's command) that names a
file, as a path or found on ``PATH``, is looked at: it is a Python if it is the running
interpreter's own file (the same device and inode, however it is reached), if it is an
executable that carries CPython's entry point (``Py_BytesMain``, ``Py_Main``: every build
exports them, for extension modules), or if it is a script whose ``#!`` line names one.

What this cannot see is a command a shell builds as it runs (``sh -c "$(printf ...)"``):
those words are not in the command until the shell makes them.
"""

from __future__ import annotations

import mmap
import os
import stat
import sys

from minipaged.grader.provenance import private

MARKERS = (b"Py_BytesMain\x00", b"Py_Main\x00")
"""Names only a CPython interpreter's executable (or its library) exports."""

LARGEST = 2**30
"""Files larger than this are not read (no interpreter is)."""

SEPARATORS = " \t\n;|&()<>`'\"$="
"""What splits a shell's command into the words looked at."""


def python_finder(unread: tuple[str, ...] = ()):
    """``runs_python(arguments)``: whether the arguments of a program-start audit event
    (``subprocess.Popen``, ``os.exec``, ``os.posix_spawn``, ``os.system``) name a Python
    interpreter anywhere. Made before any student code runs; calls only what it took then.
    Files below the folders ``unread`` (the library's, whose guard refuses their reading) are
    judged by their inode only."""
    executable = os.path.realpath(sys.executable)
    found = os.stat(executable)
    interpreter = (found.st_dev, found.st_ino)
    environ, defpath, pathsep, join = os.environ, os.defpath, os.pathsep, os.path.join
    stat_of, fspath, is_file, realpath = os.stat, os.fspath, stat.S_ISREG, os.path.realpath
    mapped, readonly, markers, largest = mmap.mmap, mmap.ACCESS_READ, MARKERS, LARGEST
    separators = SEPARATORS

    def words(value, depth: int) -> list[str]:
        """The words of ``value``: a string, bytes, a path, or lists of them, nested."""
        if depth > 8:
            return []
        if type(value) in (list, tuple):
            return [w for item in value for w in words(item, depth + 1)]
        if type(value) is int:  # os.execve on a file descriptor
            return [f"/proc/self/fd/{value}"]
        try:
            value = fspath(value)
        except TypeError:
            return []
        if type(value) is bytes:
            value = value.decode(errors="replace")
        for separator in separators:
            value = value.replace(separator, " ")
        return value.split()

    def places(word: str, env, folders: list) -> list[str]:
        """The files ``word`` may name: itself (and below each of ``folders``: the program's
        folder, a shell's ``cd``), where it holds a ``/``, else each ``PATH`` folder's."""
        if "/" in word:
            return [word] + [join(f, word) for f in folders if not word.startswith("/")]
        searched = [defpath, environ.get("PATH", "")]
        if type(env) is dict:
            given = env.get("PATH", env.get(b"PATH", ""))
            searched.append(given.decode(errors="replace") if type(given) is bytes else given)
        found = {f for path in searched if type(path) is str for f in path.split(pathsep) if f}
        return [join(folder, word) for folder in found]

    def is_python(path: str, depth: int) -> bool:
        try:
            found = stat_of(path)
        except (OSError, ValueError):
            return False
        if (found.st_dev, found.st_ino) == interpreter:
            return True
        if not is_file(found.st_mode) or not 0 < found.st_size <= largest:
            return False
        if unread and realpath(path).startswith(unread):
            return False
        try:
            with open(path, "rb") as f, mapped(f.fileno(), 0, access=readonly) as data:
                if data[:2] == b"#!":  # a script: what its first line runs
                    line = data[: max(data.find(b"\n"), 0) or 512].decode(errors="replace")
                    return depth < 3 and any(
                        is_python(p, depth + 1)
                        for w in words(line[2:], 0)
                        for p in places(w, {}, [])
                    )
                return data[:4] == b"\x7fELF" and any(data.find(m) >= 0 for m in markers)
        except (OSError, ValueError):
            return False

    def runs_python(arguments: tuple) -> bool:
        env = next((a for a in arguments if type(a) is dict), None)
        said = [w for w in words(list(arguments), 0) if not w.startswith("-")]
        folders = [w for w in said if w.startswith("/")]  # Popen's cwd, a shell's cd
        return any(is_python(place, 0) for word in said for place in places(word, env, folders))

    words, places, is_python = private(words), private(places), private(is_python)
    return private(runs_python)
