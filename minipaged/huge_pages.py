"""``zeros_on_huge_pages(shape, dtype)`` and ``on_huge_pages(tensor)``: a CPU tensor of zeros, or
a copy of one, in memory the operating system is asked to map in 2 MiB pages (Linux's
transparent huge pages) instead of 4 KiB ones. The engine's ``KVCache`` makes its CPU pools
this way, and ``bench kernels`` every key and value it times.

Why a twin's pools want it. A core finds the physical page of an address through its TLB, a
small cache of page-table entries; a miss walks the page tables, and each level of the walk is
a memory read. The twin reads a KV head's $B \\cdot d_h \\cdot b$ bytes of a block
(8 KiB for $B = 16$, $d_h = 128$, fp32: two 4 KiB pages) and jumps to the next block, so on
4 KiB pages every block of every KV head starts with a page the TLB has not seen. Laid out in
order, the next block's page-table entries sit beside the last one's, in a cache line the
walk has just read; through a shuffled table they are anywhere, and the walk waits for memory.
On 2 MiB pages a pool of a few hundred MiB needs a few hundred TLB entries, which the core's
second-level TLB holds, and a shuffled table costs no walk at all. A GPU maps its memory in
large pages too, so §4's claim about a shuffled table is made on such pages.

Measured on the two-core machine this was written on, under other engineers' load (load
average 6 to 9), with the v1 twin's compiled loop alone (caches emptied before each call, in
order and shuffled interleaved, 40 rounds, rows 1 x 1,024, 4 x 1,024 and 1 x 8,192): on 4 KiB
pages, shuffled ÷ in order was 1.00 on one thread and 1.03 to 1.11 on two; on 2 MiB pages
0.99 to 1.04 on one and 1.00 to 1.01 on two, and both orders ran 8 to 18% faster on one
thread than on 4 KiB pages. Through the whole call (``bench kernels``' own paths) the same
load left the ratios too noisy to tell the two kinds of page apart; a quiet run says more.

It is a request, not a guarantee: where the system has no ``madvise`` (not Linux) or the
request fails, the copy is an ordinary tensor, computing the same values. Linux serves it with
huge pages only where ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or
``madvise``; ``huge_page_bytes()`` says how much of this process it did.
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path

import torch

HUGE_PAGE = 2 * 2**20
"""The size of an x86 or ARM transparent huge page."""

MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
"""``madvise``'s advice to back a range with huge pages; ``None`` where the system has none."""

SMAPS = Path("/proc/self/smaps_rollup")


def zeros_on_huge_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous CPU tensor of zeros whose memory starts on a 2 MiB boundary and was advised
    to be mapped in huge pages before anything was written to it. The memory is a mapping of
    its own (``mmap``), so no page of it was touched before the advice, as memory the
    allocator hands out again would be, and it reads as zeros until written (the system maps
    each page on first touch). The tensor holds the whole mapping (less than two huge pages
    more than it needs)."""
    nbytes = math.prod(shape) * dtype.itemsize
    advised = -(-nbytes // HUGE_PAGE) * HUGE_PAGE  # whole huge pages
    region = private_mapping(advised + HUGE_PAGE)
    buffer = torch.frombuffer(region, dtype=torch.uint8)  # shares it, and keeps it alive
    start = -buffer.data_ptr() % HUGE_PAGE  # the first 2 MiB boundary in the mapping
    if nbytes and MADV_HUGEPAGE is not None:
        region.madvise(MADV_HUGEPAGE, start, advised)
    return buffer[start : start + nbytes].view(dtype).view(shape)


def on_huge_pages(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of CPU ``tensor`` on huge pages (``zeros_on_huge_pages``), contiguous."""
    return zeros_on_huge_pages(tuple(tensor.shape), tensor.dtype).copy_(tensor)


def private_mapping(nbytes: int) -> mmap.mmap:
    """``nbytes`` of anonymous memory of this process alone, no page of it mapped yet. Private,
    not ``mmap``'s default shared mapping: Linux gives shared memory huge pages under another
    setting (``shmem_enabled``), off on most systems. Where ``mmap`` takes no flags
    (Windows), its default."""
    if hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS"):
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return mmap.mmap(-1, nbytes)


def huge_page_bytes() -> int:
    """How many bytes of this process's memory Linux maps in transparent huge pages now
    (``AnonHugePages``); 0 where the system does not say."""
    try:
        for line in SMAPS.read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def note(mapped: list[int]) -> str:
    """What a table measured on a CPU says about its pages, given ``huge_page_bytes()`` of
    each row, taken while the row's inputs were alive."""
    granted = (
        f"Linux mapped {min(mapped) / 2**20:,.0f} to {max(mapped) / 2**20:,.0f} MiB of the "
        "process in huge pages while a row's inputs were alive (json: huge_page_bytes)"
        if min(mapped, default=0)
        else "Linux mapped none of them so for some row (transparent huge pages off, or not "
        "Linux): 4 KiB pages, where a shuffled table costs a page-table walk at each block"
    )
    return (
        "Every path's keys and values were asked for 2 MiB pages, in order and shuffled alike, "
        "as a GPU maps its memory in large pages (minipaged.huge_pages); "
        f"{granted}."
    )
