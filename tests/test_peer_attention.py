"""A peer's test of DESIGN.md's paged attention signature against a contiguous oracle.

``paged_attention_decode(query, key_pool, value_pool, block_tables, seq_lens, scale,
block_size) -> Tensor`` with ``query [batch, num_heads, head_dim]``, pools ``[num_blocks,
num_kv_heads, block_size, head_dim]``, ``block_tables [batch, max_blocks]`` int32 and
``seq_lens [batch]``; grouped-query attention when ``num_heads % num_kv_heads == 0``. Each
sequence's keys and values are gathered into contiguous tensors by hand and attended with
``torch.nn.functional.scaled_dot_product_attention``; the paged result must equal it. Unused
slots are poisoned with NaN, so reading one shows. The kernels' Numba CPU twins
(``cuda_kernels.cpu``) take the same arguments and must return the same result; the CUDA
kernels themselves run in the simulator in ``test_peer_cuda_simulator.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from peer_cases import TOLERANCE, contiguous_oracle, make_case

from minipaged.attention import paged_attention_decode

CASES = st.fixed_dictionaries(
    dict(
        seed=st.integers(0, 2**16),
        batch=st.integers(1, 4),
        heads=st.sampled_from([(4, 4), (4, 2), (8, 2), (6, 3), (4, 1)]),
        head_dim=st.sampled_from([8, 16, 32]),
        block_size=st.sampled_from([8, 16, 32]),
        alias=st.booleans(),
        lens=st.lists(st.integers(1, 70), min_size=4, max_size=4),
    )
)


def unpack(case):
    num_heads, num_kv_heads = case["heads"]
    return make_case(
        case["seed"],
        batch=case["batch"],
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=case["head_dim"],
        block_size=case["block_size"],
        lens=case["lens"][: case["batch"]],
        alias=case["alias"],
    )


@settings(max_examples=40, deadline=None)
@given(CASES)
def test_paged_decode_equals_contiguous_sdpa_with_gqa_and_poisoned_slots(case):
    args = unpack(case)
    scale = 1 / math.sqrt(case["head_dim"])
    out = paged_attention_decode(*args, scale, case["block_size"])
    assert out.shape == args[0].shape
    assert not torch.isnan(out).any()
    expected = contiguous_oracle(*args, scale, case["block_size"])
    torch.testing.assert_close(out, expected, **TOLERANCE)


def test_paged_decode_takes_its_arguments_by_the_designs_names():
    args = make_case(
        0,
        batch=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        block_size=8,
        lens=[9, 16],
        alias=False,
    )
    names = ["query", "key_pool", "value_pool", "block_tables", "seq_lens"]
    out = paged_attention_decode(**dict(zip(names, args, strict=True)), scale=0.25, block_size=8)
    torch.testing.assert_close(out, contiguous_oracle(*args, 0.25, 8), **TOLERANCE)


def test_a_scale_other_than_one_over_root_d_is_honoured():
    args = make_case(
        1, batch=1, num_heads=2, num_kv_heads=2, head_dim=8, block_size=8, lens=[13], alias=False
    )
    for scale in (0.05, 1.0, 3.0):
        torch.testing.assert_close(
            paged_attention_decode(*args, scale, 8), contiguous_oracle(*args, scale, 8), **TOLERANCE
        )


def test_heads_that_do_not_divide_are_refused():
    args = make_case(
        2, batch=1, num_heads=4, num_kv_heads=2, head_dim=8, block_size=8, lens=[5], alias=False
    )
    query = torch.randn(1, 3, 8)
    with pytest.raises(ValueError):
        paged_attention_decode(query, *args[1:], 0.3, 8)


@pytest.fixture(scope="module")
def cpu_twins():
    pytest.importorskip("numba")
    import cuda_kernels.cpu

    return cuda_kernels.cpu


@pytest.mark.parametrize("partition_size", [None, 16, 32])
@pytest.mark.parametrize(
    "heads, block_size, lens, alias",
    [((4, 2), 16, [1, 17, 40], False), ((8, 2), 8, [33, 8, 5], True), ((4, 4), 32, [70], False)],
)
def test_the_cpu_twins_return_the_references_result(
    cpu_twins, partition_size, heads, block_size, lens, alias
):
    if partition_size is not None and partition_size % block_size:
        pytest.skip("a partition is whole blocks")
    args = make_case(
        5,
        batch=len(lens),
        num_heads=heads[0],
        num_kv_heads=heads[1],
        head_dim=16,
        block_size=block_size,
        lens=lens,
        alias=alias,
    )
    scale = 0.25
    expected = paged_attention_decode(*args, scale, block_size)
    if partition_size is None:
        out = cpu_twins.paged_attention_decode(*args, scale, block_size)
    else:
        out = cpu_twins.paged_attention_decode_v2(
            *args, scale, block_size, partition_size=partition_size
        )
    torch.testing.assert_close(torch.as_tensor(out), expected, **TOLERANCE)
    torch.testing.assert_close(
        torch.as_tensor(out), contiguous_oracle(*args, scale, block_size), **TOLERANCE
    )


def small_case():
    return make_case(
        6,
        batch=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        block_size=8,
        lens=[9, 16],
        alias=False,
    )


def attention_paths():
    """The reference, and the CPU twins where numba is installed: the same arguments each."""
    paths = {"reference": paged_attention_decode}
    try:
        import cuda_kernels.cpu as twins
    except ImportError:
        return paths
    paths["cpu twin v1"] = twins.paged_attention_decode
    paths["cpu twin v2"] = lambda *a, **k: twins.paged_attention_decode_v2(
        *a, partition_size=16, **k
    )
    return paths


@pytest.mark.parametrize("path", attention_paths().values(), ids=attention_paths().keys())
def test_every_path_takes_int64_tables_and_lengths_and_any_query_strides(path):
    query, *rest = small_case()
    expected = contiguous_oracle(query, *rest, 0.25, 8)
    block_tables, seq_lens = rest[2].long(), rest[3].long()
    strided = query.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    assert not strided.is_contiguous()
    out = path(strided, rest[0], rest[1], block_tables, seq_lens, 0.25, 8)
    assert isinstance(out, torch.Tensor) and out.shape == query.shape
    torch.testing.assert_close(out, expected, **TOLERANCE)


@pytest.mark.parametrize("path", attention_paths().values(), ids=attention_paths().keys())
@pytest.mark.parametrize("argument", ["query", "block_tables", "seq_lens"])
def test_an_argument_that_is_not_a_tensor_is_refused_naming_it(path, argument):
    names = ["query", "key_pool", "value_pool", "block_tables", "seq_lens"]
    args = dict(zip(names, small_case(), strict=True))
    args[argument] = args[argument].tolist()
    with pytest.raises((TypeError, ValueError), match=argument):
        path(*args.values(), 0.25, 8)


@pytest.mark.parametrize("path", attention_paths().values(), ids=attention_paths().keys())
def test_a_float_block_table_is_refused_naming_it(path):
    query, key_pool, value_pool, block_tables, seq_lens = small_case()
    with pytest.raises((TypeError, ValueError), match="block_tables"):
        path(query, key_pool, value_pool, block_tables.float(), seq_lens, 0.25, 8)
