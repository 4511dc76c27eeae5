"""Exercise 01: block-table arithmetic (source text §1 and §3).

Fill in each region marked ``# --- your code here ---``, then run

    minipaged exercises check 1

The names and signatures are those of ``minipaged.memory``, so the same checks grade both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def logical_block(t: int, block_size: int) -> int:
    """j = floor(t / B): the logical block that holds token position t (t counts from 0)."""
    # --- your code here (1 line; integers only, no float division) ---
    raise NotImplementedError("exercise 01: return j = floor(t / B)")


def block_offset(t: int, block_size: int) -> int:
    """o = t mod B: token t's place inside its block, in 0..B-1."""
    # --- your code here (1 line) ---
    raise NotImplementedError("exercise 01: return o = t mod B")


def num_logical_blocks(num_tokens: int, block_size: int) -> int:
    """M = ceil(L / B): the blocks a sequence of L = num_tokens tokens needs (0 for L = 0)."""
    # --- your code here (1 line; integers only, no float division) ---
    raise NotImplementedError("exercise 01: return M = ceil(L / B)")


def slot(block_table: Sequence[int], t: int, block_size: int) -> int:
    """T_r[j] * B + o: token t's row in the pool flattened to [num_blocks * B, ...].

    Raise ValueError when the table has no logical block j for token t (past its end, or
    j < 0)."""
    # --- your code here (about 6 lines) ---
    raise NotImplementedError("exercise 01: look up T_r[j], then return T_r[j] * B + o")


@dataclass(frozen=True)
class ModelShape:
    """The §1 parameters that fix a model's KV-cache size."""

    num_layers: int  # N_L
    num_q_heads: int  # N_Q
    num_kv_heads: int  # N_KV
    head_dim: int  # d_h
    dtype_bytes: int  # b: 2 for FP16/BF16, 1 for FP8
    name: str = ""

    @property
    def kv_bytes_per_token(self) -> int:
        """2 N_L N_KV d_h b: one token's keys and values, in every layer."""
        # --- your code here (1 line) ---
        raise NotImplementedError("exercise 01: keys and values, for every layer and KV head")

    def kv_bytes(self, num_tokens: int) -> int:
        """M_KV(L) = 2 N_L N_KV d_h L b bytes for L = num_tokens."""
        # --- your code here (1 line) ---
        raise NotImplementedError("exercise 01: M_KV(L)")

    def block_bytes_per_layer(self, block_size: int) -> int:
        """2 N_KV d_h B b: one physical block's keys and values in one layer."""
        # --- your code here (1 line) ---
        raise NotImplementedError("exercise 01: one block, one layer")

    def block_bytes(self, block_size: int) -> int:
        """BlockSizeBytes = 2 N_L N_KV d_h B b: one physical block in all N_L layers."""
        # --- your code here (1 line) ---
        raise NotImplementedError("exercise 01: one block, all layers")
