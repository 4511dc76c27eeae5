"""``bench memory`` (and ``minipaged simulate``): KV-cache waste and concurrency per allocator
at a real model's scale, simulated without a model (``minipaged.study.simulator``).

The theory column is the expected unused slots per sequence when lengths are uniform modulo
the allocation unit $U$: $(U - 1)/2$, §3's argument, with $U$ = $B$ for paging, the page for
vAttention and $\\Delta L$ for Orca; for static allocation it is §2's
$\\mathbb{E}[\\mathcal{W}_{int}] = L_{\\max} - \\mathbb{E}[L]$.
"""

from __future__ import annotations

from minipaged import memory
from minipaged.study.baselines import (
    KVAllocator,
    OrcaAllocator,
    PagedAllocator,
    StaticAllocator,
    VAttentionAllocator,
    page_tokens,
)
from minipaged.study.bench import Options, plot
from minipaged.study.orca_baselines import POLICIES, OrcaReservationAllocator, orca_reservation
from minipaged.study.report import Column, Report
from minipaged.study.simulator import simulate
from minipaged.study.workloads import Request, make_workload

WEIGHTS_GB = {"llama-3-8b": 16.0, "llama-3-70b": 140.0, "llama-2-70b": 140.0}
"""BF16 weights of each preset in decimal GB (2 bytes per parameter), the default to subtract
from HBM capacity."""


def kv_budget_bytes(hbm_gb: float, weights_gb: float) -> int:
    """HBM capacity minus the weights, in bytes (decimal GB, as the source text's)."""
    budget = int((hbm_gb - weights_gb) * 10**9)
    if budget <= 0:
        raise ValueError(
            f"no room for a KV cache: {weights_gb} GB of weights on {hbm_gb} GB of HBM; "
            "raise --hbm-gb (two 80 GB GPUs: 160) or lower --weights-gb"
        )
    return budget


def make_allocators(
    shape: memory.ModelShape,
    budget_bytes: int,
    *,
    block_size: int = 16,
    delta: int = 256,
    page_kb: tuple[int, ...] = (2048,),
    fp8_paged: bool = False,
) -> list[KVAllocator]:
    """The allocators over the same KV budget: static, the source text's Orca model
    ($\\Delta L$ = ``delta``), the vLLM paper's three Orca baselines (Max, Pow2, Oracle),
    vAttention with each page size in ``page_kb`` (KiB), and paged ($B$ = ``block_size``).
    With ``fp8_paged``, also paged over an FP8 cache ($b = 1$): twice the blocks of a BF16
    cache in the same bytes."""
    slots = budget_bytes // shape.kv_bytes_per_token
    vattention = [
        VAttentionAllocator(slots, page_tokens(shape, kb * 1024), f"{kb} KB") for kb in page_kb
    ]
    allocators = [
        StaticAllocator(slots),
        OrcaAllocator(slots, delta),
        *(OrcaReservationAllocator(slots, policy) for policy in POLICIES),
        *vattention,
        PagedAllocator(shape.num_blocks_for(budget_bytes, block_size), block_size),
    ]
    if fp8_paged:
        fp8_shape = shape.with_kv_dtype("fp8_e4m3")
        fp8 = PagedAllocator(fp8_shape.num_blocks_for(budget_bytes, block_size), block_size)
        fp8.name += " FP8"
        allocators.append(fp8)
    return allocators


COLUMNS = [
    Column("allocator", "allocator"),
    Column("waste_of_reserved", "unused/reserved", "{:.1%}"),
    Column("internal", "internal", "{:.1%}"),
    Column("reservation", "reserv.", "{:.1%}"),
    Column("external", "external", "{:.1%}"),
    Column("shared", "shared", "{:.1%}"),
    Column("unused_per_seq", "unused/seq", "{:,.1f}"),
    Column("peak_seqs", "peak seqs", "{:,}"),
    Column("mean_seqs", "mean seqs", "{:,.0f}"),
    Column("tokens_per_step", "tok/step", "{:,.0f}"),
    Column("stalls", "stalls", "{:,}"),
    Column("preemptions", "preempt", "{:,}"),
]
THEORY = Column("theory_per_seq", "theory/seq", "{:,.1f}")


def theory_per_seq(alloc: KVAllocator, requests: list[Request]) -> float:
    """Expected unused slots per sequence for ``alloc`` (see the module docstring)."""
    if isinstance(alloc, StaticAllocator):
        finals = [length for r in requests for length in r.final_lens]
        return float(memory.expected_static_internal_waste(finals, requests[0].max_len))
    if isinstance(alloc, OrcaReservationAllocator):  # what each buffer holds beyond L_i
        spare = [
            orca_reservation(alloc.policy, r.prompt_len, r.max_len, final) - final
            for r in requests
            for final in r.final_lens
        ]
        return sum(spare) / len(spare)
    # §3's expectation (U - 1)/2 holds for any allocation unit U, not only for B.
    unit = {
        OrcaAllocator: lambda a: a.delta,
        VAttentionAllocator: lambda a: a.page_size,
        PagedAllocator: lambda a: a.block_size,
    }[type(alloc)](alloc)
    return float(memory.expected_paged_waste(unit))


