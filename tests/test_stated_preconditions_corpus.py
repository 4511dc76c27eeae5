"""Every precondition a public docstring states is refused when a call breaks it: a
``ValueError`` or ``TypeError`` whose words name what was wrong and the way out, raised before
anything changes, and the object takes a good call afterwards.

``STATED`` is the table (the statement, the call that breaks it, the words); the generated
tests below it cover the statements that hold over a family of inputs: ``KVCache.set_scales``
on every pool dtype that is not FP8 and after a write to each pool, device and host, key and
value, first layer and last; ``fp8``'s "``scale`` broadcasts against ``x``" for each of its
three functions and scales of every rank; ``LLMEngine.add_request``'s ``params`` of every falsy
kind (``params or SamplingParams()`` took them as the default). All in this process: one small
engine, and caches of a few hundred bytes."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from minipaged import LLM, SamplingParams, fp8
from minipaged.block_manager import BlockManager
from minipaged.contract import POOL_DTYPES
from minipaged.kv_cache import KVCache, write_kv
from minipaged.kv_calibration import calibrate_kv_scales, calibration_tokens
from minipaged.memory import expected_static_internal_waste, static_internal_waste
from minipaged.prefix_cache import HashPrefixCache
from minipaged.radix_cache import RadixCache
from minipaged.speculative.config import SpeculativeConfig

E4M3 = torch.float8_e4m3fn
SHAPE = (2, 6, 2, 4, 8)  # num_layers, num_blocks, num_kv_heads, B, head_dim
SCALES = (torch.full((2, 2), 0.5), torch.full((2, 2), 0.25))  # [num_layers, num_kv_heads]


def fp8_cache() -> KVCache:
    return KVCache(*SHAPE, num_cpu_blocks=3, dtype=E4M3)


def cache_state(cache: KVCache) -> list[torch.Tensor]:
    """Everything a refused call must leave as it was: the scales and every pool's bytes."""
    pools = (cache._key, cache._value, cache._host_key, cache._host_value)
    return [
        cache.k_scale.clone(),
        cache.v_scale.clone(),
        *(p.view(torch.uint8).clone() for p in pools),
    ]


def write_one_token(cache: KVCache, value: float = 1.0) -> None:
    """A good write of one token of float32 ``value``s into slot 0 of the first layer, under
    the cache's scales when it is FP8 (``KVCache.scales``)."""
    key = torch.full((1, cache.num_kv_heads, cache.head_dim), value)
    scales = cache.scales(0, key.dtype)
    write_kv(cache.key[0], cache.value[0], key, key, torch.tensor([0]), **scales)


def manager_with_sequence() -> BlockManager:
    manager = BlockManager(8, block_size=4)
    manager.allocate(1, 5)
    return manager


