"""``bench speculative``: speculative tree decoding (§5's fourth workload) on the tiny model.

Each system generates greedily, one request at a time (so a forward pass serves one sequence
and *target passes per token* means what it says), from the same prompts: plain decoding, the
n-gram drafter (prompt lookup, no model) and the draft-model drafter (``tiny-draft``, the same
tokenizer). The table reports the target model's forward passes per generated token (the
prefill, plain decode passes and verify passes), the acceptance rate (guesses kept / guesses
proposed), tokens/s and its ratio to plain decoding, and whether the tokens equal plain
greedy's: they must.

It also counts blocks at the peak of each step, right after the branches are forked: one block
per guess on copy-on-write branches, against what a tree that copied its prefix for every
guess would hold, $\\sum_i \\lceil (P + \\delta_i + 1)/B \\rceil$ more blocks.

The systems run in turns, once per round, after a warm-up; tokens/s is the median over the
rounds and *vs plain* the median of the rounds' ratios.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from minipaged import memory
from minipaged.llm import LLM
from minipaged.sampling import SamplingParams
from minipaged.speculative import SpeculativeConfig
from minipaged.study.bench import Options, plot
from minipaged.study.report import Column, Report

BLOCK_SIZE = 16
DRAFT_MODEL = "tiny-draft"
PROMPTS = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune",
    "Mr. Darcy said that he had never seen",
    "Emma Woodhouse, handsome, clever, and rich,",
    "My dear Miss Elizabeth, I am very sorry",
]
SYSTEMS = {
    "plain": None,
    "n-gram": SpeculativeConfig("ngram", num_speculative_tokens=4, branching=2),
    "draft model": SpeculativeConfig(
        "draft", num_speculative_tokens=4, branching=2, draft_model=DRAFT_MODEL
    ),
}

COLUMNS = [
    Column("system", "decoding"),
    Column("tokens", "tokens", "{:,}"),
    Column("passes_per_token", "target passes / token", "{:.2f}"),
    Column("acceptance", "acceptance", "{:.0%}"),
    Column("tokens_per_verify", "tokens / verify pass", "{:.2f}"),
    Column("tokens_per_s", "tokens/s", "{:,.0f}"),
    Column("ratio", "vs plain", "{:.2f}×"),
    Column("peak_blocks", "peak blocks (CoW tree)", "{:,}"),
    Column("peak_copy_blocks", "peak blocks (copied prefixes)", "{:,}"),
    Column("same_tokens", "same greedy tokens"),
    Column("threads", "threads", "{}"),
]


@dataclass
class Tally:
    """What one system's run counted: target passes, guesses, and peak blocks."""

    passes: int = 0
    peak_blocks: int = 0
    peak_copy_blocks: int = 0
    outputs: list[list[int]] = field(default_factory=list)


def generate(llm: LLM, prompts: list[str], max_tokens: int) -> Tally:
    """Greedy outputs of ``prompts``, one request at a time, counting the target's forward
    passes and the blocks held right after each step's branches are forked."""
    tally = Tally()
    model, engine = llm.model, llm.engine
    bm = engine.block_manager

    def counted(method):
        def call(*args, **kwargs):
            tally.passes += 1
            return method(*args, **kwargs)

        return call

    model.forward, model.forward_with = counted(model.forward), counted(model.forward_with)
    speculator = engine.speculator
    if speculator is not None:
        draft = speculator.draft

        def draft_and_count(manager, plan, budget):
            drafted = draft(manager, plan, budget)
            held = bm.device.num_blocks - bm.device.num_free
            copied = held + sum(
                memory.num_logical_blocks(d.branches.prefix_len + node.depth + 1, BLOCK_SIZE) - 1
                for d in drafted
                for node in d.tree.nodes[1:]
            )
            tally.peak_blocks = max(tally.peak_blocks, held)
            tally.peak_copy_blocks = max(tally.peak_copy_blocks, copied)
            return drafted

        speculator.draft = draft_and_count
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    try:
        for prompt in prompts:
            (output,) = llm.generate(prompt, params, show_progress=False)
            tally.outputs.append(output.outputs[0].token_ids)
            if speculator is None:  # plain: the blocks a finished sequence held at its end
                used = memory.num_logical_blocks(
                    len(output.prompt_token_ids) + max_tokens, BLOCK_SIZE
                )
                tally.peak_blocks = tally.peak_copy_blocks = max(tally.peak_blocks, used)
    finally:
        del model.forward, model.forward_with
        if speculator is not None:
            del speculator.draft
    return tally


