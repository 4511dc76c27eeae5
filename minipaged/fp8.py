"""FP8 for the KV cache: the formats, the scales, quantize and dequantize, and the error bound.

Source text §1 counts KV bytes as $2 \\cdot N_L \\cdot N_{KV} \\cdot d_h \\cdot b$ per token, with
$b = 2$ for FP16/BF16 and $b = 1$ for FP8: an FP8 cache holds twice the blocks in the same
bytes. Two 8-bit formats are offered, as in vLLM (``kv_cache_dtype``):

- ``"fp8_e4m3"`` (``torch.float8_e4m3fn``): 4 exponent bits, 3 mantissa bits, largest value
  448. More precision, less range: the usual choice for a KV cache.
- ``"fp8_e5m2"`` (``torch.float8_e5m2``): 5 exponent bits, 2 mantissa bits, largest 57344.

A stored value $\\hat{x}$ stands for $x \\approx s \\cdot \\hat{x}$ with one float32 scale $s$ per
(layer, KV head), one for keys and one for values (vLLM's ``k_scale`` and ``v_scale``, which it
keeps per layer). Why per KV head: keys differ in size from head to head (the tiny model's
third layer: largest key 4.6 in one head, 11.9 in the other). FP8's relative step is the same
across its normal range, so the scale matters at the edges: it keeps the largest values from
clamping and a small head's values out of the subnormals, where FP8 keeps fewer significant
bits. A scale per head fits each head's range for $N_{KV}$ floats per layer, read once per
(sequence, head) by the kernels.

Because the scale belongs to the layer and head, not to a block, a copy-on-write copy (§5) or a
swap (§6) moves only bytes: a block means the same values wherever it lies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from minipaged.python_numbers import python_number

KV_CACHE_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
"""The FP8 names ``LLM(kv_cache_dtype=...)`` accepts, besides ``"auto"`` (the model's dtype)."""

FP8_DTYPES = tuple(KV_CACHE_DTYPES.values())

SCALE_HEADROOM = 2.0
"""Calibration maps the largest magnitude seen to ``max / SCALE_HEADROOM``, not to ``max``:
a later token up to twice as large is still stored, not clamped. FP8's precision is relative,
so the headroom costs only one binade at the bottom of the range."""


def cache_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The dtype of the KV pools: the model's for ``"auto"``, else the named FP8 format.

    Raises ``ValueError`` for an unknown name, naming the accepted ones."""
    if kv_cache_dtype == "auto":
        return model_dtype
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype must be 'auto' or one of {list(KV_CACHE_DTYPES)}, "
            f"got {kv_cache_dtype!r}"
        )
    return KV_CACHE_DTYPES[kv_cache_dtype]


def kv_cache_dtype_name(dtype: torch.dtype) -> str:
    """``dtype`` as ``LLM(kv_cache_dtype=...)`` and the CLI name it: ``"fp8_e4m3"`` for an FP8
    format (``KV_CACHE_DTYPES``), else torch's name (``"float32"``)."""
    names = {fp8_dtype: name for name, fp8_dtype in KV_CACHE_DTYPES.items()}
    return names.get(dtype, str(dtype).removeprefix("torch."))


def is_fp8(dtype: torch.dtype) -> bool:
    """Whether pools of ``dtype`` hold FP8 bytes that attention must dequantize."""
    return dtype in FP8_DTYPES


def quantize(x: Tensor, scale: Tensor | float, dtype: torch.dtype) -> Tensor:
    """$\\hat{x} = \\mathrm{fp8}(\\mathrm{clamp}(x / s, -\\max, \\max))$, rounded to nearest.
    ``scale`` (a positive finite number, or a tensor of them) broadcasts against ``x`` (for
    keys ``[N, N_KV, d_h]``: ``scale[:, None]``); ``dtype`` is one of ``FP8_DTYPES``.

    Raises ``TypeError`` unless ``x`` is a tensor, and ``ValueError`` for a scale that is 0,
    negative, infinite or NaN (``check_scales``):
    $x / 0$ stores $\\pm\\max$ for every nonzero value, and a NaN scale stores NaN bytes.

    A value of ``x`` that is no finite number has a defined result, not a refusal: NaN is
    stored as the format's NaN (e4m3 and e5m2 each hold one, and ``dequantize`` gives NaN
    back), so a slot poisoned with NaN stays visibly poisoned, as the kernels' tests poison
    the slots no sequence reaches; $\\pm\\infty$ is clamped to $\\pm\\max$, like every value
    past the range (``dequantize`` gives $\\pm s\\max$, and ``error_bound`` says $\\infty$).
    The scale, read by every value of its head, is never NaN: each way in refuses one."""
    check_tensor(x, "x")
    check_fp8_dtype(dtype)
    return quantize_unchecked(x, check_scale_for(x, scale), dtype)


def quantize_unchecked(x: Tensor, scale: Tensor | float, dtype: torch.dtype) -> Tensor:
    """``quantize`` for a caller that has checked ``scale`` and ``dtype`` already: the KV
    cache's write path (``kv_cache.quantize_kv``), whose scales ``check_kv_scales`` checked
    once (in the engine, ``KVCache.set_scales`` did); reading them again here would cost a
    host sync per layer on a GPU.

    Clamping first matters: e5m2 would turn an out-of-range value into $\\pm\\infty$, and one
    $\\infty$ in a key makes every score of that head NaN."""
    limit = torch.finfo(dtype).max
    return (x.float() / scale).clamp(-limit, limit).to(dtype)


def check_fp8_dtype(dtype: object) -> None:
    """``dtype`` is one of the FP8 formats (``FP8_DTYPES``); else ``ValueError`` naming them."""
    if dtype not in FP8_DTYPES:
        raise ValueError(
            f"dtype must be an FP8 format, one of {list(FP8_DTYPES)} (named "
            f"{list(KV_CACHE_DTYPES)} by LLM(kv_cache_dtype=...)), got {dtype!r}"
        )


def check_scales(scale: object, name: str, *, zero: bool = False) -> Tensor | float:
    """``scale`` as a float or a floating-point tensor whose every value is positive and finite
    (0 too when ``zero``, for a largest magnitude); else ``TypeError`` or ``ValueError``
    naming ``name``. Every FP8 function, ``KVCache.set_scales`` and every attention entry
    point's ``k_scale`` / ``v_scale`` (``attention_call.check_kv_scales``) check with it or,
    having read the values already, with ``check_scale_values``, the rule's one home, in its
    words. A tensor's values are read once (``tolist``): one transfer on a GPU, which only
    direct calls pay, never the engine's (``attention_call.engine_attention``)."""
    if not (isinstance(scale, Tensor) and scale.dim() > 0 and scale.is_floating_point()):
        scale = python_number(scale)  # np.float32(0.5) is 0.5, and so is torch.tensor(0.5)
    if isinstance(scale, int) and not isinstance(scale, bool):
        scale = float(scale)
    if isinstance(scale, Tensor) and scale.is_meta:
        raise ValueError(
            f"{name} is on the meta device, which holds shapes but no values: build it on the "
            "device of the keys and values"
        )
    if isinstance(scale, Tensor) and scale.is_floating_point():
        values = scale.flatten().tolist()
    elif isinstance(scale, float):
        values = [scale]
    else:
        raise TypeError(
            f"{name} must be a number or a floating-point torch.Tensor, got "
            f"{type(scale).__name__} {scale!r:.60}"
        )
    check_scale_values(values, name, zero=zero)
    return scale


SCALE_RANGE = (2.0**-149, torch.finfo(torch.float32).max)
"""The positive numbers float32 holds, smallest (a subnormal) to largest: scales are kept and
applied in float32, so a float64 scale past either end would become 0 or inf there."""


def check_scale_values(values: Iterable[float], name: str, *, zero: bool = False) -> None:
    """Every one of ``values``, a scale's numbers already read, is positive and finite in
    float32 (``SCALE_RANGE``; 0 too when ``zero``); else ``ValueError`` naming ``name`` and
    the first that is not."""
    low, high = SCALE_RANGE
    bad = [v for v in values if not ((v == 0 if zero else False) or low <= v <= high)]
    if bad:  # NaN fails every comparison
        what = (
            "non-negative and finite (a head's largest |x|)"
            if zero
            else "positive and finite (a head's largest |x| over the format's largest value, "
            "times headroom: minipaged.fp8.scale_for)"
        )
        raise ValueError(
            f"{name} must be {what} in float32, where scales are kept ({low:.3g} to "
            f"{high:.3g}), got {bad[0]}"
        )


def dequantize(x: Tensor, scale: Tensor | float | None) -> Tensor:
    """$s \\cdot \\hat{x}$ in float32; ``scale`` broadcasts against ``x``. A float pool in the
    model's dtype (no scale given) is returned as it is, so callers can dequantize
    unconditionally; a 16-bit pool read with a scale (a float32 model over a float16 cache,
    as the ``kv-dtype`` benchmark runs it) comes back in float32.

    Raises ``TypeError`` unless ``x`` is a tensor, and checks a given ``scale`` as ``quantize``
    does: a 0 or NaN scale would turn every stored value into 0 or NaN."""
    check_tensor(x, "x")
    return dequantize_unchecked(x, None if scale is None else check_scale_for(x, scale))


def dequantize_unchecked(x: Tensor, scale: Tensor | float | None) -> Tensor:
    """``dequantize`` for a caller that has checked ``scale`` already: the attention paths,
    whose entry point checked ``k_scale`` and ``v_scale`` once for the call
    (``attention_call.check_kv_scales``), and then read them block after block."""
    if not is_fp8(x.dtype) and (scale is None or x.dtype == torch.float32):
        return x
    values = x.float()
    return values if scale is None else values * scale


def check_scale_for(x: Tensor, scale: object) -> Tensor | float:
    """``scale`` checked by ``check_scales`` and, as a tensor, against ``x``: it broadcasts
    against ``x`` and leaves its shape, else ``ValueError`` naming both shapes: a scale
    ``[k, N, ...]`` would give ``k`` copies of the result, and one that does not broadcast
    failed inside the arithmetic, in torch's words."""
    scale = check_scales(scale, "scale")
    if isinstance(scale, Tensor):
        try:
            shape = torch.broadcast_shapes(scale.shape, x.shape)
        except RuntimeError:
            shape = None
        if shape != x.shape:
            raise ValueError(
                f"scale of shape {list(scale.shape)} must broadcast against x of shape "
                f"{list(x.shape)} and leave its shape; for keys [N, N_KV, d_h] give one scale "
                "per KV head as scale[:, None] ([N_KV, 1])"
            )
    return scale


def check_tensor(x: object, name: str) -> None:
    """``x`` is a ``torch.Tensor``; else ``TypeError`` naming ``name`` (a list has no
    ``dtype``, and would fail with an ``AttributeError`` inside the arithmetic)."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__} {x!r:.60}: build it with "
            "torch.tensor([...])"
        )


def error_bound(x: Tensor, scale: Tensor | float, dtype: torch.dtype) -> Tensor:
    """The largest $|\\mathrm{dequantize}(\\mathrm{quantize}(x)) - x|$ the format allows, per
    element.

    With $m$ mantissa bits and smallest normal exponent $e_{\\min}$, rounding $y = x / s$ to
    nearest moves it by at most half a unit in the last place:
    $\\max(|y| \\cdot 2^{-(m+1)}, 2^{e_{\\min} - m - 1})$, the second term for subnormals. A
    value past the largest one ($|y| > \\max$) is clamped and loses $|x| - s\\max$. A few float32
    roundings (of $x/s$ and of $s\\hat{x}$) add $2^{-22}|x|$ at most. ``scale`` and ``dtype``
    are checked as ``quantize`` checks them."""
    check_tensor(x, "x")
    check_fp8_dtype(dtype)
    scale = check_scale_for(x, scale)
    info = torch.finfo(dtype)
    mantissa_bits = -round(math.log2(info.eps))  # e4m3: 3, e5m2: 2
    min_exponent = round(math.log2(info.smallest_normal))  # e4m3: -6, e5m2: -14
    x = x.float()
    y = (x / scale).abs()
    rounding = torch.clamp(
        y * 2.0 ** -(mantissa_bits + 1), min=2.0 ** (min_exponent - mantissa_bits - 1)
    )
    clamped = (x.abs() - scale * info.max).clamp(min=0)
    bound = torch.where(y <= info.max, rounding * scale, clamped)
    return bound + x.abs() * 2.0**-22


def scale_for(amax: Tensor | float, dtype: torch.dtype) -> Tensor:
    """The scale that stores magnitudes up to ``amax`` with ``SCALE_HEADROOM`` to spare:
    $s = \\mathrm{amax} \\cdot \\mathrm{headroom} / \\max$. A head that saw only zeros gets 1.

    Raises ``ValueError`` for a negative, infinite or NaN ``amax`` (a largest magnitude is
    none of them, and its scale would store every value as NaN or $\\pm\\max$)."""
    check_fp8_dtype(dtype)
    amax = torch.as_tensor(check_scales(amax, "amax", zero=True))
    scale = amax.float() * SCALE_HEADROOM / torch.finfo(dtype).max
    return torch.where(scale > 0, scale, torch.ones_like(scale))
