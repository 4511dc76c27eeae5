"""Choosing a prefix cache by name: the ``prefix_caching`` argument of ``BlockManager`` and
``LLM``. It lives apart from both caches so that neither cache module imports the other's
user: ``radix_cache`` builds on ``prefix_cache``, and this module on both."""

from __future__ import annotations

from minipaged.config import check_setting
from minipaged.prefix_cache import HashPrefixCache, PrefixCache
from minipaged.radix_cache import RadixCache

PREFIX_CACHES: dict[str, type[HashPrefixCache] | type[RadixCache]] = {
    "hash": HashPrefixCache,  # vLLM: chained block hashes
    "radix": RadixCache,  # SGLang: a radix tree over token runs
}


def make_prefix_cache(kind: str | None, block_size: int) -> PrefixCache | None:
    """``None`` (no caching), ``"hash"`` (``HashPrefixCache``) or ``"radix"`` (``RadixCache``)."""
    check_setting("prefix_caching", kind)  # the rule of EngineConfig's field
    return None if kind is None else PREFIX_CACHES[kind](block_size)