def run(options: Options) -> Report:
    prompts = PROMPTS[:2] if options.quick else PROMPTS
    max_tokens, rounds = (16, 1) if options.quick else (64, 5)
    llms = {
        name: LLM(
            options.model,
            block_size=BLOCK_SIZE,
            num_gpu_blocks=256,
            num_cpu_blocks=0,
            device=options.device,
            speculative=config,
        )
        for name, config in SYSTEMS.items()
    }
    for llm in llms.values():  # warm-up
        generate(llm, prompts[:1], 4)
    seconds: dict[str, list[float]] = {name: [] for name in llms}
    tallies: dict[str, Tally] = {}
    for _ in range(rounds):
        for name, llm in llms.items():
            start = time.perf_counter()
            tallies[name] = generate(llm, prompts, max_tokens)
            seconds[name].append(time.perf_counter() - start)
    rows = []
    tokens = len(prompts) * max_tokens
    for name, llm in llms.items():
        tally, speculator = tallies[name], llm.engine.speculator
        ratios = [p / s for p, s in zip(seconds["plain"], seconds[name], strict=True)]
        rows.append(
            {
                "system": name,
                "tokens": tokens,
                "passes_per_token": tally.passes / tokens,
                "acceptance": speculator.num_accepted / max(1, speculator.num_proposed)
                if speculator
                else None,
                "tokens_per_verify": (speculator.num_accepted + speculator.num_verified)
                / max(1, speculator.num_verified)
                if speculator
                else None,
                "tokens_per_s": tokens / statistics.median(seconds[name]),
                "ratio": statistics.median(ratios),
                "peak_blocks": tally.peak_blocks,
                "peak_copy_blocks": tally.peak_copy_blocks,
                "same_tokens": "yes" if tally.outputs == tallies["plain"].outputs else "NO",
                "threads": torch.get_num_threads(),
            }
        )
    notes = [
        f"{len(prompts)} prompts, {max_tokens} greedy tokens each, one request at a time, on "
        f"the {options.model} model with B = {BLOCK_SIZE}; the draft model is {DRAFT_MODEL}. "
        "Trees of depth d = 4 with k = 2 children per node (at most 32 guesses).",
        "target passes / token counts every forward pass of the target model (prefills, plain "
        "decode passes, verify passes); acceptance is guesses kept / guesses proposed, "
        "accumulated over every round; tokens / verify pass counts the kept guesses plus the "
        "target's own token of every verified tree.",
        f"Measured on {options.device} with {torch.get_num_threads()} thread(s): median of "
        f"{rounds} round(s), systems in turns. The draft model and the tree's bookkeeping run "
        "in Python on the CPU: on a model this small a pass costs little, so fewer passes need "
        "not mean more tokens/s.",
        "Peak blocks are counted right after each step's branches are forked (one block per "
        "guess); the copied-prefix column is the same tree with every guess holding its own "
        "copy of the prefix, sum over guesses of ceil((P + depth + 1) / B) blocks.",
    ]
    title = "Speculative tree decoding on copy-on-write branches"
    report = Report("speculative", title, COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (passes, blocks) = plot.figure(panels=2)
    names = [row["system"] for row in rows]
    passes.bar(names, [row["passes_per_token"] for row in rows])
    passes.set_ylabel("target forward passes per token")
    where = range(len(rows))
    blocks.bar([x - 0.2 for x in where], [r["peak_blocks"] for r in rows], 0.4, label="CoW")
    copies = [r["peak_copy_blocks"] for r in rows]
    blocks.bar([x + 0.2 for x in where], copies, 0.4, label="copied prefixes")
    blocks.set_xticks(list(where), names)
    blocks.set_ylabel("peak blocks in a step")
    blocks.legend(fontsize="small")
    return plot.save(fig, options.out, "speculative", options.force)
