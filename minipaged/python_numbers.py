"""One rule for the numbers every public entry point takes (configs, ``SamplingParams``, the
block manager, allocator, scheduler, prefix caches, ``KVCache``, attention): a number that
came out of NumPy or torch is the Python number it equals.

- An integer is anything ``operator.index`` accepts: ``np.int64(16)``, a 0-d integer tensor
  ``torch.tensor(16)``; never a ``bool`` (``True`` is no block size), nor a bool tensor.
- A real number is anything ``float()`` takes that is a real number: ``np.float32(0.5)``, a
  0-d floating-point tensor; never text (``float("0.5")`` would parse it).

``python_number`` only converts; each caller then checks the value by its own rule (a range,
a choice), so a refusal names the caller's setting. This module imports nothing, so the
modules that import no torch can use it."""

from __future__ import annotations

import functools
import inspect
import numbers
import operator
from collections.abc import Callable

MAX_COUNT = 2**31 - 1
"""The largest count any public setting holds (blocks, tokens, sequences, heads, a model's
sizes): the attention paths carry block ids, slots and sequence lengths as int32
(``backend.PagedBatch``), and the kernels index heads and dimensions with 32-bit integers, so
no run can use a larger one. Each setting refuses it where it is given, before a model loads
or a pool is sized, rather than as an overflow inside a step."""

FLOAT32_TINY = 1.1754943508222875e-38
"""float32's smallest normal number: a smaller positive one is 0 or denormal in the model."""


def python_number(value: object) -> object:
    """``value`` as the Python ``int`` or ``float`` it equals, by the rule above; anything
    else (a bool, text, None, a list) as it is, for the caller's check to judge."""
    if type(value) in (int, float) or isinstance(value, bool) or _holds_bools(value):
        return value
    try:
        return operator.index(value)  # np.int64(16), torch.tensor(16)
    except TypeError:
        pass
    real = isinstance(value, numbers.Real) or (
        getattr(value, "ndim", None) == 0 and "float" in str(getattr(value, "dtype", ""))
    )
    return float(value) if real else value  # np.float32(0.5), torch.tensor(0.5)


def python_numbers(**values: object) -> dict[str, object]:
    """Each of ``values`` by ``python_number``, by name: for a constructor that takes its
    numbers as arguments, before it checks them."""
    return {name: python_number(value) for name, value in values.items()}


def python_number_arguments(*names: str) -> Callable[[Callable], Callable]:
    """Decorate a function whose arguments ``names`` are numbers, so its body sees each as
    ``python_number`` of what the caller passed, by position or by name: the attention entry
    points take ``scale=np.float32(0.125)`` or ``block_size=torch.tensor(16)`` this way, and
    their checks then judge Python numbers only."""

    def decorate(function: Callable) -> Callable:
        parameters = list(inspect.signature(function).parameters)
        positions = {name: parameters.index(name) for name in names}

        @functools.wraps(function)
        def taking_python_numbers(*args: object, **kwargs: object) -> object:
            args = list(args)
            for name, position in positions.items():
                if position < len(args):
                    args[position] = python_number(args[position])
                elif name in kwargs:
                    kwargs[name] = python_number(kwargs[name])
            return function(*args, **kwargs)

        return taking_python_numbers

    return decorate


def take_python_numbers(instance: object, names: tuple[str, ...] = ()) -> None:
    """Replace each field ``names`` of the frozen dataclass ``instance`` (every field when
    empty) by ``python_number`` of it, before the instance checks them."""
    fields = names or tuple(instance.__dataclass_fields__)
    for name in fields:
        object.__setattr__(instance, name, python_number(getattr(instance, name)))


def _holds_bools(value: object) -> bool:
    """Whether ``value`` is a NumPy bool or a tensor or array of bools: ``operator.index``
    takes ``torch.tensor(True)`` as 1, but a flag is no count."""
    return "bool" in type(value).__name__ or "bool" in str(getattr(value, "dtype", ""))
