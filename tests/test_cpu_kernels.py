"""The CPU twins of the kernels (``cuda_kernels.cpu``, backend ``"numba-cpu"``) against the
torch reference: the same properties as the CUDA kernels (``tests/kernel_properties.py``), plus
the v2 twin's first stage called by hand.

Numba's CPU compiler works in any process, with or without ``NUMBA_ENABLE_CUDASIM``, so these
tests run in the main pytest process. The twins compile once (``cache=True`` keeps the machine
code in ``__pycache__`` for the next run).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("numba", reason="the CPU kernels need numba")

from kernel_properties import (  # noqa: F401  (pytest collects the imported tests here)
    TOLERANCE,
    make_case,
    test_copy_blocks_copies_exactly_what_kvcache_copies,
    test_copy_blocks_rejects_a_block_that_is_both_source_and_destination,
    test_engine_with_the_kernels_generates_the_torch_backend_tokens,
    test_kernels_reject_a_dtype_other_than_float32,
    test_reshape_and_cache_rejects_a_slot_past_the_pool_without_writing,
    test_reshape_and_cache_writes_exactly_what_write_kv_writes,
    test_swap_blocks_out_and_back_in_restores_every_byte,
    test_swap_blocks_out_copies_exactly_what_kvcache_swap_out_copies,
    test_swap_blocks_rejects_a_host_block_outside_the_host_pool,
    test_v1_equals_the_loop_reference_and_contiguous_attention,
    test_v2_equals_the_reference_for_partitions_of_one_to_three_blocks,
    test_v2_rejects_a_partition_size_that_is_not_whole_blocks,
)
from kernel_properties_fp8 import (  # noqa: F401  (the FP8 properties, collected here too)
    test_copies_and_swaps_move_the_same_fp8_bytes_as_the_reference,
    test_engine_in_fp8_with_the_kernels_generates_the_torch_backends_tokens,
    test_reshape_and_cache_writes_the_bytes_write_kv_quantizes,
    test_v1_in_fp8_equals_the_loop_reference,
    test_v2_in_fp8_equals_the_reference,
)

from cuda_kernels import cpu
from cuda_kernels.cpu.launch import kernel_array
from cuda_kernels.cpu.paged_attention_v2 import paged_attention_v2_partitions
from cuda_kernels.decode_arguments import by_fields, fp8_arguments
from cuda_kernels.fp8 import decode_fields
from minipaged.attention import paged_attention_decode_partitions


@pytest.fixture(scope="module", params=[1, 2], ids=["serial", "parallel"])
def kernels(request):
    """The twins on one thread (their loop nests compiled without ``parallel``) and on two (the
    ``prange`` loops spread over threads): every property must hold for both."""
    previous = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield cpu
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def backend_name():
    return "numba-cpu"


def test_v2_stage_one_writes_each_partitions_m_l_o_and_exact_zeros_past_the_end():
    case = make_case(3, seq_lens=[5, 40], num_heads=4, num_kv_heads=2, head_dim=8, block_size=8)
    m_ref, l_ref, o_ref = paged_attention_decode_partitions(*case.args, partition_size=16)
    m_k, l_k, o_k = torch.empty_like(m_ref), torch.empty_like(l_ref), torch.empty_like(o_ref)
    query, key_pool, value_pool, block_tables, seq_lens, scale, _ = case.args
    tensors = (m_k, l_k, o_k, query, key_pool, value_pool, block_tables, seq_lens)
    no_fp8 = fp8_arguments(key_pool, None, None, kernel_array, by_fields)  # float32 pools: scales 1
    paged_attention_v2_partitions(*(t.numpy() for t in tensors), np.float32(scale), 16, *no_fp8)
    for got, want in ((m_k, m_ref), (l_k, l_ref), (o_k, o_ref)):
        torch.testing.assert_close(got, want, **TOLERANCE)
    assert (m_k[0, :, 1:] == -math.inf).all()  # sequence 0 (5 tokens) is empty past partition 0
    assert (l_k[0, :, 1:] == 0).all()
    assert (o_k[0, :, 1:] == 0).all()


def test_the_twins_reject_a_gpu_tensor_with_the_way_out():
    case = make_case(0, seq_lens=[9], num_heads=1, num_kv_heads=1, head_dim=8, block_size=8)
    with pytest.raises(ValueError, match=r"query is on meta.*\.cpu\(\)"):
        cpu.paged_attention_decode(case.query.to("meta"), *case.args[1:])


@pytest.mark.parametrize(
    ("tensor", "dtype"),
    [
        (torch.ones(2, 3), np.float32),
        (torch.arange(6, dtype=torch.int32), np.int32),
        (torch.ones(2, 3, requires_grad=True), np.float32),  # numpy() refuses: detached first
        (torch.ones(2, 3).to(torch.float8_e4m3fn), np.uint8),  # numpy() refuses: its bytes
    ],
    ids=["float32", "int32", "needs grad", "fp8"],
)
def test_kernel_array_views_the_memory_of_every_tensor_it_takes(tensor, dtype):
    """``kernel_array`` tries ``numpy()`` first and asks why only when it refuses: each kind
    it takes still comes back as a view of the tensor's own memory, never a copy."""
    array = kernel_array(tensor, "t")
    assert array.dtype == dtype
    assert array.ctypes.data == tensor.data_ptr()


