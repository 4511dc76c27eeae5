"""Rotary position embeddings (RoPE): the angle each query and key turns by at its position, and
the two ways a checkpoint may stretch those angles to a longer context (``RopeScaling``).

RoPE pairs dimension $i$ of a head with dimension $i + d_h/2$ (Hugging Face's rotate-half
convention) and turns the pair by $p \\cdot \\omega_i$ at position $p$, where
$\\omega_i = \\theta^{-2i/d_h}$, $i = 0 \\ldots d_h/2 - 1$. A query at $p$ and a key at $p'$ then
meet at an angle that depends on $p - p'$ only. Pair $i$ comes round once every
$\\lambda_i = 2\\pi / \\omega_i$ positions, its wavelength: from a few positions ($i = 0$) to
about $2\\pi\\theta$ positions (the last pair).

A model trained on contexts of $L_{orig}$ tokens has seen its long-wavelength pairs turn through
only part of a circle. To run it past $L_{orig}$, a checkpoint may scale the frequencies
(``rope_scaling`` in ``config.json``, or ``rope_parameters`` as transformers 5 writes it):

- ``linear``: every $\\omega_i$ divided by ``factor``, as if positions were ``factor`` times
  closer together;
- ``llama3`` (Llama 3.1 and 3.2): only the pairs that turn slowly are slowed. With
  $f_{low}$ = ``low_freq_factor`` and $f_{high}$ = ``high_freq_factor``, a pair with
  $\\lambda_i > L_{orig} / f_{low}$ is divided by ``factor``; one with
  $\\lambda_i < L_{orig} / f_{high}$ (many turns within $L_{orig}$: it encodes nearby order)
  is kept; in between, $\\omega_i$ moves linearly from one to the other in
  $L_{orig} / \\lambda_i$ (``inverse_frequencies``).

Neither changes anything but the angles: the paged KV cache stores keys after their rotation,
so a scaled model pages exactly as an unscaled one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minipaged.python_numbers import FLOAT32_TINY, MAX_COUNT, take_python_numbers

ROPE_TYPES = ("linear", "llama3")
"""The scalings this model implements; a checkpoint's ``"default"`` means none."""

RANGES = {
    "factor": (1.0, "how many times longer a context than the model was trained on"),
    "low_freq_factor": (FLOAT32_TINY, "turns in L_orig below which a pair is slowed"),
    "high_freq_factor": (FLOAT32_TINY, "turns in L_orig above which a pair is kept"),
}
"""Each real field's smallest value and what it means; the largest is ``MAX_COUNT``."""


