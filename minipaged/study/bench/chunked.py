"""``bench chunked``: time between tokens of running requests while long prompts arrive, with
and without chunked prefill (Sarathi's and vLLM V1's trade-off), and total throughput.

Workload: a few short requests decode while long prompts arrive, one at a time, at fixed
points of the run. With chunking off each long prompt is prefilled in one step, and every
running request waits for that whole step: the time between its tokens jumps. With a token
budget of $N$ a step, the long prompt is computed in chunks of at most $N$ minus the decodes,
so no step is longer than $N$ tokens' worth, at the cost of the long prompt's own first token
coming later.

Two rows of systems:

- **measured** on the tiny model (the engine as it runs, reference attention): each step is
  timed with ``perf_counter``; a token's time is the end of the step that sampled it. The
  systems run in turns, once per round, and each figure is the median over the rounds.
- **simulated** at Llama-3-8B's scale (BF16, $B = 16$): the real ``Scheduler`` and
  ``BlockManager`` decide every step, and a roofline gives each step's time from its tokens
  (``step_seconds``): the weights and the decodes' KV read once at the GPU's bandwidth, or
  $2 P$ FLOPs per token at its peak, whichever is longer. Attention's own FLOPs are left out.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from minipaged.block_manager import BlockManager
from minipaged.llm import LLM
from minipaged.memory import PRESETS
from minipaged.sampling import SamplingParams
from minipaged.scheduler import Scheduler
from minipaged.sequence import Sequence, SequenceGroup
from minipaged.study.bench import Options, plot
from minipaged.study.report import Column, Report

HELDOUT = Path(__file__).with_name("austen_heldout.txt")

COLUMNS = [
    Column("where", "model"),
    Column("system", "prefill"),
    Column("tbt_p50", "time between tokens p50 (ms)", "{:,.1f}"),
    Column("tbt_p99", "p99 (ms)", "{:,.1f}"),
    Column("tbt_max", "max (ms)", "{:,.1f}"),
    Column("long_ttft", "long prompt's first token (ms)", "{:,.0f}"),
    Column("throughput", "tokens/s", "{:,.0f}"),
    Column("steps", "steps", "{:,}"),
]

# Llama-3-8B on one H100 SXM (BF16): the simulated rows' hardware, from the data sheet.
PARAMS_8B = 8.03e9
BANDWIDTH = 3.35e12  # bytes/s of HBM3
PEAK_FLOPS = 989e12  # dense BF16


@dataclass
class Timeline:
    """When each request's tokens came (seconds from the start), and the run's totals."""

    token_times: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0
    steps: int = 0
    tokens: int = 0

    def gaps(self, requests: list[str]) -> list[float]:
        """Every time between two consecutive tokens of ``requests``."""
        return [
            later - earlier
            for request in requests
            for earlier, later in itertools.pairwise(self.token_times[request])
        ]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, by linear interpolation."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def row(where: str, system: str, runs: list[Timeline], short: list[str], long: str) -> dict:
    """One table row: each figure the median over ``runs`` (rounds of one system)."""

    def median(figure) -> float:
        return statistics.median(figure(run) for run in runs)

    ms = 1000.0
    return {
        "where": where,
        "system": system,
        "tbt_p50": median(lambda r: percentile(r.gaps(short), 50)) * ms,
        "tbt_p99": median(lambda r: percentile(r.gaps(short), 99)) * ms,
        "tbt_max": median(lambda r: max(r.gaps(short))) * ms,
        "long_ttft": median(lambda r: r.token_times[long][0] - r.token_times["arrive " + long][0])
        * ms,
        "throughput": median(lambda r: r.tokens / r.seconds),
        "steps": runs[0].steps,
    }


# -- measured: the tiny model --------------------------------------------------------------


def measure(llm: LLM, shorts, longs, arrive_every: int) -> Timeline:
    """Run the short requests, and add each long prompt ``arrive_every`` steps apart (the
    first once the short ones decode); time every step."""
    engine = llm.engine
    timeline = Timeline()
    decode = SamplingParams(max_tokens=48, temperature=0, ignore_eos=True)
    for i, prompt in enumerate(shorts):
        engine.add_request({"prompt_token_ids": prompt}, decode, request_id=f"short {i}")
    pending = list(enumerate(longs))
    start = time.perf_counter()
    while engine.has_unfinished() or pending:
        if pending and timeline.steps == 2 + arrive_every * pending[0][0]:
            i, prompt = pending.pop(0)
            name = f"long {i}"
            timeline.token_times["arrive " + name] = [time.perf_counter() - start]
            params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
            engine.add_request({"prompt_token_ids": prompt}, params, request_id=name)
        owners = {s.seq_id: name for name, g in engine.requests.items() for s in g.seqs}
        step = engine.step(snapshot=False)
        now = time.perf_counter() - start
        timeline.steps += 1
        timeline.tokens += len(step.new_tokens)
        for seq in step.new_tokens:  # one token a request: n = 1, no speculation
            timeline.token_times.setdefault(owners[seq], []).append(now)
    timeline.seconds = time.perf_counter() - start
    return timeline


def measured_rows(options: Options) -> list[dict]:
    rounds = 1 if options.quick else 3
    budgets = (32,) if options.quick else (16, 32, 64, 128)
    probe = LLM(options.model, backend="torch", device=options.device)
    tokenizer = probe.engine.tokenizer
    text = tokenizer.encode(HELDOUT.read_text(encoding="utf-8"))
    long_len = 96 if options.quick else 400
    longs = [text[i * long_len : (i + 1) * long_len] for i in range(1 if options.quick else 3)]
    shorts = [text[5000 + 16 * i : 5000 + 16 * i + 12] for i in range(4)]
    systems = {"off": {}} | {
        f"budget {budget}": {"enable_chunked_prefill": True, "max_num_batched_tokens": budget}
        for budget in budgets
    }
    llms = {
        name: LLM(
            options.model,
            backend="torch",
            device=options.device,
            block_size=16,
            num_gpu_blocks=256,
            max_num_seqs=8,
            **settings,
        )
        for name, settings in systems.items()
    }
    runs: dict[str, list[Timeline]] = {name: [] for name in llms}
    for llm in llms.values():  # warm-up
        llm.generate(shorts[:1], SamplingParams(max_tokens=2), show_progress=False)
    for _ in range(rounds):
        for name, llm in llms.items():
            runs[name].append(measure(llm, shorts, longs, arrive_every=12))
    short_names = [f"short {i}" for i in range(len(shorts))]
    return [row(options.model, name, runs[name], short_names, "long 0") for name in llms]


# -- simulated: Llama-3-8B's scale -----------------------------------------------------------


def step_seconds(decode_context: int, num_tokens: int) -> float:
    """A roofline for one step of Llama-3-8B computing ``num_tokens`` tokens whose decodes
    read ``decode_context`` cached tokens: the weights ($2P$ bytes) and that KV read once at
    the bandwidth, or $2P$ FLOPs per token at the peak, whichever takes longer."""
    shape = PRESETS["llama-3-8b"]
    read = 2 * PARAMS_8B + decode_context * shape.kv_bytes_per_token
    return max(read / BANDWIDTH, 2 * PARAMS_8B * num_tokens / PEAK_FLOPS)


def simulate(budget: int | None, num_short: int, long_len: int, num_long: int) -> Timeline:
    """The scheduler and block manager at Llama-3-8B's scale, with no model: a row that
    samples gets token 0. ``budget`` None is chunking off with a budget of one context."""
    chunked = budget is not None
    manager = BlockManager(num_gpu_blocks=28_000, block_size=16)
    scheduler = Scheduler(manager, "recompute", 256, budget or 8192, chunked)
    timeline, clock, ids = Timeline(), 0.0, iter(range(10**9))

    def add(name: str, length: int, max_tokens: int) -> None:
        seq = Sequence(next(ids), [1] * length, length)
        params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
        scheduler.add(SequenceGroup(name, seq.seq_id, params, [seq], None))

    for i in range(num_short):
        add(f"short {i}", 512, 256)
    arrivals = [(0.2 + 0.25 * i, f"long {i}") for i in range(num_long)]
    while scheduler.has_unfinished() or arrivals:
        while arrivals and arrivals[0][0] <= clock:
            _, name = arrivals.pop(0)
            timeline.token_times["arrive " + name] = [clock]
            add(name, long_len, 4)
        if not scheduler.has_unfinished():
            clock = arrivals[0][0]
            continue
        plan = scheduler.schedule()
        context = sum(r.query_positions.stop for r in plan.scheduled if not r.is_prefill)
        clock += step_seconds(context, sum(r.num_query_tokens for r in plan.scheduled))
        timeline.steps += 1
        for item in plan.scheduled:
            if item.samples:
                _sample(scheduler, item.group, item.seq, clock, timeline)
        manager.pop_events()
    timeline.seconds = clock
    return timeline


def _sample(scheduler: Scheduler, group: SequenceGroup, seq: Sequence, clock, timeline) -> None:
    seq.token_ids.append(0)
    timeline.tokens += 1
    timeline.token_times.setdefault(group.request_id, []).append(clock)
    if len(seq.output_ids) >= group.params.max_tokens:
        scheduler.block_manager.free(seq.seq_id)
        group.seqs.remove(seq)
        group.finished.append(seq)
        scheduler.finish(group)


def simulated_rows(options: Options) -> list[dict]:
    num_short, long_len = (8, 2048) if options.quick else (32, 8000)
    num_long = 2 if options.quick else 4
    systems = {"off": None} | {f"budget {b}": b for b in (256, 512, 1024, 2048)}
    short_names = [f"short {i}" for i in range(num_short)]
    rows = []
    for name, budget in systems.items():
        runs = [simulate(budget, num_short, long_len, num_long)]
        rows.append(row("Llama-3-8B (sim.)", name, runs, short_names, "long 0"))
    return rows


def run(options: Options) -> Report:
    rows = measured_rows(options) + simulated_rows(options)
    notes = [
        "Time between tokens (TBT) of the short requests, which decode while each long prompt "
        "arrives; the long prompt's first token is counted from its arrival. off: a prompt is "
        "prefilled whole in one step; budget N: chunked prefill, N tokens a step "
        "(max_num_batched_tokens), decodes first.",
        f"tiny: 4 requests of 12 prompt tokens decode 48 tokens each, while 3 prompts of "
        f"400 tokens arrive 12 steps apart (quick: one of 96); measured on {options.device} "
        f"with {torch.get_num_threads()} thread(s), reference attention, median of the rounds; "
        "on a shared machine the times are noisy, their ratios less so.",
        "Llama-3-8B (sim.): 32 requests of 512 prompt tokens decode 256 tokens each while 4 "
        "prompts of 8,000 tokens arrive a quarter of a second apart; the real scheduler and "
        "block manager (B = 16, 28,000 blocks), each step's time from a roofline of one H100 "
        "SXM (3.35 TB/s, 989 TFLOP/s BF16): max(weights + decodes' KV / bandwidth, 2 P tokens "
        "/ peak).",
    ]
    title = "Chunked prefill: time between tokens while long prompts arrive"
    report = Report("chunked", title, COLUMNS, rows, notes)
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, panels = plot.figure(panels=2)
    for panel, where in zip(panels, dict.fromkeys(r["where"] for r in rows), strict=True):
        mine = [r for r in rows if r["where"] == where]
        names = [r["system"] for r in mine]
        spots = range(len(mine))
        panel.bar([x - 0.2 for x in spots], [r["tbt_p50"] for r in mine], 0.4, label="p50")
        panel.bar([x + 0.2 for x in spots], [r["tbt_p99"] for r in mine], 0.4, label="p99")
        panel.set_xticks(list(spots), names, fontsize="small")
        panel.set_ylabel("time between tokens (ms)")
        panel.set_title(where, fontsize="medium")
        panel.legend(fontsize="small")
    return plot.save(fig, options.out, "chunked", options.force)
