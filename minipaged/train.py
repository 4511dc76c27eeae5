"""Train the embedded tiny model: ``python -m minipaged.train --help``.

From a plain-text corpus with one paragraph per line (by default Jane Austen's six novels) this
trains a byte-level BPE tokenizer, then a small Llama, and writes a Hugging Face directory
(``config.json``, ``model.safetensors``, ``tokenizer.json``, ``MODEL_CARD.md``) that
``LLM(model="tiny")`` and transformers both load.

Data: paragraphs are joined into one token stream with ``<|endoftext|>`` before each, so the
model learns where a passage ends, and a prompt that starts with BOS (the same token) looks like
the start of a paragraph. The last 5% of paragraphs (by characters) are held out for validation;
the tokenizer is trained on the rest only.

Deterministic for a given seed, step count and thread count on a given machine: the initial
weights and every batch follow from ``--seed`` (the model has no dropout), and the run length is
a step count, not a time limit.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from torch import Tensor

from minipaged import ending_signals
from minipaged.arguments import DefaultsFormatter
from minipaged.checkpoint import save_model
from minipaged.checkpoint_kinds import MODEL_CARD_FILE, check_checkpoint_replaceable
from minipaged.input_file import check_input_file
from minipaged.model import Llama, LlamaConfig
from minipaged.model_card import model_card
from minipaged.output_paths import add_force_flag, output_folder
from minipaged.tokenizer import Tokenizer, train_tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "data" / "austen.txt"
DEFAULT_OUT = Path(__file__).resolve().parent / "models" / "tiny"
VALIDATION_FRACTION = 0.05


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minipaged.train",
        description="Train the embedded tiny Llama and its tokenizer on a paragraph-per-line "
        "corpus, and write a Hugging Face model directory with a model card.",
        formatter_class=DefaultsFormatter,
    )
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="one paragraph a line")
    parser.add_argument(  # refused where it is typed, not after the training it would end
        "--out",
        type=output_folder("a folder for the trained model"),
        default=DEFAULT_OUT,
        help="output model directory",
    )
    add_force_flag(parser, "a file of the checkpoint")
    parser.add_argument("--steps", type=int, default=2800, help="optimizer steps (fixed)")
    parser.add_argument("--batch-size", type=int, default=8, help="windows per step")
    parser.add_argument("--context", type=int, default=512, help="tokens per window")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="reuse this model directory's tokenizer instead of training one: a draft model "
        "for speculative decoding must share its target's vocabulary",
    )
    parser.add_argument("--vocab-size", type=int, default=2048, help="when training a tokenizer")
    parser.add_argument("--dim", type=int, default=128, help="hidden_size")
    parser.add_argument("--layers", type=int, default=4, help="num_hidden_layers")
    parser.add_argument("--heads", type=int, default=4, help="num_attention_heads")
    parser.add_argument("--kv-heads", type=int, default=2, help="num_key_value_heads")
    parser.add_argument("--intermediate", type=int, default=344, help="SwiGLU hidden size")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--min-lr", type=float, default=3e-4, help="learning rate at the end")
    parser.add_argument("--warmup", type=int, default=200, help="linear warmup steps")
    parser.add_argument("--weight-decay", type=float, default=0.1, help="AdamW, matrices only")
    parser.add_argument("--eval-every", type=int, default=250, help="steps between val losses")
    parser.add_argument("--seed", type=int, default=0, help="the initial weights and every batch")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads; on a 2-core machine shared with other jobs, 2 threads "
        "measured 6x slower than 1 (each step waits for the thread that lost its core)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "context", "eval_every", "threads"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    try:  # refused where typed, not after the tokenizer is trained on it
        check_input_file(args.corpus, "pass --corpus PATH, a text file of one paragraph a line")
        args.corpus.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        parser.error(
            f"--corpus {args.corpus} is not UTF-8 text (byte {error.start}): save it as UTF-8"
        )
    except (OSError, ValueError) as error:
        parser.error(f"--corpus {error}")
    if args.tokenizer is not None and not (args.tokenizer / "tokenizer.json").is_file():
        parser.error(f"--tokenizer {args.tokenizer} has no tokenizer.json; pass a model directory")
    if args.tokenizer is not None:
        try:  # one that is there and does not load: refused now, not after the corpus is read
            Tokenizer(args.tokenizer)
        except (OSError, ValueError, TypeError) as error:
            parser.error(f"--tokenizer {error}")
    try:  # another model's folder: refused before the training, not after it
        check_checkpoint_replaceable(args.out, [MODEL_CARD_FILE], args.force, way="give --force")
    except ValueError as error:
        parser.error(f"--out {error}")
    return args


def split_paragraphs(text: str) -> tuple[list[str], list[str]]:
    """Non-empty lines, split into (train, validation) at the paragraph boundary where the
    last ``VALIDATION_FRACTION`` of the characters begins."""
    paragraphs = [line.strip() for line in text.splitlines() if line.strip()]
    budget = VALIDATION_FRACTION * sum(len(p) for p in paragraphs)
    held, cut = 0, len(paragraphs)
    while cut > 0 and held < budget:
        cut -= 1
        held += len(paragraphs[cut])
    return paragraphs[:cut], paragraphs[cut:]


def token_stream(tokenizer: Tokenizer, paragraphs: list[str]) -> Tensor:
    """``[BOS p1 BOS p2 ...]`` as one int64 tensor: BOS (= EOS) marks every paragraph start."""
    ids: list[int] = []
    for encoding in tokenizer.tokenizer.encode_batch(paragraphs, add_special_tokens=False):
        ids.append(tokenizer.bos_id)
        ids.extend(encoding.ids)
    return torch.tensor(ids, dtype=torch.int64)


def check_enough_tokens(args: argparse.Namespace, train_tokens: int, val_tokens: int) -> None:
    """End the command as a refused flag does (status 2), before the model is built, when
    the corpus is too short for one window of ``--context`` tokens in its training part and
    in its held-out part (the last ``VALIDATION_FRACTION``): the windows would be empty."""
    need = args.context + 2  # a window's inputs and targets, and one place to start it
    if min(train_tokens, val_tokens) < need:
        build_parser().error(
            f"--corpus {args.corpus} is too short for --context {args.context}: its training "
            f"part has {train_tokens} tokens and its held-out last {VALIDATION_FRACTION:.0%} "
            f"{val_tokens}, and each needs at least {need}; give a longer corpus or a "
            "smaller --context"
        )


def random_windows(stream: Tensor, batch: int, context: int, generator: torch.Generator) -> Tensor:
    """``[batch, context + 1]`` windows at random offsets: inputs are ``[:, :-1]``, targets
    ``[:, 1:]``."""
    starts = torch.randint(0, len(stream) - context - 1, (batch,), generator=generator)
    return torch.stack([stream[s : s + context + 1] for s in starts.tolist()])


def tiled_windows(stream: Tensor, context: int) -> Tensor:
    """Every full non-overlapping ``context + 1`` window of ``stream``, ``[n, context + 1]``:
    a fixed set, so losses at different steps compare."""
    n = (len(stream) - 1) // context
    return torch.stack([stream[i * context : i * context + context + 1] for i in range(n)])


@torch.no_grad()
def mean_loss(model: Llama, windows: Tensor, batch: int) -> float:
    """Mean next-token cross-entropy (nats per token) over ``windows``."""
    model.eval()
    total = 0.0
    for i in range(0, len(windows), batch):
        chunk = windows[i : i + batch]
        logits = model.forward_contiguous(chunk[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum")
        total += loss.item()
    model.train()
    return total / (windows.shape[0] * (windows.shape[1] - 1))


def learning_rate(step: int, args: argparse.Namespace) -> float:
    """Linear warmup to ``--lr`` over ``--warmup`` steps, then cosine decay to ``--min-lr``."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def generate(
    model: Llama,
    tokenizer: Tokenizer,
    prompt: str,
    max_tokens: int,
    temperature: float = 0.0,
    top_k: int = 0,
    seed: int = 0,
) -> str:
    """Continue ``prompt`` (after BOS) with the contiguous forward pass: greedy when
    ``temperature`` is 0, else sampling from the ``top_k`` most likely tokens. Stops at EOS."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    ids = tokenizer.encode(prompt)
    prompt_len = len(ids)
    context = model.config.max_position_embeddings
    for _ in range(max_tokens):
        logits = model.forward_contiguous(torch.tensor([ids[-context:]]))[0, -1]
        if temperature == 0:
            token = int(logits.argmax())
        else:
            top = torch.topk(logits / temperature, top_k)
            choice = torch.multinomial(top.values.softmax(-1), 1, generator=generator)
            token = int(top.indices[choice])
        if token == tokenizer.eos_id:
            break
        ids.append(token)
    return prompt + tokenizer.decode(ids[prompt_len:])


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.time()
    corpus_bytes = args.corpus.read_bytes()
    corpus_sha256 = hashlib.sha256(corpus_bytes).hexdigest()
    train_paragraphs, val_paragraphs = split_paragraphs(corpus_bytes.decode("utf-8"))

    if args.tokenizer is None:
        tokenizer = Tokenizer(train_tokenizer(texts=train_paragraphs, vocab_size=args.vocab_size))
    else:
        tokenizer = Tokenizer(args.tokenizer)
    train_stream = token_stream(tokenizer, train_paragraphs)
    val_stream = token_stream(tokenizer, val_paragraphs)
    check_enough_tokens(args, len(train_stream), len(val_stream))
    val_windows = tiled_windows(val_stream, args.context)
    # As many training windows as validation ones, fixed, for a final train loss that compares.
    train_eval_windows = tiled_windows(train_stream, args.context)[: len(val_windows)]

    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=args.dim,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.dim // args.heads,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=args.context,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
    )
    model = Llama(config).train()
    num_params = sum(p.numel() for p in model.parameters())
    matrices = [p for p in model.parameters() if p.dim() == 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": matrices, "weight_decay": args.weight_decay},
            {"params": vectors, "weight_decay": 0.0},
        ],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    generator = torch.Generator().manual_seed(args.seed)
    tokens_per_step = args.batch_size * args.context
    print(
        f"corpus {args.corpus.name} sha256 {corpus_sha256[:12]}: {len(train_stream):,} train "
        f"tokens, {val_windows.numel():,} val tokens; model {num_params:,} parameters; "
        f"{args.steps} steps = {args.steps * tokens_per_step / len(train_stream):.1f} epochs",
        flush=True,
    )

    history: list[tuple[int, float, float]] = []  # (step, smoothed train loss, val loss)
    smoothed = val_loss = float("nan")
    columns = (
        TextColumn("step {task.completed}/{task.total}"),
        BarColumn(),
        TextColumn("loss {task.fields[loss]:.3f} val {task.fields[val]:.3f}"),
        TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    train_started = time.time()
    with Progress(*columns, refresh_per_second=2) as progress:
        task = progress.add_task("train", total=args.steps, loss=smoothed, val=val_loss, tps=0.0)
        for step in range(args.steps):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, args)
            window = random_windows(train_stream, args.batch_size, args.context, generator)
            logits = model.forward_contiguous(window[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

            smoothed = loss.item() if step == 0 else 0.98 * smoothed + 0.02 * loss.item()
            if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
                val_loss = mean_loss(model, val_windows, args.batch_size)
                history.append((step + 1, smoothed, val_loss))
                progress.console.print(
                    f"step {step + 1}: train {smoothed:.3f} val {val_loss:.3f} "
                    f"({time.time() - train_started:.0f} s)"
                )
            tps = (step + 1) * tokens_per_step / (time.time() - train_started)
            progress.update(task, advance=1, loss=smoothed, val=val_loss, tps=tps)
    train_seconds = time.time() - train_started

    model.eval()
    final_train = mean_loss(model, train_eval_windows, args.batch_size)
    final_val = history[-1][2]
    samples = {
        "greedy": generate(model, tokenizer, "It is a truth universally acknowledged", 60),
        "sampled (temperature 0.8, top-k 40, seed 0)": generate(
            model, tokenizer, "Elizabeth", 80, temperature=0.8, top_k=40, seed=0
        ),
    }
    card = model_card(
        args,
        config,
        num_params,
        corpus_sha256,
        len(train_stream),
        val_windows.numel(),
        history,
        final_train,
        final_val,
        train_seconds,
        time.time() - started,
        samples,
        VALIDATION_FRACTION,
    )
    # The card with the checkpoint it describes, put in place together (save_model)
    save_model(model, tokenizer, args.out, extra={MODEL_CARD_FILE: card}, force=args.force)
    print(f"final train loss {final_train:.3f}, val loss {final_val:.3f}; wrote {args.out}")
    for name, text in samples.items():
        print(f"{name}: {text}")


def main(argv: list[str] | None = None) -> None:
    """Train as ``argv`` says. Ctrl-C, ``kill``, a closed terminal and Ctrl-\\ end the run as
    they end a ``minipaged`` command (``ending_signals``): one line, status 128 + the signal's
    number, and no checkpoint file half written."""
    previous = ending_signals.end_on_signals(lambda: "train")
    try:
        train(parse_args(argv))
    finally:
        ending_signals.restore(previous)


if __name__ == "__main__":
    main()