@dataclass(frozen=True)
class RopeScaling:
    """How a checkpoint scales RoPE's frequencies, with Hugging Face's names.

    Guarantees after construction: ``rope_type`` is one of ``ROPE_TYPES``; each real field
    lies in ``RANGES`` (``factor`` at least 1); for ``llama3``,
    ``low_freq_factor < high_freq_factor`` and ``original_max_position_embeddings``
    ($L_{orig}$) is a positive integer up to ``MAX_COUNT``. The last three are read only by
    ``llama3``.
    """

    rope_type: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        take_python_numbers(self)
        check_rope_type(self.rope_type)
        for name, (low, meaning) in RANGES.items():
            value = getattr(self, name)
            is_real = isinstance(value, int | float) and not isinstance(value, bool)
            if not (is_real and low <= value <= MAX_COUNT):  # NaN fails both comparisons
                raise ValueError(
                    f"rope scaling's {name} ({meaning}) must be a number from {low:.3g} to "
                    f"{MAX_COUNT:,}, got {value!r}"
                )
            object.__setattr__(self, name, float(value))
        if self.rope_type != "llama3":
            return
        low, high = self.low_freq_factor, self.high_freq_factor
        if not low < high:
            raise ValueError(
                "llama3 rope scaling needs low_freq_factor < high_freq_factor: "
                f"got low_freq_factor={low!r}, high_freq_factor={high!r}"
            )
        original = self.original_max_position_embeddings
        is_count = isinstance(original, int) and not isinstance(original, bool)
        if not (is_count and 0 < original <= MAX_COUNT):
            raise ValueError(
                "llama3 rope scaling's original_max_position_embeddings (the context it was "
                f"trained on) must be a positive integer up to {MAX_COUNT:,}, got {original!r}"
            )

    @classmethod
    def from_hf(cls, entry: Mapping[str, Any] | None) -> RopeScaling | None:
        """The scaling a ``config.json`` entry states (``rope_scaling``, or transformers 5's
        ``rope_parameters``, whose ``rope_theta`` is not read here), or None for none: an
        absent entry, or rope type ``"default"``. ``type`` is the older spelling of
        ``rope_type``. Raises ``ValueError`` naming what is wrong or missing."""
        if entry is None:
            return None
        if not isinstance(entry, Mapping):
            raise ValueError(f"rope scaling must be an object, got {entry!r}")
        rope_type = entry.get("rope_type", entry.get("type", "default"))
        if rope_type == "default":
            return None
        check_rope_type(rope_type)
        if "factor" not in entry:
            raise ValueError(f"rope scaling {dict(entry)} has no 'factor', which it must state")
        wanted = ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        if rope_type == "llama3" and (missing := [key for key in wanted if key not in entry]):
            raise ValueError(f"llama3 rope scaling {dict(entry)} has no {missing}")
        return cls(
            rope_type, entry["factor"], **{key: entry[key] for key in wanted if key in entry}
        )

    def hf(self) -> dict[str, Any]:
        """This scaling as ``config.json`` states it (``from_hf``'s inverse)."""
        if self.rope_type == "linear":
            return {"rope_type": "linear", "factor": self.factor}
        return {
            "rope_type": "llama3",
            "factor": self.factor,
            "low_freq_factor": self.low_freq_factor,
            "high_freq_factor": self.high_freq_factor,
            "original_max_position_embeddings": self.original_max_position_embeddings,
        }


def check_rope_type(rope_type: Any) -> None:
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"rope scaling of type {rope_type!r} is not supported: minipaged implements "
            f"{' and '.join(map(repr, ROPE_TYPES))}, or none (rope_type 'default')"
        )


@functools.cache
def inverse_frequencies(
    head_dim: int, theta: float, scaling: RopeScaling | None, device: torch.device
) -> Tensor:
    """The frequencies $\\omega_i = \\theta^{-2i/d_h}$, $i = 0 \\ldots d_h/2 - 1$, scaled by
    ``scaling``, in float32 on ``device``. Made once per arguments, not once per step: they
    never change."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    omega = 1.0 / (theta**exponents)  # [head_dim/2]
    if scaling is not None and scaling.rope_type == "linear":
        omega = omega / scaling.factor
    elif scaling is not None:  # llama3
        original, factor = scaling.original_max_position_embeddings, scaling.factor
        low, high = scaling.low_freq_factor, scaling.high_freq_factor
        wavelength = 2 * math.pi / omega  # lambda_i, in positions
        slow = wavelength > original / low  # under low turns in L_orig: slowed by factor
        fast = wavelength < original / high  # over high turns in L_orig: kept
        blend = (original / wavelength - low) / (high - low)  # 0 at the slow edge, 1 at the fast
        between = (1 - blend) * omega / factor + blend * omega
        omega = torch.where(slow, omega / factor, torch.where(fast, omega, between))
    return omega.to(device)


def rope_cos_sin(
    positions: Tensor,
    head_dim: int,
    theta: float,
    dtype: torch.dtype,
    scaling: RopeScaling | None = None,
) -> tuple[Tensor, Tensor]:
    """cos and sin ``[len(positions), 1, head_dim]`` of the rotation angles $p \\cdot \\omega_i$,
    each frequency written twice (for dimension $i$ and $i + d_h/2$) as HF's rotate-half
    convention needs; the 1 broadcasts over heads."""
    omega = inverse_frequencies(head_dim, theta, scaling, positions.device)  # [head_dim/2]
    angles = positions.float()[:, None] * omega[None, :]  # [T, head_dim/2]
    angles = torch.cat((angles, angles), dim=-1)[:, None, :]  # [T, 1, head_dim]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (dimension $i$, dimension $i + d_h/2$) of every head of ``x``
    ``[..., T, heads, head_dim]`` by its position's angle; cos, sin are ``[T, 1, head_dim]``."""
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat((-second, first), dim=-1)  # rotate_half(x)
    return x * cos + rotated * sin
