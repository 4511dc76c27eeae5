"""The kernels' decode checks remember a layout that passed (``cuda_kernels.decode_arguments``):
a later call with the same tensors' kinds, dtypes, devices, shapes and strides checks only
their values. Whatever a call changed since, in place or by passing other tensors, it is
refused exactly as a first call with it would be."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("numba", reason="the kernels' wrappers need numba")

from cuda_kernels import cpu, decode_arguments
from cuda_kernels.cpu.paged_attention import tables_fit

B, NUM_BLOCKS = 4, 8


def arguments(index_dtype: torch.dtype = torch.int32, block_size: int = B) -> dict:
    """A valid decode call: sequences of 9 and 5 tokens over a pool of 8 blocks."""
    gen = torch.Generator().manual_seed(0)
    pool = (NUM_BLOCKS, 2, block_size, 8)  # [num_blocks, N_KV, B, d_h]
    return {
        "query": torch.randn(2, 4, 8, generator=gen),
        "key_pool": torch.randn(pool, generator=gen),
        "value_pool": torch.randn(pool, generator=gen),
        "block_tables": torch.tensor([[0, 1, 2], [3, 4, -1]], dtype=index_dtype),
        "seq_lens": torch.tensor([9, 5], dtype=index_dtype),
        "scale": 8**-0.5,
        "block_size": block_size,
    }


def refusal(call) -> tuple[type, str]:
    with pytest.raises((TypeError, ValueError)) as refused:
        call()
    return type(refused.value), str(refused.value)


VALUE_CHANGES = {
    # what a call changes in place, after a call with the same tensors passed
    "a used id past the pool": lambda a: a["block_tables"][0].__setitem__(2, NUM_BLOCKS),
    "a used id of -1": lambda a: a["block_tables"][1].__setitem__(1, -1),
    "an id past int32": lambda a: a["block_tables"][0].__setitem__(1, 2**40),
    "a length of 0": lambda a: a["seq_lens"].__setitem__(1, 0),
    "a negative length": lambda a: a["seq_lens"].__setitem__(0, -1),
    "a length past the table": lambda a: a["seq_lens"].__setitem__(0, 13),
}


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("change", VALUE_CHANGES)
def test_a_value_changed_in_place_is_refused_as_on_a_first_call(change, index_dtype):
    if change == "an id past int32" and index_dtype == torch.int32:
        pytest.skip("an int32 table cannot hold the id")
    first = arguments(index_dtype)
    VALUE_CHANGES[change](first)
    decode_arguments.passed_layouts.clear()
    fresh = refusal(lambda: cpu.paged_attention_decode(**first))

    remembered = arguments(index_dtype)
    cpu.paged_attention_decode(**remembered)  # the layout passes, and is remembered
    assert decode_arguments.layout_key(*remembered.values(), cpu.launch.check_device) in (
        decode_arguments.passed_layouts
    )
    VALUE_CHANGES[change](remembered)
    assert refusal(lambda: cpu.paged_attention_decode(**remembered)) == fresh
    assert refusal(lambda: cpu.paged_attention_decode_v2(**remembered, partition_size=8)) == fresh


def test_a_refused_layout_is_not_remembered():
    bad = arguments() | {"scale": -1.0}
    decode_arguments.passed_layouts.clear()
    for _ in range(2):
        with pytest.raises(ValueError, match="scale must be a positive"):
            cpu.paged_attention_decode(**bad)
    assert not decode_arguments.passed_layouts


@pytest.mark.parametrize(
    ("passed", "refused", "words"),
    [
        ({"block_size": 1}, {"block_size": True}, "block_size must be an integer"),
        ({"scale": 1.0}, {"scale": True}, "scale must be a number"),
    ],
)
def test_a_value_equal_to_one_that_passed_but_of_another_type_is_checked_again(
    passed, refused, words
):
    """``True == 1`` and they hash alike, but ``True`` is neither a block size nor a scale."""
    call = arguments(block_size=1) | {"seq_lens": torch.tensor([3, 2], dtype=torch.int32)}
    cpu.paged_attention_decode(**call | passed)
    with pytest.raises(TypeError, match=words):
        cpu.paged_attention_decode(**call | passed | refused)


def test_other_tensors_of_the_same_layout_are_read_not_the_first_ones():
    """What is remembered is that a layout passed, never a tensor: another query and other
    pools of the same layout give their own attention."""
    first, second = arguments(), arguments()
    second["query"] = -second["query"]
    second["value_pool"] = 2 * second["value_pool"]
    torch.testing.assert_close(
        cpu.paged_attention_decode(**second),
        2 * cpu.paged_attention_decode(**first | {"query": second["query"]}),
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_v1_twin_refuses_in_its_kernel_exactly_the_values_the_contract_refuses(data):
    """The v1 twin checks a remembered layout's values inside its kernel (``tables_fit``), and
    only when it finds one it cannot read does its wrapper run ``check_values`` for the
    refusal's words: the two must agree on every length and table, or a bad one would be read
    (the kernel accepting what the contract refuses) or the call fail with no refusal (the
    other way round)."""
    batch, width = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 4))
    block_size, num_blocks = data.draw(st.sampled_from([1, 2, 4])), data.draw(st.integers(1, 6))
    lens = data.draw(
        st.lists(st.integers(-2, width * block_size + 2), min_size=batch, max_size=batch)
    )
    ids = st.lists(st.integers(-2, num_blocks + 1), min_size=width, max_size=width)
    rows = data.draw(st.lists(ids, min_size=batch, max_size=batch))
    tables = torch.tensor(rows, dtype=torch.int32).view(batch, width)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    try:
        decode_arguments.check_values(tables, seq_lens, block_size, num_blocks)
        accepted = True
    except ValueError:
        accepted = False
    fits = tables_fit(tables.numpy(), seq_lens.numpy(), block_size, num_blocks)
    assert fits == accepted, (rows, lens, block_size, num_blocks)
