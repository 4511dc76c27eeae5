"""Bad input to the Python surface: §4's attention (the reference and the kernels' CPU
twins), ``SamplingParams`` (generated from its fields) and the requests ``LLM.generate`` and
``LLMEngine.add_request`` take. Each is refused with a ``ValueError`` or ``TypeError`` whose one
line names the argument, never an ``AttributeError`` or a ``RuntimeError`` from inside torch;
and a refused request loses nothing already running."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from minipaged import LLM, SamplingParams, attention
from minipaged.checkpoint import EMBEDDED_MODELS
from minipaged.prompts import prompt_token_ids
from minipaged.tokenizer import Tokenizer

B, NUM_BLOCKS, NUM_KV_HEADS, NUM_HEADS, HEAD_DIM = 4, 8, 2, 4, 8


def good() -> dict:
    """A valid decode call: two sequences of 9 and 5 tokens."""
    gen = torch.Generator().manual_seed(0)
    return {
        "query": torch.randn(2, NUM_HEADS, HEAD_DIM, generator=gen),
        "key_pool": torch.randn(NUM_BLOCKS, NUM_KV_HEADS, B, HEAD_DIM, generator=gen),
        "value_pool": torch.randn(NUM_BLOCKS, NUM_KV_HEADS, B, HEAD_DIM, generator=gen),
        "block_tables": torch.tensor([[0, 1, 2], [3, 4, -1]], dtype=torch.int32),
        "seq_lens": torch.tensor([9, 5], dtype=torch.int32),
        "scale": HEAD_DIM**-0.5,
        "block_size": B,
    }


def changed(**changes):
    """``good()`` with ``changes``, each a value or a function of the good argument."""
    arguments = good()
    for name, change in changes.items():
        arguments[name] = change(arguments[name]) if callable(change) else change
    return arguments


NUMBER_KINDS = {"numpy": (np.int64, np.float32), "0-d tensor": (torch.tensor, torch.tensor)}
"""Numbers as they come out of arrays: ``(integer, real)`` makers of each kind, which the one
rule of ``minipaged.python_numbers`` takes as the Python numbers they equal."""

BAD_ATTENTION = {
    # (the arguments, the exception, words of its message)
    "query a list": (changed(query=torch.Tensor.tolist), TypeError, "query must be a torch.Tensor"),
    "query None": (changed(query=None), TypeError, "query must be a torch.Tensor"),
    "pool a numpy array": (changed(key_pool=torch.Tensor.numpy), TypeError, "key_pool"),
    "tables a list": (changed(block_tables=torch.Tensor.tolist), TypeError, "block_tables"),
    "lengths a list": (changed(seq_lens=[9, 5]), TypeError, "seq_lens must be a torch.Tensor"),
    "query float64": (changed(query=torch.Tensor.double), ValueError, "query has dtype"),
    "query float16": (changed(query=torch.Tensor.half), ValueError, "query has dtype"),
    "query integers": (changed(query=torch.Tensor.int), TypeError, "floating point"),
    "one pool float16": (changed(key_pool=torch.Tensor.half), ValueError, "key_pool holds"),
    "pool on meta": (
        changed(key_pool=lambda t: t.to("meta"), value_pool=lambda t: t.to("meta")),
        ValueError,
        "meta",
    ),
    "lengths on meta": (changed(seq_lens=lambda t: t.to("meta")), ValueError, "seq_lens is on"),
    "tables on meta": (
        changed(block_tables=lambda t: t.to("meta")),
        ValueError,
        "block_tables is on the meta device",
    ),
    "everything on meta": (
        {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in good().items()},
        ValueError,
        "meta",
    ),
    "float tables": (changed(block_tables=torch.Tensor.float), TypeError, "block_tables"),
    "bool tables": (changed(block_tables=lambda t: t > 0), TypeError, "block_tables"),
    "float lengths": (changed(seq_lens=torch.Tensor.float), TypeError, "seq_lens"),
    "bool lengths": (changed(seq_lens=lambda t: t > 0), TypeError, "seq_lens"),
    "2-D lengths": (changed(seq_lens=lambda t: t[None]), ValueError, "seq_lens must be [batch]"),
    "0-D lengths": (changed(seq_lens=torch.tensor(9)), ValueError, "seq_lens must be [batch]"),
    "table past the pool": (
        changed(block_tables=torch.tensor([[0, 1, NUM_BLOCKS], [3, 4, -1]])),
        ValueError,
        "outside the pool",
    ),
    "int64 table past int32": (
        changed(block_tables=torch.tensor([[0, 1, 2**40], [3, 4, -1]])),
        ValueError,
        "outside the pool",
    ),
    "negative length": (changed(seq_lens=torch.tensor([-1, 5])), ValueError, "seq_len -1"),
    "length past the table": (changed(seq_lens=torch.tensor([13, 5])), ValueError, "13"),
    "scale nan": (changed(scale=math.nan), ValueError, "scale"),
    "scale inf": (changed(scale=math.inf), ValueError, "scale"),
    "scale 0": (changed(scale=0.0), ValueError, "scale"),
    "scale negative": (changed(scale=-0.3), ValueError, "scale"),
    # finite, but infinite in float32: every logit q.k * scale would be too
    "scale 1e300": (changed(scale=1e300), ValueError, "scale must be a positive number up to"),
    "scale past float32": (changed(scale=1e39), ValueError, "the largest torch.float32"),
    "scale text": (changed(scale="0.3"), TypeError, "scale must be a number"),
    "scale None": (changed(scale=None), TypeError, "scale must be a number"),
    "block_size 0": (changed(block_size=0), ValueError, "block_size must be a positive"),
    "block_size float": (changed(block_size=4.0), TypeError, "block_size must be an integer"),
    "block_size True": (changed(block_size=True), TypeError, "block_size must be an integer"),
    "block_size text": (changed(block_size="4"), TypeError, "block_size must be an integer"),
}


def decoders():
    """Every decode path, reference and twins, by name; the twins only where numba is."""
    paths = {
        "reference": attention.paged_attention_decode,
        "loop": attention.paged_attention_decode_loop,
        "partitions": lambda **a: attention.paged_attention_decode_partitions(
            **a, partition_size=8
        ),
    }
    try:
        import cuda_kernels.cpu as twins
    except ImportError:
        return paths
    paths["twin v1"] = twins.paged_attention_decode
    paths["twin v2"] = lambda **a: twins.paged_attention_decode_v2(**a, partition_size=8)
    return paths


DECODERS = decoders()


@pytest.mark.parametrize("path", DECODERS)
@pytest.mark.parametrize("case", BAD_ATTENTION)
def test_every_decode_path_refuses_bad_arguments_naming_them(path, case):
    arguments, error, words = BAD_ATTENTION[case]
    with pytest.raises(error) as refused:
        DECODERS[path](**arguments)
    message = str(refused.value)
    assert words in message and "\n" not in message


@pytest.mark.parametrize("path", [name for name in DECODERS if name != "partitions"])
def test_every_decode_path_takes_numpy_numbers_as_the_python_numbers_they_equal(path):
    expected = DECODERS["reference"](**good())
    for kind in NUMBER_KINDS.values():
        as_int, as_float = kind
        arguments = changed(scale=as_float(HEAD_DIM**-0.5), block_size=as_int(B))
        torch.testing.assert_close(DECODERS[path](**arguments), expected)


def test_a_numpy_partition_size_is_taken_as_the_integer_it_equals():
    expected = DECODERS["reference"](**good())
    partitioned = [attention.paged_attention_decode_partitioned]
    if "twin v2" in DECODERS:
        import cuda_kernels.cpu as twins

        partitioned.append(twins.paged_attention_decode_v2)
    for decode in partitioned:
        for as_int, _ in NUMBER_KINDS.values():
            torch.testing.assert_close(decode(**good(), partition_size=as_int(8)), expected)


@pytest.mark.parametrize("path", ["reference", "loop", "twin v1"])
def test_an_empty_batch_gives_an_empty_result_on_every_path(path):
    if path not in DECODERS:
        pytest.skip("numba is not installed")
    empty = changed(
        query=torch.empty(0, NUM_HEADS, HEAD_DIM),
        block_tables=torch.empty(0, 3, dtype=torch.int32),
        seq_lens=torch.empty(0, dtype=torch.int32),
    )
    assert DECODERS[path](**empty).shape == (0, NUM_HEADS, HEAD_DIM)


ALL_PATHS = {
    **DECODERS,
    "prefill": lambda **a: attention.paged_attention_prefill(
        **a, query_lens=torch.ones(2, dtype=torch.int32)
    ),
}
"""Every entry point of §4's attention that takes the decode arguments, prefill included."""


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("scale", [3e38, 1e38])
def test_a_scale_that_overflows_the_logits_is_refused_with_the_largest_that_does_not(path, scale):
    """``scale`` is a finite float32, but q.k*scale is infinite and the softmax NaN: every
    entry point refuses it alike, naming the largest scale these inputs take."""
    with pytest.raises(ValueError, match=r"makes the logits q\.k\*scale overflow") as refused:
        ALL_PATHS[path](**changed(scale=scale))
    bound = float(str(refused.value).split("a scale up to ")[1].split(" ")[0])
    assert "\n" not in str(refused.value) and bound < scale
    ALL_PATHS[path](**changed(scale=bound * 0.99))  # finite: taken