def test_kernel_array_names_the_way_out_for_a_tensor_off_the_cpu():
    with pytest.raises(ValueError, match=r"^t is on meta.*move it with \.cpu\(\)"):
        kernel_array(torch.ones(2, device="meta"), "t")


@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.float8_e4m3fn])
def test_no_scales_give_the_kernel_what_scales_of_one_give(pool_dtype):
    """A call given no ``k_scale``/``v_scale`` takes its arguments from one lookup
    (``unscaled_arguments``): the same values as scales of one passed through the general
    path, and the same decoder."""
    pool = torch.zeros(4, 3, 8, 16).to(pool_dtype)
    ones = torch.ones(3)
    unscaled = fp8_arguments(pool, None, None, kernel_array, by_fields)
    scaled = fp8_arguments(pool, ones, ones, kernel_array, by_fields)
    for got, want in zip(unscaled[:2], scaled[:2], strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype == np.float32
    assert unscaled[2] == scaled[2]


def test_a_strided_query_gives_what_a_contiguous_one_gives():
    """The output is made contiguous whatever the query's strides (it was once made like the
    query, and a transposed query's output was refused as not contiguous)."""
    case = make_case(0, seq_lens=[9, 4], num_heads=4, num_kv_heads=2, head_dim=8, block_size=8)
    query, *rest = case.args
    strided = query.transpose(1, 2).contiguous().transpose(1, 2)  # same values, other strides
    for decode in (cpu.paged_attention_decode, cpu.paged_attention_decode_v2):
        torch.testing.assert_close(decode(strided, *rest), decode(query, *rest))


def test_per_call_tensors_that_are_views_elsewhere_give_what_fresh_ones_give():
    """The v1 twin takes its per-call tensors by address (``cuda_kernels.cpu.addresses``): a
    query that starts inside another tensor's memory, tables that are a strided int64 view and
    lengths taken every other element must each reach the kernel as the values they show, not
    as the memory at their storage's start or in their storage's order."""
    case = make_case(1, seq_lens=[9, 4], num_heads=4, num_kv_heads=2, head_dim=8, block_size=4)
    query, key_pool, value_pool, tables, lens, *rest = case.args
    want = cpu.paged_attention_decode(*case.args)
    padded = torch.cat([torch.randn(1, *query.shape[1:]), query])  # the query from row 1 on
    wide = torch.full((tables.shape[1], 2 * tables.shape[0]), -7, dtype=torch.int64)
    wide[:, ::2] = tables.T  # the tables as every other column of a wider, transposed one
    spread = torch.tensor([n for length in lens.tolist() for n in (length, 99)], dtype=torch.int32)[
        ::2
    ]
    views = (padded[1:], key_pool, value_pool, wide[:, ::2].T, spread, *rest)
    assert padded[1:].storage_offset() > 0 and not views[3].is_contiguous()
    assert not spread.is_contiguous()
    torch.testing.assert_close(cpu.paged_attention_decode(*views), want, rtol=0, atol=0)


def test_array_at_views_the_memory_at_an_address_in_compiled_code_and_in_python():
    """``array_at`` gives the array at a tensor's address: its values, and a write lands in
    the tensor; with Numba's compiler off, its Python body does the same (``ctypes``)."""
    from numba import njit

    from cuda_kernels.cpu.addresses import array_at

    @njit
    def second_row_doubled(address, rows):
        view = array_at(address, (rows, 3), np.int32)
        view[1] *= 2
        return view.sum()

    tensor = torch.arange(12, dtype=torch.int32)
    assert second_row_doubled(tensor.data_ptr() + 3 * 4, 2) == sum(range(3, 9)) + 6 + 7 + 8
    assert tensor[6:9].tolist() == [12, 14, 16] and tensor[3:6].tolist() == [3, 4, 5]
    floats = torch.zeros(2, 2)
    array_at.py_func(floats.data_ptr(), (2, 2), np.float32)[0, 1] = 5.0
    assert floats.tolist() == [[0.0, 5.0], [0.0, 0.0]]


def test_a_serial_twin_is_cached_on_disk_under_a_name_of_its_own():
    """A new process loads the one-thread compilation instead of compiling it again (about
    10 s for the v1 twin): it must be cached, and in files that are not the parallel
    compilation's, whose cache index cannot tell the two apart."""
    from cuda_kernels.cpu.launch import serial
    from cuda_kernels.cpu.paged_attention import paged_attention_v1

    twin = serial(paged_attention_v1)
    assert not twin.targetoptions.get("parallel")
    assert twin._cache.cache_path, "the serial twin is not cached on disk"
    parallel_file = paged_attention_v1._cache._cache_file._index_name
    assert twin._cache._cache_file._index_name != parallel_file
    assert twin.py_func.__code__ is paged_attention_v1.py_func.__code__


def test_numba_is_given_torchs_thread_count_once_a_change_not_once_a_call(monkeypatch):
    """Setting Numba's thread count takes a process-wide lock (about 0.08 ms from cold caches),
    so ``on_torch_threads`` sets it only when torch's count changed since this thread last set
    it: once for three calls on two threads, not again after a call on one (which runs the
    serial twin and leaves Numba's count as it was), and Numba ends on torch's count."""
    import numba

    from cuda_kernels.cpu import launch

    case = make_case(2, seq_lens=[9], num_heads=4, num_kv_heads=2, head_dim=8, block_size=4)
    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    if threads < 2:
        pytest.skip("Numba has one thread here")
    sets = []
    real_set = numba.set_num_threads
    monkeypatch.setattr(numba, "set_num_threads", lambda n: (sets.append(n), real_set(n)))
    monkeypatch.setattr(launch.numba_threads, "count", None, raising=False)
    previous = torch.get_num_threads()
    try:
        for torch_threads in (2, 2, 1, 2, 2):
            torch.set_num_threads(torch_threads)
            cpu.paged_attention_decode(*case.args)
    finally:
        torch.set_num_threads(previous)
    assert sets == [2]
    assert numba.get_num_threads() == 2


STEP_THROUGH = """
import torch
from cuda_kernels import cpu
from minipaged import attention, fp8

torch.manual_seed(0)
torch.set_num_threads(1)
dtype = torch.float8_e4m3fn
pools, scales = [], {}
for name in ("k_scale", "v_scale"):
    pool = torch.randn(6, 2, 4, 8)  # [blocks, N_KV, B, d_h]
    scales[name] = fp8.scale_for(pool.abs().amax(dim=(0, 2, 3)), dtype)
    pools.append(fp8.quantize(pool, scales[name].view(-1, 1, 1), dtype))
args = (torch.randn(2, 4, 8), *pools, torch.tensor([[3, 1, 5], [0, 2, 4]], dtype=torch.int32))
args += (torch.tensor([11, 7], dtype=torch.int32), 0.35, 4)
got = cpu.paged_attention_decode(*args, **scales)
torch.testing.assert_close(got, attention.paged_attention_decode(*args, **scales))
"""
"""A process with Numba's compiler off that runs the v1 twin on FP8 pools on one thread and
checks it against the reference."""


def test_a_twin_runs_as_python_with_numbas_compiler_off():
    """``NUMBA_DISABLE_JIT=1``, to step through a twin in a debugger: the one-thread twin is
    the Python function itself (there is no compiled twin to copy), and the FP8 decoder's
    Python body gives the reference's result."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    run = subprocess.run(
        [sys.executable, "-c", STEP_THROUGH],
        env=env | {"NUMBA_DISABLE_JIT": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize(("start", "end"), [(5, 27), (8, 16), (3, 6), (0, 1), (13, 30)])
def test_attend_reads_only_tokens_start_to_end_even_inside_blocks(start, end):
    """The twins' ``attend`` over tokens ``start .. end - 1`` that begin and end inside
    blocks, in passes of four rows and fewer: every other slot of the sequence is NaN, so a
    row read outside the range would poison the result."""
    from cuda_kernels.cpu.paged_attention import attend

    case = make_case(4, seq_lens=[30], num_heads=4, num_kv_heads=2, head_dim=16, block_size=8)
    table = case.block_tables[0]
    key_pool, value_pool = case.key_pool.clone(), case.value_pool.clone()
    for t in [*range(start), *range(end, 30)]:
        key_pool[table[t // 8], :, t % 8] = math.nan
        value_pool[table[t // 8], :, t % 8] = math.nan
    scale = np.float32(0.25)
    for kv_head in range(2):
        q = case.query[0, 2 * kv_head : 2 * kv_head + 2]  # the group of query heads
        acc = np.zeros((2, 16), np.float32)
        no_fp8 = decode_fields(torch.float32)
        pools = (key_pool.numpy(), value_pool.numpy(), table.numpy(), kv_head)
        m_prev, l_prev = attend(q.numpy(), acc, *pools, start, end, scale, no_fp8)
        k = case.keys[0][kv_head, start:end]
        v = case.values[0][kv_head, start:end]
        scores = scale * q @ k.T  # [group, end - start]
        torch.testing.assert_close(torch.from_numpy(m_prev), scores.max(dim=1).values, **TOLERANCE)
        want = torch.softmax(scores, dim=1) @ v
        torch.testing.assert_close(torch.from_numpy(acc / l_prev[:, None]), want, **TOLERANCE)
