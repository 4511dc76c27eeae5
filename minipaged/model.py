"""A small Llama in plain PyTorch, readable top to bottom.

The architecture of Llama 2/3 and of Hugging Face's ``LlamaForCausalLM``: token embedding,
$N_L$ decoder layers (RMSNorm, grouped-query attention with rotary position embeddings, RMSNorm,
SwiGLU MLP, each with a residual connection), a final RMSNorm and the vocabulary projection.

Parameter names are Hugging Face's without the ``model.`` prefix (``layers.0.input_layernorm.
weight`` is HF's ``model.layers.0.input_layernorm.weight``; ``lm_head.weight`` is the same),
except that the projections reading the same input run as one matrix multiply, as in vLLM:
``qkv_proj`` stacks HF's ``q_proj``, ``k_proj`` and ``v_proj`` and ``gate_up_proj`` stacks
``gate_proj`` and ``up_proj`` (``packed_projections``). Loading a checkpoint
(``minipaged.checkpoint``) is a rename plus that stacking. RoPE uses HF's rotate-half pairing
(dimension $i$ with $i + d_h/2$), so the q and k rows need no permutation.

Two entry points share every layer and differ only in the attention step:

- ``Llama.forward_contiguous``: a ``[batch, T]`` block of tokens with causal attention over
  the block itself. Training uses it, and tests use it as the contiguous oracle.
- ``Llama.forward``: the serving path. One engine step's tokens from all sequences are
  flattened into ``N`` rows; each layer writes its keys and values into the paged KV cache and
  attends through the block tables (``minipaged.backend.paged_attention``, source text §4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minipaged.attention_probe import Observer
from minipaged.backend import PagedBatch, paged_attention
from minipaged.kv_cache import KVCache
from minipaged.python_numbers import (
    FLOAT32_TINY,
    MAX_COUNT,
    python_number,
    take_python_numbers,
)
from minipaged.rope import RopeScaling, apply_rope, rope_cos_sin

AttendFn = Callable[[int, Tensor, Tensor, Tensor], Tensor]
"""``attend(layer, q, k, v)``: attention of one layer after RoPE, with q ``[..., H, d_h]`` and
k, v ``[..., N_KV, d_h]`` over the same leading dimensions; returns ``[..., H, d_h]``."""


REAL_BOUNDS = {  # each real hyperparameter's low (itself allowed?), high, and why no model runs
    "rms_norm_eps": (
        FLOAT32_TINY,
        True,
        1.0,
        "it only keeps RMSNorm's division off 0: below float32's smallest normal it is 0, and "
        "at 1 or more it outweighs the activations' mean square",
    ),
    "rope_theta": (
        1.0,
        False,
        3.4028234663852886e38,
        "RoPE's base: at 1 or below the rotation frequencies grow with the dimension and "
        "overflow; past float32's largest number it is infinite",
    ),
}


@dataclass(frozen=True)
class LlamaConfig:
    """The hyperparameters of a Llama model, with Hugging Face's names.

    Guarantees after construction: every size is a positive integer up to ``MAX_COUNT``,
    ``rms_norm_eps`` and ``rope_theta`` lie in ``REAL_BOUNDS``, ``num_attention_heads`` is
    a multiple of ``num_key_value_heads`` (grouped-query attention), ``head_dim`` is even
    (rotate-half RoPE pairs dimension $i$ with $i + d_h/2$) and the special token ids lie in the
    vocabulary. ``head_dim`` need not equal ``hidden_size / num_attention_heads``: HF allows an
    explicit one. ``rope_scaling`` stretches RoPE's frequencies to a longer context
    (``minipaged.rope``), or is None.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None  # HF allows several (Llama 3 has three)
    rope_scaling: RopeScaling | None = None  # a dict as config.json writes it is read too

    def __post_init__(self) -> None:
        take_python_numbers(self)  # np.int64(64) is 64
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_COUNT:
                raise ValueError(
                    f"{name} must be a positive integer up to {MAX_COUNT:,} (the kernels index "
                    f"with 32-bit integers), got {value!r}"
                )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"head_dim ({self.head_dim}) must be even: rotary embeddings rotate pairs of "
                "dimensions (i, i + head_dim/2)"
            )
        for name, (low, low_in, high, why) in REAL_BOUNDS.items():
            value = getattr(self, name)
            is_real = isinstance(value, int | float) and not isinstance(value, bool)
            if not (is_real and (low < value or (low_in and value == low)) and value <= high):
                range_ = f"from {low:.3g} to" if low_in else f"above {low:g} and at most"
                raise ValueError(
                    f"{name} must be a number {range_} {high:.3g} ({why}), got {value!r}"
                )
            object.__setattr__(self, name, float(value))  # config.json's 10000 is 10000.0
        if not isinstance(self.rope_scaling, RopeScaling | None):
            object.__setattr__(self, "rope_scaling", RopeScaling.from_hf(self.rope_scaling))
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(
                f"tie_word_embeddings must be True or False, got {self.tie_word_embeddings!r}"
            )
        if isinstance(self.eos_token_id, list | tuple):  # as config.json writes several
            several = tuple(python_number(token) for token in self.eos_token_id)
            object.__setattr__(self, "eos_token_id", several or None)
        special = [("bos_token_id", self.bos_token_id)]
        special += [("eos_token_id", token) for token in self.eos_token_ids]
        for name, value in special:
            is_int = isinstance(value, int) and not isinstance(value, bool)
            if value is not None and not (is_int and 0 <= value < self.vocab_size):
                raise ValueError(
                    f"{name} ({value!r}) must be a token id in 0..{self.vocab_size - 1} or None"
                )

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Every end-of-sequence token: generation stops at any of them, as transformers'
        ``generate`` does with a list (the first is the model's own, a pad token's stand-in)."""
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, tuple):
            return self.eos_token_id
        return (self.eos_token_id,)

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads sharing one KV head: $N_Q / N_{KV}$."""
        return self.num_attention_heads // self.num_key_value_heads


