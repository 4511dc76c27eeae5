"""Exercise 13, part 1: the waste formulas of the source text's §2 and §3.

Fill in each region marked ``# --- your code here ---``, then run

    minipaged exercises check 13

The names and signatures are those of ``minipaged.memory``, so the same checks grade both.
Every count is in token slots (one token's keys and values in every layer), never in blocks.
"""

from __future__ import annotations

from collections.abc import Sequence


def paged_internal_waste(num_tokens: int, block_size: int) -> int:
    """ceil(L / B) * B - L: the slots of a sequence's last block that hold no token (§3), for
    L = num_tokens and B = block_size. A sequence that fills its last block exactly wastes
    nothing, and L = 0 holds no block at all."""
    # --- your code here (1 line; integers only, no float division) ---
    raise NotImplementedError("exercise 13: return ceil(L/B)*B - L")


def static_internal_waste(length: int, max_length: int) -> int:
    """L_max - L_i: the slots of a static buffer of L_max = max_length slots that a sequence
    ending at L_i = length tokens never writes (§2). Raise ValueError when L_i > L_max: no
    such buffer holds the sequence."""
    # --- your code here (about 3 lines) ---
    raise NotImplementedError("exercise 13: return L_max - L_i")


def reservation_waste(t: int, delta: int) -> int:
    """ceil(t / ΔL) * ΔL - t: the slots reserved ahead of step t >= 1 by a buffer grown
    ΔL = delta slots at a time (§2), in 0..ΔL-1."""
    # --- your code here (1 line; integers only) ---
    raise NotImplementedError("exercise 13: return ceil(t/ΔL)*ΔL - t")


def external_fragmentation_stalls(free_segments: Sequence[int], request: int) -> bool:
    """True iff max_j c(m_j) < C_req <= sum_j c(m_j) (§2): enough memory is free in total
    (free_segments holds each hole's size c(m_j)), but no single hole holds the request of
    C_req = request slots. With nothing free, return False: that is running out of memory,
    not fragmentation."""
    # --- your code here (about 2 lines) ---
    raise NotImplementedError("exercise 13: compare the request with the largest hole and the sum")
