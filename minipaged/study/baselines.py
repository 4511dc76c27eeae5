"""KV-cache allocators behind one interface, so a simulator can replay the same workload on
each: the contiguous designs the source text's §2 criticises, Orca as the vLLM paper measured
it (``minipaged.study.orca_baselines``), vAttention (§7), and paging (§3).

Every allocator counts **token slots**: one slot holds one token's keys and values in every
layer ($2 N_L N_{KV} d_h b$ bytes, ``kv_bytes_per_token``).
A sequence enters with its prompt stored (``admit``), then gains one token per decode step
(``grow``), and leaves (``release``). The allocators differ only in what they reserve:

| allocator | what each sequence holds |
| --- | --- |
| ``StaticAllocator`` | one contiguous buffer of $L_{\\max}$ slots (§2: internal waste) |
| ``OrcaAllocator`` | a contiguous buffer grown $\\Delta L$ slots at a time (§2's model) |
| ``OrcaReservationAllocator`` | one buffer reserved up front: the vLLM paper's Orca baselines |
| ``VAttentionAllocator`` | a contiguous *virtual* range, physical pages mapped on demand (§7) |
| ``PagedAllocator`` | a block table in the real ``BlockManager`` (§3, §5) |

``stalls`` counts refusals that meet §2's external-fragmentation condition
$\\max_j c(m_j) < C_{req} \\le C_{total\\_free}$: enough memory was free, in pieces.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import ClassVar, Protocol

from minipaged import memory
from minipaged.events import SeqId
from minipaged.study.fast_manager import FastBlockManager


class KVAllocator(Protocol):
    """What the simulator needs from an allocator. ``capacity`` and every count are in slots.

    Guarantees shared by all four: ``admit`` and ``grow`` either succeed or change nothing;
    ``reserved`` never exceeds ``capacity``; after every sequence is released, ``reserved`` is 0;
    ``reserved_slots(seq)`` changes only when ``grow`` finds ``seq``'s span full (the simulator
    relies on it to keep its sums exact without asking after every token); ``stalls`` rises
    only when an ``admit`` or a ``grow`` is refused.
    """

    name: str
    capacity: int
    stalls: int
    shares_prefixes: ClassVar[bool]

    def admit(
        self, seq: SeqId, prompt_len: int, max_len: int, final_len: int | None = None
    ) -> bool:
        """Store a new sequence's ``prompt_len`` tokens; ``max_len`` is its $L_{\\max}$ and
        ``final_len`` the length $L_i$ it will end at, which only an oracle knows (the Orca
        baselines of ``orca_baselines`` reserve from it; the others ignore it)."""

    def grow(self, seq: SeqId) -> bool:
        """Make room for one more token of ``seq``."""

    def release(self, seq: SeqId) -> None:
        """Give back everything ``seq`` holds."""

    def reserved_slots(self, seq: SeqId) -> int:
        """Slots that ``seq``'s own buffer or block table spans (shared blocks included)."""

    @property
    def reserved(self) -> int:
        """Slots held by all sequences together, each physical slot once."""


def check_fits(prompt_len: int, max_len: int) -> None:
    memory._check_int("prompt_len", prompt_len)
    if prompt_len > max_len:
        raise ValueError(f"prompt_len {prompt_len} exceeds max_len (L_max) {max_len}")