@pytest.mark.parametrize("path", ALL_PATHS)
def test_queries_whose_dot_products_overflow_before_the_scale_are_refused(path):
    arguments = changed(query=lambda q: q * 1e20, key_pool=lambda k: k * 1e20, scale=1e-30)
    with pytest.raises(ValueError, match=r"products q\.k overflow torch\.float32"):
        ALL_PATHS[path](**arguments)


@pytest.mark.parametrize("path", ALL_PATHS)
def test_nan_in_an_attended_key_is_the_callers_data_not_a_refused_overflow(path):
    """The refusal is for an overflow of finite inputs only: NaN in an attended key is passed
    through as ``scaled_dot_product_attention`` passes it (the fastmath twins may drop it)."""
    arguments = good()
    arguments["key_pool"][0, 0, 0, 0] = math.nan  # sequence 0's token 0, KV head 0
    ALL_PATHS[path](**arguments)


def test_a_nan_no_overflow_explains_is_the_functions_own_and_comes_back_as_nan():
    """A copy of an entry point with a bug of its own (a student's: the running max started
    at 0, so all-negative scores give 0 / 0) keeps its NaN: the refusal speaks only when the
    scale or the inputs' size can overflow, and would otherwise hide the bug."""
    from minipaged.attention_call import attention_entry_point

    @attention_entry_point
    def zero_over_zero(
        query,
        key_pool,
        value_pool,
        block_tables,
        seq_lens,
        scale,
        block_size,
        *,
        k_scale=None,
        v_scale=None,
    ):
        return torch.full_like(query, math.nan)

    assert zero_over_zero(**good()).isnan().all()


