"""``bench engine``: generation throughput of minipaged's engine against Hugging Face
transformers' ``LlamaForCausalLM.generate``, same model, same requests, same process.

Two workloads, every request greedy with EOS ignored, so both systems produce exactly the same
tokens and the table can count the requests whose output matches token for token:

- ``uniform``: prompts of 8–96 tokens, every request 32 new tokens. Continuous batching has
  nothing to win here: it measures what one step costs.
- ``mixed``: 64 requests, prompt and output lengths each drawn from 8–256. This is where
  continuous batching matters. transformers runs padded static batches of ``width`` requests
  (left padding, attention mask), the way a script without a serving engine would: a batch
  runs until its longest request is done, so the short ones ride along as padding, and the
  next batch waits for it. minipaged keeps at most ``width`` sequences running and admits the
  next request the step after one finishes (Orca's iteration-level scheduling, over the paged
  KV cache).

Each system runs once per round, the two in alternating order, after a warm-up; the table gives
the median over the rounds, and *vs transformers* is the median of the rounds' ratios.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import torch

from minipaged.backend import resolve_backend
from minipaged.checkpoint import load_config
from minipaged.llm import LLM
from minipaged.models import model_directory
from minipaged.sampling import SamplingParams
from minipaged.study.bench import Options, plot, rounds
from minipaged.study.report import Column, Report

COLUMNS = [
    Column("workload", "workload"),
    Column("system", "system"),
    Column("requests", "requests", "{}"),
    Column("width", "width", "{}"),
    Column("tokens", "tokens generated", "{:,}"),
    Column("passes", "forward passes", "{:,}"),
    Column("seconds", "seconds", "{:.2f}"),
    Column("tokens_per_s", "tokens/s", "{:,.0f}"),
    Column("ratio", "vs transformers", "{:.2f}×"),
    Column("same_tokens", "same greedy tokens"),
    Column("threads", "threads", "{}"),
]


@dataclass(frozen=True)
class Workload:
    """Requests (prompt token ids, each with its own number of new tokens) and the width: the
    most sequences minipaged runs at once, and transformers' static batch size."""

    name: str
    prompts: list[list[int]]
    max_tokens: list[int]
    width: int
    description: str
    rounds: int = 1  # interleaved rounds the table's medians are taken over


def make_workloads(vocab_size: int, max_len: int, quick: bool, seed: int) -> list[Workload]:
    """The uniform and the mixed workload (see the module docstring); ``quick`` shrinks both
    to seconds. Token ids are drawn from 1 (0 is often a special token); a request never
    outgrows the model's context ``max_len``."""
    generator = torch.Generator().manual_seed(seed)

    def draw(low: int, high: int, count: int) -> list[int]:
        return torch.randint(low, high + 1, (count,), generator=generator).tolist()

    def prompts(lengths: list[int]) -> list[list[int]]:
        return [draw(1, vocab_size - 1, n) for n in lengths]

    num_uniform, uniform_tokens, uniform_width = (4, 8, 2) if quick else (16, 32, 8)
    num_mixed, longest, mixed_width = (6, 24, 2) if quick else (64, 256, 16)
    # A uniform round takes a fraction of a second, so its ratio swings with the machine's
    # load; more rounds steady its median for about the time of one mixed round.
    uniform = Workload(
        "uniform",
        prompts(draw(8, 96, num_uniform)),
        [uniform_tokens] * num_uniform,
        uniform_width,
        f"uniform: {num_uniform} requests of 8–96 prompt tokens, {uniform_tokens} new tokens "
        f"each, width {uniform_width}",
        rounds=1 if quick else 9,
    )
    prompt_lens = draw(8, longest, num_mixed)
    outputs = [
        min(n, max_len - p) for n, p in zip(draw(8, longest, num_mixed), prompt_lens, strict=True)
    ]
    mixed = Workload(
        "mixed",
        prompts(prompt_lens),
        outputs,
        mixed_width,
        f"mixed: {num_mixed} requests, prompt and output lengths each uniform in 8–{longest}, "
        f"width {mixed_width}",
        rounds=1 if quick else 3,
    )
    return [uniform, mixed]


def run_minipaged(llm: LLM, workload: Workload) -> tuple[float, list[list[int]], int]:
    """Seconds, each request's new tokens, and the engine steps (forward passes) it took."""
    engine = llm.engine
    ids = [
        engine.add_request(
            {"prompt_token_ids": prompt},
            SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
        )
        for prompt, max_tokens in zip(workload.prompts, workload.max_tokens, strict=True)
    ]
    outputs, steps = {}, 0
    start = time.perf_counter()
    while engine.has_unfinished():
        for output in engine.step().finished:
            outputs[output.request_id] = output.outputs[0].token_ids
        steps += 1
    return time.perf_counter() - start, [outputs[i] for i in ids], steps


def run_transformers(model, workload: Workload, pad_id: int) -> tuple[float, list[list[int]], int]:
    """Seconds, each request's new tokens, and the forward passes of padded static batches of
    ``workload.width`` requests: each batch generates as many tokens as its longest request
    asks for, and each request keeps its own first ``max_tokens``."""
    tokens, passes = [], 0
    start = time.perf_counter()
    for i in range(0, len(workload.prompts), workload.width):
        group = workload.prompts[i : i + workload.width]
        wanted = workload.max_tokens[i : i + workload.width]
        out = _generate(model, group, max(wanted), pad_id)
        tokens.extend(row[:n] for row, n in zip(out, wanted, strict=True))
        passes += max(wanted)
    return time.perf_counter() - start, tokens, passes


