"""Confining a grading child with Linux Landlock: it may write only where it is told, read only
what it is allowed, make no TCP connection, and signal no process outside itself.

Landlock (Linux 5.13 and later, when the kernel enables it) lets an unprivileged process give
up rights for itself and every process it starts, for good. ``confine(writable)`` asks the
kernel for its Landlock ABI and restricts, as far as that ABI goes:

- file-system writes (create, write, truncate, remove, rename, link) to the folders
  ``writable`` and to ``/dev/null`` (ABI 1; truncation from ABI 3, cross-folder links ABI 2):
  the grading child passes its private temporary folder alone, not the student's folder;
- file-system reads, when ``readable`` is given, to the paths it lists (ABI 1): the grading
  child passes ``minipaged.grader.readable``'s rules, which leave out the library modules the
  exercise mirrors;
- running programs (``execve``), when ``executable`` is given, to the paths it lists (ABI 1):
  the grading child passes the same places less the folders it may write, so that nothing
  its code writes runs as a program (a copy of the Python interpreter under another name, a
  script), however a shell builds the command;
- TCP ``bind`` and ``connect``, to nothing (ABI 4);
- signals and abstract Unix sockets, to this process and its own children (ABI 6), so a
  student's code cannot stop the grader that judges it, nor the supervisor that ends what it
  starts (``minipaged.grader.process_tree``).

Where Landlock is missing (another OS, an older or differently built kernel), ``confine``
changes nothing and says why, and the report says that the code ran unconfined.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # same number on every arch
_VERSION = 1  # landlock_create_ruleset flag: return the ABI version
_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE = 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_BIND_TCP, _CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> tuple[int, str]:
    """The kernel's Landlock ABI version, or 0 and why there is none."""
    if platform.system() != "Linux":
        return 0, f"Landlock is Linux's, and this is {platform.system()}"
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    if version < 0:
        error = ctypes.get_errno()
        return 0, f"this kernel offers no Landlock ({os.strerror(error)})"
    return version, ""


def confine(
    writable: list[Path],
    devices: list[Path] = (),
    readable: tuple[list[Path], list[Path]] | None = None,
    executable: list[Path] | None = None,
) -> str:
    """Restrict this process (and all it starts) as far as the kernel allows, leaving writes
    to the folders ``writable`` and the device files ``devices`` (a GPU's), and, where
    ``readable`` is given as ``(whole, listing)``, reads to below the paths ``whole`` (and the
    folders ``writable``) and listing to the folders ``listing``; return what was done, in one
    line, starting with "confined" or "unconfined"."""
    version, why = abi()
    if not version:
        return f"unconfined: {why}"
    libc = ctypes.CDLL(None, use_errno=True)
    fs = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    fs |= (_REFER if version >= 2 else 0) | (_TRUNCATE if version >= 3 else 0)
    net = _BIND_TCP | _CONNECT_TCP if version >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if version >= 6 else 0
    reads = _READ_FILE | _READ_DIR if readable is not None else 0
    runs = _EXECUTE if executable is not None else 0
    ruleset = _Ruleset(fs | reads | runs, net, scoped)
    size = ctypes.sizeof(_Ruleset) if version >= 6 else (16 if version >= 4 else 8)
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(ruleset), ctypes.c_size_t(size), 0)
    if fd < 0:
        return f"unconfined: Landlock refused a ruleset ({os.strerror(ctypes.get_errno())})"
    try:
        file_rights = _WRITE_FILE | (_TRUNCATE if version >= 3 else 0) | (reads & _READ_FILE)
        files = [Path(os.devnull), *devices]
        rules = [(Path(p), fs | reads) for p in writable] + [(p, file_rights) for p in files]
        required = len(rules)  # the folders it writes and the device files: these must exist
        if readable is not None:
            whole, listing = readable
            rules += [(p, _READ_FILE if p.is_file() else reads) for p in whole]
            rules += [(p, _READ_DIR) for p in listing]
        rules += [(p, runs) for p in executable or []]
        for index, (path, allowed) in enumerate(rules):
            try:
                target = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                if index < required:
                    raise
                continue  # listed, then removed (another process's temporary file): no rule
            try:
                rule = _PathBeneath(allowed, target)
                if libc.syscall(_ADD_RULE, fd, _PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    error = os.strerror(ctypes.get_errno())
                    return f"unconfined: Landlock refused a rule for {path} ({error})"
            finally:
                os.close(target)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
            return f"unconfined: no_new_privs failed ({os.strerror(ctypes.get_errno())})"
        if libc.syscall(_RESTRICT_SELF, fd, 0) < 0:
            return f"unconfined: Landlock could not restrict ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(fd)
    limits = ["writes only to a private temporary folder (your folder is read-only)"]
    limits += [
        "reads of Python, its libraries and your folder, not of the library's solution"
        if readable is not None
        else "reads unconfined"
    ]
    limits += ["no programs run from the folders it writes"] if runs else []
    limits += [
        "no TCP connections"
        if net
        else "network unconfined (this kernel's Landlock has no network rules)"
    ]
    limits += ["no signals to other processes"] if scoped else []
    return f"confined by Landlock (ABI {version}): {', '.join(limits)}"
