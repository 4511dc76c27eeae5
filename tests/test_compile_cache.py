"""Numba's on-disk cache of the CPU twins never serves machine code compiled from an older
version of a file the twin inlined (``cuda_kernels.cpu.compile_cache``).

The end-to-end test edits a helper in a copy of the package, the way a student would, and runs
a twin in fresh processes before and after: the second process must compute what the edited
helper says, without anyone deleting a cache file, and a third, with nothing edited, must load
the twin from the cache rather than compile it again.
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

RUN_TWIN = """
import json, sys
import torch
import cuda_kernels
from cuda_kernels import cpu
from cuda_kernels.cpu.launch import serial
from cuda_kernels.cpu.paged_attention import paged_attention_v1

assert cuda_kernels.__file__.startswith(sys.argv[1]), cuda_kernels.__file__
torch.set_num_threads(1)
ones = torch.ones(1, 1, 4, 8).to(torch.float8_e4m3fn)  # [blocks, N_KV, B, d_h]: k = v = 1
out = cpu.paged_attention_decode(
    torch.ones(1, 1, 8), ones, ones.clone(), torch.zeros(1, 1, dtype=torch.int32),
    torch.tensor([3], dtype=torch.int32), 1.0, 4,
    k_scale=torch.ones(1), v_scale=torch.ones(1),
)
stats = serial(paged_attention_v1).stats
print(json.dumps({"out": out.flatten().tolist(), "hits": sum(stats.cache_hits.values())}))
"""
"""A fresh process that runs the v1 twin on FP8 pools holding 1 everywhere (so its output is 1
everywhere), and prints the output and how many of its compilations came from the cache."""


def copy_of_the_package(tmp_path: Path) -> Path:
    """A copy of ``cuda_kernels`` under ``tmp_path``, without its caches."""
    copy = tmp_path / "cuda_kernels"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def run_twin(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["PYTHONPATH"] = str(root)  # the copy, ahead of the installed package
    result = subprocess.run(
        [sys.executable, "-c", RUN_TWIN, str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow  # three fresh processes, two of which compile the twin: about 50 s
def test_an_edit_to_an_inlined_helper_reaches_a_cached_twin(tmp_path):
    copy = copy_of_the_package(tmp_path)
    assert run_twin(tmp_path)["out"] == [1.0] * 8  # compiled, and written to the cache

    fp8 = copy / "fp8.py"
    source = fp8.read_text()
    assert source.count(FP8_DECODE) == 1
    fp8.write_text(source.replace(FP8_DECODE, f"{FP8_DECODE} * np.float32(2.0)"))
    edited = run_twin(tmp_path)
    assert edited["out"] == [2.0] * 8, "the twin ran the cached code of the helper before its edit"
    assert edited["hits"] == 0

    again = run_twin(tmp_path)  # nothing edited since: the cache serves the twin
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
    from cuda_kernels.cpu.paged_attention import attend

    assert package_stamp()[:16] in attend._cache._cache_file._index_name