def simulate_report(
    preset: str = "llama-3-8b",
    *,
    hbm_gb: float = 80.0,
    weights_gb: float | None = None,
    lengths: str = "enterprise",
    num_requests: int = 1000,
    n: int = 1,
    beam_width: int = 0,
    block_size: int = 16,
    delta: int = 256,
    page_kb: tuple[int, ...] = (2048,),
    seed: int = 0,
    theory: bool = False,
    show_progress: bool | None = None,
    kv_cache_dtype: str = "auto",
    fp8_paged: bool = False,
) -> Report:
    """Simulate one workload on every allocator over the same KV budget; one row each.
    ``kv_cache_dtype`` sets every allocator's $b$ (``"auto"``: the preset's BF16); with
    ``fp8_paged`` a last row runs paging over an FP8 cache in the same bytes (§1's $b = 1$).
    ``n`` beside ``beam_width`` $K$: the n best of the K beams, as ``SamplingParams`` reads it;
    the K beams are what is simulated, so n is at most K."""
    if beam_width and n > beam_width:
        raise ValueError(
            f"n={n} asks for the {n} best of beam_width={beam_width} beams, more than there "
            f"are: give n at most {beam_width}"
        )
    if preset not in memory.PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose from {list(memory.PRESETS)}")
    shape = memory.PRESETS[preset].with_kv_dtype(kv_cache_dtype)
    weights_gb = WEIGHTS_GB[preset] if weights_gb is None else weights_gb
    budget = kv_budget_bytes(hbm_gb, weights_gb)
    # With beam search, n is how many of the K beams are returned: the K beams hold the memory
    samples = 1 if beam_width else n
    requests = make_workload(
        lengths, num_requests, n=samples, beam_width=beam_width, max_len=8192, seed=seed
    )
    sizes = {"block_size": block_size, "delta": delta, "page_kb": page_kb}
    allocators = make_allocators(shape, budget, **sizes, fp8_paged=fp8_paged)
    results = simulate(allocators, requests, seed, show_progress)
    rows = []
    for alloc, result in zip(allocators, results, strict=True):
        row = result.as_dict()
        if theory:
            row[THEORY.key] = theory_per_seq(alloc, requests)
        rows.append(row)
    sampling = f", n = {n} parallel samples" if samples > 1 else ""
    sampling += f", beam width K = {beam_width}" if beam_width else ""
    sampling += f", the {n} best returned" if beam_width and n > 1 else ""
    measured = {r.measured for r in results}
    notes = [
        f"Simulated, model-free: {shape.name} on {hbm_gb:g} GB of HBM minus {weights_gb:g} GB "
        f"of weights = {budget / 1e9:g} GB of KV cache, "
        f"{budget // shape.kv_bytes_per_token:,} token slots of "
        f"{shape.kv_bytes_per_token:,} B (b = {shape.dtype_bytes}). "
        f"Workload: {num_requests:,} requests, {lengths} "
        f"lengths{sampling}, L_max = 8,192, seed {seed}.",
        "internal / reservation / external / shared: share of the KV budget, mean over the "
        "steps where a request was waiting (memory full)"
        + ("" if measured == {"saturated"} else "; 'all steps' where memory never filled")
        + ". unused / reserved: (internal + reservation) / slots the sequences span. shared "
        "can pass 100%: with copy-on-write the tables together span more slots than exist.",
        "text's orca ΔL: the source text's §2 model of Orca, a buffer grown ΔL slots at a "
        "time (a hypothetical). orca (max / pow2 / oracle): the vLLM paper's Orca baselines, "
        "one buffer reserved at admission for L_max, the prompt plus the output length "
        "rounded up to a power of two, or exactly L_i.",
        "paged: every decision is the real BlockManager's (allocate, append_slot, fork; "
        "copy-on-write included), no watermark. vAttention pages are never shared here.",
        *(
            [
                "paged FP8: the same bytes as an FP8 KV cache (b = 1): twice the blocks (a "
                "peak equal to the request count means every request ran at once)."
            ]
            if fp8_paged
            else []
        ),
        "stalls: refusals meeting §2's condition (enough memory free, no hole large enough), "
        "counted per attempt; preemptions: requests evicted and recomputed (§6).",
    ]
    if theory:
        notes.append(
            "theory: expected unused tokens per sequence, (U - 1)/2 for allocation unit U = "
            "ΔL, page or B (§3's argument; assumes lengths uniform modulo U); static: §2's "
            "L_max - E[L]; Orca baselines: the mean of what each buffer holds beyond L_i."
        )
    columns = COLUMNS[:7] + ([THEORY] if theory else []) + COLUMNS[7:]
    return Report("simulate", f"KV-cache waste per allocator, {shape.name}", columns, rows, notes)


def run(options: Options) -> Report:
    """The source text's enterprise mix (§2) on Llama-3-8B, one 80 GB GPU, with paging over
    an FP8 cache as the last row."""
    common = {"page_kb": (64, 2048), "seed": options.seed, "theory": True}
    common |= {"kv_cache_dtype": options.kv_cache_dtype, "fp8_paged": True}
    if options.quick:
        report = simulate_report(hbm_gb=20, num_requests=40, **common)
    else:
        report = simulate_report(**common)
    report.name = "memory"
    report.plots.append(_plot(report.rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    fig, (share, seqs) = plot.figure(panels=2)
    names = [row["allocator"] for row in rows]
    parts = {
        "stored": [r["reserved"] + r["shared"] - r["internal"] - r["reservation"] for r in rows],
        "internal": [r["internal"] for r in rows],
        "reservation": [r["reservation"] for r in rows],
        "external": [r["external"] for r in rows],
    }
    left = [0.0] * len(rows)
    for label, values in parts.items():
        share.barh(names, [100 * v for v in values], left=[100 * x for x in left], label=label)
        left = [x + v for x, v in zip(left, values, strict=True)]
    share.set_xlabel("% of the KV budget, memory full")
    share.invert_yaxis()
    share.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, fontsize="small")
    seqs.barh(names, [r["peak_seqs"] for r in rows], label="peak")
    seqs.barh(names, [r["mean_seqs"] for r in rows], label="mean", alpha=0.7)
    seqs.set_xlabel("concurrent sequences")
    seqs.invert_yaxis()
    seqs.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, fontsize="small")
    return plot.save(fig, options.out, "memory", options.force)