# name: (build the object, the call that breaks the statement, a good call after, exception,
# words of its message). Each statement is quoted from the docstring of the function it names.
STATED: dict[str, tuple[Callable, Callable, Callable, type, str]] = {
    "KVCache.set_scales: FP8 scales": (
        lambda: KVCache(*SHAPE),
        lambda c: c.set_scales(*SCALES),
        write_one_token,
        ValueError,
        "build the cache with an FP8 dtype",
    ),
    "KVCache.set_scales: before anything is written": (
        lambda: (cache := fp8_cache(), write_one_token(cache))[0],
        lambda c: c.set_scales(*SCALES),
        write_one_token,
        ValueError,
        "set the scales before the first write",
    ),
    "KVCache.copy_blocks: destinations must be distinct": (
        fp8_cache,
        lambda c: c.copy_blocks([(0, 2), (1, 2)]),
        lambda c: c.copy_blocks([(0, 2)]),
        ValueError,
        "each destination must appear once",
    ),
    "KVCache.copy_blocks: no destination may also be a source": (
        fp8_cache,
        lambda c: c.copy_blocks([(0, 1), (1, 2)]),
        lambda c: c.copy_blocks([(0, 2)]),
        ValueError,
        "both source and destination",
    ),
    "fp8.quantize: dtype is one of FP8_DTYPES": (
        lambda: None,
        lambda _: fp8.quantize(torch.ones(3), 0.5, torch.float16),
        lambda _: fp8.quantize(torch.ones(3), 0.5, E4M3),
        ValueError,
        "dtype must be an FP8 format",
    ),
    "fp8.quantize: scale broadcasts against x": (
        lambda: None,
        lambda _: fp8.quantize(torch.ones(3, 2, 8), torch.ones(2), E4M3),
        lambda _: fp8.quantize(torch.ones(3, 2, 8), torch.ones(2, 1), E4M3),
        ValueError,
        "give one scale per KV head as scale[:, None]",
    ),
    "HashPrefixCache.insert: a block is registered at most once": (
        lambda: HashPrefixCache(2),
        lambda c: c.insert([1, 2, 3, 4], [7, 7]),
        lambda c: c.insert([1, 2, 3, 4], [7, 8]),
        ValueError,
        "a distinct block for each of the 2 full blocks",
    ),
    "RadixCache.insert: every cached block is on exactly one edge": (
        lambda: RadixCache(2),
        lambda c: c.insert([1, 2, 3, 4], [7, 7]),
        lambda c: c.insert([1, 2, 3, 4], [7, 8]),
        ValueError,
        "a distinct block for each of the 2 full blocks",
    ),
    "BlockManager.allocate: a new sequence": (
        manager_with_sequence,
        lambda m: m.allocate(1, 3),
        lambda m: m.allocate(2, 3),
        ValueError,
        "already has a block table; free it first",
    ),
    "BlockManager.fork: into a new sequence": (
        manager_with_sequence,
        lambda m: m.fork(1, 1),
        lambda m: m.fork(1, 2),
        ValueError,
        "cannot fork into sequence 1: it already has a block table",
    ),
    "SpeculativeConfig: ngram_min <= ngram_max": (
        lambda: None,
        lambda _: SpeculativeConfig(ngram_min=3, ngram_max=2),
        lambda _: SpeculativeConfig(ngram_min=2, ngram_max=2),
        ValueError,
        "ngram_min (3) must be <= ngram_max (2)",
    ),
    "static_internal_waste: length at most max_length": (
        lambda: None,
        lambda _: static_internal_waste(9, 8),
        lambda _: static_internal_waste(8, 8),
        ValueError,
        "length 9 exceeds max_length 8: raise max_length",
    ),
    "expected_static_internal_waste: probabilities summing to 1": (
        lambda: None,
        lambda _: expected_static_internal_waste({4: 0.5, 6: 0.25}, 8),
        lambda _: expected_static_internal_waste({4: 0.5, 6: 0.5}, 8),
        ValueError,
        "probabilities must sum to 1",
    ),
}


def state_of(thing: object) -> object:
    """What a refused call must leave as it was, for each kind of object in ``STATED``."""
    if isinstance(thing, KVCache):
        return cache_state(thing)
    if isinstance(thing, BlockManager):
        return thing.snapshot()
    if isinstance(thing, HashPrefixCache | RadixCache):
        return thing.contents()
    return thing


def same(a: object, b: object) -> bool:
    if isinstance(a, list):
        return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("case", STATED)
def test_a_stated_precondition_is_refused_before_anything_changes(case):
    build, bad, good, error, words = STATED[case]
    thing = build()
    before = state_of(thing)
    with pytest.raises(error) as refused:
        bad(thing)
    assert words in str(refused.value)
    assert same(state_of(thing), before)
    good(thing)  # still usable


NOT_FP8 = [dtype for dtype in POOL_DTYPES if not fp8.is_fp8(dtype)]


@pytest.mark.parametrize("dtype", NOT_FP8, ids=str)
def test_scales_on_a_cache_that_is_not_fp8_are_refused_naming_its_dtype(dtype):
    """A float pool stores the keys and values themselves; the engine reads it without scales
    (``KVCache.scales``), so scales set on it would be ignored."""
    cache = KVCache(*SHAPE, dtype=dtype)
    with pytest.raises(ValueError, match=f"this cache holds {dtype}.*kv_cache_dtype='fp8_e4m3'"):
        cache.set_scales(*SCALES)
    assert torch.equal(cache.k_scale, torch.ones(2, 2))
    assert torch.equal(cache.v_scale, torch.ones(2, 2))


POOLS = ["key", "value", "host_key", "host_value"]


@pytest.mark.parametrize("layer", [0, -1])
@pytest.mark.parametrize("pool", POOLS)
def test_scales_after_any_pool_was_written_are_refused_and_kept(pool, layer):
    """One nonzero byte in any pool, in any layer, is a value the new scales would change."""
    cache = fp8_cache()
    getattr(cache, pool)[layer].view(torch.uint8)[-1, -1, -1, -1] = 0x38  # e4m3's 1.0, last
    before = cache_state(cache)
    with pytest.raises(ValueError, match="after keys and values were written"):
        cache.set_scales(*SCALES)
    assert same(cache_state(cache), before)


