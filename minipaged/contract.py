"""What every implementation of §4's attention and of the cache operations accepts: one
contract, checked in one place.

The reference (``attention``, ``kv_cache``), the CUDA kernels and their CPU twins
(``cuda_kernels``) read the same layout: pools ``[num_blocks, num_kv_heads, B, head_dim]``, block
tables ``[batch, max_blocks]`` whose row $r$ is $\\mathcal{T}_r$, lengths ``seq_lens`` $L_r$,
slots $\\mathcal{T}_r[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$. Each of them calls these
checks before it reads or writes anything, so a rejected call changes nothing and every path
rejects the same inputs with the same message.

This module imports no other module of the project: the reference and the kernels both depend
on it, and it on neither.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

INDEX_DTYPES = (torch.int32, torch.int64)
"""What block tables, ``seq_lens`` and ``query_lens`` hold: block ids and token counts."""

FP8_POOL_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
"""One-byte pools ($b = 1$, §1), dequantized to float32 as they are read."""

HALF_POOL_DTYPES = (torch.float16, torch.bfloat16)
"""Two-byte pools ($b = 2$, §1) a float32 model may keep its cache in, storing k / k_scale."""

NARROWER_POOL_DTYPES = (*FP8_POOL_DTYPES, *HALF_POOL_DTYPES)
"""Pools a float32 query may read, each element widened to float32 as it is read."""

POOL_DTYPES = (torch.float32, *NARROWER_POOL_DTYPES)
"""What a ``KVCache`` holds: the model's dtype (``EngineConfig.dtype``) or FP8."""


def check_attention_inputs(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    block_size: int,
    query_lens: Tensor | None = None,
    *,
    scale: float,
) -> int:
    """Check query, pools, tables and lengths against each other (``query_lens`` None: one
    query per sequence) and ``scale``; return the GQA group size $N_Q / N_{KV}$. A value of
    the wrong kind (a list for a tensor, a float table) is a ``TypeError``, a wrong size a
    ``ValueError``: both before any tensor is read, and both name the argument and the value."""
    check_tensor_kinds(query, key_pool, value_pool, block_tables, seq_lens, query_lens)
    check_block_size(block_size)
    check_scale(scale, query.dtype)
    lens = seq_lens.tolist()
    queries = [1] * len(lens) if query_lens is None else query_lens.tolist()
    if query.dim() != 3 or query.shape[0] != sum(check_query_lens(lens, queries)):
        raise ValueError(
            f"query must be [N, num_heads, head_dim] with N = {sum(queries)} rows, one per "
            f"query (query_lens {queries}), got {tuple(query.shape)}"
        )
    if key_pool.dim() != 4 or value_pool.shape != key_pool.shape:
        raise ValueError(
            "key_pool and value_pool must both be [num_blocks, num_kv_heads, B, head_dim], got "
            f"{tuple(key_pool.shape)} and {tuple(value_pool.shape)}"
        )
    num_heads, head_dim = query.shape[1:]
    num_blocks, num_kv_heads, pool_block_size, pool_head_dim = key_pool.shape
    if (pool_block_size, pool_head_dim) != (block_size, head_dim):
        raise ValueError(
            f"the pools hold blocks of B={pool_block_size} tokens with head_dim={pool_head_dim}, "
            f"but block_size={block_size} and the query's head_dim={head_dim}"
        )
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}: grouped-"
            "query attention shares each KV head among num_heads // num_kv_heads query heads"
        )
    if block_tables.dim() != 2 or block_tables.shape[0] != len(lens):
        raise ValueError(
            f"block_tables must be [batch, max_blocks] with batch = len(seq_lens) = "
            f"{len(lens)}, got {tuple(block_tables.shape)}"
        )
    check_block_tables(lens, block_tables, block_size, num_blocks)
    return num_heads // num_kv_heads