FLOAT_POOL_SCALES = {
    "k_scale on float32 pools": ({"k_scale": torch.ones(NUM_KV_HEADS)}, ValueError, "k_scale"),
    "v_scale on float32 pools": ({"v_scale": torch.ones(NUM_KV_HEADS)}, ValueError, "v_scale"),
}


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("case", FLOAT_POOL_SCALES)
def test_fp8_scales_for_pools_that_store_the_keys_themselves_are_refused(path, case):
    """A float32 pool stores k, not k / k_scale: a scale given for it would be ignored (as
    vLLM ignores it) by the reference and applied by the kernels; every path refuses it."""
    scales, error, words = FLOAT_POOL_SCALES[case]
    with pytest.raises(error, match=f"{words} is given.*{words}=None"):
        ALL_PATHS[path](**good(), **scales)


def fp8_good() -> dict:
    """``good()`` with FP8 pools and their per-KV-head scales."""
    from minipaged import fp8

    arguments = good()
    scale = torch.full((NUM_KV_HEADS,), 0.01)
    for name in ("key_pool", "value_pool"):
        arguments[name] = fp8.quantize(arguments[name], scale[:, None, None], torch.float8_e4m3fn)
    return arguments | {"k_scale": scale, "v_scale": scale.clone()}


BAD_FP8_SCALES = {
    "a list": ([0.01, 0.01], TypeError, "k_scale must be a floating-point torch.Tensor"),
    "integers": (torch.ones(NUM_KV_HEADS, dtype=torch.int64), TypeError, "floating-point"),
    "one per layer": (torch.ones(3, NUM_KV_HEADS), ValueError, "k_scale must be \\[num_kv"),
    "a zero": (torch.tensor([0.01, 0.0]), ValueError, "positive and finite"),
    "a NaN": (torch.tensor([0.01, math.nan]), ValueError, "positive and finite"),
    "negative": (torch.tensor([-0.01, 0.01]), ValueError, "positive and finite"),
    "an infinity": (torch.tensor([0.01, math.inf]), ValueError, "positive and finite"),
}


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("case", BAD_FP8_SCALES)
def test_fp8_scales_of_the_wrong_kind_or_value_are_refused_naming_them(path, case):
    scale, error, words = BAD_FP8_SCALES[case]
    with pytest.raises(error, match=words):
        ALL_PATHS[path](**fp8_good() | {"k_scale": scale})


def test_a_write_with_scales_into_pools_of_its_own_dtype_is_refused_before_writing():
    from minipaged.kv_cache import write_kv

    pools = torch.zeros(2, NUM_BLOCKS, NUM_KV_HEADS, B, HEAD_DIM)
    key = torch.ones(1, NUM_KV_HEADS, HEAD_DIM)
    with pytest.raises(ValueError, match="k_scale is given"):
        write_kv(*pools, key, key, torch.tensor([0]), k_scale=torch.ones(NUM_KV_HEADS))
    assert not pools.any()


def test_a_16_bit_pool_stores_k_over_its_scale_and_reads_back_k():
    """Under a float32 model a float16 pool is narrower, as FP8 is: it stores k / k_scale and
    attention reads k_scale * k-hat, so a scale acts the same on the way in and out."""
    from minipaged.kv_cache import write_kv

    arguments = good()
    half = {
        n: torch.zeros_like(arguments[n], dtype=torch.float16) for n in ("key_pool", "value_pool")
    }
    scales = {"k_scale": torch.tensor([2.0, 4.0]), "v_scale": torch.tensor([0.5, 8.0])}
    tokens = torch.arange(NUM_BLOCKS * B)
    for name in ("key_pool", "value_pool"):
        rows = arguments[name].transpose(1, 2).flatten(0, 1)  # [slots, N_KV, d_h]
        written = half["key_pool"] if name == "key_pool" else half["value_pool"]
        other = torch.zeros_like(written)
        pair = (written, other) if name == "key_pool" else (other, written)
        write_kv(*pair, rows, rows, tokens, **scales)
    expected = attention.paged_attention_decode(**arguments)
    got = attention.paged_attention_decode(**arguments | half, **scales)
    torch.testing.assert_close(got, expected, atol=5e-3, rtol=5e-3)


