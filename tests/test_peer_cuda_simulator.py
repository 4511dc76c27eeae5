"""A peer's test of DESIGN.md's kernel promise, in Numba's CUDA simulator.

"``cuda_kernels.paged_attention_decode`` (and ``..._v2`` with ``partition_size``) take the same
arguments and return the same result" as ``minipaged.attention.paged_attention_decode``, and
``backend="numba"`` runs them ("simulator on CPU"). The simulator must be chosen before numba
is first imported, so this file runs in a process of its own:
``NUMBA_ENABLE_CUDASIM=1 .venv/bin/python -m pytest tests/test_peer_cuda_simulator.py``.
A simulated thread block costs about 0.1 s per launch: the cases are small.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip(
        "simulator tests: run them alone, with NUMBA_ENABLE_CUDASIM=1 set before numba loads",
        allow_module_level=True,
    )
pytest.importorskip("numba.cuda", reason="the Numba kernels need numba and numba-cuda")

import torch
from peer_cases import TOLERANCE, contiguous_oracle, make_case

import cuda_kernels
from minipaged import LLM, SamplingParams
from minipaged.attention import paged_attention_decode

# (num_heads, num_kv_heads), block_size, seq_lens, alias: GQA, lengths ending mid-block,
# a block shared by both sequences
CASES = [((2, 1), 8, [5, 19], True), ((2, 2), 16, [16, 33], False)]


def case(seed, heads, block_size, lens, alias):
    """A case whose query has other strides than a fresh tensor's (a view, as a model's
    projection often gives): the kernels take it as the reference does."""
    query, *rest = make_case(
        seed,
        batch=len(lens),
        num_heads=heads[0],
        num_kv_heads=heads[1],
        head_dim=8,
        block_size=block_size,
        lens=lens,
        alias=alias,
    )
    return (query.transpose(0, 1).contiguous().transpose(0, 1), *rest)


@pytest.mark.parametrize("heads, block_size, lens, alias", CASES)
def test_the_cuda_kernel_returns_the_references_result(heads, block_size, lens, alias):
    args = case(3, heads, block_size, lens, alias)
    out = cuda_kernels.paged_attention_decode(*args, 0.3, block_size)
    assert isinstance(out, torch.Tensor) and out.shape == args[0].shape
    torch.testing.assert_close(out, paged_attention_decode(*args, 0.3, block_size), **TOLERANCE)
    torch.testing.assert_close(out, contiguous_oracle(*args, 0.3, block_size), **TOLERANCE)


def test_the_v2_kernel_with_partitions_returns_the_same_result():
    heads, block_size, lens, alias = CASES[0]
    args = case(4, heads, block_size, lens, alias)
    out = cuda_kernels.paged_attention_decode_v2(*args, 0.3, block_size, partition_size=16)
    torch.testing.assert_close(out, contiguous_oracle(*args, 0.3, block_size), **TOLERANCE)


def test_the_numba_backend_generates_the_torch_backends_tokens(hf_llama):
    _, path = hf_llama
    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    prompt = {"prompt_token_ids": [5, 17, 99, 42, 8]}
    tokens = [
        LLM(model=path, backend=backend, block_size=8, skip_tokenizer_init=True)
        .generate(prompt, params)[0]
        .outputs[0]
        .token_ids
        for backend in ("torch", "numba")
    ]
    assert tokens[0] == tokens[1]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_cuda_wrappers_refuse_what_the_reference_refuses(version):
    """``attention_entry_point``'s checks on the CUDA wrappers as on the reference: a scale
    that overflows the logits, and an FP8 scale for a float32 pool, refused alike; a 0-d
    tensor is a block size."""
    heads, block_size, lens, alias = CASES[0]
    args = case(5, heads, block_size, lens, alias)
    decode = cuda_kernels.paged_attention_decode
    if version == "v2":
        decode = lambda *a, **k: cuda_kernels.paged_attention_decode_v2(  # noqa: E731
            *a, **k, partition_size=16
        )
    with pytest.raises(ValueError, match=r"makes the logits q\.k\*scale overflow"):
        decode(*args, 3e38, block_size)
    with pytest.raises(ValueError, match="k_scale is given"):
        decode(*args, 0.3, block_size, k_scale=torch.ones(heads[1]))
    torch.testing.assert_close(
        decode(*args, torch.tensor(0.3), torch.tensor(block_size)),
        paged_attention_decode(*args, 0.3, block_size),
        **TOLERANCE,
    )