class ContiguousHeap:
    """A first-fit heap of ``capacity`` slots: the physical memory of a contiguous allocator.

    Invariant: ``holes`` is sorted by start, holes never touch or overlap (neighbours are
    merged on free), and allocated plus free slots equal ``capacity``.
    """

    def __init__(self, capacity: int) -> None:
        memory._check_int("capacity", capacity)
        self.capacity = capacity
        self.holes: list[list[int]] = [[0, capacity]]  # [start, size], sorted by start

    @property
    def free(self) -> int:
        return sum(size for _, size in self.holes)

    def hole_sizes(self) -> list[int]:
        """$c(m_1), \\dots, c(m_k)$: the free segments of §2."""
        return [size for _, size in self.holes]

    def allocate(self, size: int) -> int | None:
        """The start of the first hole that fits ``size`` slots (carved off it), or None."""
        for i, (start, hole) in enumerate(self.holes):
            if hole >= size:
                if hole == size:
                    del self.holes[i]
                else:
                    self.holes[i] = [start + size, hole - size]
                return start
        return None

    def allocate_at(self, start: int, size: int) -> None:
        """Carve exactly ``[start, start + size)``, which must lie inside one hole."""
        i = bisect.bisect_right(self.holes, [start, self.capacity]) - 1
        if i < 0 or sum(self.holes[i]) < start + size:
            raise ValueError(f"slots [{start}, {start + size}) are not free")
        hole_start, hole = self.holes.pop(i)
        after = hole_start + hole - (start + size)
        pieces = [[hole_start, start - hole_start], [start + size, after]]
        self.holes[i:i] = [piece for piece in pieces if piece[1] > 0]

    def extend(self, start: int, size: int, extra: int) -> bool:
        """Grow the buffer ``[start, start + size)`` in place by ``extra`` slots, if the hole
        right after it is large enough."""
        i = bisect.bisect_left(self.holes, [start + size, 0])
        if i == len(self.holes) or self.holes[i][0] != start + size or self.holes[i][1] < extra:
            return False
        if self.holes[i][1] == extra:
            del self.holes[i]
        else:
            self.holes[i] = [start + size + extra, self.holes[i][1] - extra]
        return True

    def release(self, start: int, size: int) -> None:
        """Return ``[start, start + size)``, merging it with the holes it touches."""
        i = bisect.bisect_left(self.holes, [start, 0])
        if i < len(self.holes) and self.holes[i][0] == start + size:  # merge the hole after
            size += self.holes.pop(i)[1]
        if i > 0 and sum(self.holes[i - 1]) == start:  # merge the hole before
            self.holes[i - 1][1] += size
        else:
            self.holes.insert(i, [start, size])


class ContiguousAllocator:
    """What static and Orca-style allocation share: each sequence's KV cache is one contiguous
    buffer in a first-fit ``ContiguousHeap``. Subclasses decide how large it is."""

    shares_prefixes: ClassVar[bool] = False

    def __init__(self, capacity: int, name: str) -> None:
        self.name = name
        self.heap = ContiguousHeap(capacity)
        self.capacity = capacity
        self.stalls = 0
        self._buffers: dict[SeqId, tuple[int, int]] = {}  # seq -> (start, size) in slots
        self._lengths: dict[SeqId, int] = {}

    @property
    def reserved(self) -> int:
        return self.capacity - self.heap.free

    def reserved_slots(self, seq: SeqId) -> int:
        return self._buffers[seq][1]

    def release(self, seq: SeqId) -> None:
        self.heap.release(*self._buffers.pop(seq))
        del self._lengths[seq]

    def _place(self, seq: SeqId, size: int) -> bool:
        """Carve a buffer of ``size`` slots for ``seq``; on refusal, count a stall if §2's
        condition holds (enough memory free in total, no hole large enough)."""
        start = self.heap.allocate(size)
        if start is None:
            self.stalls += memory.external_fragmentation_stalls(self.heap.hole_sizes(), size)
            return False
        self._buffers[seq] = (start, size)
        return True


class StaticAllocator(ContiguousAllocator):
    """FasterTransformer-style static pre-allocation (§2): at admission each sequence gets one
    contiguous buffer of $L_{\\max}$ slots, which never moves or grows.

    A sequence that ends at length $L_i$ leaves $\\mathcal{W}_{int,i} = L_{\\max} - L_i$ slots
    never written (``static_internal_waste``).
    """

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, "static")

    def admit(
        self, seq: SeqId, prompt_len: int, max_len: int, final_len: int | None = None
    ) -> bool:
        check_fits(prompt_len, max_len)
        if not self._place(seq, max_len):
            return False
        self._lengths[seq] = prompt_len
        return True

    def grow(self, seq: SeqId) -> bool:
        if self._lengths[seq] == self._buffers[seq][1]:
            raise ValueError(f"sequence {seq!r} is already at L_max = {self._buffers[seq][1]}")
        self._lengths[seq] += 1
        return True


