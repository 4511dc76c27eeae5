"""The properties every implementation of the kernels must have, shared by the CUDA kernels
(``tests/test_cuda_kernels.py``, in Numba's CUDA simulator) and their CPU twins
(``tests/test_cpu_kernels.py``). A test module that imports these tests provides two
module-scoped fixtures: ``kernels``, the module whose functions are tested (``cuda_kernels`` or
``cuda_kernels.cpu``), and ``backend_name``, the ``LLM`` backend that runs them.

Each case builds each sequence's keys and values contiguously, scatters them into pools through
block tables (sequences may alias blocks, as after a fork) and fills every other slot with NaN,
including a whole spare block at the end of the pool that a stray index of -1 would read. The
kernels must equal the §4 loop reference and contiguous ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged.attention import NO_BLOCK, paged_attention_decode, paged_attention_decode_loop
from minipaged.kv_cache import KVCache, write_kv

TOLERANCE = {"atol": 2e-5, "rtol": 1e-4}  # float32; the simulator's math.exp is float64


@dataclass(repr=False)
class Case:
    """A batch of sequences in paged pools, with their contiguous originals for the oracle."""

    query: torch.Tensor  # [batch, num_heads, head_dim]
    key_pool: torch.Tensor  # [num_blocks, num_kv_heads, B, head_dim], NaN where unused
    value_pool: torch.Tensor
    block_tables: torch.Tensor  # [batch, max_blocks] int32, padded with garbage ids
    seq_lens: torch.Tensor  # [batch] int32
    block_size: int
    keys: list[torch.Tensor]  # per sequence [num_kv_heads, seq_len, head_dim]
    values: list[torch.Tensor]

    @property
    def args(self) -> tuple:
        scale = 1 / math.sqrt(self.query.shape[2])
        paged = (self.key_pool, self.value_pool, self.block_tables, self.seq_lens)
        return (self.query, *paged, scale, self.block_size)

    def oracle(self) -> torch.Tensor:
        """Contiguous attention, sequence by sequence: shares no gather code with the kernels."""
        scale = 1 / math.sqrt(self.query.shape[2])
        rows = [
            F.scaled_dot_product_attention(q[:, None], k, v, scale=scale, enable_gqa=True)[:, 0]
            for q, k, v in zip(self.query, self.keys, self.values, strict=True)
        ]
        return torch.stack(rows)  # [batch, num_heads, head_dim]

    def __repr__(self) -> str:  # the tensors would bury a failing example's shape
        _, num_heads, head_dim = self.query.shape
        return (
            f"Case(seq_lens={self.seq_lens.tolist()}, block_tables={self.block_tables.tolist()}, "
            f"B={self.block_size}, num_heads={num_heads}, "
            f"num_kv_heads={self.key_pool.shape[1]}, head_dim={head_dim})"
        )


def make_case(
    seed: int,
    seq_lens: list[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    alias: bool = False,
    pad_ids: tuple[int, ...] = (NO_BLOCK,),
) -> Case:
    """With ``alias``, every later sequence's first full blocks are sequence 0's (a fork)."""
    gen = torch.Generator().manual_seed(seed)
    needed = [-(-n // block_size) for n in seq_lens]
    shared = [0] + [min(seq_lens[0], n) // block_size if alias else 0 for n in seq_lens[1:]]
    num_used = sum(needed) - sum(shared)
    free = torch.randperm(num_used, generator=gen).tolist()  # a scattered physical layout
    # One spare block at the end: never named, all NaN, where an index of -1 lands.
    pool_shape = (num_used + 1, num_kv_heads, block_size, head_dim)
    key_pool = torch.full(pool_shape, float("nan"))
    value_pool = torch.full(pool_shape, float("nan"))
    tables, keys, values = [], [], []
    for seq_len, num_shared, num_needed in zip(seq_lens, shared, needed, strict=True):
        prefix = tables[0][:num_shared] if num_shared else []
        table = prefix + [free.pop() for _ in range(num_needed - num_shared)]
        k = torch.randn(num_kv_heads, seq_len, head_dim, generator=gen)
        v = torch.randn(num_kv_heads, seq_len, head_dim, generator=gen)
        if num_shared:  # the aliased blocks hold sequence 0's tokens
            k[:, : num_shared * block_size] = keys[0][:, : num_shared * block_size]
            v[:, : num_shared * block_size] = values[0][:, : num_shared * block_size]
        for t in range(seq_len):  # token t -> block T[t // B], offset t % B
            key_pool[table[t // block_size], :, t % block_size] = k[:, t]
            value_pool[table[t // block_size], :, t % block_size] = v[:, t]
        tables.append(table)
        keys.append(k)
        values.append(v)
    width = max(needed) + 1
    padded = [
        table + [pad_ids[i % len(pad_ids)] for i in range(width - len(table))] for table in tables
    ]
    return Case(
        query=torch.randn(len(seq_lens), num_heads, head_dim, generator=gen),
        key_pool=key_pool,
        value_pool=value_pool,
        block_tables=torch.tensor(padded, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_size=block_size,
        keys=keys,
        values=values,
    )


@st.composite
def cases(draw) -> Case:
    """Block sizes 8/16/32, GQA groups 1/2, lengths that often end mid-block, aliased tables."""
    block_size = draw(st.sampled_from([8, 16, 32]))
    num_kv_heads = draw(st.sampled_from([1, 2]))
    num_heads = num_kv_heads * draw(st.sampled_from([1, 2]))
    seq_lens = draw(st.lists(st.integers(1, 3 * block_size), min_size=1, max_size=2))
    return make_case(
        seed=draw(st.integers(0, 2**16)),
        seq_lens=seq_lens,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=draw(st.sampled_from([8, 16])),
        block_size=block_size,
        alias=draw(st.booleans()),
        pad_ids=draw(st.sampled_from([(NO_BLOCK,), (-7, 10**6)])),
    )


@settings(max_examples=10, deadline=None)
@given(cases())
def test_v1_equals_the_loop_reference_and_contiguous_attention(kernels, case):
    got = kernels.paged_attention_decode(*case.args)
    torch.testing.assert_close(got, paged_attention_decode_loop(*case.args), **TOLERANCE)
    torch.testing.assert_close(got, case.oracle(), **TOLERANCE)


@settings(max_examples=8, deadline=None)
@given(cases(), st.integers(1, 3))
def test_v2_equals_the_reference_for_partitions_of_one_to_three_blocks(
    kernels, case, blocks_per_partition
):
    """v2 against the vectorized reference, not against v1: the test above holds v1 to the
    references, so v2 equal to them is v2 equal to v1, and on 8 more cases than v1's own 10. In
    the CUDA simulator a v1 launch here cost a quarter to a third of each example."""
    partition_size = blocks_per_partition * case.block_size
    got = kernels.paged_attention_decode_v2(*case.args, partition_size=partition_size)
    torch.testing.assert_close(got, paged_attention_decode(*case.args), **TOLERANCE)


def test_v2_rejects_a_partition_size_that_is_not_whole_blocks(kernels):
    case = make_case(0, seq_lens=[9], num_heads=1, num_kv_heads=1, head_dim=8, block_size=8)
    with pytest.raises(ValueError, match=r"multiple of block_size=8.*got 12"):
        kernels.paged_attention_decode_v2(*case.args, partition_size=12)


def test_kernels_reject_a_dtype_other_than_float32(kernels):
    case = make_case(0, seq_lens=[9], num_heads=1, num_kv_heads=1, head_dim=8, block_size=8)
    query, *rest = case.args
    with pytest.raises(ValueError, match=r"query has dtype torch.float64.*torch.float32"):
        kernels.paged_attention_decode(query.double(), *rest)
    with pytest.raises(ValueError, match=r"query has dtype torch.float64.*\.float\(\)"):
        kernels.paged_attention_decode(
            query.double(), *(pool.double() for pool in rest[:2]), *rest[2:]
        )


@settings(max_examples=8, deadline=None)
@given(st.data())
def test_reshape_and_cache_writes_exactly_what_write_kv_writes(kernels, data):
    block_size = data.draw(st.sampled_from([8, 16]))
    num_kv_heads, head_dim, num_blocks = data.draw(st.sampled_from([1, 2])), 8, 3
    slots = data.draw(
        st.lists(st.integers(0, num_blocks * block_size - 1), min_size=1, max_size=5, unique=True)
    )
    skipped = data.draw(st.lists(st.booleans(), min_size=len(slots), max_size=len(slots)))
    slots = [-1 if skip else slot for slot, skip in zip(slots, skipped, strict=True)]
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    key, value = torch.randn(2, len(slots), num_kv_heads, head_dim, generator=gen)
    pools = torch.randn(2, num_blocks, num_kv_heads, block_size, head_dim, generator=gen)
    expected = pools.clone()
    slot_mapping = torch.tensor(slots)
    kernels.reshape_and_cache(key, value, pools[0], pools[1], slot_mapping)
    write_kv(expected[0], expected[1], key, value, slot_mapping)
    assert torch.equal(pools, expected)


def test_reshape_and_cache_rejects_a_slot_past_the_pool_without_writing(kernels):
    pools = torch.zeros(2, 2, 1, 4, 8)  # 2 blocks of B=4: slots 0..7
    key = value = torch.ones(2, 1, 8)
    with pytest.raises(ValueError, match="slot 8 is past the end"):
        kernels.reshape_and_cache(key, value, pools[0], pools[1], torch.tensor([0, 8]))
    assert (pools == 0).all()


def filled_cache() -> KVCache:
    """A 2-layer cache whose every element is distinct, so any misplaced copy shows."""
    cache = KVCache(2, 6, num_kv_heads=2, block_size=8, head_dim=8, num_cpu_blocks=4)
    for layer in range(2):
        numel = cache.key[layer].numel()
        cache.key[layer].copy_(torch.arange(numel).view_as(cache.key[layer]) + layer * numel)
        cache.value[layer].copy_(-cache.key[layer])
    return cache


@settings(max_examples=6, deadline=None)
@given(st.permutations(range(6)), st.integers(1, 3))
def test_copy_blocks_copies_exactly_what_kvcache_copies(kernels, blocks, num_pairs):
    pairs = list(zip(blocks[:num_pairs], blocks[num_pairs : 2 * num_pairs], strict=True))
    expected, cache = filled_cache(), filled_cache()
    expected.copy_blocks(pairs)
    kernels.copy_blocks(cache.key, cache.value, pairs)
    for got, want in zip(cache.key + cache.value, expected.key + expected.value, strict=True):
        assert torch.equal(got, want)


def test_copy_blocks_rejects_a_block_that_is_both_source_and_destination(kernels):
    cache = filled_cache()
    with pytest.raises(ValueError, match="both source and destination"):
        kernels.copy_blocks(cache.key, cache.value, [(0, 1), (1, 2)])


def device_and_host_pools(cache: KVCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's key pool with its host key pool, then each value pool with its host pool."""
    return list(zip(cache.key + cache.value, cache.host_key + cache.host_value, strict=True))


