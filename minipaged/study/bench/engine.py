"""``bench engine``: generation throughput of minipaged's engine against Hugging Face
transformers' ``LlamaForCausalLM.generate``, same model, same requests, same run.

The requests have mixed prompt lengths and all generate ``max_tokens`` tokens greedily (EOS
ignored), so both systems produce exactly the same number of tokens. minipaged schedules them
with continuous batching over the paged KV cache (at most ``batch`` sequences at a time);
transformers runs padded static batches of ``batch`` prompts (left padding, attention mask),
the way a script without a serving engine would. The table also counts how many requests got
token-for-token the same greedy output from both.
"""

from __future__ import annotations

import os
import time

import torch

from minipaged.checkpoint import load_config, model_directory
from minipaged.llm import LLM
from minipaged.sampling import SamplingParams
from minipaged.study.bench import Options, plot
from minipaged.study.report import Column, Report

COLUMNS = [
    Column("system", "system"),
    Column("requests", "requests", "{}"),
    Column("tokens", "tokens generated", "{:,}"),
    Column("seconds", "seconds", "{:.2f}"),
    Column("tokens_per_s", "tokens/s", "{:,.0f}"),
    Column("ratio", "vs transformers", "{:.2f}×"),
    Column("same_tokens", "same greedy tokens"),
]


def make_prompts(num_requests: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Random token-id prompts of 8 to 96 tokens (ids from 1: 0 is often a special token)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 97, (num_requests,), generator=generator).tolist()
    return [torch.randint(1, vocab_size, (n,), generator=generator).tolist() for n in lengths]


def run_minipaged(
    llm: LLM, prompts: list[list[int]], max_tokens: int
) -> tuple[float, list[list[int]]]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    requests = [{"prompt_token_ids": p} for p in prompts]
    llm.generate(requests[:1], SamplingParams(max_tokens=2, temperature=0.0), show_progress=False)
    start = time.perf_counter()
    outputs = llm.generate(requests, params, show_progress=False)
    seconds = time.perf_counter() - start
    return seconds, [out.outputs[0].token_ids for out in outputs]


def run_transformers(
    model, prompts: list[list[int]], max_tokens: int, batch: int, pad_id: int
) -> tuple[float, list[list[int]]]:
    def generate(group: list[list[int]], new_tokens: int) -> list[list[int]]:
        width = max(len(p) for p in group)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in group])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=pad_id,
        )
        return out[:, width:].tolist()

    # minipaged's ignore_eos: EOS may be generated and does not stop the sequence. (HF's
    # min_new_tokens would differ: it forbids EOS, so the greedy tokens would diverge.)
    model.generation_config.eos_token_id = None
    generate(prompts[:1], 2)  # warm-up
    start = time.perf_counter()
    tokens = []
    for i in range(0, len(prompts), batch):
        tokens.extend(generate(prompts[i : i + batch], max_tokens))
    return time.perf_counter() - start, tokens


def run(options: Options) -> Report:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never reach the network
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    num_requests, max_tokens, batch = (4, 8, 2) if options.quick else (16, 32, 8)
    config = load_config(options.model)
    prompts = make_prompts(num_requests, config.vocab_size, options.seed)
    llm = LLM(options.model, seed=options.seed, device=options.device, max_num_seqs=batch)
    ours_s, ours = run_minipaged(llm, prompts, max_tokens)
    hf = LlamaForCausalLM.from_pretrained(model_directory(options.model), dtype=torch.float32)
    hf = hf.to(options.device).eval()
    pad_id = config.eos_token_id if config.eos_token_id is not None else 0
    theirs_s, theirs = run_transformers(hf, prompts, max_tokens, batch, pad_id)
    tokens = sum(map(len, ours))
    if tokens != sum(map(len, theirs)):
        raise AssertionError("both systems must generate the same number of tokens")
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    rows = [
        {
            "system": "minipaged LLM.generate (continuous batching, paged KV)",
            "requests": num_requests,
            "tokens": tokens,
            "seconds": ours_s,
            "tokens_per_s": tokens / ours_s,
            "ratio": theirs_s / ours_s,
            "same_tokens": f"{same} of {num_requests}",
        },
        {
            "system": "transformers generate (padded static batches)",
            "requests": num_requests,
            "tokens": tokens,
            "seconds": theirs_s,
            "tokens_per_s": tokens / theirs_s,
            "ratio": 1.0,
            "same_tokens": "(reference)",
        },
    ]
    notes = [
        f"Measured on {options.device} with {torch.get_num_threads()} thread(s), one run after a "
        f"warm-up: model {options.model!r} ({config.num_hidden_layers} layers, hidden "
        f"{config.hidden_size}), fp32; {num_requests} requests of 8–96 prompt tokens, "
        f"{max_tokens} greedy tokens each, EOS ignored; at most {batch} sequences at a time.",
        "vs transformers: tokens/s divided by transformers' tokens/s in the same run.",
    ]
    report = Report("engine", "Engine throughput", COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (axis,) = plot.figure(width=7.0)
    axis.barh([r["system"] for r in rows], [r["tokens_per_s"] for r in rows])
    axis.set_xlabel("generated tokens per second")
    axis.invert_yaxis()
    return plot.save(fig, options.out, "engine")
