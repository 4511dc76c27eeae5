"""The small Llama against Hugging Face transformers (the oracle) and against itself: the paged
serving path must give the contiguous path's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minipaged.backend import PagedBatch
from minipaged.checkpoint import EMBEDDED_MODELS, load_model
from minipaged.kv_cache import KVCache
from minipaged.model import Llama, LlamaConfig
from minipaged.rope import apply_rope, inverse_frequencies, rope_cos_sin
from minipaged.tokenizer import Tokenizer

VOCAB = 101


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def hf_pair(request, transformers, llama_config, tmp_path_factory) -> tuple[object, Llama]:
    """A random transformers Llama saved to disk, and minipaged's load of it, with weights
    scaled by :func:`sharpen`."""
    torch.manual_seed(0)
    config = llama_config(
        vocab_size=VOCAB, tie_word_embeddings=request.param, bos_token_id=1, eos_token_id=2
    )
    hf = transformers.LlamaForCausalLM(config).eval()
    sharpen(hf)
    path: Path = tmp_path_factory.mktemp("hf_llama")
    hf.save_pretrained(path)
    return hf, load_model(path)


def sharpen(model: torch.nn.Module) -> None:
    """Scale a random init (std 0.02) so that every part matters and logits are peaky:
    projections to std 0.12 (attention scores and each sublayer's output of order 1, so a bug
    in attention or the MLP moves the logits), norm weights away from 1, embeddings and lm_head
    to std 1 (logits of order 10, so float reordering cannot flip an argmax)."""
    with torch.no_grad():
        for name, param in model.named_parameters():  # a tied lm_head is listed once
            if name.endswith("proj.weight"):
                param.mul_(6.0)
            elif name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            else:  # embed_tokens and lm_head
                param.mul_(50.0)


def prompt(length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (length,), generator=torch.Generator().manual_seed(seed))


def test_contiguous_logits_match_transformers(hf_pair):
    hf, ours = hf_pair
    tokens = torch.stack([prompt(24, seed=1), prompt(24, seed=2)])  # [2, 24]
    with torch.no_grad():
        expected = hf(tokens).logits
        actual = ours.forward_contiguous(tokens)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)


def test_greedy_tokens_match_transformers_generate(hf_pair):
    hf, ours = hf_pair
    tokens = prompt(8)[None, :]
    with torch.no_grad():
        expected = hf.generate(tokens, max_new_tokens=24, do_sample=False, pad_token_id=0)
        for _ in range(24):
            next_token = ours.forward_contiguous(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
    assert tokens.tolist() == expected.tolist()


def test_tied_model_keeps_one_tensor_for_embedding_and_lm_head(hf_pair):
    _, ours = hf_pair
    tied = ours.config.tie_word_embeddings
    assert (ours.lm_head.weight is ours.embed_tokens.weight) == tied


@pytest.mark.parametrize("name", sorted(EMBEDDED_MODELS))
def test_embedded_models_greedy_tokens_match_transformers(transformers, name):
    hf = transformers.LlamaForCausalLM.from_pretrained(EMBEDDED_MODELS[name]).eval()
    ours = load_model(name)
    tokenizer = Tokenizer(EMBEDDED_MODELS[name])
    tokens = torch.tensor([tokenizer.encode("It is a truth")])
    with torch.no_grad():
        # BOS is id 0 = pad_token_id: pass the mask, or transformers would mask the BOS out.
        expected = hf.generate(
            tokens,
            attention_mask=torch.ones_like(tokens),
            max_new_tokens=40,
            do_sample=False,
            pad_token_id=0,
        )
        for _ in range(40):  # transformers stops after EOS; so do we
            next_token = ours.forward_contiguous(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            if int(next_token) == tokenizer.eos_id:
                break
    assert tokens.tolist() == expected.tolist()


def small_llama() -> Llama:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
    )
    model = Llama(config).eval()
    sharpen(model)
    return model


def test_paged_prefill_then_decode_matches_contiguous_logits():
    """Two sequences with scattered, non-contiguous blocks (B = 4): prefill both prompts in
    one step (lengths ending mid-block), then decode three tokens each; every step's logits
    equal the contiguous forward pass over the whole sequence."""
    model = small_llama()
    cfg = model.config
    block_size = 4
    cache = KVCache(cfg.num_hidden_layers, 16, cfg.num_key_value_heads, block_size, cfg.head_dim)
    tables = [[7, 2, 11, 4, 0], [9, 13, 5, 1]]  # T_r for each sequence
    seqs = [prompt(9, seed=3).tolist(), prompt(6, seed=4).tolist()]

    batch = PagedBatch.from_lists(tables, [9, 6], block_size, query_lens=[9, 6])
    tokens = torch.tensor(seqs[0] + seqs[1])
    positions = torch.tensor([*range(9), *range(6)])
    with torch.no_grad():
        logits = model(tokens, positions, cache, batch)  # [15, V]
        full = [model.forward_contiguous(torch.tensor([s]))[0] for s in seqs]
    torch.testing.assert_close(logits, torch.cat(full), atol=1e-4, rtol=0)

    for _ in range(3):
        new = [int(full[b][-1].argmax()) for b in range(2)]
        for seq, token in zip(seqs, new, strict=True):
            seq.append(token)
        lens = [len(s) for s in seqs]
        batch = PagedBatch.from_lists(tables, lens, block_size)
        with torch.no_grad():
            logits = model(torch.tensor(new), torch.tensor(lens) - 1, cache, batch)  # [2, V]
            full = [model.forward_contiguous(torch.tensor([s]))[0] for s in seqs]
        torch.testing.assert_close(logits, torch.stack([f[-1] for f in full]), atol=1e-4, rtol=0)


def test_logits_index_returns_only_the_requested_rows():
    model = small_llama()
    cfg = model.config
    cache = KVCache(cfg.num_hidden_layers, 8, cfg.num_key_value_heads, 4, cfg.head_dim)
    batch = PagedBatch.from_lists([[0, 1], [2, 3]], [5, 7], 4, query_lens=[5, 7])
    tokens = torch.cat([prompt(5, seed=5), prompt(7, seed=6)])
    positions = torch.tensor([*range(5), *range(7)])
    last = torch.tensor([4, 11])  # each sequence's last token
    with torch.no_grad():
        picked = model(tokens, positions, cache, batch, logits_index=last)
        cache_again = KVCache(cfg.num_hidden_layers, 8, cfg.num_key_value_heads, 4, cfg.head_dim)
        every = model(tokens, positions, cache_again, batch)
    assert picked.shape == (2, VOCAB)
    torch.testing.assert_close(picked, every[last])


def test_rope_rotates_dimension_i_into_i_plus_half_head_dim():
    """HF's rotate-half pairing: a vector along dimension 0 turns towards dimension d/2 (not
    dimension 1, as Meta's interleaved pairing would)."""
    head_dim = 8
    x = torch.zeros(1, 1, head_dim)  # [T, heads, head_dim]
    x[0, 0, 0] = 1.0
    cos, sin = rope_cos_sin(torch.tensor([1]), head_dim, 10000.0, torch.float32)
    rotated = apply_rope(x, cos, sin)[0, 0]
    assert rotated[0] == pytest.approx(torch.cos(torch.tensor(1.0)).item())
    assert rotated[head_dim // 2] == pytest.approx(torch.sin(torch.tensor(1.0)).item())
    assert rotated[1] == 0.0


@pytest.mark.parametrize("head_dim, theta", [(8, 10000.0), (16, 10000.0), (16, 500000.0)])
def test_rope_angles_from_the_cached_frequencies_equal_the_formula(head_dim, theta):
    """The frequencies are made once per (head_dim, theta, device); each step's cos and sin
    are still exactly those of $p \\cdot \\theta^{-2i/d_h}$ computed afresh."""
    positions = torch.tensor([0, 1, 7, 511])
    cos, sin = rope_cos_sin(positions, head_dim, theta, torch.float32)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)[:, None, :]
    assert torch.equal(cos, angles.cos()) and torch.equal(sin, angles.sin())
    cpu = torch.device("cpu")
    assert inverse_frequencies(head_dim, theta, None, cpu) is inverse_frequencies(
        head_dim, theta, None, cpu
    )


def test_config_rejects_heads_that_are_not_a_multiple_of_kv_heads():
    with pytest.raises(ValueError, match=r"num_attention_heads \(6\).*num_key_value_heads \(4\)"):
        LlamaConfig(
            vocab_size=10,
            hidden_size=48,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=6,
            num_key_value_heads=4,
            head_dim=8,
        )


def test_config_rejects_an_odd_head_dim():
    with pytest.raises(ValueError, match=r"head_dim \(7\) must be even"):
        LlamaConfig(
            vocab_size=10,
            hidden_size=28,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=4,
            head_dim=7,
        )
