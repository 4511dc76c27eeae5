"""Reference paged attention in PyTorch: the source text's §4, and the oracle for every kernel.

Token $t$ of sequence $r$ lives in physical block $\\mathcal{T}_r[\\lfloor t/B \\rfloor]$ at
offset $t \\bmod B$ of the pools ``[num_blocks, num_kv_heads, B, head_dim]``. Each function here
reads keys and values through the block table and returns exactly what contiguous attention over
the sequence's first ``seq_len`` tokens returns:

- ``paged_attention_decode_loop``: §4's pseudo-code line by line (online softmax), to read;
- ``paged_attention_decode``: the vectorized version the model uses;
- ``paged_attention_decode_partitions``, ``combine_partitions`` and
  ``paged_attention_decode_partitioned``: §4's cross-partition reduction, the reference for
  the v2 kernel's two stages;
- ``paged_attention_prefill``: several queries per sequence with a causal mask;
- ``paged_attention``: the one entry point the model calls, with a ``PagedBatch``.

Grouped-query attention: query head $h$ reads KV head $h \\div (N_Q / N_{KV})$, the mapping of
Hugging Face's ``repeat_kv`` (``repeat_interleave`` on the head axis).

Guarantee shared by all paths: no key or value at a position $\\ge$ ``seq_len``, and no block
named by an unused block-table entry, influences the result, even when it holds NaN or inf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from minipaged.kv_cache import write_kv

SUPPORTED_BACKENDS = ("torch", "numba")
"""``"torch"``: this module. ``"numba"``: the kernels of ``cuda_kernels`` for the cache write and
decode attention (on a GPU, or on the CPU under Numba's CUDA simulator); prefill has no kernel
and runs on this module's reference on either backend."""

NO_BLOCK = -1
"""Pads block tables past a sequence's last block. Never read: attention masks those positions."""


def paged_attention_decode_loop(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
) -> Tensor:
    """§4's decode pseudo-code, line by line: one query per sequence, one logical block at a
    time, with the online softmax's running max $m$, running sum $l$ and accumulator.

    Invariant after block $j$: ``acc / l_prev`` is softmax attention over tokens
    $0 \\ldots \\min((j+1)B, L) - 1$. Returns ``[batch, num_heads, head_dim]``.
    """
    group = check_attention_inputs(query, key_pool, value_pool, block_tables, seq_lens, block_size)
    batch_size, num_heads, head_dim = query.shape
    output = torch.zeros_like(query)

    for b in range(batch_size):
        seq_len = int(seq_lens[b])
        num_blocks = (seq_len + block_size - 1) // block_size
        q = query[b]  # [num_heads, head_dim]

        # Accumulators for online softmax
        m_prev = torch.full((num_heads, 1), -float("inf"), dtype=query.dtype, device=query.device)
        l_prev = torch.zeros((num_heads, 1), dtype=query.dtype, device=query.device)
        acc = torch.zeros((num_heads, head_dim), dtype=query.dtype, device=query.device)

        for blk_idx in range(num_blocks):
            phys_block_id = int(block_tables[b, blk_idx])
            tokens_in_block = min(block_size, seq_len - blk_idx * block_size)

            # Gather physical block KV tensors: [num_kv_heads, tokens, head_dim]
            k_block = key_pool[phys_block_id, :, :tokens_in_block, :]
            v_block = value_pool[phys_block_id, :, :tokens_in_block, :]

            # The source text's einsum "hd,ktd->hkt" pairs every query head with every KV head,
            # which is only right when num_kv_heads == 1. Query head h must read KV head
            # h // group, so give each query head its own copy of its KV head first.
            k_block = k_block.repeat_interleave(group, dim=0)  # [num_heads, tokens, head_dim]
            v_block = v_block.repeat_interleave(group, dim=0)  # [num_heads, tokens, head_dim]

            # Compute logits: S = (q * K^T) * scale
            scores = torch.einsum("hd,htd->ht", q, k_block) * scale  # [num_heads, tokens]

            # Online softmax reduction across blocks
            m_curr = torch.maximum(m_prev, torch.max(scores, dim=-1, keepdim=True)[0])
            p_prev = torch.exp(m_prev - m_curr)  # rescales what was summed under the old max
            p_curr = torch.exp(scores - m_curr)

            l_curr = p_prev * l_prev + torch.sum(p_curr, dim=-1, keepdim=True)
            acc = acc * p_prev + torch.einsum("ht,htd->hd", p_curr, v_block)

            m_prev = m_curr
            l_prev = l_curr

        output[b] = acc / l_prev

    return output


def paged_attention_decode(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
) -> Tensor:
    """Vectorized decode: gather every sequence's blocks through its table, mask positions
    $\\ge$ ``seq_len``, one softmax. Same arguments and result as
    ``paged_attention_decode_loop``; returns ``[batch, num_heads, head_dim]``."""
    group = check_attention_inputs(query, key_pool, value_pool, block_tables, seq_lens, block_size)
    keys, values, valid = _gather_kv(key_pool, value_pool, block_tables, seq_lens, block_size)
    scores = _masked_scores(query, keys, valid, group, scale)  # [batch, num_heads, max_len]
    probs = torch.softmax(scores, dim=-1)
    values = values.repeat_interleave(group, dim=1)  # [batch, num_heads, max_len, head_dim]
    return torch.einsum("bht,bhtd->bhd", probs, values)


def combine_partitions(m_k: Tensor, l_k: Tensor, o_k: Tensor) -> Tensor:
    """§4's cross-partition reduction: $O = \\sum_k \\frac{l_k e^{m_k - m}}{l} O_k$ with
    $m = \\max_k m_k$ and $l = \\sum_k l_k e^{m_k - m}$.

    ``m_k`` and ``l_k`` are ``[..., P]`` (partition $k$'s max score and sum of
    $e^{s - m_k}$); ``o_k`` is ``[..., P, head_dim]`` (its normalized output). A partition with
    $l_k = 0$ holds no token and contributes nothing, whatever its $m_k$ and $O_k$ hold. Each
    row needs at least one non-empty partition. Returns ``[..., head_dim]``.
    """
    non_empty = l_k > 0  # [..., P]
    if not bool(non_empty.any(dim=-1).all()):
        raise ValueError(
            "combine_partitions needs at least one partition with l_k > 0 in every row: "
            "attention over zero tokens is undefined"
        )
    m = torch.where(non_empty, m_k, -float("inf")).amax(dim=-1, keepdim=True)  # [..., 1]
    weights = torch.where(non_empty, l_k * torch.exp(m_k - m), 0.0)  # l_k e^{m_k - m}
    l = weights.sum(dim=-1, keepdim=True)  # noqa: E741  (the source text's l)
    o_k = torch.where(non_empty[..., None], o_k, 0.0)
    return (weights[..., None] * o_k).sum(dim=-2) / l


def paged_attention_decode_partitions(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
    partition_size: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """The first stage of vLLM's v2 decode kernel: split each sequence's tokens into
    $P = \\lceil \\max_b L_b / \\text{partition\\_size} \\rceil$ partitions of whole blocks and
    compute each one's $(m_k, l_k, O_k)$ on its own.

    Returns ``m_k`` and ``l_k`` ``[batch, num_heads, P]`` and ``o_k``
    ``[batch, num_heads, P, head_dim]`` (vLLM's ``max_logits``, ``exp_sums``, ``tmp_out``).
    A partition past a sequence's end holds no token and gets exactly $m_k = -\\infty$,
    $l_k = 0$, $O_k = 0$: never NaN."""
    group = check_attention_inputs(query, key_pool, value_pool, block_tables, seq_lens, block_size)
    if not isinstance(partition_size, int) or partition_size <= 0 or partition_size % block_size:
        raise ValueError(
            f"partition_size must be a positive multiple of block_size={block_size} so each "
            f"partition holds whole blocks, got {partition_size!r}"
        )
    keys, values, valid = _gather_kv(key_pool, value_pool, block_tables, seq_lens, block_size)
    batch_size, num_heads, head_dim = query.shape
    num_partitions = -(-keys.shape[2] // partition_size)
    pad = num_partitions * partition_size - keys.shape[2]
    keys = F.pad(keys, (0, 0, 0, pad))  # [batch, num_kv_heads, P * partition_size, head_dim]
    values = F.pad(values, (0, 0, 0, pad)).repeat_interleave(group, dim=1)
    valid = F.pad(valid, (0, pad), value=False)  # [batch, P * partition_size]

    by_partition = (batch_size, num_heads, num_partitions, partition_size)
    scores = _masked_scores(query, keys, valid, group, scale).view(by_partition)
    values = values.view(*by_partition, head_dim)
    m_k = scores.amax(dim=-1)  # [batch, num_heads, P]; -inf for an empty partition
    # Shift an empty partition's scores by 0, not by m_k = -inf: -inf - (-inf) would be NaN.
    shift = torch.where(torch.isfinite(m_k), m_k, 0.0)
    p = torch.exp(scores - shift[..., None])  # [batch, num_heads, P, partition_size]
    l_k = p.sum(dim=-1)  # [batch, num_heads, P]
    acc = torch.einsum("bhps,bhpsd->bhpd", p, values)
    o_k = torch.where(l_k[..., None] > 0, acc / l_k[..., None], 0.0)  # [batch, heads, P, dim]
    return m_k, l_k, o_k


def paged_attention_decode_partitioned(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
    partition_size: int,
) -> Tensor:
    """Decode as vLLM's v2 kernel does it: ``paged_attention_decode_partitions``, then
    ``combine_partitions``. Same result as ``paged_attention_decode``."""
    args = (query, key_pool, value_pool, block_tables, seq_lens, scale, block_size)
    return combine_partitions(*paged_attention_decode_partitions(*args, partition_size))


def paged_attention_prefill(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    query_lens: Tensor,
    scale: float,
    block_size: int,
) -> Tensor:
    """Attention for several new tokens per sequence (a prompt, a recomputation after
    preemption, or the suffix after a prefix-cache hit).

    ``query`` is ``[N, num_heads, head_dim]``: the sequences' queries concatenated in batch
    order, $N = \\sum_b$ ``query_lens[b]``. Sequence $b$'s queries are its last ``query_lens[b]``
    positions out of ``seq_lens[b]`` tokens already in the cache, and the query at position $t$
    attends to cache positions $0 \\ldots t$ (causal). Returns ``[N, num_heads, head_dim]``.
    """
    paged = (key_pool, value_pool, block_tables, seq_lens)
    group = check_attention_inputs(query, *paged, block_size, query_lens)
    keys, values, _ = _gather_kv(*paged, block_size)
    output = torch.empty_like(query)
    start = 0
    lens = zip(seq_lens.tolist(), query_lens.tolist(), strict=True)
    for b, (seq_len, query_len) in enumerate(lens):
        rows = slice(start, start + query_len)
        q = query[rows].transpose(0, 1)  # [num_heads, query_len, head_dim]
        k = keys[b, :, :seq_len].repeat_interleave(group, dim=0)  # [num_heads, seq_len, head_dim]
        v = values[b, :, :seq_len].repeat_interleave(group, dim=0)
        # Query i sits at position t = seq_len - query_len + i and sees cache positions 0..t.
        positions = torch.arange(seq_len - query_len, seq_len, device=query.device)
        sees = torch.arange(seq_len, device=query.device)[None, :] <= positions[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=sees, scale=scale)
        output[rows] = out.transpose(0, 1)
        start += query_len
    return output


@dataclass(frozen=True, slots=True, eq=False)  # eq on tensors would be ambiguous
class PagedBatch:
    """One engine step's attention metadata, shared by every layer.

    - ``slot_mapping`` ``[N]`` int64: where token $i$'s key and value are written,
      slot $= \\mathcal{T}_r[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$; negative = skip;
    - ``block_tables`` ``[batch, max_blocks]`` int32: row $r$ is $\\mathcal{T}_r$, padded;
    - ``seq_lens`` ``[batch]`` int32: tokens in the cache per sequence after this step's writes;
    - ``query_lens`` ``[batch]`` int32: tokens computed this step (1 when decoding), so
      $N = \\sum_b$ ``query_lens[b]``;
    - ``block_size``: $B$; ``backend``: one of ``SUPPORTED_BACKENDS``.
    """

    slot_mapping: Tensor
    block_tables: Tensor
    seq_lens: Tensor
    query_lens: Tensor
    block_size: int
    backend: str = "torch"

    def __post_init__(self) -> None:
        if self.backend not in SUPPORTED_BACKENDS:
            raise ValueError(
                f"unknown attention backend {self.backend!r}; supported: {list(SUPPORTED_BACKENDS)}"
            )
        if not isinstance(self.block_size, int) or self.block_size <= 0:
            raise ValueError(f"block_size must be a positive integer, got {self.block_size!r}")
        num_queries = int(self.query_lens.sum())
        if self.slot_mapping.shape != (num_queries,):
            raise ValueError(
                f"slot_mapping must have one slot per computed token: query_lens add up to "
                f"{num_queries}, got slot_mapping of shape {tuple(self.slot_mapping.shape)}"
            )

    @classmethod
    def from_lists(
        cls,
        block_tables: Sequence[Sequence[int]],
        seq_lens: Sequence[int],
        block_size: int,
        query_lens: Sequence[int] | None = None,
        slot_mapping: Sequence[int] | None = None,
        backend: str = "torch",
        device: torch.device | str = "cpu",
    ) -> PagedBatch:
        """Build a batch from Python lists: tables of varying length are padded with
        ``NO_BLOCK``; ``query_lens`` defaults to all 1 (a decode step); ``slot_mapping``
        defaults to the slots of each sequence's last ``query_lens[b]`` positions $t$,
        $\\mathcal{T}_b[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$."""
        if query_lens is None:
            query_lens = [1] * len(seq_lens)
        _check_query_lens(list(seq_lens), list(query_lens))
        if slot_mapping is None:
            slot_mapping = []
            lens = zip(block_tables, seq_lens, query_lens, strict=True)
            for b, (table, seq_len, query_len) in enumerate(lens):
                if len(table) * block_size < seq_len:
                    raise ValueError(_table_too_short(b, seq_len, block_size, len(table)))
                for t in range(seq_len - query_len, seq_len):
                    slot_mapping.append(table[t // block_size] * block_size + t % block_size)
        width = max((len(table) for table in block_tables), default=0)
        padded = [list(table) + [NO_BLOCK] * (width - len(table)) for table in block_tables]
        tables = torch.tensor(padded, dtype=torch.int32, device=device)
        return cls(
            slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
            block_tables=tables.reshape(len(padded), width),  # [batch, max_blocks]
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            query_lens=torch.tensor(query_lens, dtype=torch.int32, device=device),
            block_size=block_size,
            backend=backend,
        )


def paged_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    batch: PagedBatch,
    scale: float,
) -> Tensor:
    """One layer's attention for one engine step: write this step's keys and values
    (``[N, num_kv_heads, head_dim]``) at ``batch.slot_mapping``, then attend each query
    (``[N, num_heads, head_dim]``) to its sequence's cache. Decode when every query_len is 1,
    prefill otherwise. Returns ``[N, num_heads, head_dim]``."""
    paged = (key_pool, value_pool, batch.block_tables, batch.seq_lens)
    decoding = bool((batch.query_lens == 1).all())
    if batch.backend == "numba":
        import cuda_kernels  # numba loads only when this backend is asked for

        cuda_kernels.reshape_and_cache(key, value, key_pool, value_pool, batch.slot_mapping)
        if decoding:
            return cuda_kernels.paged_attention_decode(query, *paged, scale, batch.block_size)
    else:
        write_kv(key_pool, value_pool, key, value, batch.slot_mapping)
        if decoding:
            return paged_attention_decode(query, *paged, scale, batch.block_size)
    return paged_attention_prefill(query, *paged, batch.query_lens, scale, batch.block_size)


def _gather_kv(
    key_pool: Tensor, value_pool: Tensor, block_tables: Tensor, seq_lens: Tensor, block_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Each sequence's keys and values in token order, ``[batch, num_kv_heads, max_len,
    head_dim]`` with ``max_len`` the longest sequence rounded up to whole blocks, and ``valid``
    ``[batch, max_len]`` = position < seq_len. Invalid positions are set to 0, so NaN or inf
    in unused slots cannot reach a result (multiplying by a zero weight would not help:
    NaN * 0 = NaN)."""
    batch_size = block_tables.shape[0]
    num_blocks, num_kv_heads, _, head_dim = key_pool.shape
    max_blocks = -(-int(seq_lens.max()) // block_size)
    # Entries past a sequence's last block may hold NO_BLOCK or garbage: clamp them to some
    # real block so indexing works; the positions they supply are masked out below.
    table = block_tables[:, :max_blocks].long().clamp(0, num_blocks - 1)  # [batch, max_blocks]
    max_len = max_blocks * block_size
    positions = torch.arange(max_len, device=seq_lens.device)
    valid = positions[None, :] < seq_lens[:, None]  # [batch, max_len]

    def gather(pool: Tensor) -> Tensor:
        blocks = pool[table]  # [batch, max_blocks, num_kv_heads, B, head_dim]
        tokens = blocks.permute(0, 2, 1, 3, 4).reshape(batch_size, num_kv_heads, max_len, head_dim)
        return torch.where(valid[:, None, :, None], tokens, 0.0)

    return gather(key_pool), gather(value_pool), valid


def _masked_scores(query: Tensor, keys: Tensor, valid: Tensor, group: int, scale: float) -> Tensor:
    """Scores ``[batch, num_heads, max_len]`` of ``query [batch, num_heads, head_dim]`` against
    ``keys [batch, num_kv_heads, max_len, head_dim]``, with $-\\infty$ where not ``valid``."""
    keys = keys.repeat_interleave(group, dim=1)  # [batch, num_heads, max_len, head_dim]
    scores = torch.einsum("bhd,bhtd->bht", query, keys) * scale
    return scores.masked_fill(~valid[:, None, :], -float("inf"))


def check_attention_inputs(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    block_size: int,
    query_lens: Tensor | None = None,
) -> int:
    """Check query, pools, tables and lengths against each other (``query_lens`` None: one
    query per sequence); return the GQA group size $N_Q / N_{KV}$."""
    lens = seq_lens.tolist()
    queries = [1] * len(lens) if query_lens is None else query_lens.tolist()
    if query.dim() != 3 or query.shape[0] != sum(_check_query_lens(lens, queries)):
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
    for b, seq_len in enumerate(lens):
        if block_tables.shape[1] * block_size < seq_len:
            raise ValueError(_table_too_short(b, seq_len, block_size, block_tables.shape[1]))
        used = block_tables[b, : -(-seq_len // block_size)]  # T_b[0 .. ceil(L_b / B) - 1]
        if bool(((used < 0) | (used >= num_blocks)).any()):
            raise ValueError(
                f"sequence {b}'s block table {used.tolist()} names a block outside the pool "
                f"of {num_blocks} blocks (ids 0..{num_blocks - 1})"
            )
    return num_heads // num_kv_heads


def _check_query_lens(seq_lens: list[int], query_lens: list[int]) -> list[int]:
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


def _table_too_short(b: int, seq_len: int, block_size: int, width: int) -> str:
    needed = -(-seq_len // block_size)
    return (
        f"sequence {b} has seq_len {seq_len}, which needs ceil({seq_len}/{block_size}) = "
        f"{needed} blocks, but its block table has only {width} entries"
    )