class OrcaAllocator(ContiguousAllocator):
    """The source text's model of Orca, dynamic resizing (§2): a contiguous buffer reserved
    $\\Delta L$ = ``delta`` slots at a time. The text's hypothetical: Orca itself reserves one
    buffer up front (``minipaged.study.orca_baselines``, the vLLM paper's baselines).

    At length $t$ it spans $\\lceil t/\\Delta L \\rceil \\Delta L$ slots, so
    $\\mathcal{W}_{res}(t) = \\lceil t/\\Delta L \\rceil \\Delta L - t$
    (``reservation_waste``).

    A full buffer grows in place when the hole after it is large enough, else it moves to the
    first hole that fits the larger size (a realloc). When neither works the growth is refused
    and the buffer stays where it was; the refusal is a stall when enough memory was free in
    total (§2).
    """

    def __init__(self, capacity: int, delta: int = 256) -> None:
        memory._check_int("delta", delta)
        super().__init__(capacity, f"text's orca ΔL={delta}")
        self.delta = delta

    def admit(
        self, seq: SeqId, prompt_len: int, max_len: int, final_len: int | None = None
    ) -> bool:
        check_fits(prompt_len, max_len)
        if not self._place(seq, prompt_len + memory.reservation_waste(prompt_len, self.delta)):
            return False
        self._lengths[seq] = prompt_len
        return True

    def grow(self, seq: SeqId) -> bool:
        start, size = self._buffers[seq]
        if self._lengths[seq] == size and not self.heap.extend(start, size, self.delta):
            # Relocate. The old slots count as free for the larger buffer (a memmove may
            # overlap them); if nothing fits, the old place is taken back, still free.
            self.heap.release(start, size)
            if not self._place(seq, size + self.delta):
                self.heap.allocate_at(start, size)
                return False
        elif self._lengths[seq] == size:
            self._buffers[seq] = (start, size + self.delta)
        self._lengths[seq] += 1
        return True


def page_tokens(shape: memory.ModelShape, page_bytes: int) -> int:
    """Tokens one physical page holds under vAttention: each layer's key (and value) tensor is
    its own virtual range, so a page of ``page_bytes`` holds $\\text{page} / (N_{KV} d_h b)$
    tokens of one layer's keys. 2 MB pages hold 1,024 tokens of Llama-3-8B; 64 KB pages 32."""
    memory._check_int("page_bytes", page_bytes)
    per_token = shape.num_kv_heads * shape.head_dim * shape.dtype_bytes
    if page_bytes % per_token:
        raise ValueError(
            f"page_bytes {page_bytes} is not a whole number of {per_token}-byte token vectors"
        )
    return page_bytes // per_token


