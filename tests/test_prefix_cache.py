"""Prefix caching: the same tokens with and without it, less prefill with it, and the known
traps (same-step sharing, fully cached prompts, eviction of blocks in use, hits after
preemption)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minipaged import invariants, prefix_cache
from minipaged.block_manager import BlockManager
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine
from minipaged.prefix_cache import HashPrefixCache
from minipaged.radix_cache import RadixCache
from minipaged.sampling import SamplingParams
from minipaged.scheduler import Scheduler
from minipaged.sequence import Sequence, SequenceGroup

CACHES = ["hash", "radix"]
SYSTEM = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]  # 13 tokens: 3 full blocks of B=4
GREEDY = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def model(hf_llama):
    return load_model(hf_llama[1])


def run(model, prompts, prefix_caching, arrivals=None, **engine_args):
    """Greedy outputs by prompt index, and every step output."""
    args = dict(block_size=4, num_gpu_blocks=64, num_cpu_blocks=16) | engine_args
    engine = LLMEngine(model, prefix_caching=prefix_caching, **args)
    arrivals = arrivals or [0] * len(prompts)
    outputs, steps, ids, step = {}, [], {}, 0
    while step <= max(arrivals) or engine.has_unfinished():
        for index, prompt in enumerate(prompts):
            if arrivals[index] == step:
                ids[engine.add_request({"prompt_token_ids": prompt}, GREEDY)] = index
        out = engine.step()
        invariants.assert_holds(out.state)
        steps.append(out)
        for finished in out.finished:
            outputs[ids[finished.request_id]] = finished.outputs[0].token_ids
        step += 1
    assert engine.block_manager.device.num_free == engine.block_manager.device.num_blocks
    return outputs, steps


def kinds(steps):
    return [event.kind for step in steps for event in step.events]


# -- the cache alone --------------------------------------------------------------------------


@pytest.mark.parametrize("cache_type", [HashPrefixCache, RadixCache])
def test_match_finds_the_longest_cached_run_of_full_blocks(cache_type):
    cache = cache_type(block_size=2)
    cache.insert([1, 2, 3, 4, 5], [10, 11, 12])  # 2 full blocks; block 12 is partial
    assert cache.match([1, 2, 3, 4, 9, 9]) == [10, 11]
    assert cache.match([1, 2, 9, 9]) == [10]
    assert cache.match([9, 2, 3, 4]) == [], "block 1 is only found after its own parent"
    assert cache.cached_blocks() == (10, 11)


def test_a_hash_collision_is_never_a_hit(monkeypatch):
    monkeypatch.setattr(prefix_cache, "hash", lambda key: 42, raising=False)
    cache = HashPrefixCache(block_size=2)
    cache.insert([1, 2], [10])
    assert cache.match([3, 4]) == [], "same hash, other tokens: not a hit"


@pytest.mark.parametrize("cache_type", [HashPrefixCache, RadixCache])
def test_forgotten_blocks_are_no_longer_found(cache_type):
    cache = cache_type(block_size=2)
    cache.insert([1, 2, 3, 4], [10, 11])
    assert cache.forget(10)
    assert not cache.forget(10)
    assert cache.match([1, 2, 3, 4]) == []


def test_radix_match_ending_inside_an_edge_leaves_it_whole():
    cache = RadixCache(block_size=1)
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    assert cache.match([1, 2, 9]) == [10, 11]
    (edge,) = cache.root.children.values()
    assert edge.blocks == [10, 11, 12, 13], "a lookup must not split an edge"
    assert edge.children == {}


def test_radix_insert_leaving_an_edge_partway_splits_it():
    cache = RadixCache(block_size=1)
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    assert cache.insert([1, 2, 7], [10, 11, 20]) == [20]
    (edge,) = cache.root.children.values()
    assert edge.blocks == [10, 11], "the edge was split after the shared blocks"
    assert sorted(child.blocks for child in edge.children.values()) == [[12, 13], [20]]
    assert cache.match([1, 2, 3, 4]) == [10, 11, 12, 13]
    assert cache.match([1, 2, 7]) == [10, 11, 20]


def test_radix_forgetting_a_block_cuts_its_subtree():
    cache = RadixCache(block_size=1)
    cache.insert([1, 2, 3], [10, 11, 12])
    cache.insert([1, 2, 4], [10, 11, 13])
    assert cache.forget(11)
    assert cache.cached_blocks() == (10,)
    assert cache.match([1, 2, 3]) == [10]
    assert cache.forget(10) and cache.root.children == {}


@pytest.mark.parametrize("cache_type", [HashPrefixCache, RadixCache])
def test_a_prefix_is_shared_whichever_block_first_held_the_parent(cache_type):
    cache = cache_type(block_size=2)
    cache.insert([1, 2], [10])
    # Another sequence computed the same first block itself (block 20) and went on: its later
    # blocks are registered under the cached prefix, since their contents depend on tokens,
    # not on block ids (vLLM's chained hash is computed from token contents).
    assert cache.insert([1, 2, 3, 4], [20, 21]) == [21]
    assert 20 not in cache, "the first copy of [1, 2] stays the one the cache names"
    assert cache.match([1, 2, 3, 4]) == [10, 21]


def test_a_hash_block_whose_prefix_was_evicted_is_found_again_once_the_prefix_is_cached():
    cache = HashPrefixCache(block_size=2)
    cache.insert([1, 2, 3, 4], [10, 11])
    assert cache.forget(10)
    assert cache.match([1, 2, 3, 4]) == [], "block 11 cannot be reached without its prefix"
    cache.insert([1, 2], [30])  # another block holds the prefix's contents again
    assert cache.match([1, 2, 3, 4]) == [30, 11]


def test_a_hash_collision_stops_the_chain_it_would_corrupt(monkeypatch):
    monkeypatch.setattr(
        prefix_cache,
        "hash",
        lambda key: 42 if key[1] in {(1, 2), (5, 6)} else len(key[1]) * 1000 + key[1][0],
        raising=False,
    )
    cache = HashPrefixCache(block_size=2)
    cache.insert([1, 2], [10])
    assert cache.insert([5, 6, 7, 8], [20, 21]) == [], "[5, 6] collides with [1, 2]: stop"
    assert cache.match([5, 6, 7, 8]) == []


def test_unknown_prefix_cache_kind_is_refused_listing_the_choices():
    with pytest.raises(ValueError, match="one of 'hash', 'radix' or None, got 'lru'"):
        BlockManager(16, block_size=16, prefix_caching="lru")


# -- the block manager with a cache -----------------------------------------------------------


@pytest.mark.parametrize("kind", CACHES)
def test_a_second_prompt_shares_the_cached_prefix_and_not_its_last_block(kind):
    manager = BlockManager(num_gpu_blocks=16, block_size=4, prefix_caching=kind)
    first = manager.allocate(0, 12, list(range(12)))  # 3 full blocks
    second = manager.allocate(1, 12, list(range(12)))
    assert second.blocks[:2] == first.blocks[:2]
    assert second.blocks[2] != first.blocks[2], "the block of the last token is always private"
    assert second.cached_tokens == 8
    assert [manager.refcount(p) for p in first.blocks] == [2, 2, 1]


@pytest.mark.parametrize("kind", CACHES)
def test_released_cached_blocks_are_evicted_least_recently_released_first(kind):
    manager = BlockManager(num_gpu_blocks=6, block_size=2, prefix_caching=kind)
    old = manager.allocate(0, 5, [1, 2, 3, 4, 5]).blocks[:2]  # caches 2 full blocks
    manager.free(0)
    newer = manager.allocate(1, 5, [6, 7, 8, 9, 10]).blocks[:2]
    manager.free(1)
    manager.pop_events()
    manager.allocate(2, 2, [20, 21])  # the oldest free block was never cached: seq 0's tail
    manager.allocate(3, 2, [30, 31])  # next comes seq 0's last cached block
    evicted = [e.block for e in manager.pop_events() if e.kind == "prefix-evict"]
    assert evicted == [old[1]], "the child of the oldest release goes before its parent"
    assert manager.prefix_cache.match([6, 7, 8, 9]) == newer


@pytest.mark.parametrize("kind", CACHES)
def test_eviction_never_takes_a_block_a_running_sequence_holds(kind):
    manager = BlockManager(num_gpu_blocks=4, block_size=2, prefix_caching=kind)
    held = manager.allocate(0, 4, [1, 2, 3, 4]).blocks
    manager.allocate(1, 4, [5, 6, 7, 8])
    manager.free(1)
    manager.allocate(2, 4, [9, 10, 11, 12])  # needs both freed blocks: evicts seq 1's
    assert manager.prefix_cache.match([1, 2, 3, 4]) == held
    invariants.assert_holds(manager)


# -- the engine ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", CACHES)
def test_requests_sharing_a_system_prompt_get_the_same_tokens_with_less_prefill(model, kind):
    prompts = [SYSTEM + [40 + i, 50 + i] for i in range(4)]
    arrivals = [0, 3, 4, 9]
    plain, plain_steps = run(model, prompts, None, arrivals)
    cached, cached_steps = run(model, prompts, kind, arrivals)
    assert cached == plain
    assert sum(s.num_prefill_tokens for s in cached_steps) == 15 + 3 * (15 - 12)
    assert sum(s.num_cached_tokens for s in cached_steps) == 3 * 12
    assert sum(s.num_prefill_tokens for s in plain_steps) == 4 * 15


@pytest.mark.parametrize("kind", CACHES)
def test_a_multi_turn_conversation_reuses_every_earlier_turn(model, kind):
    turn1 = SYSTEM + [30, 31]
    first = run(model, [turn1], None)[0][0]
    turn2 = turn1 + first + [32, 33, 34]
    plain, _ = run(model, [turn1, turn2], None, arrivals=[0, 8])
    cached, steps = run(model, [turn1, turn2], kind, arrivals=[0, 8])
    assert cached == plain
    hits = [e for s in steps for e in s.events if e.kind == "prefix-hit"]
    assert hits and hits[-1].num_tokens >= 16, "turn 2 reuses turn 1's prompt and answer"


@pytest.mark.parametrize("kind", CACHES)
def test_two_requests_with_a_new_prefix_admitted_in_one_step_share_it(model, kind):
    prompts = [SYSTEM + [40], SYSTEM + [41]]
    plain, _ = run(model, prompts, None)
    cached, steps = run(model, prompts, kind)
    assert cached == plain
    assert "prefix-hit" in [e.kind for e in steps[0].events]
    assert steps[0].num_prefill_tokens == 14 + (14 - 12)


@pytest.mark.parametrize("kind", CACHES)
def test_a_fully_cached_prompt_still_computes_its_last_block(model, kind):
    prompt = SYSTEM[:12]  # exactly 3 blocks
    plain, _ = run(model, [prompt, prompt], None, arrivals=[0, 8])
    cached, steps = run(model, [prompt, prompt], kind, arrivals=[0, 8])
    assert cached == plain
    assert steps[8].num_prefill_tokens == 4 and steps[8].num_cached_tokens == 8


@pytest.mark.parametrize("kind", CACHES)
@pytest.mark.parametrize("preemption", ["swap", "recompute"])
def test_cache_hits_after_preemption_keep_the_tokens(model, kind, preemption):
    prompts = [SYSTEM + [40 + i] for i in range(4)]
    args = dict(num_gpu_blocks=9, preemption=preemption)
    plain, _ = run(model, prompts, None, **args)
    cached, steps = run(model, prompts, kind, **args)
    assert cached == plain
    assert "preempt" in kinds(steps) and "prefix-hit" in kinds(steps)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    requests=st.lists(
        st.tuples(
            st.integers(0, 6),  # arrival step
            st.sampled_from([[], SYSTEM[:5], SYSTEM, SYSTEM + [70, 71, 72]]),  # shared prefix
            st.lists(st.integers(3, 127), min_size=1, max_size=6),  # own suffix
        ),
        min_size=1,
        max_size=6,
    ),
    num_gpu_blocks=st.integers(12, 40),
    preemption=st.sampled_from(["swap", "recompute"]),
    kind=st.sampled_from(CACHES),
)
def test_random_streams_with_shared_prefixes_match_the_uncached_run(
    model, requests, num_gpu_blocks, preemption, kind
):
    prompts = [prefix + suffix for _, prefix, suffix in requests]
    arrivals = [arrival for arrival, _, _ in requests]
    args = dict(num_gpu_blocks=num_gpu_blocks, preemption=preemption)
    plain, _ = run(model, prompts, None, arrivals, **args)
    cached, _ = run(model, prompts, kind, arrivals, **args)
    assert cached == plain


# -- release order: children before parents, on every path -------------------------------------


def _release_by_free(manager):
    manager.free(0)


def _release_by_swap_out(manager):
    manager.swap_out([0])


def _release_by_preemption(mode):
    def release(manager):
        scheduler = Scheduler(manager, preemption=mode)
        params = SamplingParams(max_tokens=8)
        for seq, arrival in ((1, 0), (0, 1)):  # seq 0 arrived last: it is preempted
            # Each holds one sampled token more than its table: the next step computes it.
            tokens = [*range(13), 60] if seq == 0 else [50, 51, 52, 53, 54]
            group = SequenceGroup(str(seq), arrival, params, [Sequence(seq, tokens, len(tokens))],
                                  torch.Generator())  # fmt: skip
            scheduler.running.append(group)
        plan = scheduler.schedule()  # seq 1 needs a block for token 4: none is free
        assert [g.request_id for g in plan.preempted] == ["0"]
        return True  # seq 1's new block was this step's allocation

    return release


def _release_by_copy_on_write(manager):
    manager.fork(0, 2)
    manager.free(0)  # seq 2 still holds every block
    manager.free(1)  # one free, cached block
    manager.append_slot(2, [*range(13), 99])  # copy-on-write: seq 2 had shared the last block
    return True  # the copy was the allocation


RELEASES = {
    "free": _release_by_free,
    "swap-out": _release_by_swap_out,
    "preempt-recompute": _release_by_preemption("recompute"),
    "preempt-swap": _release_by_preemption("swap"),
    "copy-on-write": _release_by_copy_on_write,
}


@pytest.mark.parametrize("kind", CACHES)
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_release_path_keeps_the_cached_prefix_findable(kind, release):
    """The issue's repro, for every way blocks are released: a chain of three cached blocks
    survives the next allocation, because the tail is released (and so evicted) first."""
    manager = BlockManager(5, 5, block_size=4, watermark=0.0, prefix_caching=kind)
    chain = manager.allocate(0, 13, list(range(13))).blocks[:3]  # 3 full blocks + 1 partial
    manager.allocate(1, 4, [50, 51, 52, 53])  # the pool is full
    if not RELEASES[release](manager):
        manager.allocate(9, 1, [77])  # takes the front of the free list
    assert manager.prefix_cache.match(list(range(13))) == chain
    invariants.assert_holds(manager)
