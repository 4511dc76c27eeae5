"""What a run did to memory, measured from the engine's step outputs: the figures the CLI
prints after ``minipaged generate`` and the TUI shows as gauges."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from minipaged.block_state import BlockState
from minipaged.outputs import StepOutput


def slot_usage(state: BlockState) -> tuple[int, int]:
    """``(filled, allocated)`` token slots over the distinct device blocks in use.

    A shared block counts once, filled up to the longest of its holders. ``allocated -
    filled`` is the paged internal waste of the source text's §3: only each sequence's last
    block can have empty slots, so it is below $B$ per sequence.
    """
    fill: dict[int, int] = {}
    for table in state.tables.values():
        if table.pool != "device":
            continue
        for j, block in enumerate(table.blocks):
            tokens = min(state.block_size, table.num_tokens - j * state.block_size)
            fill[block] = max(fill.get(block, 0), tokens)
    return sum(fill.values()), len(fill) * state.block_size


@dataclass
class RunStats:
    """Counters over a run, fed one ``StepOutput`` at a time by ``update``."""

    num_gpu_blocks: int = 0
    kv_cache: str = ""  # KVCache.describe(): dtype, b, blocks and bytes; "" when unknown
    backend: str = ""  # the attention path the engine ran (what "auto" chose); "" when unknown
    steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache: prefill skipped
    peak_blocks_used: int = 0
    peak_blocks_shared: int = 0
    filled_slots: int = 0  # summed over steps, so their ratio is a mean over the run
    allocated_slots: int = 0
    events: Counter[str] = field(default_factory=Counter)

    def update(self, step: StepOutput) -> None:
        """Count one more step (pass it as ``LLM.generate(..., on_step=stats.update)``)."""
        state = step.state
        self.num_gpu_blocks = len(state.device_refcounts)
        self.steps += 1
        self.prefill_tokens += step.num_prefill_tokens
        self.decode_tokens += step.num_decode_tokens
        self.cached_tokens += step.num_cached_tokens
        used = sum(1 for r in state.device_refcounts if r > 0)
        self.peak_blocks_used = max(self.peak_blocks_used, used)
        shared = sum(1 for r in state.device_refcounts if r > 1)
        self.peak_blocks_shared = max(self.peak_blocks_shared, shared)
        filled, allocated = slot_usage(state)
        self.filled_slots += filled
        self.allocated_slots += allocated
        self.events.update(event.kind for event in step.events)

    @property
    def internal_waste(self) -> float:
        """Empty slots in allocated device blocks, as a fraction, over the whole run."""
        if not self.allocated_slots:
            return 0.0
        return 1 - self.filled_slots / self.allocated_slots

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs, in the order a reader wants them."""
        kv_cache = [("KV cache", self.kv_cache)] if self.kv_cache else []
        backend = [("attention backend", self.backend)] if self.backend else []
        return [
            *kv_cache,
            *backend,
            ("steps", str(self.steps)),
            ("tokens prefilled / decoded", f"{self.prefill_tokens} / {self.decode_tokens}"),
            ("peak device blocks used", f"{self.peak_blocks_used} of {self.num_gpu_blocks}"),
            ("peak blocks shared (R > 1)", str(self.peak_blocks_shared)),
            ("internal waste (mean over steps)", f"{self.internal_waste:.1%}"),
            ("forks", str(self.events["fork"])),
            ("copy-on-write copies", str(self.events["cow-copy"])),
            ("preemptions", str(self.events["preempt"])),
            ("swap-outs / swap-ins", f"{self.events['swap-out']} / {self.events['swap-in']}"),
            ("recomputations", str(self.events["recompute"])),
            ("prefix cache hits", str(self.events["prefix-hit"])),
            ("prompt tokens from the cache", f"{self.cached_tokens} ({self.cache_hit_rate:.0%})"),
        ]

    @property
    def cache_hit_rate(self) -> float:
        """The share of prompt tokens whose prefill the prefix cache saved."""
        prompt_tokens = self.cached_tokens + self.prefill_tokens
        return self.cached_tokens / prompt_tokens if prompt_tokens else 0.0