def test_scales_set_before_the_first_write_are_the_scales_it_writes_under():
    cache = fp8_cache()
    write_one_token(cache, 0.0)  # zeros written mean 0 under any scale: nothing to change
    cache.set_scales(*SCALES)
    write_one_token(cache)
    stored = fp8.dequantize(cache.key[0][0, :, 0], cache.k_scale[0][:, None])  # [N_KV, d_h]
    assert torch.equal(stored, torch.ones(2, 8))
    assert torch.equal(cache.k_scale, SCALES[0])


X = torch.linspace(-2, 2, 48).reshape(3, 2, 8)  # keys [N, N_KV, d_h]
FP8_CALLS = {
    "quantize": lambda s: fp8.quantize(X, s, E4M3),
    "dequantize": lambda s: fp8.dequantize(fp8.quantize(X, 0.5, E4M3), s),
    "error_bound": lambda s: fp8.error_bound(X, s, E4M3),
}
FITS = [(), (1,), (8,), (2, 1), (3, 1, 1), (3, 2, 8), (1, 1, 1)]
MISFITS = [(2,), (3,), (2, 2), (4, 1, 1), (5, 1, 1, 1), (1, 3, 2, 8), (3, 2, 8, 1)]


@pytest.mark.parametrize("shape", FITS + MISFITS, ids=str)
@pytest.mark.parametrize("call", FP8_CALLS)
def test_an_fp8_scale_broadcasts_against_x_and_keeps_its_shape(call, shape):
    """``scale`` broadcasts against ``x`` (the docstrings of all three): a scale that does
    not is refused naming both shapes, and one that would make the result larger than ``x``
    too (``[5, 1, 1, 1]`` gave five copies)."""
    scale = torch.full(shape, 0.5)
    if shape in FITS:
        assert FP8_CALLS[call](scale).shape == X.shape
        return
    words = f"scale of shape {list(shape)} must broadcast against x of shape [3, 2, 8]"
    with pytest.raises(ValueError, match=re.escape(words)):
        FP8_CALLS[call](scale)


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_gpu_blocks=16, block_size=4, backend="torch")


@pytest.mark.parametrize("flags", [(True, False), (False, True)], ids=str)
def test_generate_refuses_show_progress_and_use_tqdm_that_disagree(llm, flags):
    """``use_tqdm`` is vLLM's name for ``show_progress`` (``LLM.generate``): given both, the
    second won in silence. Both alike are one setting."""
    show_progress, use_tqdm = flags
    with pytest.raises(ValueError, match=f"show_progress={show_progress} and use_tqdm="):
        llm.generate([[1, 2]], show_progress=show_progress, use_tqdm=use_tqdm)
    assert not llm.engine.requests
    params = SamplingParams(max_tokens=1)
    assert llm.generate([[1, 2]], params, show_progress=False, use_tqdm=False)[0].outputs


def test_calibration_names_its_empty_token_ids(llm):
    """``calibrate_kv_scales`` prefills ``token_ids``: none was refused as a cache of 0
    blocks, in words about a cache the caller never built."""
    with pytest.raises(ValueError, match=r"needs token ids .* calibration_tokens\(model"):
        calibrate_kv_scales(llm.model, [], E4M3)
    tokens = calibration_tokens(llm.model, None)[:4]
    assert calibrate_kv_scales(llm.model, tokens, E4M3)[0].shape == (4, 2)


@pytest.mark.parametrize("params", [0, 0.0, False, "", [], (), {}], ids=repr)
def test_add_request_refuses_params_of_any_falsy_kind(llm, params):
    """ "``TypeError`` for a prompt or ``params`` of the wrong kind" (``check_request``): a
    falsy one was taken as the default, ``SamplingParams()``. Only None means that."""
    engine = llm.engine
    with pytest.raises(TypeError, match="sampling params must be a SamplingParams"):
        engine.add_request([1, 2, 3], params)
    assert not engine.requests and not engine.has_unfinished()
    request_id = engine.add_request([1, 2, 3], None)  # None is the default: still usable
    engine.abort_request(request_id)
