"""NumPy numbers taken as the Python numbers they equal, by every object that checks its
settings (``EngineConfig``, ``SamplingParams``, ``SpeculativeConfig``, ``LlamaConfig``,
``ModelShape``): a student reads ``np.int64(16)`` out of an array and passes it as a block size,
and each of them accepts it as ``16``, then checks it by its own rule.

This module imports nothing, so the configs that import no torch can use it."""

from __future__ import annotations

import numbers


def python_number(value: object) -> object:
    """A NumPy integer or float as the Python ``int`` or ``float`` it equals; anything else as
    it is, for the caller's check to judge. ``bool`` stays a ``bool``: True is no count."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    return value if isinstance(value, int | float) else float(value)


def take_python_numbers(instance: object, names: tuple[str, ...] = ()) -> None:
    """Replace each field ``names`` of the frozen dataclass ``instance`` (every field when
    empty) by ``python_number`` of it, before the instance checks them."""
    fields = names or tuple(instance.__dataclass_fields__)
    for name in fields:
        object.__setattr__(instance, name, python_number(getattr(instance, name)))
