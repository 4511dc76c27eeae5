"""The three Orca baselines the vLLM paper compares PagedAttention with (Kwon et al., SOSP
2023, §6.1): one contiguous buffer per request, reserved up front and never resized.

Orca (Yu et al., OSDI 2022) schedules at the granularity of iterations, but stores each
request's KV cache as one contiguous buffer reserved when the request is admitted. How large
a buffer depends on what the system knows of the request's output length $O_i = L_i - P_i$
(prompt $P_i$, final length $L_i$), and the vLLM paper evaluates three assumptions:

| baseline | reserves | knows |
| --- | --- | --- |
| Orca (Max) | $L_{\\max}$ slots, the longest sequence the model serves | nothing |
| Orca (Pow2) | $P_i + 2^{\\lceil \\log_2 O_i \\rceil}$, at most $L_{\\max}$ | $O_i$ within 2x |
| Orca (Oracle) | $L_i = P_i + O_i$ slots exactly | $O_i$ |

Orca (Max) reserves like static allocation (§2), so its waste is internal; Pow2 over-reserves
the output by less than 2x; Oracle wastes nothing inside a buffer, an upper bound no real
system reaches. All three still place contiguous buffers of different sizes first fit, so
freed buffers leave holes: external fragmentation (§2), which paging removes.

These are the paper's baselines. The source text's §2 model of Orca, a buffer grown $\\Delta L$
slots at a time (``OrcaAllocator``), is a hypothetical of the text, not how Orca allocates.
"""

from __future__ import annotations

from minipaged import memory
from minipaged.events import SeqId
from minipaged.study.baselines import ContiguousAllocator, check_fits

POLICIES = ("max", "pow2", "oracle")


def next_power_of_two(n: int) -> int:
    """$2^{\\lceil \\log_2 n \\rceil}$, the least power of two $\\ge n$, for $n \\ge 1$; 0 for 0."""
    memory._check_int("n", n, minimum=0)
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def orca_reservation(policy: str, prompt_len: int, max_len: int, final_len: int) -> int:
    """Slots Orca (``policy``) reserves for a request of ``prompt_len`` tokens that will end
    at ``final_len`` ($L_i$) under a limit of ``max_len`` ($L_{\\max}$); see the module's
    table."""
    if policy not in POLICIES:
        raise ValueError(f"Orca policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    check_fits(prompt_len, max_len)
    memory._check_int("final_len", final_len)
    if not prompt_len <= final_len <= max_len:
        raise ValueError(
            f"final_len (L_i) {final_len} must lie between prompt_len {prompt_len} and "
            f"max_len (L_max) {max_len}"
        )
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(max_len, prompt_len + next_power_of_two(final_len - prompt_len))
    return final_len


class OrcaReservationAllocator(ContiguousAllocator):
    """One of the vLLM paper's Orca baselines: at admission a request gets one contiguous
    buffer of ``orca_reservation(policy, ...)`` slots, first fit, which never moves or grows.
    ``admit`` needs the request's final length ``final_len`` ($L_i$): the simulator, which
    knows the workload, passes it."""

    def __init__(self, capacity: int, policy: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"Orca policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        super().__init__(capacity, f"orca ({policy})")
        self.policy = policy

    def admit(
        self, seq: SeqId, prompt_len: int, max_len: int, final_len: int | None = None
    ) -> bool:
        if final_len is None:
            raise ValueError(
                f"Orca ({self.policy}) reserves from the request's final length: pass "
                "final_len (L_i), the prompt plus every token it will generate"
            )
        size = orca_reservation(self.policy, prompt_len, max_len, final_len)
        if not self._place(seq, size):
            return False
        self._lengths[seq] = prompt_len
        return True

    def grow(self, seq: SeqId) -> bool:
        size = self._buffers[seq][1]
        if self._lengths[seq] == size:
            raise ValueError(
                f"sequence {seq!r} has filled the {size} slots Orca ({self.policy}) reserved "
                "for it: it grew past the final_len it was admitted with"
            )
        self._lengths[seq] += 1
        return True
