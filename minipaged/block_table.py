"""A sequence's block table $\\mathcal{T}_r$: its logical blocks mapped to physical blocks.

Source text §3: token $t$ lives in logical block $j = \\lfloor t/B \\rfloor$ at offset
$o = t \\bmod B$, that is in physical block $\\mathcal{T}_r[j]$ at slot
$\\mathcal{T}_r[j] \\cdot B + o$.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minipaged import memory
from minipaged.config import check_setting
from minipaged.python_numbers import python_number


@dataclass(slots=True)
class BlockTable:
    """$\\mathcal{T}_r = [p_{(r,0)}, \\dots, p_{(r,M-1)}]$ for one sequence $r$.

    Invariant: ``len(blocks) == ceil(num_tokens / block_size)`` ($M = \\lceil L/B \\rceil$), so
    only the last block can have unwritten slots. ``pool`` says which pool the ids index:
    ``"device"`` while the sequence runs, ``"host"`` while it is swapped out; a table never
    mixes the two. ``cached_tokens`` counts the leading tokens whose blocks came from the
    prefix cache when the table was made: their keys and values need no compute.
    """

    block_size: int
    blocks: list[int] = field(default_factory=list)
    num_tokens: int = 0
    pool: str = "device"
    cached_tokens: int = 0

    def __post_init__(self) -> None:
        # B by EngineConfig's rule, so B = 0 fails here, not at the first t // B;
        # np.int64(16) is 16, as everywhere (minipaged.python_numbers).
        self.block_size = check_setting("block_size", self.block_size)
        for name in ("num_tokens", "cached_tokens"):
            count = python_number(getattr(self, name))
            if type(count) is not int or count < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {count!r}")
            setattr(self, name, count)

    def logical_block(self, t: int) -> int:
        """$j = \\lfloor t/B \\rfloor$."""
        return memory.logical_block(t, self.block_size)

    def offset(self, t: int) -> int:
        """$o = t \\bmod B$."""
        return memory.block_offset(t, self.block_size)

    def slot(self, t: int) -> int:
        """$\\mathcal{T}_r[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$: token $t$'s row in the
        flattened pool ``[num_blocks * B, ...]``, the slot mapping the kernels write through."""
        return memory.slot(self.blocks, t, self.block_size)

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def last_block_fill(self) -> int:
        """Tokens written in the last block (0 for an empty table, $B$ when it is full)."""
        if self.num_tokens == 0:
            return 0
        return self.num_tokens - (self.num_blocks - 1) * self.block_size

    @property
    def is_last_block_full(self) -> bool:
        """True when the next token starts a new logical block ($t \\bmod B = 0$)."""
        return self.num_tokens % self.block_size == 0
