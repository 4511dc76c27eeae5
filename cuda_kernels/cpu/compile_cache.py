"""Numba's on-disk cache of the twins' machine code (``cache=True``), kept fresh for every file the
twins compile from.

Numba keys a cached function on its own source file (a hash of it) and its own bytecode, and
nothing else. But a twin's machine code also holds what it inlined from other files: the FP8
decoder (``cuda_kernels/fp8.py``), the prefetch hint (``prefetch.py``), ``attend`` when the v2
twin calls it, the constants it read as globals (``NUM_THREADS`` in ``launch.py``). Left to
itself, Numba would load a stale twin after an edit to any of those files alone, and the twin
would go on computing what the old helper did until someone deleted the ``*.nbi`` and ``*.nbc``
files by hand.

So a function of this package is located as Numba would locate it (the same directory, the
same file names) but stamped with ``package_stamp()``, one hash of every source file of the
``cuda_kernels`` package: an edit to any of them makes every twin's cache stale, and the next
call compiles afresh; with no edit the twins load from the cache as before. Functions outside
the package keep Numba's own locators. This uses Numba's locator interface
(``numba.core.caching``), which has no public name: ``tests/test_compile_cache.py`` checks it
still behaves so.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from numba.core.caching import CacheImpl, _CacheLocator

PACKAGE = Path(__file__).resolve().parents[1]
"""The ``cuda_kernels`` package: every ``.py`` file under it goes into the stamp."""

NUMBA_LOCATORS = tuple(CacheImpl._locator_classes)
"""Numba's own locators, tried in its order to find where a function's cache lives."""


def package_stamp(package: Path = PACKAGE) -> str:
    """A SHA-256 over every source file of ``package``, each with its path in it: changes when
    any file changes, is added, is removed or is renamed."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


class PackageSourceLocator(_CacheLocator):
    """Where Numba's own locator puts a function's cache, stamped with ``package_stamp()``
    instead of a hash of the function's file alone."""

    def __init__(self, numba_locator: _CacheLocator):
        self.numba_locator = numba_locator

    def ensure_cache_path(self):
        self.numba_locator.ensure_cache_path()

    def get_cache_path(self):
        return self.numba_locator.get_cache_path()

    def get_disambiguator(self):
        """Numba's (the function's first line) and the stamp's first 16 hex digits, so that
        the cache's file names change with the stamp and an index written under another one is
        never opened: Numba unpickles an index before it compares its stamp, and an old index
        can name a class the package no longer has (when an experiment replaced the twins'
        ``DecodeFields`` named tuple, every cached index of a twin raised ``AttributeError``
        on loading instead of being compiled afresh). The old files stay behind, unread."""
        return f"{self.numba_locator.get_disambiguator()}-{package_stamp()[:16]}"

    def get_source_stamp(self):
        return package_stamp()

    @classmethod
    def from_function(cls, py_func, py_file):
        """A locator for a function defined in this package; ``None`` (Numba's locators then
        take it) for any other."""
        if not Path(py_file).resolve().is_relative_to(PACKAGE):
            return None
        for locator_class in NUMBA_LOCATORS:
            numba_locator = locator_class.from_function(py_func, py_file)
            if numba_locator is not None:
                return cls(numba_locator)
        return None


if PackageSourceLocator not in CacheImpl._locator_classes:  # once, however often imported
    CacheImpl._locator_classes.insert(0, PackageSourceLocator)
