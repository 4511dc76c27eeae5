"""The library's code a student's files import, loaded before their files are.

Importing a student's files is timed (``check_seconds``) as their own code; importing torch is
seconds of CPU (twice that on a slow, busy machine), Numba and the library's kernels as long,
and none of it is the student's work. So a grading child, before it loads the student's files
and before their clock starts, imports every module those files name in an ``import``
statement (at the top of a file or inside a function) that belongs to the library or to a
package it depends on (``LIBRARY_PACKAGES``); their own import then finds it loaded.

Nothing else is imported early: a module outside these may do anything as it loads
(``antigravity`` opens a web browser), and is the student's to pay for, on their clock. A module
that is not installed, or fails as it loads, is left to the student's own import, which reports
it in their words. Nothing is imported that the student's import would not have imported: the
same modules, the same order, after the same guards (``minipaged.grader.child_setup.prepare``).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

LIBRARY_PACKAGES = frozenset({"minipaged", "cuda_kernels", "torch", "numpy", "numba", "hypothesis"})
"""The top-level packages whose modules a student's import gets loaded before their clock: the
library's own, and those it depends on (``pyproject.toml``'s, and the ``cuda`` extra's)."""

MAX_SOURCE_BYTES = 2**20
"""A larger file is not read for its imports: its own import pays for them."""


def named_modules(source: str) -> Iterator[str]:
    """The absolute module names ``source``'s import statements name, in order: ``a.b`` for
    ``import a.b`` and for ``from a.b import c``, and ``a.b.c`` too (``c`` may be a
    submodule). Nothing for a source that does not parse: its import reports that."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names if a.name != "*")


def is_library(name: str) -> bool:
    """Whether ``name`` is a module of the library or of a package it depends on, and not one
    that runs a program as it loads (``__main__``)."""
    parts = name.split(".")
    return parts[0] in LIBRARY_PACKAGES and "__main__" not in parts


def load_library_imports(folder: Path) -> list[str]:
    """Import the library modules that the Python files directly in ``folder`` name; return
    those that loaded now (the others were loaded already, or are not modules)."""
    loaded = []
    for path in sorted(folder.glob("*.py")):
        with contextlib.suppress(OSError):
            if not path.is_file() or path.stat().st_size > MAX_SOURCE_BYTES:
                continue
            source = path.read_text(errors="replace")
            for name in named_modules(source):
                if is_library(name) and _imported(name):
                    loaded.append(name)
    return loaded


def _imported(name: str) -> bool:
    """Import ``name``; whether it loaded now. A name that is no module (``from a import
    function``), or a module that fails, is left to the student's own import."""
    if name in sys.modules:
        return False
    try:
        importlib.import_module(name)
    except Exception:  # the student's import raises it again, in their words
        return False
    return True