class VAttentionAllocator:
    """vAttention-style allocation (§7): each sequence owns a contiguous *virtual* range of
    $L_{\\max}$ tokens, which costs no physical memory; physical pages of ``page_size`` tokens
    ($P$) are mapped under it on demand. Physical pages need not be contiguous, so there is no
    external fragmentation, and a sequence of length $L$ wastes $\\lceil L/P \\rceil P - L < P$
    slots, one page at most. Pages are never shared between sequences here.
    """

    shares_prefixes: ClassVar[bool] = False

    def __init__(self, capacity: int, page_size: int, label: str = "") -> None:
        memory._check_int("page_size", page_size)
        self.name = f"vattention {label or f'{page_size}-token'} pages"
        self.page_size = page_size
        self.num_pages = capacity // page_size
        self.capacity = self.num_pages * page_size
        self.stalls = 0
        self._lengths: dict[SeqId, int] = {}
        self._free_pages = deque(range(self.num_pages))  # unmapped physical pages
        self._page_tables: dict[SeqId, list[int]] = {}  # physical pages, in virtual order
        self._virtual_pages: dict[SeqId, int] = {}  # the range reserved: ceil(L_max / P)

    @property
    def reserved(self) -> int:
        return (self.num_pages - len(self._free_pages)) * self.page_size

    def reserved_slots(self, seq: SeqId) -> int:
        return len(self._page_tables[seq]) * self.page_size

    def page_table(self, seq: SeqId) -> tuple[int, ...]:
        """The physical pages mapped under ``seq``'s virtual range, in virtual order: page $k$
        of the range holds tokens $kP$ to $kP + P - 1$. The GPU's memory-management unit does
        this translation; paging's block table does the same in the kernel."""
        return tuple(self._page_tables[seq])

    def virtual_pages(self, seq: SeqId) -> int:
        """How many pages ``seq``'s virtual range spans: $\\lceil L_{\\max}/P \\rceil$, of
        which only the first ``len(page_table(seq))`` are backed by physical memory."""
        return self._virtual_pages[seq]

    def admit(
        self, seq: SeqId, prompt_len: int, max_len: int, final_len: int | None = None
    ) -> bool:
        check_fits(prompt_len, max_len)
        pages = self._pages(prompt_len)
        if pages > len(self._free_pages):
            return False
        self._page_tables[seq] = [self._free_pages.popleft() for _ in range(pages)]
        self._virtual_pages[seq] = self._pages(max_len)
        self._lengths[seq] = prompt_len
        return True

    def grow(self, seq: SeqId) -> bool:
        length = self._lengths[seq]
        if length % self.page_size == 0:  # the last mapped page is full: map one more
            if not self._free_pages:
                return False
            self._page_tables[seq].append(self._free_pages.popleft())
        self._lengths[seq] = length + 1
        return True

    def release(self, seq: SeqId) -> None:
        self._free_pages.extend(self._page_tables.pop(seq))
        del self._lengths[seq], self._virtual_pages[seq]

    def _pages(self, length: int) -> int:
        return memory.num_logical_blocks(length, self.page_size)


class PagedAllocator:
    """PagedAttention (§3, §5): the real ``BlockManager`` with
    ``num_blocks`` ($\\mathcal{P}_{\\max}$) blocks of $B$ = ``block_size`` slots, no host pool
    and no watermark (admission as greedy as the other allocators').

    Every decision is the block manager's own: ``admit`` is ``can_allocate`` / ``allocate``,
    ``grow`` is ``can_append`` / ``append_slot`` (copy-on-write included), ``fork`` is
    ``fork`` and ``fork_replacing`` is ``fork`` then ``free``. ``FastBlockManager``
    (``minipaged.study.fast_manager``) takes each pair in one step, with the same decisions,
    and keeps no events. Any free block serves any request, so a refusal is never a stall.
    """

    shares_prefixes: ClassVar[bool] = True

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.name = f"paged B={block_size}"
        self.manager = FastBlockManager(num_blocks, block_size=block_size)
        self.block_size = block_size
        self.capacity = num_blocks * block_size
        self.stalls = 0

    @property
    def reserved(self) -> int:
        return self.manager.device.num_used * self.block_size

    def reserved_slots(self, seq: SeqId) -> int:
        return self.manager.table(seq).num_blocks * self.block_size

    def admit(
        self, seq: SeqId, prompt_len: int, max_len: int, final_len: int | None = None
    ) -> bool:
        check_fits(prompt_len, max_len)
        if not self.manager.can_allocate(prompt_len):
            return False
        self.manager.allocate(seq, prompt_len)
        return True

    def grow(self, seq: SeqId) -> bool:
        return self.manager.try_append(seq)

    def fork(self, parent: SeqId, child: SeqId) -> None:
        """``child`` shares every block of ``parent`` (§5): no block is allocated."""
        self.manager.fork(parent, child)

    def fork_replacing(self, parent: SeqId, child: SeqId, dropped: SeqId) -> None:
        """``fork(parent, child)``, then ``release(dropped)``: a beam takes a dropped one's
        place."""
        self.manager.fork_replacing(parent, child, dropped)

    def release(self, seq: SeqId) -> None:
        self.manager.free(seq)