def _generate(model, group: list[list[int]], new_tokens: int, pad_id: int) -> list[list[int]]:
    width = max(len(p) for p in group)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in group])  # left padding
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
    out = model.generate(
        input_ids=ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=pad_id,
    )
    return out[:, width:].tolist()


def default_backends(device: str) -> tuple[str, ...]:
    """The reference, and the kernel backend that runs on ``device`` without a simulator."""
    return ("torch", "numba") if device.startswith("cuda") else ("torch", "numba-cpu")


def auto_backend(device: str) -> str:
    """What ``LLM(backend="auto")`` runs for this benchmark's float32 model on ``device``."""
    return resolve_backend("auto", torch.device(device), torch.float32, torch.float32)


def run(options: Options) -> Report:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never reach the network
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    config = load_config(options.model)
    workloads = make_workloads(
        config.vocab_size, config.max_position_embeddings, options.quick, options.seed
    )
    threads = torch.get_num_threads()
    notes = []

    hf = LlamaForCausalLM.from_pretrained(model_directory(options.model), dtype=torch.float32)
    hf = hf.to(options.device).eval()
    # minipaged's ignore_eos: EOS may be generated and does not stop the sequence. (HF's
    # min_new_tokens would differ: it forbids EOS, so the greedy tokens would diverge.)
    hf.generation_config.eos_token_id = None
    pad_id = next(iter(config.eos_token_ids), 0)
    _generate(hf, workloads[0].prompts[:1], 2, pad_id)  # warm-up

    rows = []
    for workload in workloads:
        engines = {}
        for backend in options.backends or default_backends(options.device):
            try:
                engines[backend] = LLM(
                    options.model,
                    backend=backend,
                    seed=options.seed,
                    device=options.device,
                    max_num_seqs=workload.width,
                )
            except (ValueError, ImportError) as error:  # one this build or device does not have
                note = f"Backend {backend!r} not run: {error}"
                notes += [note] if note not in notes else []
                continue
            run_minipaged(engines[backend], Workload("warm-up", workload.prompts[:1], [2], 1, ""))
        rows += _measure(workload, hf, pad_id, engines, threads)
    notes += [
        f"Measured on {options.device} with {threads} thread(s): model {options.model!r} "
        f"({config.num_hidden_layers} layers, hidden {config.hidden_size}), fp32, greedy, EOS "
        "ignored. seconds: median of "
        f"{' and '.join(f'{w.rounds} ({w.name})' for w in workloads)} rounds after a warm-up, "
        "the systems interleaved in alternating order; vs transformers: median over the "
        "rounds of transformers' seconds / this row's seconds.",
        *(w.description for w in workloads),
        "width: the most sequences minipaged runs at once (max_num_seqs), and transformers' "
        "static batch size. forward passes: engine steps for minipaged (a step prefills new "
        "prompts and decodes the running sequences together); for transformers, the tokens "
        "each static batch generates (its longest request's), prefill included.",
        "same greedy tokens: requests whose new tokens equal transformers' token for token.",
        f"LLM's default backend, 'auto', runs {auto_backend(options.device)!r} here.",
    ]
    report = Report("engine", "Engine throughput", COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _measure(workload: Workload, hf, pad_id: int, engines: dict, threads: int) -> list[dict]:
    """One row per minipaged backend and one for transformers, from ``workload.rounds``
    interleaved rounds."""
    theirs: list[float] = []
    ours: dict[str, list[float]] = {backend: [] for backend in engines}
    results = {}
    for round_ in range(workload.rounds):
        order = ["transformers", *engines]
        for system in order if round_ % 2 == 0 else reversed(order):
            if system == "transformers":
                seconds, tokens, passes = run_transformers(hf, workload, pad_id)
                theirs.append(seconds)
            else:
                seconds, tokens, passes = run_minipaged(engines[system], workload)
                ours[system].append(seconds)
            results[system] = (tokens, passes)
    reference, their_passes = results["transformers"]
    num_tokens = sum(workload.max_tokens)

    def row(system: str, seconds: list[float], same: str, ratio: float, passes: int) -> dict:
        median = statistics.median(seconds)
        return {
            "workload": workload.name,
            "system": system,
            "requests": len(workload.prompts),
            "width": workload.width,
            "tokens": num_tokens,
            "passes": passes,
            "seconds": median,
            "tokens_per_s": num_tokens / median,
            "ratio": ratio,
            "same_tokens": same,
            "threads": threads,
        }

    rows = []
    for backend, seconds in ours.items():
        tokens, passes = results[backend]
        if sum(map(len, tokens)) != num_tokens:
            raise AssertionError(f"minipaged ({backend}) generated the wrong number of tokens")
        same = sum(a == b for a, b in zip(tokens, reference, strict=True))
        ratio = rounds.paired_ratio(theirs, seconds)
        system = f"minipaged ({backend})"
        rows.append(row(system, seconds, f"{same} of {len(tokens)}", ratio, passes))
    rows.append(row("transformers (static batches)", theirs, "(reference)", 1.0, their_passes))
    return rows


def _plot(rows: list[dict], options: Options):
    fig, (axis,) = plot.figure()
    labels = [f"{r['workload']}: {r['system']}" for r in rows]
    axis.barh(labels, [r["tokens_per_s"] for r in rows])
    axis.set_xlabel("generated tokens per second")
    axis.invert_yaxis()
    return plot.save(fig, options.out, "engine", options.force)