swap_mappings = st.builds(
    lambda device, host, n: list(zip(device[:n], host[:n], strict=True)),
    st.permutations(range(6)),
    st.permutations(range(4)),
    st.integers(1, 4),
)


@settings(max_examples=10, deadline=None)
@given(swap_mappings)
def test_swap_blocks_out_copies_exactly_what_kvcache_swap_out_copies(kernels, mapping):
    expected, cache = filled_cache(), filled_cache()
    expected.swap_out(mapping)
    for device_pool, host_pool in device_and_host_pools(cache):
        kernels.swap_blocks(device_pool, host_pool, mapping)
    for got, want in zip(
        cache.host_key + cache.host_value, expected.host_key + expected.host_value, strict=True
    ):
        assert torch.equal(got, want)


@settings(max_examples=10, deadline=None)
@given(swap_mappings)
def test_swap_blocks_out_and_back_in_restores_every_byte(kernels, mapping):
    cache = filled_cache()
    before = [device_pool.clone() for device_pool, _ in device_and_host_pools(cache)]
    for device_pool, host_pool in device_and_host_pools(cache):
        kernels.swap_blocks(device_pool, host_pool, mapping)
        device_pool.zero_()
        kernels.swap_blocks(host_pool, device_pool, [(host, device) for device, host in mapping])
    swapped = [device for device, _ in mapping]
    for (device_pool, _), then in zip(device_and_host_pools(cache), before, strict=True):
        assert torch.equal(device_pool[swapped], then[swapped])


