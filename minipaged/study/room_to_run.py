"""Whether a simulated KV cache can hold a workload at all, and the settings that give it more
room, named as the user typed them (``minipaged simulate``'s flags, ``simulate_report``'s
arguments).

A cache of fewer token slots than the workload's largest request holds can never finish it:
the simulator would admit the others and stop at that request, minutes into a run, or at once
with no slots at all (a vAttention page larger than the whole budget maps no page). Refused before
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


def tokens_held(request: Request, shares_prefixes: bool) -> int:
    """The fewest token slots ``request`` must hold at once: its longest sequence's $L_i$ and,
    where nothing is shared, all its sequences until the shortest ends (each its prompt and
    that many outputs). Where the allocator shares (§5: prompts, beams' common outputs) only
    the longest sequence is sure. A lower bound (static allocation holds $L_{\\max}$ a
    sequence), so nothing that could finish is refused."""
    longest = max(request.final_lens)
    if shares_prefixes:
        return longest
    together = len(request.output_lens) * (request.prompt_len + min(request.output_lens))
    return max(longest, together)


def check_room(allocators: Sequence[KVAllocator], requests: Sequence[Request]) -> None:
    """Refuse, before any runs, an allocator whose empty cache is smaller than what the
    workload's largest request holds at its end (``tokens_held``): it could never finish."""
    for alloc in allocators if requests else ():
        largest = max(requests, key=lambda r: tokens_held(r, alloc.shares_prefixes))
        need = tokens_held(largest, alloc.shares_prefixes)
        if alloc.capacity < need:
            raise ValueError(
                f"the KV cache under {alloc.name} holds {alloc.capacity:,} token slots, fewer "
                f"than the {need:,} tokens the workload's largest request must hold at once "
                f"({len(largest.output_lens)} sequence(s)), so it could never finish; "
                f"{more_room(alloc)}"
            )
