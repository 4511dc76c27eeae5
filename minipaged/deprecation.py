"""Old keyword names that still work, with a warning that names the new one.

The pools were once ``num_device_blocks`` / ``num_host_blocks`` in the block manager and the KV
cache, and ``num_gpu_blocks`` / ``num_cpu_blocks`` in ``LLM``; they now have vLLM's names
everywhere. Code written against the old names keeps running and is told what to write.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

POOL_RENAMES = {"num_device_blocks": "num_gpu_blocks", "num_host_blocks": "num_cpu_blocks"}


def renamed_keywords(renames: dict[str, str]) -> Callable[[F], F]:
    """Accept each old keyword of ``renames`` as its new name, with a ``DeprecationWarning``;
    passing both the old and the new name is a ``TypeError``."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"pass {new}= only: {old}= is its old name")
                warnings.warn(f"{old}= is now called {new}=", DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
