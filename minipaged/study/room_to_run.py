"""Whether a simulated KV cache can hold a workload at all, and the settings that give it more
room, named as the user typed them (``minipaged simulate``'s flags, ``simulate_report``'s
arguments).

A cache of fewer token slots than the workload's longest sequence can never finish it: the
simulator would admit the others and stop at that request, minutes into a run, or at once with
no slots at all (a vAttention page larger than the whole budget maps no page). Refused before
any allocator runs, naming the allocator, the slots, the tokens and the way out.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipaged.study.baselines import KVAllocator, VAttentionAllocator
from minipaged.study.workloads import Request


def more_room(alloc: KVAllocator) -> str:
    """The way out for a cache too small under ``alloc``: the flags (and arguments) that size it."""
    way = "raise --hbm-gb (hbm_gb) or lower --weights-gb (weights_gb)"
    if isinstance(alloc, VAttentionAllocator):  # its capacity is whole pages of the budget
        way += f", or pass a smaller --page-kb (page_kb; pages of {alloc.page_size} tokens now)"
    return f"give the cache more memory: {way}"


def check_room(allocators: Sequence[KVAllocator], requests: Sequence[Request]) -> None:
    """Refuse, before any runs, an allocator whose empty cache is smaller than the workload's
    longest sequence (its final length $L_i$, prompt included)."""
    if not requests:
        return
    longest = max(max(request.final_lens) for request in requests)
    for alloc in allocators:
        if alloc.capacity < longest:
            raise ValueError(
                f"the KV cache under {alloc.name} holds {alloc.capacity:,} token slots, fewer "
                f"than the {longest:,} tokens of the workload's longest sequence, which could "
                f"never finish; {more_room(alloc)}"
            )
