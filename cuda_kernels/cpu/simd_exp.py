"""``exp(x)`` in float32 written so that LLVM runs it in SIMD lanes, eight values an instruction,
for the twins' online softmax, which takes $e^{s_\\tau - m}$ of a whole round's scores at once.

``math.exp`` in a Numba loop is a call to the C library's ``expf`` for each value, which LLVM
cannot vectorize: one call per query head and token, 15.6 ns a value against 0.65 for this
exp in the same loop on the machine this was written on, and the fp32 twin 7-13% faster for
it (CPU time, Llama-3-8B shapes, one thread). This is the classic range reduction (Cephes'
``expf``): $x = n \\ln 2 + r$ with $n = \\lfloor x \\log_2 e + \\frac12 \\rfloor$ and
$|r| \\le \\frac12 \\ln 2$, $e^r$ by a polynomial of degree 7 ($1 + r + r^2 P(r)$), and $2^n$
built in a float's exponent bits. Where $e^x$ is a float32 normal ($x > -87.3$) it is
within 1.01 units in the last place of the true value (measured over every 13th float32 of
$[-87.3, 0]$; 0.06 on average), far inside what the twins may differ from the reference by;
``expf`` is within 1.

The edges, decided without a branch, so the loop stays in SIMD lanes:

- below $-87.3$, where the true $e^x$ is under float32's smallest normal $2^{-126}$, the
  result is within $2^{-126}$ of it, and exactly 0 from $-87.7$ down (the softmax's
  $-\\infty$ among them): there $n = -127$ builds $2^n$ as the float whose bits are all zero.
  What such a value adds to a softmax's sum, which holds at least 1, is lost anyway;
- $x \\ge 88$ is computed at 88 (the twins never ask: their arguments are $\\le 0$);
- NaN stays NaN, so that a NaN score still reaches the output as it does through ``math.exp``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from cuda_kernels.cpu.launch import FASTMATH

LOWEST = np.float32(-88.0)
"""At or below it $n = -127$, and $2^n$ is built as 0.0."""

HIGHEST = np.float32(88.0)
"""$e^{88} < 2^{127}$: the largest argument computed as it is."""

LOG2_E = np.float32(1.44269504088896341)
LN2_HIGH = np.float32(0.693359375)  # ln 2 in few bits, so that n * LN2_HIGH is exact
LN2_LOW = np.float32(-2.12194440e-4)  # the rest of ln 2
POLYNOMIAL = (  # P(r), highest power first: e^r = 1 + r + r^2 P(r) on |r| <= ln(2) / 2
    np.float32(1.9875691500e-4),
    np.float32(1.3981999507e-3),
    np.float32(8.3334519073e-3),
    np.float32(4.1665795894e-2),
    np.float32(1.6666665459e-1),
    np.float32(5.0000001201e-1),
)
EXPONENT_BIAS = np.int32(127)
MANTISSA_BITS = np.int32(23)


@njit(inline="always", fastmath=FASTMATH)
def exp(x):
    """$e^x$ for a float32 ``x``: within 1.01 units in the last place where $e^x$ is a
    float32 normal and $x < 88$; within $2^{-126}$ of it below, 0 from $-87.7$ down; NaN
    for NaN."""
    clamped = x if x > LOWEST else LOWEST  # NaN fails the test: clamped = LOWEST
    clamped = clamped if clamped < HIGHEST else HIGHEST
    n = np.floor(clamped * LOG2_E + np.float32(0.5))
    r = clamped - n * LN2_HIGH - n * LN2_LOW
    p = POLYNOMIAL[0]
    for coefficient in POLYNOMIAL[1:]:
        p = p * r + coefficient
    e_r = p * (r * r) + r + np.float32(1.0)
    two_to_n = np.int32((np.int32(n) + EXPONENT_BIAS) << MANTISSA_BITS).view(np.float32)
    result = e_r * two_to_n
    return result if x == x else x  # NaN: the argument itself, as expf returns it
