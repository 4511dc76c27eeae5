"""What a CPU twin's call reads once: each FP8 scale's values (the entry point's check reads
them, and the kernel's arguments take that read), and its result for NaN (the kernel counts
the rows holding NaN as it writes them, so the entry point does not read the whole result
again). Both keep their guarantees: a scale changed between calls is read again, and an
overflow in any one row of the result is refused, as the whole-result check refused it."""

from __future__ import annotations

import pytest
import torch

from minipaged import attention, attention_call, fp8

twins = pytest.importorskip("cuda_kernels.cpu", reason="the CPU twins need numba")

BATCH, HEADS, KV_HEADS, HEAD_DIM, BLOCK = 2, 4, 2, 8, 4

TWINS = {
    "twin v1": twins.paged_attention_decode,
    "twin v2": lambda *a, **k: twins.paged_attention_decode_v2(*a, **k, partition_size=4),
}
ENTRY_POINTS = TWINS | {
    "reference": attention.paged_attention_decode,
    "loop": attention.paged_attention_decode_loop,
}


def decode_arguments(positive_keys: bool = False) -> list:
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(BATCH, HEADS, HEAD_DIM, generator=gen)
    keys = torch.randn(6, KV_HEADS, BLOCK, HEAD_DIM, generator=gen)
    keys = keys.abs() + 0.5 if positive_keys else keys
    values = torch.randn(6, KV_HEADS, BLOCK, HEAD_DIM, generator=gen)
    tables = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    lens = torch.tensor([7, 5], dtype=torch.int32)
    return [query, keys, values, tables, lens, HEAD_DIM**-0.5, BLOCK]


def fp8_arguments() -> tuple[list, dict]:
    arguments = decode_arguments()
    scales = {}
    for position, name in ((1, "k_scale"), (2, "v_scale")):
        pool = arguments[position]
        scales[name] = fp8.scale_for(pool.abs().amax(dim=(0, 2, 3)), torch.float8_e4m3fn)
        arguments[position] = fp8.quantize(pool, scales[name].view(-1, 1, 1), torch.float8_e4m3fn)
    return arguments, scales


@pytest.fixture
def reads(monkeypatch):
    """``reads[name]``: how many times the values of the scale ``name`` were read back
    (``Tensor.tolist``), counted for the tensors registered in ``reads["tensors"]``."""
    counted = {"tensors": {}, "k_scale": 0, "v_scale": 0}
    original = torch.Tensor.tolist

    def tolist(tensor):
        for name, scale in counted["tensors"].items():
            counted[name] += tensor is scale
        return original(tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    return counted


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_a_direct_call_reads_each_fp8_scale_at_most_once(path, reads):
    arguments, scales = fp8_arguments()
    reads["tensors"] = scales
    got = ENTRY_POINTS[path](*arguments, **scales)
    assert (reads["k_scale"], reads["v_scale"]) == (1, 1)
    want = attention.paged_attention_decode(*arguments, **scales)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("path", TWINS)
def test_an_engine_call_reads_each_fp8_scale_once_for_the_kernel(path, reads):
    """Under ``engine_attention`` the check reads nothing; the kernel's arguments still need
    the values, and read them once."""
    arguments, scales = fp8_arguments()
    reads["tensors"] = scales
    with attention_call.engine_attention():
        TWINS[path](*arguments, **scales)
    assert (reads["k_scale"], reads["v_scale"]) == (1, 1)


@pytest.mark.parametrize("path", TWINS)
def test_a_scale_changed_in_place_between_calls_is_read_again(path):
    arguments, scales = fp8_arguments()
    TWINS[path](*arguments, **scales)
    scales["v_scale"].mul_(2)  # the same tensor object, new values
    got = TWINS[path](*arguments, **scales)
    torch.testing.assert_close(got, attention.paged_attention_decode(*arguments, **scales))


@pytest.fixture
def whole_result_reads(monkeypatch):
    """The results read whole for NaN by an entry point (``attention_call.holds_nan``)."""
    looked = []
    original = attention_call.holds_nan
    monkeypatch.setattr(
        attention_call, "holds_nan", lambda out: looked.append(out) or original(out)
    )
    return looked


ROWS = [(seq, head) for seq in range(BATCH) for head in range(HEADS)]


@pytest.mark.parametrize("path", TWINS)
@pytest.mark.parametrize(("seq", "head"), ROWS)
def test_an_overflow_in_any_one_row_is_refused(path, seq, head, whole_result_reads):
    """One query head's logits overflow (every key positive, its query at float32's edge:
    each q.k is +inf, its softmax NaN), every other row is finite: the kernel's count of rows
    holding NaN sees that row, wherever it is, and the overflow is refused."""
    arguments = decode_arguments(positive_keys=True)
    arguments[0][seq, head] = 3e38
    with pytest.raises(ValueError, match=r"makes the logits q\.k\*scale overflow"):
        TWINS[path](*arguments)
    assert whole_result_reads == []


@pytest.mark.parametrize("path", TWINS)
@pytest.mark.parametrize(("seq", "head"), ROWS)
def test_nan_in_one_query_row_comes_back_in_that_row_alone(path, seq, head, whole_result_reads):
    """NaN in the caller's data is not an overflow: the result comes back as it is, the
    reference's, NaN in the row of the NaN query and nowhere else."""
    arguments = decode_arguments()
    arguments[0][seq, head, 0] = float("nan")
    got = TWINS[path](*arguments)
    assert whole_result_reads == []
    assert got.isnan().any(dim=-1).nonzero().tolist() == [[seq, head]]
    torch.testing.assert_close(got, attention.paged_attention_decode(*arguments), equal_nan=True)


@pytest.mark.parametrize("path", TWINS)
def test_a_finite_result_is_given_back_without_reading_it_again(path, whole_result_reads):
    arguments = decode_arguments()
    got = TWINS[path](*arguments)
    assert whole_result_reads == []
    torch.testing.assert_close(got, attention.paged_attention_decode(*arguments))
