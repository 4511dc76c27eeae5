"""A twin loaded from Numba's on-disk cache runs the code a fresh compilation runs: the cached
code of the functions it calls is loaded before it (``compile_cache.load_callees``), so that its
calls find their own code, optimized once, rather than the copy linked into the caller.

The probe is three small cached functions in a file of their own, imported twice under two
names: the second import's functions are new dispatchers over the first's cache, as in a new
process, and it takes a fraction of a second where a twin takes seconds to compile.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba", reason="the CPU kernels need numba")

from cuda_kernels.cpu.compile_cache import load_callees
from cuda_kernels.cpu.launch import on_torch_threads

PROBE = """
from numba import njit


@njit(cache=True)
def leaf(x):
    return x + 1


@njit(cache=True)
def callee(x):
    return leaf(x) * 2


@njit(cache=True)
def caller(x):
    return callee(x) - 1
"""
"""A caller, the function it calls and the one that calls in turn, as a twin calls ``attend``."""


def imported(path: Path, name: str):
    """The module in ``path`` imported afresh as ``name``: new dispatchers, the same cache."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def probe_file(tmp_path_factory) -> Path:
    """The probe, compiled once so that every function's machine code is in its cache."""
    path = tmp_path_factory.mktemp("callees") / "callees_probe.py"
    path.write_text(PROBE)
    assert imported(path, "callees_probe_compiled").caller(1) == 3
    return path


@pytest.mark.parametrize("load", [load_callees, on_torch_threads], ids=lambda f: f.__name__)
def test_a_cached_callers_callees_are_loaded_before_it(probe_file, load):
    fresh = imported(probe_file, f"callees_probe_{load.__name__}")
    load(fresh.caller)
    for callee in (fresh.callee, fresh.leaf):  # the callee's own callee too
        assert sum(callee.stats.cache_hits.values()) == 1, callee
        assert not callee.stats.cache_misses, "loaded from the cache, not compiled"
    assert not fresh.caller.overloads, "the caller itself is loaded by its first call, after"
    assert fresh.caller(1) == 3


def test_a_function_without_a_cache_has_nothing_loaded(tmp_path):
    path = tmp_path / "uncached_probe.py"
    path.write_text(PROBE.replace("cache=True", "cache=False"))
    fresh = imported(path, "uncached_probe")
    load_callees(fresh.caller)
    assert not fresh.callee.overloads and not fresh.leaf.overloads
