"""The ``MODEL_CARD.md`` that ``minipaged.train`` writes beside every model it trains: what the
model is for, its data and split, its tokenizer, its shape, how it was trained and on what
machine, its loss curve and samples. A card is generated, never edited by hand, so it stays
true to the run that made the weights.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
from dataclasses import asdict

import torch

from minipaged.checkpoint_kinds import model_card_title
from minipaged.model import LlamaConfig
from minipaged.tokenizer import ENDOFTEXT


def model_card(
    args: argparse.Namespace,
    config: LlamaConfig,
    num_params: int,
    corpus_sha256: str,
    train_tokens: int,
    val_tokens: int,
    history: list[tuple[int, float, float]],
    final_train: float,
    final_val: float,
    train_seconds: float,
    total_seconds: float,
    samples: dict[str, str],
    validation_fraction: float,
) -> str:
    """The ``MODEL_CARD.md`` text: what the model is, how it was made, how good it is."""
    tokens_per_step = args.batch_size * args.context
    command = shlex.join(["python", "-m", "minipaged.train", *sys.argv[1:]])
    config_rows = "\n".join(f"| `{key}` | {value} |" for key, value in asdict(config).items())
    curve = "\n".join(f"| {step} | {train:.3f} | {val:.3f} |" for step, train, val in history)
    sample_text = "\n\n".join(f"{name}:\n\n> {text}" for name, text in samples.items())
    machine = (
        f"{platform.machine()} {platform.system()}, torch threads: {args.threads} "
        f"(os.cpu_count() = {os.cpu_count()}), torch {torch.__version__}, fp32"
    )
    if args.tokenizer is None:
        purpose = """to be the embedded default
of minipaged (`LLM(model="tiny")`). It writes English-like Austen pastiche; it is a teaching
prop for the KV-cache manager, not a language model to rely on. Greedy decoding falls into
loops: sample (temperature about 0.8, top-k about 40) for demonstrations."""
        tokenizer_text = (
            "Byte-level BPE (GPT-2's scheme, `tokenizers`), vocabulary "
            f"""{config.vocab_size} including
`{ENDOFTEXT}`, trained on the training paragraphs only. Every byte is in the base alphabet, so
any text round-trips."""
        )
    else:
        purpose = f"""to be the draft model of
speculative decoding, proposing tokens that the embedded `tiny` model verifies. It is about
{4 * num_params / 1e6:.1f} MB in fp32, cheap enough that a proposal costs far less than a
target forward pass; the target decides every token, so the draft's quality changes only how
many proposals are accepted, never the output."""
        source = args.tokenizer.name
        tokenizer_text = f"""Reused unchanged from `{source}` (`--tokenizer`), vocabulary
{config.vocab_size}: a draft must propose token ids that the target reads as the same text."""
    return f"""{model_card_title(args.out.name)}

A {num_params / 1e6:.2f}M-parameter Llama (RMSNorm, RoPE, grouped-query attention, SwiGLU,
tied embeddings) trained from scratch on Jane Austen's six novels, {purpose}

The directory is a Hugging Face Llama checkpoint: transformers' `LlamaForCausalLM` and
`PreTrainedTokenizerFast` load it and give the same logits as minipaged's model.

## Data

- Corpus: `{args.corpus.name}`, Jane Austen's six novels, one paragraph a line (from Debian's
  `r-cran-janeaustenr`), sha256 `{corpus_sha256}`.
- Licence: the novels are in the public domain; so is this model's training data. The weights
  are released with minipaged under its MIT licence.
- Split: the last {validation_fraction:.0%} of paragraphs (by characters) are held out for
  validation: {train_tokens:,} training tokens, {val_tokens:,} validation tokens.
- Every paragraph is preceded by `{ENDOFTEXT}` (id {config.bos_token_id}), which is both BOS and
  EOS: the model learns where a paragraph ends and a BOS-prefixed prompt starts a new one.

## Tokenizer

{tokenizer_text}

## Model

| key | value |
| --- | --- |
{config_rows}

## Training

- {args.steps} steps of {args.batch_size} windows × {args.context} tokens = {tokens_per_step:,}
  tokens per step, {args.steps * tokens_per_step / train_tokens:.1f} epochs; windows at random
  offsets drawn from a generator seeded with {args.seed}.
- AdamW (β = 0.9, 0.95; weight decay {args.weight_decay} on matrices only), gradient clipping
  at norm 1.0, learning rate {args.lr} after {args.warmup} linear warmup steps, cosine decay to
  {args.min_lr}. Initialisation Normal(0, 0.02), residual projections scaled by 1/√(2·layers).
- fp32 throughout; the checkpoint is fp32 (bf16 weights drift from transformers' greedy output
  after a few dozen tokens).
- Machine: {machine}. Training took {train_seconds / 60:.1f} min
  ({total_seconds / 60:.1f} min with the tokenizer, evaluation and export).
- Command: `{command}`

## Results

Final loss in nats per token: train {final_train:.3f} (on {val_tokens:,} fixed training
tokens), validation {final_val:.3f}.

| step | train (smoothed) | validation |
| --- | --- | --- |
{curve}

## Samples

{sample_text}
"""
