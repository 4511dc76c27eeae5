"""The machine's streaming-read bandwidth: the ceiling every GB/s figure of ``bench kernels`` is
read against. §4 states its claim as a share of what memory can deliver ("over 95% of the
memory bandwidth saturation"), so a kernel's GB/s means little until it is set beside what this
machine reads when nothing but reading is asked of it.

The probe is ``torch.sum`` over a float32 tensor several times larger than the last-level
cache: every byte is read once, in order, with one add per element, which the compiler spreads
over SIMD lanes, so the memory system and not the arithmetic sets its pace. Why ``torch.sum``:

- on the two-core machine this was written on, it read as fast as a Numba loop the compiler
  vectorizes (12.4 against 12.1 GB/s per thread under the same load), and numpy's ``sum``,
  which adds in pairwise blocks on one thread, about 20% slower;
- it runs on torch's thread count, the count every other path of a row runs on, so the
  one-thread and the all-thread rows each get their own ceiling;
- on a GPU the same call reads the device's memory, so a CUDA row gets its ceiling too.

A tensor that fits in a cache would measure the cache: ``probe_tensor`` refuses a size below
``MIN_CACHE_MULTIPLE`` times the last-level cache, and sizes its default at
``CACHE_MULTIPLE`` times, at least ``MIN_BYTES``: gigabytes where a machine reports a cache of
hundreds of MiB. ``bench --quick`` (seconds, for tests) reads ``QUICK_BYTES`` instead, for the
probe and for the read that clears the caches before each call: its row is computed as a full
run's is, but a cache may serve it, so its stream read is not memory's rate (its notes say so).
A full run always sizes both to defeat the cache.
"""

from __future__ import annotations

from pathlib import Path

import torch

MIN_BYTES = 256 * 2**20
"""The smallest default probe, 256 MiB, whatever the cache says."""

CACHE_MULTIPLE = 8
"""The default probe is this many times the last-level cache."""

MIN_CACHE_MULTIPLE = 4
"""A probe smaller than this many last-level caches would be served partly from the cache."""

FALLBACK_CACHE_BYTES = 64 * 2**20
"""What to assume where the cache size cannot be read: larger than most CPUs' last level."""

CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def cache_bytes(device: str = "cpu") -> int:
    """The last-level cache in bytes: the largest cache Linux lists for CPU 0 (a CPU run), the
    L2 cache torch reports (a CUDA run), or ``FALLBACK_CACHE_BYTES`` where neither is known."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(device).L2_cache_size or FALLBACK_CACHE_BYTES
    sizes = [parse_size(path.read_text()) for path in CPU_CACHES.glob("index*/size")]
    return max(sizes, default=FALLBACK_CACHE_BYTES)


def parse_size(text: str) -> int:
    """A size as Linux writes it under ``/sys/.../cache``: ``32K``, ``32768K``, ``1M``."""
    text = text.strip()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


QUICK_BYTES = 16 * 2**20
"""What ``bench --quick`` streams, for its probe and before each timed call, however large the
cache: writing and reading gigabytes took most of a quick run, which proves only that the
columns are there and how they are computed."""


def probe_tensor(
    device: str = "cpu", nbytes: int | None = None, *, quick: bool = False
) -> torch.Tensor:
    """A float32 tensor of ``nbytes`` (default: ``CACHE_MULTIPLE`` last-level caches, at least
    ``MIN_BYTES``) on ``device``, written once so that every page is mapped before it is timed.
    Refuses a size that a cache could hold a large part of. With ``quick``: ``QUICK_BYTES``,
    which a cache may hold (``bench --quick``, whose notes say so)."""
    if quick:
        return torch.ones(QUICK_BYTES // 4, dtype=torch.float32, device=device)
    cache = cache_bytes(device)
    if nbytes is None:
        nbytes = max(MIN_BYTES, CACHE_MULTIPLE * cache)
    if nbytes < MIN_CACHE_MULTIPLE * cache:
        raise ValueError(
            f"a streaming-read probe of {nbytes:,} bytes would be read partly from the "
            f"{cache:,}-byte last-level cache, not from memory: give at least "
            f"{MIN_CACHE_MULTIPLE * cache:,} bytes ({MIN_CACHE_MULTIPLE} × the cache)"
        )
    return torch.ones(nbytes // 4, dtype=torch.float32, device=device)


EVICT_MULTIPLE = 2
"""``cache_evictor`` reads this many last-level caches: enough that what a path left there is
gone before the next path starts."""


def cache_evictor(device: str = "cpu", *, quick: bool = False):
    """A call that reads ``EVICT_MULTIPLE`` last-level caches of a tensor of its own, for
    ``rounds.time_rounds``'s ``before_each``: every timed call then starts from caches that hold
    none of the keys and values of any path, as a layer's attention does after the layer's
    projections, whichever path ran before it. With ``quick`` it reads ``QUICK_BYTES``, which
    leaves in a large cache what a path read (``bench --quick``, whose notes say so)."""
    nbytes = QUICK_BYTES if quick else EVICT_MULTIPLE * cache_bytes(device)
    tensor = torch.ones(nbytes // 4, device=device)
    return streaming_read(tensor)


def streaming_read(tensor: torch.Tensor):
    """The probe as a timed path: one call reads every byte of ``tensor`` once."""
    return lambda: tensor.sum()
