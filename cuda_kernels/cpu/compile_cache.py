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

A twin loaded from the cache must also run the machine code a freshly compiled one runs
(``load_callees``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from numba.core.caching import CacheImpl, FunctionCache, _CacheLocator
from numba.core.registry import CPUDispatcher

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


def load_callees(kernel: CPUDispatcher) -> None:
    """Load from the on-disk cache every compilation it holds for this machine of each cached
    function ``kernel``'s code calls (``attend``, for the v1 and v2 twins), their own callees
    first, before ``kernel`` itself is loaded.

    Why: Numba links a copy of each callee into its caller's machine code and optimizes that
    copy again with the caller. Compiled in this process, the caller calls the callee's own code
    instead, compiled first and optimized once, since that is already loaded under the same
    name; loaded from the cache, it calls its copy, optimized twice, which differs (the v1
    twin's ``attend`` kept a 1,096-byte stack frame against 632) and ran 9-12% slower over
    float32 pools (paired rounds, one thread, 1 x 8,192 and 4 x 1,024 tokens). Loaded first,
    the callee's own code is the one the caller's call finds, as after a compilation. A
    callee's compilation missing from the cache is not compiled here: the caller then runs its
    copy, computing the same attention."""
    for name in kernel.py_func.__code__.co_names:
        callee = kernel.py_func.__globals__.get(name)
        if isinstance(callee, CPUDispatcher) and callee is not kernel:
            load_callees(callee)
            load_cached(callee)


def load_cached(function: CPUDispatcher) -> None:
    """Load every compilation of ``function`` that its on-disk cache holds for this machine
    (this CPU, this bytecode, the package's current stamp), as a call with those argument types
    would: from the cache, or compiled again where a file the index names is gone."""
    cache = function._cache
    if not isinstance(cache, FunctionCache):  # cache=False: nothing on disk to load
        return
    codegen = function.targetctx.codegen()
    for key in cache._cache_file._load_index():
        signature = key[0]
        if key == cache._index_key(signature, codegen) and signature not in function.overloads:
            function.compile(signature)
