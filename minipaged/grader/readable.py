"""What a grading child may read once a student's code runs: everything Python and the
libraries need, and not the library modules the exercise mirrors.

A copy of the library's solution needs the library's source, or its compiled ``.pyc``: read
from the installed package (``open(minipaged.memory.__file__)``, ``inspect.getsource``,
``importlib`` from the file path, ``marshal`` of the cached code). Landlock lets a process read
only below the paths it lists (an allow-list; there is no deny rule), so ``read_rules`` lists,
for each place the child may read (``roots``), either the place whole or, where a hidden file
lies below it, each of its entries but the hidden one's branch, recursively, and the folders on
the way only for listing (Python's import system lists a folder before it imports from it).

``roots``: the Python installation and the virtual environment (``sys.prefix`` and friends),
every folder on ``sys.path``, the packages ``minipaged`` and ``cuda_kernels`` (an editable
install keeps them outside ``sys.path``), the system's libraries and settings (``/usr``,
``/lib``, ``/etc``, ``/proc``, ``/sys``, ``/dev`` ...), the student's folder and the child's
private temporary folder. Not the user's home or other folders: a repository checkout of
``minipaged`` elsewhere, or a pip cache, is out of reach too.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

SYSTEM = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/dev",
)
"""Folders of the operating system a Python process may need to read (shared libraries, time
zones, its own ``/proc/self``, a GPU's device files)."""


def hidden_files(modules: list[str]) -> list[Path]:
    """The source of each library module in ``modules`` and every compiled copy of it
    (``__pycache__/memory.*.pyc``: each Python version and optimisation level)."""
    found = []
    for name in modules:
        source = Path(importlib.util.find_spec(name).origin).resolve()
        found.append(source)
        found += sorted((source.parent / "__pycache__").glob(f"{source.stem}.*"))
    return found


def roots(student: Path | None, temp: Path) -> list[Path]:
    """The places a grading child may read below (see the module's docstring), those that
    exist, resolved."""
    places = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *SYSTEM]
    places += [p for p in sys.path if p]
    for package in ("minipaged", "cuda_kernels"):
        spec = importlib.util.find_spec(package)
        places += list(spec.submodule_search_locations or []) if spec else []
    places += [temp] + ([student] if student is not None else [])
    found = []
    for place in places:
        path = Path(place).resolve()
        if path.exists() and path not in found:
            found.append(path)
    return found


def read_rules(places: list[Path], hidden: list[Path]) -> tuple[list[Path], list[Path]]:
    """``(whole, listing)``: the paths readable whole, and the folders that may only be listed,
    so that every path below ``places`` is readable except ``hidden`` (resolved paths)."""
    hidden_set = set(hidden)
    ancestors = {parent for path in hidden for parent in path.parents}
    whole: list[Path] = []
    listing: list[Path] = []

    def add(path: Path) -> None:
        if path in hidden_set or any(h in path.parents for h in hidden_set):
            return  # a hidden file, or below one
        if path not in ancestors:
            whole.append(path)
            return
        listing.append(path)
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            add(Path(entry.path).resolve())  # a link is a rule for what it names

    for place in places:
        add(place)
    return whole, listing