# -- SamplingParams, generated from its fields ----------------------------------------------


class Opaque:
    """A value of no kind any field takes. Not ``object()``: its repr holds its address, which
    differs between xdist's workers, and every worker must collect the same test ids."""

    def __repr__(self) -> str:
        return "Opaque()"


WRONG_FOR_EVERY_FIELD = ["3", Opaque(), math.nan, {"n": 1}, -math.inf]


@pytest.mark.parametrize("value", WRONG_FOR_EVERY_FIELD, ids=repr)
@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(SamplingParams)])
def test_every_sampling_field_refuses_a_value_of_the_wrong_kind_naming_itself(field, value):
    with pytest.raises((ValueError, TypeError)) as refused:
        SamplingParams(**{field: value})
    assert field in str(refused.value) and "\n" not in str(refused.value)


def test_numpy_numbers_are_taken_as_the_python_numbers_they_equal():
    params = SamplingParams(
        max_tokens=np.int64(3), temperature=np.float32(0.5), n=np.int32(2), seed=np.uint8(7)
    )
    assert (params.max_tokens, params.n, params.seed) == (3, 2, 7)
    assert type(params.max_tokens) is int and type(params.temperature) is float
    assert SamplingParams(stop_token_ids=[np.int64(5)]).stop_token_ids == (5,)


def valid_configs() -> dict[str, object]:
    """One valid instance of every object that checks its settings, with a number in every
    numeric field that can hold one (so each field is tried)."""
    from minipaged.config import EngineConfig
    from minipaged.memory import ModelShape
    from minipaged.model import LlamaConfig
    from minipaged.speculative.config import SpeculativeConfig

    return {
        "EngineConfig": EngineConfig(
            num_gpu_blocks=64,
            num_cpu_blocks=8,
            watermark=0.25,  # a share that keeps blocks of 64 (16) as float32 too
            max_num_batched_tokens=512,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=64,
        ),
        "SamplingParams": SamplingParams(seed=3, top_k=5, top_p=0.5, temperature=0.7),
        "SpeculativeConfig": SpeculativeConfig(),
        "LlamaConfig": LlamaConfig(64, 64, 128, 2, 4, 2, 16, bos_token_id=1, eos_token_id=(2, 3)),
        "ModelShape": ModelShape(2, 4, 2, 16, 2),
    }


NUMERIC_FIELDS = [
    pytest.param(owner, field.name, id=f"{owner}.{field.name}")
    for owner, instance in valid_configs().items()
    for field in dataclasses.fields(instance)
    if type(getattr(instance, field.name)) in (int, float)
]


@pytest.mark.parametrize("kind", NUMBER_KINDS)
@pytest.mark.parametrize("owner, field", NUMERIC_FIELDS)
def test_every_numeric_setting_takes_a_numpy_number_as_the_python_number_it_equals(
    owner, field, kind
):
    """Consistently with ``SamplingParams``: a NumPy or 0-d torch integer or float (what a
    student reads out of an array) is taken as the Python number it equals, in every config
    object."""
    instance = valid_configs()[owner]
    value = getattr(instance, field)
    as_int, as_float = NUMBER_KINDS[kind]
    foreign = as_int(value) if type(value) is int else as_float(value)
    again = dataclasses.replace(instance, **{field: foreign})
    assert type(getattr(again, field)) is type(value)
    assert getattr(again, field) == foreign.item()


def paging_objects() -> dict[str, tuple[type, dict[str, object]]]:
    """Every paging and cache object that takes numbers, with valid arguments: each class and
    the keyword arguments of one valid instance."""
    from minipaged.allocator import BlockAllocator
    from minipaged.block_manager import BlockManager
    from minipaged.block_table import BlockTable
    from minipaged.kv_cache import KVCache
    from minipaged.prefix_cache import HashPrefixCache
    from minipaged.radix_cache import RadixCache
    from minipaged.scheduler import Scheduler

    scheduler = dict(max_num_seqs=4, max_num_batched_tokens=64, long_prefill_token_threshold=0)
    kv_sizes = dict(num_layers=1, num_blocks=4, num_kv_heads=2, block_size=4, head_dim=8)
    return {
        "BlockManager": (BlockManager, dict(num_gpu_blocks=8, num_cpu_blocks=2, block_size=4)),
        "BlockAllocator": (BlockAllocator, dict(num_blocks=8)),
        "BlockTable": (BlockTable, dict(block_size=4, num_tokens=3)),
        "Scheduler": (Scheduler, dict(block_manager=BlockManager(8), **scheduler)),
        "HashPrefixCache": (HashPrefixCache, dict(block_size=4)),
        "RadixCache": (RadixCache, dict(block_size=4)),
        "KVCache": (KVCache, dict(kv_sizes, num_cpu_blocks=2)),
    }