def test_swap_blocks_rejects_a_host_block_outside_the_host_pool(kernels):
    cache = filled_cache()
    with pytest.raises(ValueError, match=r"destination block 4 .* outside its pool of 4 blocks"):
        kernels.swap_blocks(cache.key[0], cache.host_key[0], [(0, 4)])


def test_engine_with_the_kernels_generates_the_torch_backend_tokens(backend_name, hf_llama):
    """Greedy decoding through the kernels of ``backend_name`` (cache writes, decode
    attention, copy-on-write copies and swaps) gives the reference path's tokens, with a fork
    and a swap on the way."""
    from minipaged.checkpoint import load_model

    assert_kernels_generate_the_torch_tokens(load_model(hf_llama[1]), backend_name)


def assert_kernels_generate_the_torch_tokens(model, backend_name: str, *cache) -> None:
    """``fork_and_swap_run`` through ``backend_name`` gives the torch backend's tokens, with a
    copy-on-write copy, a swap-out and a swap-in on the way (``cache``: dtype and scales)."""
    results = {}
    for backend in ("torch", backend_name):
        results[backend], kinds = fork_and_swap_run(model, backend, *cache)
        assert {"cow-copy", "swap-out", "swap-in"} <= kinds, backend
    assert results[backend_name] == results["torch"]


def fork_and_swap_run(model, backend: str, kv_cache_dtype="auto", scales=None):
    """Greedy tokens of a request with n = 2 and one more, on 5 device blocks of B = 4 with
    swap preemption, through ``backend`` (an FP8 cache: ``kv_cache_dtype`` and its
    ``scales``). Returns the samples' tokens by request id and the event kinds seen."""
    from minipaged.engine import LLMEngine
    from minipaged.sampling import SamplingParams

    requests = [
        ([5, 9, 13, 17, 21], SamplingParams(max_tokens=3, temperature=0, n=2, ignore_eos=True)),
        ([11, 12, 13, 14, 15, 16], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)),
    ]
    engine = LLMEngine(
        model,
        block_size=4,
        num_gpu_blocks=5,
        num_cpu_blocks=8,
        preemption="swap",
        backend=backend,
        kv_cache_dtype=kv_cache_dtype,
    )
    if scales is not None:
        engine.kv_cache.set_scales(*scales)
    for prompt, params in requests:
        engine.add_request({"prompt_token_ids": prompt}, params)
    outputs, kinds = {}, set()
    while engine.has_unfinished():
        step = engine.step()
        kinds |= {event.kind for event in step.events}
        for output in step.finished:
            outputs[output.request_id] = [c.token_ids for c in output.outputs]
    return outputs, kinds
