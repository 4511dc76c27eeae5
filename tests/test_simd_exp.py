"""The twins' vectorizable exp (``cuda_kernels.cpu.simd_exp``) against float64's, over a sample
of every float32 the online softmax can ask it for, and at its edges."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="the CPU kernels need numba")

from cuda_kernels.cpu.simd_exp import exp  # noqa: E402

SMALLEST_NORMAL_EXP = -87.33  # e^x < 2^-126 below it


@numba.njit
def exp_of_each(xs):
    out = np.empty_like(xs)
    for i in range(xs.shape[0]):  # the loop LLVM vectorizes, as in the twin
        out[i] = exp(xs[i])
    return out


def every_nth_float32(low: float, high: float, n: int) -> np.ndarray:
    """Every ``n``-th float32 of ``[low, high]`` (``low < high <= 0``), in order of their bits."""
    first, last = np.float32(high).view(np.uint32), np.float32(low).view(np.uint32)
    return np.arange(first, last + 1, n, dtype=np.int64).astype(np.uint32).view(np.float32)


def test_the_exp_is_within_one_unit_in_the_last_place_wherever_its_value_is_normal():
    xs = every_nth_float32(SMALLEST_NORMAL_EXP, -0.0, 997)
    got = exp_of_each(xs).astype(np.float64)
    true = np.exp(xs.astype(np.float64))
    units = np.abs(got - true) / np.spacing(true.astype(np.float32)).astype(np.float64)
    assert units.max() <= 1.01


def test_below_the_normals_the_exp_is_within_the_smallest_normal_and_then_zero():
    xs = every_nth_float32(-200.0, SMALLEST_NORMAL_EXP, 101)
    got = exp_of_each(xs)
    assert np.abs(got - np.exp(xs.astype(np.float64))).max() <= 2.0**-126
    assert not exp_of_each(np.float32([-87.7, -88.0, -1e30, -np.inf])).any()


def test_the_exp_keeps_the_values_the_softmax_relies_on():
    got = exp_of_each(np.float32([0.0, -0.0, np.nan, 1.0, 88.0]))
    assert got[0] == got[1] == 1.0
    assert np.isnan(got[2])
    assert got[3] == np.float32(np.e)
    assert np.isfinite(got[4])