def number_parameters() -> list:
    """``(object, parameter)`` for every parameter annotated ``int`` or ``float`` of the
    paging objects' constructors (generated from their signatures)."""
    import inspect

    cases = []
    for owner, (cls, arguments) in paging_objects().items():
        for name, parameter in inspect.signature(cls).parameters.items():
            if str(parameter.annotation).split(" |")[0] in ("int", "float"):
                arguments.setdefault(name, parameter.default)
                cases.append(pytest.param(owner, name, id=f"{owner}.{name}"))
    return cases


def stored(instance: object, name: str) -> object:
    """What ``instance`` keeps of its constructor's argument ``name``."""
    kept_elsewhere = {"num_gpu_blocks": ("device", "num_blocks"), "num_cpu_blocks": ("host",)}
    if type(instance).__name__ == "BlockManager" and name in kept_elsewhere:
        pool = getattr(instance, kept_elsewhere[name][0])
        return pool.num_blocks
    if name == "watermark":
        return instance.watermark_blocks / instance.device.num_blocks
    return getattr(instance, name)


@pytest.mark.parametrize("kind", NUMBER_KINDS)
@pytest.mark.parametrize("owner, name", number_parameters())
def test_every_paging_object_takes_numpy_and_torch_numbers_as_python_numbers(owner, name, kind):
    """The one rule (``minipaged.python_numbers``): what ``operator.index`` takes is an int,
    a real 0-d value a float, in every constructor as in ``SamplingParams``."""
    cls, arguments = paging_objects()[owner]
    value = arguments.get(name)
    if value is None:
        value = {"watermark": 0.25}.get(name, 2)
    as_int, as_float = NUMBER_KINDS[kind]
    foreign = as_int(value) if type(value) is int else as_float(value)
    instance = cls(**arguments | {name: foreign})
    kept = stored(instance, name)
    assert type(kept) is type(value) and kept == pytest.approx(value)


@pytest.mark.parametrize("flag", [True, torch.tensor(True), np.bool_(True)], ids=repr)
@pytest.mark.parametrize("owner, name", number_parameters())
def test_every_paging_object_refuses_a_bool_for_a_number(owner, name, flag):
    cls, arguments = paging_objects()[owner]
    with pytest.raises((TypeError, ValueError), match=name):
        cls(**arguments | {name: flag})


MEMORY_CALLS = {  # §1-3's arithmetic: each function with integer arguments that work
    "logical_block": (13, 4),
    "block_offset": (13, 4),
    "num_logical_blocks": (13, 4),
    "static_internal_waste": (5, 16),
    "reservation_waste": (3, 2),
    "paged_internal_waste": (13, 4),
    "paged_waste_bound": (4,),
    "paged_waste_fraction": (13, 4),
}


@pytest.mark.parametrize("kind", NUMBER_KINDS)
@pytest.mark.parametrize("name", MEMORY_CALLS)
def test_the_memory_math_takes_numpy_and_torch_integers_as_the_integers_they_equal(name, kind):
    from minipaged import memory

    function, arguments = getattr(memory, name), MEMORY_CALLS[name]
    as_int, _ = NUMBER_KINDS[kind]
    expected = function(*arguments)
    got = function(*map(as_int, arguments))
    assert got == expected and type(got) is type(expected)
    with pytest.raises(ValueError, match="must be"):
        function(True, *arguments[1:])


@pytest.mark.parametrize("kind", NUMBER_KINDS)
def test_a_slot_of_numpy_or_torch_numbers_is_the_python_integer_it_equals(kind):
    from minipaged import memory

    as_int, _ = NUMBER_KINDS[kind]
    got = memory.slot([as_int(7), as_int(3)], as_int(5), as_int(4))
    assert got == 3 * 4 + 1 and type(got) is int


def test_a_block_manager_takes_numpy_and_torch_ids_as_the_ids_they_equal():
    """Sequence ids and token ids read out of arrays find their tables and their cached
    prefix (a tensor hashes by identity, so ``torch.tensor(0)`` is converted, not kept)."""
    from minipaged.block_manager import BlockManager

    manager = BlockManager(8, block_size=4, prefix_caching="hash")
    prompt = [torch.tensor(t) for t in (5, 6, 7, 8, 9)]
    manager.allocate(np.int64(0), torch.tensor(5), prompt)
    manager.append_slot(torch.tensor(0), [*prompt, np.int64(3)])
    manager.fork(np.int32(0), torch.tensor(1))
    assert sorted(manager.tables) == [0, 1] and all(type(s) is int for s in manager.tables)
    manager.free(torch.tensor(1))
    assert manager.prefix_hits([5, 6, 7, 8, 9]) == manager.table(np.int64(0)).blocks[:1]


