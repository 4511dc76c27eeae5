"""A right answer: one round-up helper, and a dict of the buffers held.

Fails: nothing
"""

from __future__ import annotations

from collections.abc import Sequence


def _round_up(x, step):
    return ((x + step - 1) // step) * step


def paged_internal_waste(num_tokens: int, block_size: int) -> int:
    return _round_up(num_tokens, block_size) - num_tokens


def static_internal_waste(length: int, max_length: int) -> int:
    if length > max_length:
        raise ValueError(f"a sequence of {length} tokens does not fit in {max_length} slots")
    return max_length - length


def reservation_waste(t: int, delta: int) -> int:
    return _round_up(t, delta) - t


def external_fragmentation_stalls(free_segments: Sequence[int], request: int) -> bool:
    if not free_segments:
        return False
    return max(free_segments) < request <= sum(free_segments)