def check_block_tables(
    seq_lens: list[int], block_tables: Tensor, block_size: int, num_blocks: int
) -> None:
    """The checks of ``check_attention_inputs`` that read the block tables' values: each row
    $\\mathcal{T}_b$ has at least $\\lceil L_b / B \\rceil$ entries, and those entries name
    blocks of the pool (ids ``0 .. num_blocks - 1``)."""
    # Plain Python over the table's ids: a step's tables hold a few hundred ids, and one
    # tolist() costs less than the handful of tensor operations a vectorized check would.
    for b, (seq_len, table) in enumerate(zip(seq_lens, block_tables.tolist(), strict=True)):
        if len(table) * block_size < seq_len:
            raise ValueError(table_too_short(b, seq_len, block_size, len(table)))
        used = table[: -(-seq_len // block_size)]  # T_b[0 .. ceil(L_b / B) - 1]
        if min(used) < 0 or max(used) >= num_blocks:
            raise ValueError(
                f"sequence {b}'s block table {used} names a block outside the pool "
                f"of {num_blocks} blocks (ids 0..{num_blocks - 1})"
            )


def check_tensor_kinds(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    query_lens: Tensor | None = None,
) -> None:
    """Every argument a tensor of the kind attention reads: floating-point query and pools on
    one device, the pools of one dtype (the query's, or a narrower one under a float32 query), and
    integer tables ``[batch, max_blocks]`` and lengths ``[batch]``."""
    named = {"query": query, "key_pool": key_pool, "value_pool": value_pool}
    named |= {"block_tables": block_tables, "seq_lens": seq_lens}
    if query_lens is not None:
        named["query_lens"] = query_lens
    for name, tensor in named.items():
        if not isinstance(tensor, Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor, got {type(tensor).__name__}: build it with "
                f"torch.as_tensor({name})"
            )
    for name in ("block_tables", "seq_lens", "query_lens"):
        if name in named and named[name].dtype not in INDEX_DTYPES:
            raise TypeError(
                f"{name} must hold integers (torch.int32 or torch.int64), got "
                f"{named[name].dtype}: pass {name}.to(torch.int32)"
            )
    for name, dims in (("seq_lens", 1), ("query_lens", 1)):
        if name in named and named[name].dim() != dims:
            raise ValueError(
                f"{name} must be [batch], one length per sequence, got shape "
                f"{tuple(named[name].shape)}"
            )
    if not query.is_floating_point():
        raise TypeError(f"query must be floating point, got {query.dtype}: cast it with .float()")
    check_devices(named, "query")
    if value_pool.dtype != key_pool.dtype:
        raise ValueError(
            f"key_pool holds {key_pool.dtype} but value_pool holds {value_pool.dtype}: the "
            "two pools of one cache hold one dtype; cast one with .to()"
        )
    for name in ("key_pool", "value_pool"):
        pool_dtype = named[name].dtype
        # A float32 query may read narrower pools, widened as they are read: FP8 (with its
        # scales), and the 16-bit caches `bench kv-dtype` prices under the float32 tiny model.
        if pool_dtype != query.dtype and not (
            pool_dtype in NARROWER_POOL_DTYPES and query.dtype == torch.float32
        ):
            want = torch.float32 if pool_dtype in NARROWER_POOL_DTYPES else pool_dtype
            raise ValueError(
                f"query has dtype {query.dtype} but {name} holds {pool_dtype}: attention reads "
                f"the pools in the query's dtype (narrower pools in float32); cast the query "
                f"with .to({want})"
            )


def check_devices(named: dict[str, Tensor], anchor: str) -> None:
    """Every tensor of ``named`` holds values (none on ``meta``, which keeps shapes only) on
    the device of ``named[anchor]``: one call reads them all there, tables and lengths too."""
    for name, tensor in named.items():
        if tensor.is_meta:
            raise ValueError(
                f"{name} is on the meta device, which holds a shape but no values: build it "
                "on 'cpu' or 'cuda' with its values"
            )
    device = named[anchor].device
    for name, tensor in named.items():
        if tensor.device != device:
            raise ValueError(
                f"{name} is on {tensor.device} but {anchor} is on {device}: move it there "
                f"with .to({anchor}.device)"
            )


def check_block_size(block_size: int) -> None:
    """$B$ is a positive integer (``True`` is no block size; a NumPy integer is one)."""
    if not isinstance(block_size, numbers.Integral) or isinstance(block_size, bool):
        raise TypeError(f"block_size must be an integer, got {block_size!r}")
    if block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")


def check_scale(scale: float, dtype: torch.dtype = torch.float32) -> None:
    """The softmax scale (usually $1/\\sqrt{d_h}$) is a positive number that ``dtype``, the
    query's, holds: a larger one (``1e300``) is infinite there, and so would every logit be."""
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool):
        raise TypeError(
            f"scale must be a number (usually 1 / sqrt(head_dim)), got {type(scale).__name__} "
            f"{scale!r:.40}"
        )
    largest = torch.finfo(dtype).max
    if not (math.isfinite(scale) and 0 < scale <= largest):
        raise ValueError(
            f"scale must be a positive number up to {largest:.4g}, the largest {dtype} (usually "
            f"1 / sqrt(head_dim)), got {scale!r}"
        )


def check_query_lens(seq_lens: list[int], query_lens: list[int]) -> list[int]:
    """Check $1 \\le$ ``query_len`` $\\le$ ``seq_len`` per sequence (so no sequence is empty);
    return ``query_lens``."""
    if len(seq_lens) != len(query_lens):
        raise ValueError(
            f"seq_lens {seq_lens} and query_lens {query_lens} must have one entry per sequence"
        )
    for b, (seq_len, query_len) in enumerate(zip(seq_lens, query_lens, strict=True)):
        if seq_len <= 0:
            raise ValueError(
                f"sequence {b} has seq_len {seq_len}: attention needs at least one cached token "
                "(a step writes its own keys and values before attending)"
            )
        if not 1 <= query_len <= seq_len:
            raise ValueError(
                f"sequence {b} has query_len {query_len} and seq_len {seq_len}: its queries are "
                "its last query_len cache positions, so 1 <= query_len <= seq_len"
            )
    return query_lens


def table_too_short(b: int, seq_len: int, block_size: int, width: int) -> str:
    """The message for a block table with fewer than $\\lceil L_b / B \\rceil$ entries."""
    needed = -(-seq_len // block_size)
    return (
        f"sequence {b} has seq_len {seq_len}, which needs ceil({seq_len}/{block_size}) = "
        f"{needed} blocks, but its block table has only {width} entries"
    )


def check_partition_size(partition_size: int, block_size: int) -> None:
    """§4's partitions (the v2 kernel) hold whole blocks: ``partition_size`` is a positive
    multiple of $B$."""
    whole = isinstance(partition_size, numbers.Integral) and not isinstance(partition_size, bool)
    if not whole or partition_size <= 0 or partition_size % block_size:
        raise ValueError(
            f"partition_size must be a positive multiple of block_size={block_size} so each "
            f"partition holds whole blocks, got {partition_size!r}"
        )


def check_write(
    key_pool: Tensor, value_pool: Tensor, key: Tensor, value: Tensor, slot_mapping: Tensor
) -> Tensor:
    """The checks every cache write makes (``kv_cache.write_kv``, ``reshape_and_cache`` in
    ``cuda_kernels``) before touching the pools: matching shapes and dtypes, slots inside the
    pool, no slot written twice. Returns the slots to write (the non-negative ones), int64."""
    named = {"key_pool": key_pool, "value_pool": value_pool, "key": key, "value": value}
    check_devices(named | {"slot_mapping": slot_mapping}, "key_pool")
    num_blocks, num_kv_heads, block_size, head_dim = key_pool.shape
    if value_pool.shape != key_pool.shape:
        raise ValueError(
            f"key_pool {tuple(key_pool.shape)} and value_pool {tuple(value_pool.shape)} must "
            "have the same shape [num_blocks, num_kv_heads, B, head_dim]"
        )
    expected = (slot_mapping.shape[0], num_kv_heads, head_dim)
    for name, tensor in (("key", key), ("value", value)):
        if tuple(tensor.shape) != expected:
            raise ValueError(
                f"{name} must be [N, num_kv_heads, head_dim] = {expected} to match slot_mapping "
                f"and the pools, got {tuple(tensor.shape)}"
            )
        if tensor.dtype != key_pool.dtype:
            raise ValueError(
                f"{name} has dtype {tensor.dtype} but the pools hold {key_pool.dtype}: "
                f"cast it with .to({key_pool.dtype}) first"
            )
    kept = [slot for slot in slot_mapping.tolist() if slot >= 0]  # one step's N slots
    num_slots = num_blocks * block_size
    if kept and max(kept) >= num_slots:
        raise ValueError(
            f"slot {max(kept)} is past the end of the pool: {num_blocks} blocks of "
            f"B={block_size} hold slots 0..{num_slots - 1}"
        )
    if len(set(kept)) != len(kept):
        raise ValueError(
            f"slot_mapping {kept} writes two tokens into the same slot; "
            "each token needs its own slot"
        )
    if len(kept) == slot_mapping.shape[0]:  # nothing skipped: the mapping itself
        return slot_mapping.long()
    return slot_mapping[slot_mapping >= 0].long()  # [n] with n <= N


def is_block_pair(pair: object) -> bool:
    """Whether ``pair`` is ``(src, dst)``: a sequence of two integers, neither a bool."""
    if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
        return False
    return all(isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in pair)


def check_block_pairs(
    pairs: Sequence[tuple[int, int]],
    src_size: int,
    dst_size: int,
    pools: tuple[str, str] = ("source-pool", "destination-pool"),
    copy_on_write: bool = False,
) -> None:
    """The checks every block copy makes (``KVCache``, ``copy_blocks`` and ``swap_blocks`` in
    ``cuda_kernels``) before moving anything: each ``(src, dst)`` names a block of its pool
    (``pools`` names them in messages), no destination repeats, and for copy-on-write no block
    is both a source and a destination. Raises ``ValueError`` naming the first bad pair
    (``TypeError`` for one that is not two block ids)."""
    for pair in pairs:
        if not is_block_pair(pair):
            raise TypeError(
                f"each block pair must be (src, dst), two integer block ids, got {pair!r:.60} "
                f"in {type(pairs).__name__} {pairs!r:.80}"
            )
    for src, dst in pairs:
        for role, block, pool, size in (
            ("source", src, pools[0], src_size),
            ("destination", dst, pools[1], dst_size),
        ):
            if not 0 <= block < size:
                valid = f"blocks 0..{size - 1}" if size else "no blocks (num_cpu_blocks=0)"
                raise ValueError(
                    f"{role} block {block} in pair ({src}, {dst}) is not a {pool} block: it "
                    f"is outside its pool of {size} blocks ({valid})"
                )
    destinations = [dst for _, dst in pairs]
    if len(set(destinations)) != len(destinations):
        raise ValueError(
            f"destination blocks {destinations} repeat; each destination must appear once"
        )
    if copy_on_write and {src for src, _ in pairs} & set(destinations):
        raise ValueError(
            f"copy_blocks pairs {list(pairs)} use a block as both source and destination; "
            "a copy-on-write destination is a freshly allocated block"
        )


def check_copy_pairs(
    key_pools: Sequence[Tensor], value_pools: Sequence[Tensor], pairs: Sequence[tuple[int, int]]
) -> bool:
    """The checks of a copy-on-write kernel launch (``copy_blocks``): one key and one value
    pool per layer, all of one shape, and ``pairs`` valid for ``check_block_pairs``. Returns
    whether there is anything to copy."""
    if len(key_pools) != len(value_pools):
        raise ValueError(
            f"got {len(key_pools)} key pools and {len(value_pools)} value pools: pass one of "
            "each per layer"
        )
    if not pairs or not key_pools:
        return False
    num_blocks = key_pools[0].shape[0]
    for pool in (*key_pools, *value_pools):
        if pool.shape != key_pools[0].shape:
            raise ValueError(
                f"every pool must have the same shape, got {tuple(pool.shape)} and "
                f"{tuple(key_pools[0].shape)}"
            )
    check_block_pairs(pairs, num_blocks, num_blocks, ("device", "device"), copy_on_write=True)
    return True


def check_swap_pairs(
    src_pool: Tensor, dst_pool: Tensor, mapping: Sequence[tuple[int, int]]
) -> None:
    """The checks of a swap (``swap_blocks``): both pools hold blocks of one shape and dtype,
    and ``mapping`` is valid for ``check_block_pairs``."""
    if src_pool.shape[1:] != dst_pool.shape[1:] or src_pool.dtype != dst_pool.dtype:
        raise ValueError(
            f"src_pool {tuple(src_pool.shape)} {src_pool.dtype} and dst_pool "
            f"{tuple(dst_pool.shape)} {dst_pool.dtype} must hold blocks of the same shape "
            "[num_kv_heads, B, head_dim] and dtype"
        )
    check_block_pairs(mapping, src_pool.shape[0], dst_pool.shape[0])