@pytest.mark.parametrize("top_p", [2.0**-126, 1e-30, 1e-6])
def test_the_smallest_top_p_keeps_the_most_likely_token_as_any_tiny_one_does(top_p):
    """top_p down to float32's smallest normal (``sampling_rules.MIN_TOP_P``; a smaller one is
    refused) keeps exactly the most likely token, as top_p = 1e-6 does, and never drops that
    one too (an empty distribution would draw token 0)."""
    from minipaged.sampling import sample

    logits = torch.randn(64, generator=torch.Generator().manual_seed(1))
    generator = torch.Generator().manual_seed(0)
    drawn = sample(logits, SamplingParams(top_p=top_p), generator, num_samples=3)
    assert drawn == [int(logits.argmax())] * 3


def manager_with_one_sequence():
    """A block manager with prefix caching, sequence 0 of 5 tokens, and its pools' state."""
    from minipaged.block_manager import BlockManager

    manager = BlockManager(8, 2, block_size=4, prefix_caching="radix")
    manager.allocate(0, 5, [1, 2, 3, 4, 5])
    return manager


BAD_PAGING_CALLS = {
    # (the call on a manager holding sequence 0, the exception, words of its message)
    "sequence id True": (lambda m: m.allocate(True, 3), TypeError, "sequence id"),
    "sequence id None": (lambda m: m.allocate(None, 3), TypeError, "sequence id"),
    "sequence id 1.5": (lambda m: m.allocate(1.5, 3), TypeError, "sequence id"),
    "fork into True": (lambda m: m.fork(0, True), TypeError, "sequence id"),
    "tokens 2.5": (lambda m: m.allocate(1, 2.5), ValueError, "num_tokens=2.5"),
    "a text token id": (lambda m: m.allocate(1, 2, ["a", 1]), ValueError, "token_ids[0]"),
    "a negative token id": (lambda m: m.allocate(1, 2, [1, -1]), ValueError, "token_ids[1]"),
    "a bool token id": (lambda m: m.allocate(1, 2, [True, 1]), ValueError, "token_ids[0]"),
    "appending a text token": (
        lambda m: m.append_slot(0, [1, 2, 3, 4, 5, "6"]),
        ValueError,
        "token_ids[5]",
    ),
    "a prompt of text": (lambda m: m.can_allocate("Emma"), TypeError, "a prompt is its length"),
    "a prompt 1.5 long": (lambda m: m.can_allocate(1.5), TypeError, "a prompt is its length"),
    "a prompt None": (lambda m: m.can_allocate(None), TypeError, "a prompt is its length"),
    "block id 1.5": (lambda m: m.refcount(1.5), TypeError, "block id must be an integer"),
    "block id True": (lambda m: m.device.incref(True), TypeError, "block id must be an integer"),
    "block id past the pool": (lambda m: m.device.decref(99), IndexError, "out of range"),
    "one block for two": (lambda m: m.prefix_cache.insert([1] * 8, [5]), ValueError, "distinct"),
    "one block twice": (lambda m: m.prefix_cache.insert([1] * 8, [5, 5]), ValueError, "distinct"),
}


@pytest.mark.parametrize("case", BAD_PAGING_CALLS)
def test_a_bad_paging_call_is_refused_naming_the_value_and_changes_nothing(case):
    call, error, words = BAD_PAGING_CALLS[case]
    manager = manager_with_one_sequence()
    before = (manager.snapshot(), manager.prefix_cache.contents())
    with pytest.raises(error, match=re.escape(words)) as refused:
        call(manager)
    assert "\n" not in str(refused.value)
    assert (manager.snapshot(), manager.prefix_cache.contents()) == before


def test_the_paging_calls_take_numpy_and_torch_numbers_as_the_ids_they_equal():
    manager = manager_with_one_sequence()
    assert manager.refcount(np.int64(0)) == manager.refcount(torch.tensor(0)) == 1
    assert manager.can_allocate(np.int64(3), [np.int64(1), torch.tensor(2)]).name == "OK"
    manager.device.incref(np.int32(0))
    assert manager.device.decref(torch.tensor(0)) == 1


def test_a_scheduler_without_a_block_manager_is_refused_before_it_queues_anything():
    from minipaged.scheduler import Scheduler

    with pytest.raises(TypeError, match="block_manager must be a BlockManager"):
        Scheduler(None)


def test_a_beam_width_without_beam_search_is_refused_not_ignored():
    with pytest.raises(ValueError, match=r"beam_width=4 .* use_beam_search=True"):
        SamplingParams(beam_width=4)


def test_a_length_penalty_without_beam_search_is_refused_not_ignored():
    with pytest.raises(ValueError, match=r"length_penalty=0.5 .* use_beam_search=True"):
        SamplingParams(length_penalty=0.5)
    assert SamplingParams(use_beam_search=True, beam_width=2, length_penalty=0.5)


# -- requests: a bad one is refused, and nothing running is lost ----------------------------


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny", backend="torch", block_size=4, num_gpu_blocks=64)


GREEDY = SamplingParams(max_tokens=3, temperature=0.0)