class RMSNorm(nn.Module):
    """$y = x / \\sqrt{\\mathrm{mean}(x^2) + \\epsilon} \\cdot w$, in float32 as HF computes it."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # [dim]

    def forward(self, x: Tensor) -> Tensor:
        normed = F.rms_norm(x.float(), self.weight.shape, eps=self.eps)  # x / rms(x), fp32
        return self.weight * normed.to(x.dtype)


class Attention(nn.Module):
    """Grouped-query self-attention: $N_Q$ query heads, $N_{KV}$ key/value heads, query head
    $h$ reads KV head $h \\div (N_Q/N_{KV})$. No biases. The attention step itself is passed in
    (``attend``), so the contiguous and paged paths share the projections and RoPE."""

    def __init__(self, config: LlamaConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        hidden = config.hidden_size
        q_dim = self.num_heads * self.head_dim
        # q, k and v read the same x: one matrix multiply, weight rows stacked as q, k, v.
        qkv_dim = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        self.qkv_proj = nn.Linear(hidden, qkv_dim, bias=False)  # weight [(H + 2 N_KV) d_h, hidden]
        self.o_proj = nn.Linear(q_dim, hidden, bias=False)  # weight [hidden, H * d_h]

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttendFn) -> Tensor:
        lead = x.shape[:-1]  # [batch, T] or [N]
        heads = self.num_heads + 2 * self.num_kv_heads
        qkv = self.qkv_proj(x).view(*lead, heads, self.head_dim)  # [..., H + 2 N_KV, d_h]
        # q and k turn by the same angles: rotate their H + N_KV heads in one go.
        qk = apply_rope(qkv[..., : self.num_heads + self.num_kv_heads, :], cos, sin)
        q, k = qk.split((self.num_heads, self.num_kv_heads), dim=-2)  # [..., H | N_KV, d_h]
        v = qkv[..., self.num_heads + self.num_kv_heads :, :]  # [..., N_KV, d_h]
        out = attend(self.layer, q, k, v)  # [..., H, d_h]
        return self.o_proj(out.reshape(*lead, self.num_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: $\\mathrm{down}(\\mathrm{silu}(\\mathrm{gate}(x)) \\odot \\mathrm{up}(x))$, with gate
    and up as one matrix multiply (weight rows stacked as gate, up)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.gate_up_proj = nn.Linear(hidden, 2 * inner, bias=False)  # weight [2 inner, hidden]
        self.down_proj = nn.Linear(inner, hidden, bias=False)  # weight [hidden, inner]

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # [..., inner] each
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-norm residual block: $x \\mathrel{+}= \\mathrm{attn}(\\mathrm{norm}(x))$, then
    $x \\mathrel{+}= \\mathrm{mlp}(\\mathrm{norm}(x))$."""

    def __init__(self, config: LlamaConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttendFn) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """The whole model. With ``tie_word_embeddings``, ``lm_head.weight`` *is*
    ``embed_tokens.weight`` (one tensor, saved once)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        # [V, hidden]; _init_weights fills it (nn.Embedding's own normal_ init, on the meta
        # device load_model builds on, would import torch's compiler: seconds, for nothing)
        embedding = torch.empty(config.vocab_size, config.hidden_size)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, _weight=embedding)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)  # [V, hidden]
        self._init_weights()
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def _init_weights(self) -> None:
        """Normal(0, 0.02) as HF's ``initializer_range``, with the two projections that write
        into the residual stream (``o_proj``, ``down_proj``) scaled by $1/\\sqrt{2 N_L}$ as in
        GPT-2, so the residual's variance does not grow with depth at the start of training."""
        residual_std = 0.02 / (2 * self.config.num_hidden_layers) ** 0.5
        for name, param in self.named_parameters():
            if param.is_meta:  # shapes only (load_model): the values come from a checkpoint
                continue
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(param, std=residual_std)
            elif param.dim() == 2:
                nn.init.normal_(param, std=0.02)

    def forward_contiguous(self, tokens: Tensor) -> Tensor:
        """Logits ``[batch, T, V]`` for ``tokens`` ``[batch, T]`` at positions ``0..T-1``, with
        causal attention: position $t$ sees positions $0 \\ldots t$ of its own row."""
        _, seq_len = tokens.shape
        positions = torch.arange(seq_len, device=tokens.device)
        group = self.config.num_queries_per_kv

        def attend(layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [batch, heads, T, d_h]
            k = k.repeat_interleave(group, dim=1)  # [batch, H, T, d_h]: head h reads h // group
            v = v.repeat_interleave(group, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(d_h)
            return out.transpose(1, 2)  # [batch, T, H, d_h]

        return self.lm_head(self._hidden(tokens, positions, attend))

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor,
        kv_cache: KVCache,
        batch: PagedBatch,
        logits_index: Tensor | None = None,
        observe: Observer | None = None,
    ) -> Tensor:
        """One engine step on the paged KV cache.

        ``tokens`` and ``positions`` are ``[N]``: every sequence's tokens computed this step,
        concatenated in batch order (``batch.query_lens`` says how many belong to each). In each
        layer the N keys and values are written to ``kv_cache`` at ``batch.slot_mapping`` and
        each query attends to its sequence's cached tokens up to its own position.

        Returns logits ``[N, V]``, or ``[len(logits_index), V]`` for only the rows
        ``logits_index`` when given: a prefill needs the logits of each sequence's last token
        only, and the vocabulary projection of every prompt token would be wasted work.

        ``observe``, when given, sees each layer's queries and attention output
        (``minipaged.attention_probe``: what the TUI's attention view shows).
        """
        scale = self.config.head_dim**-0.5

        def attend(layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            key_pool, value_pool = kv_cache.key[layer], kv_cache.value[layer]
            # q, k, v are views into the packed projection; the kernels read flat buffers.
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # [N, heads, d_h] each
            # A cache stored in another dtype than the model computes in (FP8) is read with
            # its scales; one in the model's dtype needs none.
            scales = kv_cache.scales(layer, q.dtype)
            out = paged_attention(q, k, v, key_pool, value_pool, batch, scale, **scales)
            if observe is not None:
                observe(layer, q, out)
            return out

        hidden = self._hidden(tokens, positions, attend)  # [N, hidden]
        if logits_index is not None:
            hidden = hidden[logits_index]
        return self.lm_head(hidden)

    def forward_with(self, tokens: Tensor, positions: Tensor, attend: AttendFn) -> Tensor:
        """Logits ``[N, V]`` for tokens ``[N]`` at ``positions`` ``[N]`` with the caller's
        attention step: speculative decoding's verify pass attends with a tree mask."""
        return self.lm_head(self._hidden(tokens, positions, attend))

    def _hidden(self, tokens: Tensor, positions: Tensor, attend: AttendFn) -> Tensor:
        """Final normed hidden states ``[..., hidden]`` for tokens ``[...]``; the rows of
        ``tokens`` are at ``positions`` (``[T]`` shared by a contiguous batch, or ``[N]``)."""
        x = self.embed_tokens(tokens)  # [..., hidden]
        config = self.config
        cos, sin = rope_cos_sin(
            positions, config.head_dim, config.rope_theta, x.dtype, config.rope_scaling
        )
        for layer in self.layers:
            x = layer(x, cos, sin, attend)
        return self.norm(x)


def packed_projections(config: LlamaConfig) -> dict[str, dict[str, int]]:
    """The projections this model runs as one matrix multiply that Hugging Face stores apart:
    for each packed module, HF's modules in the order their weight rows are stacked, with
    each one's rows (output features)."""
    q_rows = config.num_attention_heads * config.head_dim
    kv_rows = config.num_key_value_heads * config.head_dim
    inner = config.intermediate_size
    return {
        "qkv_proj": {"q_proj": q_rows, "k_proj": kv_rows, "v_proj": kv_rows},
        "gate_up_proj": {"gate_proj": inner, "up_proj": inner},
    }
