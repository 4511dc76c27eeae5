"""Numba's on-disk cache of the CPU twins never serves machine code compiled from an older
version of a file the twin inlined (``cuda_kernels.cpu.compile_cache``).

The end-to-end test edits a helper in a copy of the package, the way a student would, and runs
a cached function that inlines it (as every twin does) in fresh processes before and after: the
second process must compute what the edited helper says, without anyone deleting a cache file,
and a third, with nothing edited, must load the function from the cache rather than compile it
again. Every cached function of the package, twins and their one-thread copies, keeps its cache
under the package's stamp, which is what makes that true of each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba", reason="the CPU kernels need numba")

from cuda_kernels.cpu.compile_cache import PACKAGE, package_stamp

FP8_DECODE = "scratch[d] = half_to_float(halves[d])"
"""The line of ``cuda_kernels/fp8.py`` where a twin turns an FP8 byte into its float32 value."""

PROBE = """
from numba import njit

from cuda_kernels.fp8 import decoded_row


@njit(cache=True)
def decode(row, fields, halves, scratch):
    return decoded_row(row, fields, halves, scratch) * fields.multiplier
"""
"""A cached function of the package that inlines the FP8 decoder as every twin does
(``decoded_row``'s overload, ``inline="always"``), written into the copy as
``cuda_kernels/cpu/decode_probe.py``. It stands in for a twin in the end-to-end test: which
cache a function of the package reads is its locator's choice, the same for every function of
the package (``test_a_twins_cache_files_are_named_for_the_stamp`` checks the twins use it), and
it compiles in about a second where the v1 twin took seven, twice a run."""

RUN_PROBE = """
import json, sys
import numpy as np
import torch
import cuda_kernels
from cuda_kernels.cpu.decode_probe import decode
from cuda_kernels.fp8 import decode_fields

assert cuda_kernels.__file__.startswith(sys.argv[1]), cuda_kernels.__file__
one = torch.ones(8).to(torch.float8_e4m3fn).view(torch.uint8).numpy()  # [d_h] FP8 bytes of 1
halves, scratch = np.empty(8, np.int16), np.empty(8, np.float32)
out = decode(one, decode_fields(torch.float8_e4m3fn), halves, scratch)
print(json.dumps({"out": out.tolist(), "hits": sum(decode.stats.cache_hits.values())}))
"""
"""A fresh process that decodes an FP8 row holding 1 everywhere through the probe (which
multiplies back the power of two ``decoded_row`` leaves out, so its output is 1 everywhere),
and prints the output and how many of its compilations came from the cache."""


def copy_of_the_package(tmp_path: Path) -> Path:
    """A copy of ``cuda_kernels`` under ``tmp_path``, without its caches."""
    copy = tmp_path / "cuda_kernels"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def run_probe(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["PYTHONPATH"] = str(root)  # the copy, ahead of the installed package
    result = subprocess.run(
        [sys.executable, "-c", RUN_PROBE, str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_an_edit_to_an_inlined_helper_reaches_a_cached_function(tmp_path):
    copy = copy_of_the_package(tmp_path)
    (copy / "cpu" / "decode_probe.py").write_text(PROBE)
    assert run_probe(tmp_path)["out"] == [1.0] * 8  # compiled, and written to the cache

    fp8 = copy / "fp8.py"
    source = fp8.read_text()
    assert source.count(FP8_DECODE) == 1
    fp8.write_text(source.replace(FP8_DECODE, f"{FP8_DECODE} * np.float32(2.0)"))
    edited = run_probe(tmp_path)
    assert edited["out"] == [2.0] * 8, "the cache served the code of the helper before its edit"
    assert edited["hits"] == 0

    again = run_probe(tmp_path)  # nothing edited since: the cache serves the function
    assert again == {"out": [2.0] * 8, "hits": 1}


def test_the_stamp_changes_with_every_source_file_of_the_package(tmp_path):
    copy = copy_of_the_package(tmp_path)
    before = package_stamp(copy)
    assert package_stamp(copy) == before  # the same files, the same stamp
    sources = sorted(copy.rglob("*.py"))
    assert {path.name for path in sources} >= {"fp8.py", "prefetch.py", "launch.py"}
    for path in sources:
        original = path.read_bytes()
        path.write_bytes(original + b"# edited\n")
        assert package_stamp(copy) != before, f"an edit to {path.relative_to(copy)} kept the stamp"
        path.write_bytes(original)
    assert package_stamp(copy) == before


def test_a_new_source_file_changes_the_stamp(tmp_path):
    copy = copy_of_the_package(tmp_path)
    before = package_stamp(copy)
    (copy / "cpu" / "new_helper.py").write_text("SCALE = 2\n")
    assert package_stamp(copy) != before


def test_a_twins_cache_files_are_named_for_the_stamp():
    """An index written under another stamp is never opened: Numba unpickles an index before
    it compares stamps, and an old one can name a class the package no longer has (when an
    experiment replaced the twins' ``DecodeFields`` named tuple, every twin failed to load
    its cache with ``AttributeError`` instead of compiling afresh)."""
    import importlib
    import pkgutil

    import numba

    import cuda_kernels.cpu
    from cuda_kernels.cpu.launch import serial

    cached = {}  # every function of the twins' modules that Numba caches on disk
    for module in pkgutil.iter_modules(cuda_kernels.cpu.__path__, "cuda_kernels.cpu."):
        for name, value in vars(importlib.import_module(module.name)).items():
            if not isinstance(value, numba.core.registry.CPUDispatcher):
                continue
            if not isinstance(value._cache, numba.core.caching.NullCache):  # cache=True
                cached[name] = value
                if value.targetoptions.get("parallel"):
                    cached[f"{name}, on one thread"] = serial(value)  # what one thread runs
    assert {"attend", "paged_attention_v1", "paged_attention_v1, on one thread"} <= set(cached)
    for name, twin in cached.items():
        assert package_stamp()[:16] in twin._cache._cache_file._index_name, name