BAD_PROMPTS = {  # name: (prompt, what its refusal says)
    "an int": (5, "got int 5"),
    "None": (None, "got NoneType None"),
    "bytes": (b"Emma", "got bytes b'Emma'"),
    "a set": ({1, 2}, "got set {1, 2}"),
    "a dict without ids": ({"prompt": "Emma"}, "a dict prompt needs the key 'prompt_token_ids'"),
    "ids as text": ({"prompt_token_ids": "Emma"}, "got str 'Emma'"),
    "a tensor of ids": ({"prompt_token_ids": torch.tensor([1, 2])}, "(ids.tolist())"),
    "a negative id": ([-1], "got [-1]"),
    "an id past the vocabulary": ([10**9], "got [1000000000]"),
    "a bool id": ([True], "got [True]"),
    "a float id": ([1.0], "got [1.0]"),
    "no ids": ([], "the prompt is empty"),
    "an empty string": ("", "the prompt is empty"),
    "a lone surrogate": ("Emma \udcff", "which is no Unicode character"),
    "past the context": ([1] * 100_000, "tokens but the model's context is 512"),
}
"""Each refusal names its problem: a ``TypeError`` or ``ValueError`` that Python raised on the
way (``'NoneType' object is not iterable``) is no refusal."""


@pytest.mark.parametrize("prompt", BAD_PROMPTS)
def test_a_bad_prompt_among_many_names_its_place_and_runs_nothing(llm, prompt):
    bad, words = BAD_PROMPTS[prompt]
    with pytest.raises((ValueError, TypeError), match=r"^prompt 1 of 3: ") as refused:
        llm.generate(["Emma", bad, "Anne was"], GREEDY, show_progress=False)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert not llm.engine.has_unfinished()


def test_requests_refused_while_others_run_leave_their_tokens_unchanged(llm):
    alone = llm.generate(["Emma", "Anne was"], GREEDY, show_progress=False)
    engine = llm.engine
    first, second = engine.add_request("Emma", GREEDY), engine.add_request("Anne was", GREEDY)
    engine.step()
    bad_requests = [(prompt, GREEDY, words) for prompt, words in BAD_PROMPTS.values()]
    bad_requests += [
        ("Emma", SamplingParams(max_tokens=2, stop_token_ids=[10**6]), "stop_token_ids [1000000]"),
        ("Emma", "greedy", "must be a SamplingParams, got str"),
        ("Emma", {"max_tokens": 2}, "must be a SamplingParams, got dict"),
    ]
    for prompt, params, words in bad_requests:
        with pytest.raises((ValueError, TypeError), match=re.escape(words)):
            engine.add_request(prompt, params)
    for request_id, words in [
        ("", "must name the request"),
        ("   ", "must name the request"),
        (first, "is already in use"),
        (5, "must be a string"),
        (b"x", "must be a string"),
    ]:
        with pytest.raises((ValueError, TypeError), match=f"^request.id .*{words}"):
            engine.add_request("Emma", GREEDY, request_id=request_id)
    finished = {}
    while engine.has_unfinished():
        finished |= {out.request_id: out for out in engine.step().finished}
    assert [finished[first].outputs[0].token_ids, finished[second].outputs[0].token_ids] == [
        out.outputs[0].token_ids for out in alone
    ]


BAD_GENERATE_OPTIONS = {
    "show_progress text": {"show_progress": "yes"},
    "show_progress 1": {"show_progress": 1},
    "use_tqdm text": {"use_tqdm": "no"},
    "on_step a number": {"on_step": 5},
    "on_step a list": {"on_step": []},
}


@pytest.mark.parametrize("case", BAD_GENERATE_OPTIONS)
def test_a_bad_generate_option_is_refused_before_anything_queues(llm, case):
    """Not at the first step, after the requests queued (``on_step=5`` was an ``int is not
    callable`` from inside the run)."""
    with pytest.raises(TypeError, match=r"show_progress .* on_step") as refused:
        llm.generate(["Emma", "Anne"], GREEDY, **BAD_GENERATE_OPTIONS[case])
    assert "\n" not in str(refused.value) and not llm.engine.has_unfinished()


@pytest.mark.parametrize("config", [5, {"block_size": 4}, "tiny"], ids=repr)
def test_a_config_that_is_no_engine_config_is_refused_by_name(config):
    with pytest.raises(TypeError, match="config must be an EngineConfig"):
        LLM("tiny", config=config)


@pytest.mark.parametrize(
    "device, name", [(torch.device("cpu"), "cpu"), (torch.device("cuda", 1), "cuda:1")], ids=str
)
def test_a_torch_device_is_taken_by_its_name_as_a_torch_dtype_is(device, name):
    from minipaged.config import EngineConfig

    assert EngineConfig(device=device).device == name
    assert EngineConfig(dtype=torch.bfloat16).dtype == "bfloat16"


class NoArguments:
    pass


class TwoArguments:
    def __init__(self, num_gpu_blocks, num_cpu_blocks):
        pass


