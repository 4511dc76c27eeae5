"""Imports in a confined grading child of library modules that Landlock lets it read file by file:
from their source as it was read just before the child was confined.

Landlock's rules name inodes, not paths. A folder that holds a module the child may not read
(``minipaged.grader.readable``: ``minipaged/`` holds ``block_manager.py``) can only be listed,
and each of its other files gets a rule of its own, for the file that was there when the child
was confined. A file replaced since then (an editor, ``git`` and ``pip`` write a new file and
rename it over the old one) is a new inode that no rule names, and reading it raises
``PermissionError``. The child imports most of the library after it is confined (``minipaged tui
--exercise`` loads the engine at its first step), so an edit anywhere in ``minipaged/`` during a
run stopped the student's run at step 1 with ``PermissionError: (13, 'Permission denied')``.

So those files are read before the child is confined (``read_before_confinement``), and their
modules load from these bytes (``import_as_read``): the library as it was when the child was
confined, whatever replaces its files afterwards. The guards, which compile a library file to
tell its own code from an imitation (``minipaged.grader.provenance``), read the same bytes. A
compiled ``.pyc`` is still read from disk when it is there and current; one replaced since is
unreadable, and Python then compiles the source it holds.
"""

from __future__ import annotations

import contextlib
import os
import sys
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    ExtensionFileLoader,
    FileFinder,
    SourceFileLoader,
    SourcelessFileLoader,
)
from pathlib import Path

from minipaged.grader.provenance import AS_READ, seal_as_read


def read_before_confinement(whole: list[Path], listing: list[Path]) -> dict[str, bytes]:
    """The Python sources that ``readable.read_rules``'s ``(whole, listing)`` makes readable
    one file at a time (those directly in a folder of ``listing``), by resolved path, read now."""
    folders = set(listing)
    sources = {}
    for path in whole:
        if path.parent in folders and path.suffix in SOURCE_SUFFIXES:
            # listed, then removed (another process's temporary file), or a folder: no source
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                sources[str(path)] = path.read_bytes()
    return sources


def import_as_read(sources: dict[str, bytes]) -> None:
    """From now on, a module whose source is one of ``sources`` (``read_before_confinement``)
    loads from those bytes, not from the file, and the guards judge its code by them
    (``provenance.AS_READ``, sealed here: once, before any student code runs); modules
    elsewhere load as before."""
    seal_as_read(sources)
    folders = {os.path.dirname(path) for path in AS_READ}

    class AsRead(SourceFileLoader):
        def get_data(self, path: str) -> bytes:
            held = AS_READ.get(path)
            if held is None:  # a .pyc, or a path spelled through a link
                held = AS_READ.get(os.path.realpath(path))
            return super().get_data(path) if held is None else held

    def hook(path: str) -> FileFinder:
        if os.path.realpath(path or os.getcwd()) not in folders:
            raise ImportError("no folder read before confinement")  # the next hook's
        return FileFinder(
            path,
            (ExtensionFileLoader, EXTENSION_SUFFIXES),
            (AsRead, SOURCE_SUFFIXES),
            (SourcelessFileLoader, BYTECODE_SUFFIXES),
        )

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()  # the folders' finders, made before, read from disk
