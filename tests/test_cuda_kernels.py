"""The Numba CUDA kernels, run in Numba's CUDA simulator, against the torch reference.

The properties every kernel implementation must have live in ``tests/kernel_properties.py``
(shared with the CPU twins); this module runs them on ``cuda_kernels`` and adds what only the
CUDA kernels have: the block reduction and the v2 kernel's first stage launched by hand; every
shared-memory access ordered by a barrier (the grader's race watcher); and the simulator's
shared arrays, repaired (``cuda_kernels.simulator``), shared by threads that allocate together.

The simulator must be chosen before numba is first imported, so these tests run in their own
process: ``NUMBA_ENABLE_CUDASIM=1 .venv/bin/python -m pytest tests/test_cuda_kernels.py``.
A simulated thread block costs about 0.1 s per launch: cases are small and examples few.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time

import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip(
        "simulator tests: run them alone, with NUMBA_ENABLE_CUDASIM=1 set before numba loads: "
        "NUMBA_ENABLE_CUDASIM=1 .venv/bin/python -m pytest tests/test_cuda_kernels.py",
        allow_module_level=True,
    )
pytest.importorskip("numba.cuda", reason="the Numba kernels need numba and numba-cuda")

import numpy as np
import torch
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
from numba import cuda, float32
from numba.cuda.simulator import kernelapi

import cuda_kernels
from cuda_kernels.block_reduce import REDUCTION, block_reductions
from cuda_kernels.decode_arguments import by_table, fp8_arguments
from cuda_kernels.launch import NUM_THREADS, kernel_array
from cuda_kernels.paged_attention_v2 import partitions_kernel
from minipaged.attention import paged_attention_decode_partitions
from minipaged.grader.shared_memory_races import watch_shared_memory


@pytest.fixture(scope="module")
def kernels():
    return cuda_kernels


@pytest.fixture(scope="module")
def backend_name():
    return "numba"


def test_the_simulator_uses_the_shared_memory_tree_and_one_warp():
    assert (REDUCTION, NUM_THREADS) == ("tree", 32)


block_max, block_sum = block_reductions("tree")


@cuda.jit
def reduce_each_thread(values, maxima, sums):
    scratch = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    maxima[t] = block_max(values[t], scratch)
    sums[t] = block_sum(values[t], scratch)


def test_tree_reduction_gives_every_thread_the_block_max_and_sum():
    values = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    maxima, sums = np.zeros(32, np.float32), np.zeros(32, np.float32)
    reduce_each_thread[1, 32](values, maxima, sums)
    assert (maxima == values.max()).all()
    np.testing.assert_allclose(sums, np.full(32, values.sum()), rtol=1e-5)


def test_v2_stage_one_writes_each_partitions_m_l_o_and_exact_zeros_past_the_end():
    case = make_case(3, seq_lens=[5, 40], num_heads=2, num_kv_heads=1, head_dim=8, block_size=8)
    m_ref, l_ref, o_ref = paged_attention_decode_partitions(*case.args, partition_size=16)
    m_k, l_k, o_k = torch.empty_like(m_ref), torch.empty_like(l_ref), torch.empty_like(o_ref)
    query, key_pool, value_pool, block_tables, seq_lens, scale, _ = case.args
    tensors = (m_k, l_k, o_k, query, key_pool, value_pool, block_tables, seq_lens)
    grid = (2, 2, 3)  # (num_heads, batch, P): P = ceil(40 / 16) partitions
    no_fp8 = fp8_arguments(key_pool, None, None, kernel_array, by_table)  # float32 pools: scales 1
    partitions_kernel(8)[grid, NUM_THREADS](
        *(t.numpy() for t in tensors), np.float32(scale), 16, *no_fp8
    )
    for got, want in ((m_k, m_ref), (l_k, l_ref), (o_k, o_ref)):
        torch.testing.assert_close(got, want, **TOLERANCE)
    assert (m_k[0, :, 1:] == -math.inf).all()  # sequence 0 (5 tokens) is empty past partition 0
    assert (l_k[0, :, 1:] == 0).all()
    assert (o_k[0, :, 1:] == 0).all()


# Two rounds of T = 32 threads for sequence 0 (37 tokens, the last block part full); sequence 1
# (5 tokens) leaves v2's partitions 1 and 2 empty, so their thread blocks return before any
# barrier.
BARRIER_CASE = make_case(5, seq_lens=[37, 5], num_heads=1, num_kv_heads=1, head_dim=8, block_size=8)


def test_every_shared_memory_access_of_the_kernels_is_ordered_by_a_barrier():
    """No two threads of a block touch one shared element between the same two barriers, one
    of them writing, and every thread passes every barrier: in v1 and both stages of v2."""
    with watch_shared_memory() as log:
        v1 = cuda_kernels.paged_attention_decode(*BARRIER_CASE.args)
        v2 = cuda_kernels.paged_attention_decode_v2(*BARRIER_CASE.args, partition_size=16)
    assert log.races == []
    assert log.divergent_barriers() == []
    torch.testing.assert_close(v1, BARRIER_CASE.oracle(), **TOLERANCE)
    torch.testing.assert_close(v2, BARRIER_CASE.oracle(), **TOLERANCE)


@pytest.fixture
def threads_arrive_together(monkeypatch):
    """np.empty that, in a simulated thread, first sleeps 50 ms: the thread that makes a shared
    array yields to the others just before storing it, as the OS may at any moment."""
    empty = np.empty

    def slow_empty(*args, **kwargs):
        if hasattr(threading.current_thread(), "threadIdx"):
            time.sleep(0.05)
        return empty(*args, **kwargs)

    monkeypatch.setattr(np, "empty", slow_empty)


def test_threads_that_allocate_a_shared_array_together_get_the_same_array(
    threads_arrive_together,
):
    got = cuda_kernels.paged_attention_decode(*BARRIER_CASE.args)
    torch.testing.assert_close(got, BARRIER_CASE.oracle(), **TOLERANCE)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the garbage reaches exp and a division
def test_the_simulators_own_two_step_allocation_splits_the_arrays_of_threads_arriving_together(
    threads_arrive_together, monkeypatch
):
    """The test above can fail: numba-cuda's allocation (look up, then store) gives threads
    arriving together arrays of their own, and the kernel's result is garbage or a crash."""

    def look_up_then_store(self, shape, dtype, alignment=None):
        caller = (sys._getframe(1).f_code.co_filename, sys._getframe(1).f_lineno)
        array = self._allocations.get(caller)
        if array is None:
            array = np.empty(shape, kernelapi.numpy_support.as_dtype(dtype))
            self._allocations[caller] = array
        return array

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "array", look_up_then_store)
    try:
        got = cuda_kernels.paged_attention_decode(*BARRIER_CASE.args)
    except IndexError:
        return  # a block id read from an array no thread wrote, out of the pool
    except OverflowError:
        return  # a score read from an array no thread wrote, too large for math.exp
    assert not torch.allclose(got, BARRIER_CASE.oracle(), equal_nan=True)