@pytest.mark.parametrize("manager", [NoArguments, TwoArguments, object, dict])
def test_a_block_manager_class_without_blockmanagers_constructor_is_refused_by_its_name(manager):
    """Before, the engine called it and a bare ``TypeError`` came from inside."""
    with pytest.raises(TypeError) as refused:
        LLM("tiny", block_manager_class=manager, num_gpu_blocks=8)
    message = str(refused.value)
    assert f"block_manager_class {manager.__name__} must take BlockManager's constructor" in message
    assert "num_gpu_blocks, num_cpu_blocks, block_size, watermark, prefix_caching" in message


def test_a_block_manager_class_with_blockmanagers_constructor_runs():
    from minipaged.block_manager import BlockManager

    class Mine(BlockManager):
        pass

    llm = LLM("tiny", block_manager_class=Mine, num_gpu_blocks=8)
    assert type(llm.engine.block_manager) is Mine
    assert llm.generate("Emma", GREEDY)[0].outputs[0].token_ids


def test_the_embedded_models_name_as_a_path_is_told_to_be_a_string(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="named by the string 'tiny', not a path"):
        LLM(Path("tiny"))


def test_speculative_json_text_that_is_not_json_names_the_setting():
    with pytest.raises(ValueError, match=r"^speculative \(--speculative-config\) must be a JSON"):
        LLM("tiny", speculative="ngram")


def test_stop_tokens_past_the_vocabulary_are_refused(llm):
    with pytest.raises(ValueError, match=r"stop_token_ids \[5000\] lie outside"):
        llm.generate("Emma", SamplingParams(stop_token_ids=[5000]), show_progress=False)


class Misfit:
    """A tokenizer of another model: its ids run past this model's vocabulary."""

    def encode(self, text: str) -> list[int]:
        return [1, 4096]


def test_ids_past_the_vocabulary_from_a_tokenizer_blame_the_tokenizer():
    with pytest.raises(ValueError, match=r"tokenizer gave token ids \[4096\].*tokenizer.json"):
        prompt_token_ids("Emma", Misfit(), vocab=2048)


def test_text_that_is_not_unicode_is_refused_naming_where():
    tokenizer = Tokenizer(EMBEDDED_MODELS["tiny"])
    with pytest.raises(ValueError, match=r"'\\udcff' at position 5"):
        tokenizer.encode("Emma \udcff")


@pytest.mark.parametrize(
    "settings",
    [dict(num_gpu_blocks=2**31 - 1), dict(num_cpu_blocks=2**31 - 1)],
    ids=lambda settings: ",".join(f"{k}={v}" for k, v in settings.items()),
)
def test_pools_that_fit_no_memory_are_refused_before_the_model_loads(settings):
    """Each value is an integer in its range, but the pools it makes would not fit: refused
    by name, in one line, before anything is allocated (as the command lines do)."""
    with pytest.raises(ValueError, match="the KV cache would take") as refused:
        LLM("tiny", backend="torch", **settings)
    assert "num_gpu_blocks" in str(refused.value) and "\n" not in str(refused.value)


# -- checkpoints: each file of a model directory, damaged each way --------------------------

MODEL_FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]
DAMAGE = {
    # how a file is damaged, and words the refusal holds beside the file's path
    "a folder in its place": (lambda path: path.mkdir(), "is a folder"),
    "not UTF-8": (lambda path: path.write_bytes(b"\xff\xfe\xfa{"), ""),
    "empty": (lambda path: path.write_bytes(b""), ""),
}


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("name", MODEL_FILES)
def test_a_damaged_model_file_is_refused_naming_it_before_the_weights_load(
    tmp_path, monkeypatch, name, damage
):
    """Each file of a checkpoint, damaged each way, is refused in one line that names it (a
    folder in a file's place was called missing, or no tokenizer at all); a bad tokenizer is
    refused before the weights are read, which can take a minute."""
    import shutil

    from minipaged import checkpoint, llm

    directory = tmp_path / "model"
    shutil.copytree(checkpoint.model_directory("tiny"), directory)
    (directory / name).unlink()
    damage_file, words = DAMAGE[damage]
    damage_file(directory / name)
    if name == "tokenizer.json":
        monkeypatch.setattr(llm, "load_model", lambda *a, **k: pytest.fail("weights read first"))
    with pytest.raises((ValueError, FileNotFoundError)) as refused:
        LLM(str(directory), backend="torch", num_gpu_blocks=16)
    message = str(refused.value)
    assert name in message and words in message and "\n" not in message


@pytest.mark.parametrize("ids", [np.array([1, 2]), torch.tensor([1, 2])], ids=["array", "tensor"])
def test_stop_token_ids_of_an_array_are_told_to_use_tolist_as_a_prompt_is(ids):
    with pytest.raises(ValueError, match=r"stop_token_ids must be .*ids\.tolist\(\)"):
        SamplingParams(stop_token_ids=ids)
    assert SamplingParams(stop_token_ids=ids.tolist()).stop_token_ids == (1, 2)
