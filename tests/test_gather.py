"""§4's gather (``minipaged.gather``): reading through the block table into token order, and
the workspace that makes the vectorized reference reuse its memory from call to call."""

from __future__ import annotations

import math
import threading

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_attention import decode_cases, decode_oracle

from minipaged.attention import paged_attention_decode
from minipaged.gather import Workspace, gather_kv, thread_workspace


def paged(case):
    return (case.key_pool, case.value_pool, case.block_tables, case.seq_lens, case.block_size)


def assert_gathered_tokens_are_the_sequences(gathered, case):
    keys, values, valid = gathered
    for b, (k, v) in enumerate(zip(case.keys, case.values, strict=True)):
        n = k.shape[1]
        assert torch.equal(keys[:, b, :n], k) and torch.equal(values[:, b, :n], v)
        assert torch.all(keys[:, b, n:] == 0), "an unused slot's key reached the gather"
        assert torch.all(values[:, b, n:] == 0), "an unused slot's value reached the gather"
        assert valid[b].tolist() == [t < n for t in range(valid.shape[1])]


# A run of calls of growing and shrinking shapes through one workspace: a buffer that kept a
# larger call's data, or a view cut at the wrong size, would show in some later call.
@settings(deadline=None, max_examples=25)
@given(st.lists(decode_cases(), min_size=2, max_size=4))
def test_a_reused_workspace_gives_what_fresh_memory_gives(drawn_cases):
    workspace = Workspace()
    for case, query, _ in drawn_cases:
        assert_gathered_tokens_are_the_sequences(gather_kv(*paged(case)), case)
        assert_gathered_tokens_are_the_sequences(gather_kv(*paged(case), workspace=workspace), case)
        scale = 1 / math.sqrt(query.shape[-1])
        atol = 1e-5 if query.dtype == torch.float32 else 1e-10
        actual = paged_attention_decode(query, *paged(case)[:4], scale, case.block_size)
        torch.testing.assert_close(actual, decode_oracle(query, case, scale), atol=atol, rtol=atol)


def test_a_workspace_buffer_is_reused_and_grows_only_when_too_small():
    workspace, like = Workspace(), torch.empty(0)
    first = workspace.take("keys", (4, 8), like)
    assert workspace.take("keys", (2, 8), like).data_ptr() == first.data_ptr()
    assert workspace.take("values", (4, 8), like).data_ptr() != first.data_ptr()
    grown = workspace.take("keys", (64, 8), like)
    assert grown.shape == (64, 8)
    assert workspace.take("keys", (4, 8), like).data_ptr() == grown.data_ptr()
    assert workspace.take("keys", (4, 8), like.double()).dtype == torch.float64


def test_without_a_workspace_a_gather_returns_tensors_the_caller_keeps():
    pool = torch.arange(2 * 1 * 4 * 2, dtype=torch.float32).view(2, 1, 4, 2)
    first = gather_kv(pool, pool, torch.tensor([[0]]), torch.tensor([4]), 4)[0].clone()
    kept = gather_kv(pool, pool, torch.tensor([[0]]), torch.tensor([4]), 4)[0]
    gather_kv(pool, pool, torch.tensor([[1]]), torch.tensor([4]), 4)
    assert torch.equal(kept, first), "a later gather overwrote an earlier one's result"


def test_a_workspace_makes_one_index_for_a_run_of_gathers_through_the_same_tables():
    workspace = Workspace()
    first = workspace.index(torch.tensor([[2, 0]]), torch.tensor([3]), 2, 4)
    again = workspace.index(torch.tensor([[2, 0]], dtype=torch.int32), torch.tensor([3]), 2, 4)
    assert again is first
    assert workspace.index(torch.tensor([[2, 1]]), torch.tensor([3]), 2, 4) is not first
    assert workspace.index(torch.tensor([[2, 0]]), torch.tensor([3]), 2, 5) is not first


def test_a_table_changed_in_place_is_never_read_through_a_stale_index():
    """The engine builds new tables each step, but a caller may refill the same tensors: the
    workspace compares what an index was made from by value, not by tensor."""
    pool = torch.arange(4 * 1 * 2 * 1, dtype=torch.float32).view(4, 1, 2, 1)
    tables, lens = torch.tensor([[1, 2]]), torch.tensor([3])
    workspace = Workspace()
    gather_kv(pool, pool, tables, lens, 2, workspace=workspace)
    tables[0, 0], lens[0] = 3, 4
    keys, values, valid = gather_kv(pool, pool, tables, lens, 2, workspace=workspace)
    fresh = gather_kv(pool, pool, tables, lens, 2)
    assert torch.equal(keys, fresh[0]) and torch.equal(values, fresh[1])
    assert torch.equal(valid, fresh[2])


def test_each_thread_has_its_own_workspace():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(thread_workspace()))
    thread.start()
    thread.join()
    assert thread_workspace() is thread_workspace()
    assert seen[0] is not thread_workspace()


def test_a_workspace_made_under_inference_mode_serves_a_later_call_outside_it():
    """The engine attends under ``torch.inference_mode()``, a student's script outside it: one
    thread's workspace serves both, in either order."""
    pool = torch.arange(2 * 1 * 4 * 2, dtype=torch.float32).view(2, 1, 4, 2)
    args = (pool, pool, torch.tensor([[1]]), torch.tensor([3]), 4)
    workspace = Workspace()
    with torch.inference_mode():
        inside = gather_kv(*args, workspace=workspace)[0].clone()
    outside = gather_kv(*args, workspace=workspace)[0]
    assert torch.equal(inside, outside)
    with torch.inference_mode():
        assert torch.equal(gather_kv(*args, workspace=workspace)[0], outside)


def test_an_index_made_under_inference_mode_serves_a_decode_with_gradients_outside_it():
    """A student may differentiate through the reference after the engine ran under
    ``torch.inference_mode()`` with the same tables: the workspace's index must not be an
    inference tensor, which autograd could not save."""
    pool = torch.randn(3, 1, 4, 2)
    paged = (pool, pool, torch.tensor([[2, 0]]), torch.tensor([6]))
    with torch.inference_mode():
        paged_attention_decode(torch.randn(1, 2, 2), *paged, 0.5, 4)
    query = torch.randn(1, 2, 2, requires_grad=True)
    paged_attention_decode(query, *paged, 0.5, 4).sum().backward()
    assert query.grad is not None and torch.isfinite(query.grad).all()
