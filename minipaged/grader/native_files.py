"""Native code in a student's folder: a compiled extension module (``.so``, ``.pyd``) or any
shared library or program, under any name, is refused before any of their code runs.

Loaded (``ctypes.CDLL``, ``_imp.create_dynamic``, ``ExtensionFileLoader``), such a file runs
machine code in the grading process: it can call Python's C API to make and run a copy of
the library's solution (``PyCode_New*``, ``PyFunction_New``) with no audit event for any guard
to hear, or take the guards down. The grader grades Python source, and needs none: so the
folder is judged (``native_code``) with ``library_copies.copies`` (``judged_folder``), and a
hand-in holding such a file fails every criterion, saying which file, before a grading child
starts. A file is native by its name (Python's extension suffixes, ``.so``, ``.pyd``,
``.dll``, ``.dylib``) or by its first bytes (ELF, Mach-O, Windows' PE), so a renamed one is
found too. One written while graded is refused where it loads (``native_calls``).
"""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

SUFFIXES = frozenset(EXTENSION_SUFFIXES) | {".so", ".pyd", ".dll", ".dylib"}
"""The names of native code: what Python imports as an extension here, and the usual others."""

MAGIC = {
    b"\x7fELF": "an ELF shared library or program",
    b"\xfe\xed\xfa\xce": "a Mach-O library or program",
    b"\xfe\xed\xfa\xcf": "a Mach-O library or program",
    b"\xce\xfa\xed\xfe": "a Mach-O library or program",
    b"\xcf\xfa\xed\xfe": "a Mach-O library or program",
}
"""The first bytes of native code, by what they start."""

MAX_FILES = 200
"""The most files of the folder looked at (``library_copies.MAX_FILES``'s bound as well)."""


def native_code(folder: Path) -> str:
    """Why ``folder`` holds native code the grader refuses (see the module's docstring), or
    ``""``. Links are not followed: a link's target is not the student's file."""
    files = sorted(p for p in folder.rglob("*") if not p.is_symlink() and p.is_file())
    for path in files[:MAX_FILES]:
        what = _native(path)
        if what:
            return (
                f"{path.relative_to(folder)} is {what}: the grader grades Python source and "
                "loads no compiled code of yours (it would run where no check can read it); "
                "remove it, and write what it does in Python in your files"
            )
    return ""


def _native(path: Path) -> str:
    """What native code ``path`` is, by its name or its first bytes, or ``""``."""
    if any(path.name.endswith(suffix) for suffix in SUFFIXES):
        return "a compiled module or shared library"
    try:
        with open(path, "rb") as f:
            start = f.read(64)
            if start[:2] == b"MZ" and len(start) == 64:  # Windows': "PE\0\0" where it says
                f.seek(int.from_bytes(start[60:64], "little"))
                if f.read(4) == b"PE\0\0":
                    return "a Windows library or program"
    except OSError:  # unreadable here: unreadable to their code too
        return ""
    return MAGIC.get(start[:4], "")
