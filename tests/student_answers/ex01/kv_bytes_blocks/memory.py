"""M_KV(L) rounded up to whole blocks of 16: the bytes of blocks, not of the L tokens.

Fails: kv_bytes
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def logical_block(t: int, block_size: int) -> int:
    j, _ = divmod(t, block_size)
    return j


def block_offset(t: int, block_size: int) -> int:
    return divmod(t, block_size)[1]


def num_logical_blocks(num_tokens: int, block_size: int) -> int:
    full, rest = divmod(num_tokens, block_size)
    return full + (1 if rest else 0)


def slot(block_table: Sequence[int], t: int, block_size: int) -> int:
    j, o = divmod(t, block_size)
    if j < 0 or j >= len(block_table):
        raise ValueError(f"token {t} is in logical block {j}, the table has {len(block_table)}")
    physical = block_table[j]
    return physical * block_size + o


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    name: str = ""

    @property
    def kv_bytes_per_token(self) -> int:
        per_layer = 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes
        return per_layer * self.num_layers

    def kv_bytes(self, num_tokens: int) -> int:
        return -(-num_tokens // 16) * 16 * self.kv_bytes_per_token

    def block_bytes_per_layer(self, block_size: int) -> int:
        return block_size * 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def block_bytes(self, block_size: int) -> int:
        return block_size * self.kv_bytes_per_token
