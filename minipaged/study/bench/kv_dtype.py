"""``bench kv-dtype``: what a narrower KV cache costs in accuracy and buys in blocks (§1's $b$).

For each KV-cache dtype (float32, float16, fp8_e4m3, fp8_e5m2), with the tiny model's weights
in float32 on the CPU and the torch backend, measured through the real paged path (``KVCache``,
``Llama.forward`` over block tables, decoding as the engine does):

- logit error against float32: the largest and the mean $|z - z_{fp32}|$ over every position
  of the held-out windows, each window one prefill whose queries read the keys and values back
  from the cache (so every token sees quantized keys and values, its own included, exactly as
  a decode step would);
- perplexity $e^{\\text{mean NLL}}$ of the next token over the same windows;
- greedy agreement: how many of N greedily decoded tokens equal float32's before the first
  that differs (after it the texts part and a position-by-position match means nothing), as a
  share of N averaged over the prompts, and the earliest position where any prompt differs;
- blocks in the same bytes: the tiny model's default pool (256 MiB) and Llama-3-8B on an
  80 GB GPU (64 GB of KV cache), $\\propto 1/b$.

The held-out text, ``austen_heldout.txt``, is the first paragraphs of the tiny model's
validation split (the last 5% of the Austen corpus by characters, ``minipaged.train``): text
the model never trained on, shipped so that the benchmark needs no corpus and downloads
nothing. FP8 scales are calibrated at load (``minipaged.kv_calibration``), as ``LLM`` does.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from minipaged import fp8, memory
from minipaged.backend import PagedBatch
from minipaged.checkpoint import load_model
from minipaged.config import EngineConfig
from minipaged.kv_cache import KVCache
from minipaged.kv_calibration import calibrate_kv_scales, calibration_tokens
from minipaged.model import Llama
from minipaged.models import model_directory
from minipaged.study.bench import Options, plot
from minipaged.study.report import Column, Report
from minipaged.tokenizer import Tokenizer

HELDOUT = Path(__file__).with_name("austen_heldout.txt")
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
BLOCK_SIZE = 16
WINDOW = 256  # tokens per prefill window: the tiny model's training length
LLAMA_KV_BYTES = 64 * 10**9  # Llama-3-8B on 80 GB minus 16 GB of BF16 weights

COLUMNS = [
    Column("kv_cache_dtype", "KV cache"),
    Column("b", "b", "{}"),
    Column("max_logit_error", "max |Δlogit|", "{:.4f}"),
    Column("mean_logit_error", "mean |Δlogit|", "{:.5f}"),
    Column("perplexity", "perplexity", "{:.3f}"),
    Column("greedy_agreement", "greedy agree", "{:.1%}"),
    Column("first_divergence", "1st diff", "{}"),
    Column("tiny_blocks", "blocks, 256 MiB", "{:,}"),
    Column("llama_blocks", "Llama-3-8B blocks, 64 GB", "{:,}"),
]


def run(options: Options) -> Report:
    torch.manual_seed(options.seed)
    path = model_directory(options.model)
    model = load_model(path, dtype=torch.float32, device="cpu")
    tokenizer = Tokenizer(path)
    windows = heldout_windows(tokenizer, 2 if options.quick else 12)
    prompts = [window[:16].tolist() for window in windows[: 2 if options.quick else 4]]
    max_tokens = 16 if options.quick else 64
    rows, reference = [], None
    for name, dtype in DTYPES.items():
        scales = None
        if fp8.is_fp8(dtype):
            scales = calibrate_kv_scales(model, calibration_tokens(model, tokenizer), dtype)
        logits = [window_logits(model, window, dtype, scales) for window in windows]
        tokens = greedy_tokens(model, prompts, max_tokens, dtype, scales)
        reference = reference or (logits, tokens)
        rows.append(compare(name, dtype, model, windows, logits, tokens, reference))
    notes = [
        f"Tiny model, float32 weights, torch backend, CPU. Logits and perplexity: "
        f"{len(windows)} held-out windows of {WINDOW} tokens ({sum(map(len, windows)):,} "
        f"tokens, Austen text the model never trained on), each one prefill through the "
        f"paged cache. Greedy: {len(prompts)} prompts (the windows' first 16 tokens), "
        f"{max_tokens} tokens each through the engine; 'greedy agree': tokens equal to "
        "float32's before the first difference, as a share; '1st diff': the earliest position "
        "where a prompt's tokens differ (- : none).",
        "FP8 scales: one per layer and KV head, calibrated at load from a fixed text "
        "(2 × the largest magnitude / the format's max). Blocks: B = 16, in the tiny model's "
        "default 256 MiB pool and in Llama-3-8B's 64 GB on an 80 GB GPU.",
    ]
    title = "The price of a narrower KV cache: accuracy against blocks"
    report = Report("kv-dtype", title, COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (error, blocks) = plot.figure(panels=2)
    names = [row["kv_cache_dtype"] for row in rows]
    error.barh(names, [row["mean_logit_error"] for row in rows], label="mean")
    error.set_xlabel("mean |logit - float32 logit|, tiny model")
    error.invert_yaxis()
    blocks.barh(names, [row["llama_blocks"] for row in rows])
    blocks.set_xlabel("Llama-3-8B blocks (B = 16) in 64 GB")
    blocks.invert_yaxis()
    return plot.save(fig, options.out, "kv-dtype", options.force)


def heldout_windows(tokenizer: Tokenizer, count: int) -> list[torch.Tensor]:
    """Up to ``count`` windows of ``WINDOW`` token ids from the held-out text, each starting
    with BOS, as the model trained on them."""
    paragraphs = HELDOUT.read_text(encoding="utf-8").splitlines()
    ids: list[int] = []
    for paragraph in paragraphs:
        ids += tokenizer.encode(paragraph)  # BOS first: paragraph starts, as in training
    stream = torch.tensor(ids)
    return [window for window in stream.split(WINDOW) if len(window) == WINDOW][:count]


@torch.inference_mode()
def window_logits(
    model: Llama, window: torch.Tensor, dtype: torch.dtype, scales: tuple | None
) -> torch.Tensor:
    """Logits ``[WINDOW, vocab]`` of one prefill over a fresh cache of ``dtype``."""
    config = model.config
    num_blocks = -(-len(window) // BLOCK_SIZE)
    shape = (config.num_hidden_layers, num_blocks, config.num_key_value_heads, BLOCK_SIZE)
    cache = KVCache(*shape, config.head_dim, dtype=dtype)
    if scales is not None:
        cache.set_scales(*scales)
    batch = PagedBatch.from_lists(
        [list(range(num_blocks))], [len(window)], BLOCK_SIZE, [len(window)]
    )
    return model.forward(window, torch.arange(len(window)), cache, batch)


@torch.inference_mode()
def greedy_tokens(
    model: Llama, prompts: list[list[int]], max_tokens: int, dtype: torch.dtype, scales
) -> list[list[int]]:
    """Each prompt's ``max_tokens`` greedy tokens over a ``dtype`` cache, decoded as the engine
    decodes: one prefill, then one ``Llama.forward`` per token, each reading the cache through
    its block table. Written out rather than run on ``LLMEngine``, whose cache follows the
    model's dtype (``EngineConfig.kv_cache_dtype``): here a float32 model reads a float16 one."""
    config = model.config
    outputs = []
    for prompt in prompts:
        num_blocks = -(-(len(prompt) + max_tokens) // BLOCK_SIZE)
        shape = (config.num_hidden_layers, num_blocks, config.num_key_value_heads, BLOCK_SIZE)
        cache = KVCache(*shape, config.head_dim, dtype=dtype)
        if scales is not None:
            cache.set_scales(*scales)
        table, tokens, new = [list(range(num_blocks))], list(prompt), []
        query = len(prompt)  # the prefill computes the whole prompt, then one token a step
        while len(new) < max_tokens:
            batch = PagedBatch.from_lists(table, [len(tokens)], BLOCK_SIZE, [query])
            computed = torch.tensor(tokens[-query:])
            positions = torch.arange(len(tokens) - query, len(tokens))
            logits = model.forward(computed, positions, cache, batch)  # [query, vocab]
            new.append(int(logits[-1].argmax()))
            tokens.append(new[-1])
            query = 1
        outputs.append(new)
    return outputs


def common_prefix(tokens: list[int], reference: list[int]) -> int:
    """How many tokens agree with ``reference`` before the first that differs."""
    for position, (got, want) in enumerate(zip(tokens, reference, strict=True)):
        if got != want:
            return position
    return len(reference)


def compare(name, dtype, model, windows, logits, tokens, reference) -> dict:
    """One row: this dtype's logits and tokens against float32's (``reference``)."""
    ref_logits, ref_tokens = reference
    errors = torch.cat([(z - r).abs().flatten() for z, r in zip(logits, ref_logits, strict=True)])
    nll = torch.cat(
        [
            F.cross_entropy(z[:-1], w[1:], reduction="none")  # token t + 1 from logits at t
            for z, w in zip(logits, windows, strict=True)
        ]
    )
    agreed = [common_prefix(sample, ref) for sample, ref in zip(tokens, ref_tokens, strict=True)]
    max_tokens = len(ref_tokens[0])
    config = model.config
    return {
        "kv_cache_dtype": name,
        "b": torch.finfo(dtype).bits // 8,
        "max_logit_error": float(errors.max()),
        "mean_logit_error": float(errors.mean()),
        "perplexity": float(nll.mean().exp()),
        "greedy_agreement": sum(agreed) / (len(agreed) * max_tokens),
        "first_divergence": min(agreed) if min(agreed) < max_tokens else "-",
        "tiny_blocks": EngineConfig(block_size=BLOCK_SIZE).pool_sizes(
            memory.ModelShape(
                config.num_hidden_layers,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                torch.finfo(dtype).bits // 8,
            ).block_bytes(BLOCK_SIZE),
            config.max_position_embeddings,
        )[0],
        "llama_blocks": memory.PRESETS["llama-3-8b"]
        .with_kv_dtype(name)
        .num_blocks_for(LLAMA_KV_BYTES, BLOCK_SIZE),
    }
