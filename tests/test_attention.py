"""Reference paged attention (source text §4) against contiguous scaled_dot_product_attention.

Every case builds each sequence's keys and values contiguously first, then scatters them into a
pool through a block table, leaving every other slot NaN. The oracle attends over the contiguous
tensors, so it shares no gather code with the paths under test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged.attention import (
    NO_BLOCK,
    combine_partitions,
    paged_attention_decode,
    paged_attention_decode_loop,
    paged_attention_decode_partitioned,
    paged_attention_decode_partitions,
    paged_attention_prefill,
)
from minipaged.backend import PagedBatch, paged_attention
from minipaged.kv_cache import write_kv

POISON = float("nan")


@dataclass(repr=False)
class Case:
    """Sequences stored in a paged pool, with their contiguous originals for the oracle."""

    keys: list[torch.Tensor]  # per sequence [num_kv_heads, seq_len, head_dim]
    values: list[torch.Tensor]
    key_pool: torch.Tensor  # [num_blocks, num_kv_heads, B, head_dim], NaN where unused
    value_pool: torch.Tensor
    block_tables: torch.Tensor  # [batch, max_blocks] int32, unused entries hold garbage ids
    seq_lens: torch.Tensor  # [batch] int32
    block_size: int

    def __repr__(self) -> str:  # the tensors would bury a failing example's shape
        _, num_kv_heads, _, head_dim = self.key_pool.shape
        return (
            f"Case(seq_lens={self.seq_lens.tolist()}, block_tables={self.block_tables.tolist()}, "
            f"block_size={self.block_size}, num_kv_heads={num_kv_heads}, head_dim={head_dim}, "
            f"dtype={self.key_pool.dtype})"
        )


def make_case(
    gen: torch.Generator,
    seq_lens: list[int],
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype = torch.float64,
    shared_blocks: list[int] | None = None,
    pad_ids: tuple[int, ...] = (NO_BLOCK,),
    spare_blocks: int = 3,
) -> Case:
    """``shared_blocks[b]`` full blocks at the start of sequence b alias sequence 0's first
    blocks (prefix sharing), so their tokens are sequence 0's tokens."""
    shared_blocks = shared_blocks or [0] * len(seq_lens)
    needed = [-(-n // block_size) for n in seq_lens]
    own = [need - shared for need, shared in zip(needed, shared_blocks, strict=True)]
    num_blocks = sum(own) + spare_blocks
    free = torch.randperm(num_blocks, generator=gen).tolist()  # a scattered physical layout
    tables, keys, values = [], [], []
    for seq_len, shared, num_own in zip(seq_lens, shared_blocks, own, strict=True):
        prefix = tables[0][:shared] if shared else []
        tables.append(prefix + [free.pop() for _ in range(num_own)])
        k = torch.randn(num_kv_heads, seq_len, head_dim, generator=gen, dtype=dtype)
        v = torch.randn(num_kv_heads, seq_len, head_dim, generator=gen, dtype=dtype)
        if shared:
            k[:, : shared * block_size] = keys[0][:, : shared * block_size]
            v[:, : shared * block_size] = values[0][:, : shared * block_size]
        keys.append(k)
        values.append(v)
    pool_shape = (num_blocks, num_kv_heads, block_size, head_dim)
    key_pool = torch.full(pool_shape, POISON, dtype=dtype)
    value_pool = torch.full(pool_shape, POISON, dtype=dtype)
    for table, k, v in zip(tables, keys, values, strict=True):
        for j, block in enumerate(table):  # tokens jB .. jB + B - 1 -> block T[j], offsets 0..
            tokens = slice(j * block_size, (j + 1) * block_size)
            n = k[:, tokens].shape[1]
            key_pool[block, :, :n] = k[:, tokens]
            value_pool[block, :, :n] = v[:, tokens]
    width = max(needed) + 2
    padded = [
        table + [pad_ids[i % len(pad_ids)] for i in range(width - len(table))] for table in tables
    ]
    return Case(
        keys=keys,
        values=values,
        key_pool=key_pool,
        value_pool=value_pool,
        block_tables=torch.tensor(padded, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_size=block_size,
    )


def causal_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal SDPA where ``q [H, n, D]`` are the last n of ``k, v [KVH, L, D]``'s positions."""
    n, length = q.shape[1], k.shape[1]
    mask = torch.ones(n, length, dtype=torch.bool).tril(diagonal=length - n)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def decode_oracle(query: torch.Tensor, case: Case, scale: float) -> torch.Tensor:
    rows = [
        causal_oracle(query[b][:, None], k, v, scale)[:, 0]
        for b, (k, v) in enumerate(zip(case.keys, case.values, strict=True))
    ]
    return torch.stack(rows)  # [batch, num_heads, head_dim]


def run_decode(path: str, query: torch.Tensor, case: Case, scale: float, partition_size: int):
    args = (query, case.key_pool, case.value_pool, case.block_tables, case.seq_lens, scale)
    if path == "loop":
        return paged_attention_decode_loop(*args, case.block_size)
    if path == "vectorized":
        return paged_attention_decode(*args, case.block_size)
    return paged_attention_decode_partitioned(*args, case.block_size, partition_size)


DECODE_PATHS = ["loop", "vectorized", "partitioned"]


@st.composite
def decode_cases(draw):
    block_size = draw(st.sampled_from([8, 16, 32]))
    num_kv_heads = draw(st.sampled_from([1, 2, 4]))
    num_heads = num_kv_heads * draw(st.sampled_from([1, 2, 3]))
    head_dim = draw(st.sampled_from([8, 16, 32]))
    seq_lens = draw(st.lists(st.integers(1, 100), min_size=1, max_size=4))
    shared = [0] + [draw(st.integers(0, min(seq_lens[0], n) // block_size)) for n in seq_lens[1:]]
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    partition_size = block_size * draw(st.integers(1, 4))
    pad_ids = draw(st.sampled_from([(NO_BLOCK,), (0,), (-7, 10**6)]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    case = make_case(gen, seq_lens, num_kv_heads, head_dim, block_size, dtype, shared, pad_ids)
    query = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen, dtype=dtype)
    return case, query, partition_size


# No deadline: the first example pays torch's one-time kernel warm-up (about 0.4 s), which a
# timing check would report as a failure. Speed is the benchmarks' job, not the tests'.
@pytest.mark.parametrize("path", DECODE_PATHS)
@settings(deadline=None)
@given(decode_cases())
def test_decode_equals_contiguous_sdpa(path, drawn):
    case, query, partition_size = drawn
    scale = 1 / math.sqrt(query.shape[-1])
    expected = decode_oracle(query, case, scale)
    actual = run_decode(path, query, case, scale, partition_size)
    atol = 1e-5 if query.dtype == torch.float32 else 1e-10
    torch.testing.assert_close(actual, expected, atol=atol, rtol=atol)


@pytest.mark.parametrize("path", DECODE_PATHS)
@pytest.mark.parametrize("poison", [float("nan"), float("inf"), -float("inf")])
def test_unused_slots_and_blocks_never_reach_the_result(path, poison):
    gen = torch.Generator().manual_seed(0)
    case = make_case(gen, [5, 19], 2, 8, 8, pad_ids=(NO_BLOCK, 0, 999), spare_blocks=4)
    query = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    for pool in (case.key_pool, case.value_pool):  # every slot no sequence owns
        pool.nan_to_num_(nan=poison)
    out = run_decode(path, query, case, 0.3, 16)
    torch.testing.assert_close(out, decode_oracle(query, case, 0.3))


@pytest.mark.parametrize("path", DECODE_PATHS)
def test_query_head_h_reads_kv_head_h_div_group(path):
    # Each KV head's values are its index, so each output head shows which KV head it read.
    gen = torch.Generator().manual_seed(1)
    case = make_case(gen, [11], num_kv_heads=2, head_dim=8, block_size=8)
    for kv_head in range(2):
        case.value_pool[:, kv_head] = kv_head
    query = torch.randn(1, 6, 8, generator=gen, dtype=torch.float64)
    out = run_decode(path, query, case, 0.3, 8)  # [1, 6, 8]
    expected = torch.tensor([0, 0, 0, 1, 1, 1], dtype=torch.float64)[:, None].expand(6, 8)
    torch.testing.assert_close(out[0], expected)


def test_loop_matches_source_text_pseudocode_for_one_kv_head():
    # With one KV head the source text's einsum "hd,ktd->hkt" is right; run it verbatim.
    gen = torch.Generator().manual_seed(2)
    case = make_case(gen, [21], num_kv_heads=1, head_dim=8, block_size=8)
    q = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    m, l_sum, acc = torch.full((4, 1), -math.inf, dtype=q.dtype), 0, 0
    for blk in range(3):
        n = min(8, 21 - blk * 8)
        k = case.key_pool[int(case.block_tables[0, blk]), :, :n]
        v = case.value_pool[int(case.block_tables[0, blk]), :, :n]
        scores = torch.einsum("hd,ktd->hkt", q, k)[:, 0] * 0.5
        m_new = torch.maximum(m, scores.max(-1, keepdim=True)[0])
        p = torch.exp(scores - m_new)
        l_sum = torch.exp(m - m_new) * l_sum + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + torch.einsum("ht,td->hd", p, v[0])
        m = m_new
    out = paged_attention_decode_loop(
        q[None], case.key_pool, case.value_pool, case.block_tables, case.seq_lens, 0.5, 8
    )
    torch.testing.assert_close(out[0], acc / l_sum)


def test_combine_partitions_matches_one_shot_softmax():
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(3, 24, generator=gen, dtype=torch.float64)  # [heads, tokens]
    values = torch.randn(24, 5, generator=gen, dtype=torch.float64)  # [tokens, head_dim]
    parts = scores.view(3, 4, 6)  # 4 partitions of 6 tokens
    m_k = parts.amax(-1)  # [3, 4]
    p = torch.exp(parts - m_k[..., None])
    l_k = p.sum(-1)
    o_k = torch.einsum("hps,psd->hpd", p, values.view(4, 6, 5)) / l_k[..., None]
    expected = torch.softmax(scores, -1) @ values
    torch.testing.assert_close(combine_partitions(m_k, l_k, o_k), expected)


def test_combine_partitions_ignores_an_empty_partition():
    gen = torch.Generator().manual_seed(4)
    m_k, l_k = torch.randn(2, 3, generator=gen), torch.rand(2, 3, generator=gen) + 0.5
    o_k = torch.randn(2, 3, 4, generator=gen)
    expected = combine_partitions(m_k, l_k, o_k)
    # An empty partition: m = -inf, l = 0, and an output that was never written.
    m_k = torch.cat([m_k, torch.full((2, 1), -math.inf)], dim=-1)
    l_k = torch.cat([l_k, torch.zeros(2, 1)], dim=-1)
    o_k = torch.cat([o_k, torch.full((2, 1, 4), math.nan)], dim=-2)
    torch.testing.assert_close(combine_partitions(m_k, l_k, o_k), expected)


def test_combine_partitions_rejects_a_row_with_no_tokens():
    with pytest.raises(ValueError, match="at least one partition"):
        combine_partitions(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2, 3))


def test_partitions_past_a_short_sequence_are_exactly_empty():
    gen = torch.Generator().manual_seed(5)
    case = make_case(gen, [3, 70], num_kv_heads=1, head_dim=8, block_size=8)
    query = torch.randn(2, 2, 8, generator=gen, dtype=torch.float64)
    m_k, l_k, o_k = paged_attention_decode_partitions(
        query, case.key_pool, case.value_pool, case.block_tables, case.seq_lens, 0.3, 8, 16
    )
    assert m_k.shape == (2, 2, 5)  # ceil(70 / 16) partitions; sequence 0 fills only the first
    assert m_k[0, :, 1:].eq(-math.inf).all()
    assert l_k[0, :, 1:].eq(0).all()
    assert o_k[0, :, 1:].eq(0).all()
    assert torch.isfinite(m_k[1]).all() and l_k[1].gt(0).all() and torch.isfinite(o_k).all()


def test_partitioned_decode_rejects_partition_size_not_a_multiple_of_block_size():
    case = make_case(torch.Generator().manual_seed(6), [9], 1, 8, 8)
    with pytest.raises(ValueError, match="multiple of block_size=8"):
        run_decode("partitioned", torch.zeros(1, 1, 8, dtype=torch.float64), case, 1.0, 12)


def prefill_oracle(query, case, query_lens, scale):
    rows, start = [], 0
    for k, v, n in zip(case.keys, case.values, query_lens, strict=True):
        rows.append(causal_oracle(query[start : start + n].transpose(0, 1), k, v, scale))
        start += n
    return torch.cat([r.transpose(0, 1) for r in rows])  # [N, num_heads, head_dim]


def run_prefill(query, case, query_lens, scale):
    return paged_attention_prefill(
        query,
        case.key_pool,
        case.value_pool,
        case.block_tables,
        case.seq_lens,
        torch.tensor(query_lens, dtype=torch.int32),
        scale,
        case.block_size,
    )


def test_prefill_of_a_fresh_prompt_equals_causal_sdpa():
    gen = torch.Generator().manual_seed(7)
    case = make_case(gen, [37], num_kv_heads=2, head_dim=16, block_size=16)
    query = torch.randn(37, 4, 16, generator=gen, dtype=torch.float64)
    expected = causal_oracle(query.transpose(0, 1), case.keys[0], case.values[0], 0.25)
    torch.testing.assert_close(run_prefill(query, case, [37], 0.25), expected.transpose(0, 1))


def test_prefill_after_a_cached_prefix_equals_the_last_rows_of_full_causal_sdpa():
    gen = torch.Generator().manual_seed(8)
    case = make_case(gen, [45], num_kv_heads=1, head_dim=8, block_size=8)
    full_query = torch.randn(45, 2, 8, generator=gen, dtype=torch.float64)
    full = causal_oracle(full_query.transpose(0, 1), case.keys[0], case.values[0], 0.3)
    suffix = run_prefill(full_query[-13:], case, [13], 0.3)  # 32 tokens came from the cache
    torch.testing.assert_close(suffix, full.transpose(0, 1)[-13:])


@settings(deadline=None)
@given(decode_cases(), st.data())
def test_prefill_of_several_sequences_equals_causal_sdpa_per_sequence(drawn, data):
    case, query, _ = drawn
    lens = case.seq_lens.tolist()
    query_lens = [data.draw(st.integers(1, n)) for n in lens]
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**32 - 1)))
    query = torch.randn(sum(query_lens), *query.shape[1:], generator=gen, dtype=query.dtype)
    atol = 1e-5 if query.dtype == torch.float32 else 1e-10
    torch.testing.assert_close(
        run_prefill(query, case, query_lens, 0.3),
        prefill_oracle(query, case, query_lens, 0.3),
        atol=atol,
        rtol=atol,
    )


def test_paged_batch_from_lists_pads_tables_and_computes_slots():
    # The source text's §3 example: t = 38, B = 16 -> j = 2, o = 6, T[2] = 93 -> slot 93*16 + 6.
    batch = PagedBatch.from_lists([[47, 12, 93], [5]], seq_lens=[39, 3], block_size=16)
    assert batch.slot_mapping.tolist() == [93 * 16 + 6, 5 * 16 + 2]
    assert batch.block_tables.tolist() == [[47, 12, 93], [5, NO_BLOCK, NO_BLOCK]]
    assert batch.block_tables.dtype == torch.int32
    assert batch.query_lens.tolist() == [1, 1]


def test_paged_batch_from_lists_slots_cover_each_sequences_last_query_len_positions():
    batch = PagedBatch.from_lists([[3, 1], [0]], [10, 4], block_size=8, query_lens=[3, 4])
    assert batch.slot_mapping.tolist() == [3 * 8 + 7, 1 * 8 + 0, 1 * 8 + 1, 0, 1, 2, 3]


def test_paged_batch_rejects_an_unknown_backend():
    with pytest.raises(
        ValueError, match=r"unknown attention backend 'cuda'.*\['torch', 'numba', 'numba-cpu'\]"
    ):
        PagedBatch.from_lists([[0]], [1], block_size=8, backend="cuda")


def test_paged_attention_writes_keys_and_values_at_the_slot_mapping():
    key_pool = torch.zeros(4, 1, 4, 2)
    value_pool = torch.zeros(4, 1, 4, 2)
    batch = PagedBatch.from_lists([[2, 0]], [6], block_size=4, query_lens=[6])
    key = torch.arange(12.0).view(6, 1, 2)
    paged_attention(torch.zeros(6, 1, 2), key, -key, key_pool, value_pool, batch, 1.0)
    # Tokens 0..3 fill block 2, tokens 4..5 go to block 0 at offsets 0 and 1.
    torch.testing.assert_close(key_pool[2, 0], key[:4, 0])
    torch.testing.assert_close(key_pool[0, 0, :2], key[4:, 0])
    torch.testing.assert_close(value_pool[2, 0], -key[:4, 0])
    assert key_pool[[1, 3]].eq(0).all() and key_pool[0, 0, 2:].eq(0).all()


def test_paged_attention_skips_negative_slots():
    key_pool = torch.zeros(2, 1, 4, 2)
    value_pool = torch.zeros(2, 1, 4, 2)
    key_pool[1, 0, :2] = 7.0  # a cached prefix that must survive
    batch = PagedBatch.from_lists(
        [[1]], [3], block_size=4, query_lens=[3], slot_mapping=[-1, -1, 1 * 4 + 2]
    )
    key = torch.ones(3, 1, 2)
    paged_attention(torch.zeros(3, 1, 2), key, key, key_pool, value_pool, batch, 1.0)
    assert key_pool[1, 0, :2].eq(7.0).all()
    assert key_pool[1, 0, 2].eq(1.0).all()


def test_paged_attention_on_a_mixed_batch_equals_causal_sdpa_per_sequence():
    # Sequence 0 decodes its 20th token while sequence 1 prefills a 9-token prompt.
    gen = torch.Generator().manual_seed(9)
    pool_shape = (6, 2, 8, 8)  # [num_blocks, num_kv_heads, B, head_dim]
    key_pool = torch.full(pool_shape, POISON, dtype=torch.float64)
    value_pool = torch.full(pool_shape, POISON, dtype=torch.float64)
    keys = [torch.randn(n, 2, 8, generator=gen, dtype=torch.float64) for n in (20, 9)]
    values = [torch.randn(n, 2, 8, generator=gen, dtype=torch.float64) for n in (20, 9)]
    tables = [[4, 1, 5], [0, 3]]
    cached = PagedBatch.from_lists(tables[:1], [19], block_size=8, query_lens=[19])
    write_kv(key_pool, value_pool, keys[0][:19], values[0][:19], cached.slot_mapping)

    batch = PagedBatch.from_lists(tables, [20, 9], block_size=8, query_lens=[1, 9])
    query = torch.randn(10, 4, 8, generator=gen, dtype=torch.float64)
    step_keys = torch.cat([keys[0][19:], keys[1]])
    step_values = torch.cat([values[0][19:], values[1]])
    out = paged_attention(query, step_keys, step_values, key_pool, value_pool, batch, 0.3)

    for rows, k, v in ((slice(0, 1), keys[0], values[0]), (slice(1, 10), keys[1], values[1])):
        q = query[rows].transpose(0, 1)
        expected = causal_oracle(q, k.transpose(0, 1), v.transpose(0, 1), 0.3)
        torch.testing.assert_close(out[rows], expected.transpose(0, 1))


@pytest.mark.parametrize("path", DECODE_PATHS)
def test_rejects_num_heads_not_a_multiple_of_num_kv_heads(path):
    case = make_case(torch.Generator().manual_seed(10), [9], 2, 8, 8)
    with pytest.raises(ValueError, match="num_heads=3 is not a multiple of num_kv_heads=2"):
        run_decode(path, torch.zeros(1, 3, 8, dtype=torch.float64), case, 1.0, 8)


@pytest.mark.parametrize("path", DECODE_PATHS)
def test_rejects_a_block_table_too_short_for_seq_len(path):
    case = make_case(torch.Generator().manual_seed(11), [9], 1, 8, 8)
    case.block_tables = case.block_tables[:, :1]
    case.seq_lens = torch.tensor([9], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"needs ceil\(9/8\) = 2 blocks.*only 1 entries"):
        run_decode(path, torch.zeros(1, 1, 8, dtype=torch.float64), case, 1.0, 8)


@pytest.mark.parametrize("path", DECODE_PATHS)
def test_rejects_a_zero_seq_len(path):
    case = make_case(torch.Generator().manual_seed(12), [9], 1, 8, 8)
    case.seq_lens = torch.tensor([0], dtype=torch.int32)
    with pytest.raises(ValueError, match="seq_len 0: attention needs at least one cached token"):
        run_decode(path, torch.zeros(1, 1, 8, dtype=torch.float64), case, 1.0, 8)


@pytest.mark.parametrize("path", DECODE_PATHS)
def test_rejects_a_used_block_id_outside_the_pool(path):
    case = make_case(torch.Generator().manual_seed(13), [9], 1, 8, 8)
    case.block_tables[0, 1] = NO_BLOCK
    with pytest.raises(ValueError, match="names a block outside the pool"):
        run_decode(path, torch.zeros(1, 1, 8, dtype=torch.float64), case, 1.0, 8)


def test_prefill_rejects_query_len_longer_than_seq_len():
    case = make_case(torch.Generator().manual_seed(14), [5], 1, 8, 8)
    with pytest.raises(ValueError, match="query_len 6 and seq_len 5"):
        run_prefill(torch.zeros(6, 1, 8, dtype=torch.float64), case, [6], 1.0)
