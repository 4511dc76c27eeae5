"""Checks for exercise 07: paged attention decode in PyTorch (source text §4).

The student's ``attention.py`` mirrors ``minipaged.attention``: ``paged_attention_decode_loop``
(§4's loop, block by block, with the online softmax) and ``paged_attention_decode`` (the same
result, vectorized). The expected output comes from plain softmax attention over each sequence's
keys and values in token order, built here apart from any paging.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from minipaged.grader.report import CheckFailed, Criterion, note_call

TOLERANCE = 1e-4


@dataclass(frozen=True)
class Case:
    """Decode inputs laid out in a paged pool, and the answer computed without the pool."""

    what: str
    nan_hint: str  # what most likely put NaN or inf in the output
    args: tuple  # (query, key_pool, value_pool, block_tables, seq_lens, scale, block_size)
    expected: torch.Tensor  # [batch, num_heads, head_dim]


UNUSED_SLOTS = (
    "With the unused slots set to 0 instead of NaN the output is finite, so your code reads "
    "slots past the sequence's end: read only tokens τ < L (block j holds min(B, L - jB) "
    "tokens, and table entries past ceil(L/B) are -1)"
)
OTHER_BLOCKS = (
    "With the blocks no table holds set to 0 instead of NaN the output is finite, so your code "
    "reads a block its table does not hold: a table entry past ceil(L/B) (-1, which Python "
    "reads as the pool's last block), or a block id cut to fewer bits (a uint8 holds 0..255, "
    "an int8 -128..127): read T[j] for j < ceil(L/B) as it is given (int32)"
)
OVERFLOW = (
    "exp(s) overflows float32 once s > 88: subtract the running max m before exp, and "
    "rescale what came before by exp(m_prev - m_curr)"
)
UNDERFLOW = (
    "every score here is below -88, where exp(s) underflows float32 to 0, so the sum l is 0 "
    "and l divides 0: does the running max m start at 0? Start it at -inf, so that the first "
    "score sets it and exp(s - m) is 1 for the largest score"
)
UNKNOWN = "NaN or inf came from your arithmetic: is anything divided by a sum that can be 0?"


_DRAWS = random.SystemRandom()
"""The source of each grading's values: the system's, whose draws no seed foretells."""


def make_case(
    what,
    seq_lens,
    block_size=4,
    num_heads=2,
    num_kv_heads=2,
    head_dim=8,
    shared_blocks=0,
    score_scale=1.0,
    far_below=0.0,
    seed=0,
    scale=None,
    pool_blocks=None,
) -> Case:
    """Sequences of ``seq_lens`` tokens in a pool of scattered blocks; every slot no token uses
    holds NaN, and tables are padded with -1. The first ``shared_blocks`` blocks of every
    sequence are the same physical blocks (a forked prompt). With ``far_below`` > 0 (and one
    query head per KV head), every key points away from the query: each score is about
    ``-far_below``. ``scale`` multiplies the scores: 1/sqrt(head_dim) unless given. The pool
    holds ``pool_blocks`` blocks, or three more than the sequences need.

    ``seed`` fixes the layout (which physical blocks, the tables a failure names), the same at
    every grading; the queries, keys and values are drawn anew each time from ``_DRAWS``, and
    the expected output computed from them here, so no hand-in can store the outputs of the
    grader's inputs and return them."""
    layout = torch.Generator().manual_seed(seed)
    gen = torch.Generator().manual_seed(_DRAWS.randrange(2**63))
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    query = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen) * score_scale
    torch.randn(query.shape, generator=layout)  # the layout's draws as they always were
    batch = len(seq_lens)
    blocks_of = [-(-length // block_size) for length in seq_lens]
    num_blocks = pool_blocks or sum(blocks_of) + 3
    order = torch.randperm(num_blocks, generator=layout).tolist()  # scattered physical blocks
    key_pool = torch.full((num_blocks, num_kv_heads, block_size, head_dim), float("nan"))
    value_pool = torch.full_like(key_pool, float("nan"))
    shared = order[:shared_blocks]
    width = max(blocks_of)
    tables = torch.full((batch, width), -1, dtype=torch.int32)
    keys, values = [], []
    prefix = None
    for b, length in enumerate(seq_lens):
        k = torch.randn(num_kv_heads, length, head_dim, generator=gen) * score_scale
        v = torch.randn(num_kv_heads, length, head_dim, generator=gen)
        if score_scale > 1 and length > block_size:
            # Each KV head's highest score moved to the last token: the running max rises in
            # the last block, so a loop that does not rescale what it summed is always seen
            # (drawn where it fell, it lay in the first block about one grading in five).
            heads = query[b, :: num_heads // num_kv_heads]  # [num_kv_heads, head_dim]
            top = torch.einsum("hd,htd->ht", heads, k).argmax(dim=1).tolist()
            for h, t in enumerate(top):
                k[h, [t, length - 1]], v[h, [t, length - 1]] = (
                    k[h, [length - 1, t]],
                    v[h, [length - 1, t]],
                )
        if far_below:  # s = scale q.k = scale 0.1 q.noise - far_below
            q = query[b, :, None, :]  # [num_kv_heads, 1, head_dim]
            k = 0.1 * k - q * (far_below / (scale * q.square().sum(-1, keepdim=True)))
        if shared_blocks:
            n = shared_blocks * block_size
            prefix = prefix or (k[:, :n].clone(), v[:, :n].clone())
            k[:, :n], v[:, :n] = prefix
        own = [order.pop() for _ in range(blocks_of[b] - shared_blocks)]
        table = shared + own
        tables[b, : len(table)] = torch.tensor(table, dtype=torch.int32)
        for t in range(length):
            p, o = table[t // block_size], t % block_size
            key_pool[p, :, o], value_pool[p, :, o] = k[:, t], v[:, t]
        keys.append(k)
        values.append(v)
    group = num_heads // num_kv_heads
    expected = torch.empty_like(query)
    for b in range(batch):
        k = keys[b].double().repeat_interleave(group, dim=0)  # [num_heads, L, head_dim]
        v = values[b].double().repeat_interleave(group, dim=0)
        probs = torch.softmax(torch.einsum("hd,htd->ht", query[b].double(), k) * scale, dim=-1)
        expected[b] = torch.einsum("ht,htd->hd", probs, v).float()
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    hint = OVERFLOW if score_scale > 1 else UNDERFLOW if far_below else UNKNOWN
    args = (query, key_pool, value_pool, tables, lens, scale, block_size)
    return Case(what, hint, args, expected)


def compare(name: str, function, case: Case, tolerance: float = TOLERANCE) -> None:
    """Run ``function`` on ``case`` and fail with the first wrong (sequence, head) if it
    differs by more than ``tolerance``."""
    query, key_pool, value_pool, tables, lens, scale, block_size = case.args
    where = f"{call_of(name, case)} on {case.what}"
    given = [a.clone() for a in (query, key_pool, value_pool, tables, lens)]
    try:
        got = function(*given, scale, block_size)
    except Exception as error:  # the student's: its message names this call too
        note_call(error, where)
        raise
    if not isinstance(got, torch.Tensor) or got.shape != case.expected.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        raise CheckFailed(
            f"{where}: expected a tensor {tuple(case.expected.shape)} "
            f"[batch, num_heads, head_dim], got {shape}"
        )
    for argument, before, after in zip(ARGUMENTS, case.args, given, strict=False):
        if not _same(before, after):
            raise CheckFailed(
                f"{where}: your function changed its argument {argument}, which belongs to "
                f"the caller (the engine reads it again after the call): compute on a copy "
                f"({argument}.clamp(...), not clamp_(...); x = x * scale, not x *= scale)"
            )
    if got.dtype != query.dtype:
        raise CheckFailed(
            f"{where}: returned {got.dtype}, expected {query.dtype}, the query's dtype, "
            "whatever precision you compute in: make the output with torch.zeros_like(query) "
            "or cast it back with .to(query.dtype)"
        )
    for b in range(got.shape[0]):
        for h in range(got.shape[1]):
            row, want = got[b, h], case.expected[b, h]
            if torch.isnan(row).any() or torch.isinf(row).any():
                raise CheckFailed(
                    f"{where}: sequence {b}, head {h} has NaN or inf: {_short(row)}. "
                    f"{_nan_cause(function, case)}"
                )
            error = (row - want).abs().max().item()
            if error > tolerance:
                raise CheckFailed(
                    f"{where}: sequence {b} (L={int(lens[b])}), head {h}: expected "
                    f"{_short(want)}, got {_short(row)} (max error {error:.2g})"
                )


ARGUMENTS = ("query", "key_pool", "value_pool", "block_tables", "seq_lens")
"""The tensor arguments of both functions, in order: the caller's, read again after the call."""


def _same(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether a tensor argument is as it was given, NaN where it held NaN (unused slots)."""
    return (
        before.dtype == after.dtype
        and before.shape == after.shape
        and bool(torch.equal(before.isnan(), after.isnan()))
        and bool(torch.equal(before.nan_to_num(0.0), after.nan_to_num(0.0)))
    )


def call_of(name: str, case: Case) -> str:
    """The call a failure on ``case`` names: ``paged_attention_decode_loop(query [1, 2, 8],
    pools [6, 2, 4, 8], block_tables=[[4, 0, 2]], seq_lens=[11], scale=0.354, block_size=4)``
    (a large table by its shape)."""
    query, key_pool, _, tables, lens, scale, block_size = case.args
    table = tables.tolist() if tables.numel() <= 24 else f"[{', '.join(map(str, tables.shape))}]"
    return (
        f"{name}(query {list(query.shape)}, pools {list(key_pool.shape)}, block_tables={table}, "
        f"seq_lens={lens.tolist()}, scale={scale:.3g}, block_size={block_size})"
    )


def _nan_cause(function, case: Case) -> str:
    """The likely cause of NaN in ``function``'s output: run it again with NaN turned to 0 in
    the blocks no table holds; if the output is then finite, it reads one of those blocks.
    Else with every unused slot 0; if the output is then finite, it reads past some
    sequence's end."""
    query, key_pool, value_pool, tables, lens, scale, block_size = case.args
    unheld = torch.ones(key_pool.shape[0], dtype=torch.bool)
    unheld[tables[tables >= 0].long()] = False
    for zeroed, cause in ((unheld, OTHER_BLOCKS), (slice(None), UNUSED_SLOTS)):
        keys, values = key_pool.clone(), value_pool.clone()
        for pool in (keys, values):
            pool[zeroed] = pool[zeroed].nan_to_num(0.0)
        args = (query.clone(), keys, values, tables.clone(), lens.clone(), scale, block_size)
        try:
            clean = function(*args)
        except Exception:
            return case.nan_hint
        if bool(torch.isfinite(clean).all()):
            return cause
    return case.nan_hint


def _short(row: torch.Tensor) -> str:
    shown = ", ".join(f"{x:.4f}" for x in row[:4].tolist())
    return f"[{shown}{', ...' if row.numel() > 4 else ''}]"


ONE_BLOCK = make_case("one sequence in one partly filled block (L=3, B=4)", [3])
SCATTERED = make_case("one sequence over 3 scattered blocks, ending mid-block (L=11, B=4)", [11])
LONG = make_case(
    "one sequence over 11 blocks scattered in a pool of 300, block ids past 255 (L=43, B=4)",
    [43],
    seed=10,
    pool_blocks=300,
)
BATCH = make_case(
    "a batch of L=5, 12, 1 with tables padded by -1 and NaN in unused slots", [5, 12, 1], seed=1
)
GQA = make_case(
    "grouped-query attention, 6 query heads over 3 KV heads (L=6, 9)",
    [6, 9],
    num_heads=6,
    num_kv_heads=3,  # 4 over 2 let h // N_KV pass: there N_KV = N_Q / N_KV
    seed=2,
)
LARGE = make_case("large scores (|q·k| in the thousands)", [9, 4], score_scale=12.0, seed=3)
FAR_BELOW = make_case(
    "scores all far below zero (s ≈ -120, where exp(s) is 0 in float32)",
    [7, 3],
    far_below=120.0,
    seed=7,
)
SHARED = make_case(
    "two sequences sharing their first 2 blocks (a fork)", [10, 13], shared_blocks=2, seed=4
)

SCALED = make_case("a scale of 0.7, not the usual 1/sqrt(d_h) (L=6, 3)", [6, 3], scale=0.7, seed=5)


def _loop(student):
    return student.attention.paged_attention_decode_loop


def check_loop_one_block(student):
    """the loop attends one sequence in one partly filled block

    Rule: the output for head h is the sum over τ < L of softmax(s)_τ v_τ, with
    s_τ = scale * q_h · k_τ; token τ is read at block T[floor(τ/B)], offset τ mod B."""
    compare("paged_attention_decode_loop", _loop(student), ONE_BLOCK)


def check_loop_follows_the_block_table(student):
    """the loop reads token τ in block T[floor(τ/B)] at offset τ mod B, over several blocks"""
    compare("paged_attention_decode_loop", _loop(student), SCATTERED)
    compare("paged_attention_decode_loop", _loop(student), LONG)


def check_loop_batch_reads_only_tokens_below_each_length(student):
    """the loop handles a batch of lengths, and never reads a slot at or past L"""
    compare("paged_attention_decode_loop", _loop(student), BATCH)


def check_loop_grouped_query_attention(student):
    """the loop maps query head h to KV head floor(h / (N_Q / N_KV))"""
    compare("paged_attention_decode_loop", _loop(student), GQA)


def check_loop_online_softmax_is_stable(student):
    """the online softmax rescales by exp(m_prev - m_curr), so large scores stay finite"""
    compare("paged_attention_decode_loop", _loop(student), LARGE)


def check_loop_online_softmax_starts_at_minus_infinity(student):
    """the running max starts at m = -inf, so scores all far below zero stay finite"""
    compare("paged_attention_decode_loop", _loop(student), FAR_BELOW)


def check_loop_shared_blocks(student):
    """the loop reads blocks two sequences share (after a fork) for both

    Rule: each sequence b reads its tokens through its own row of block_tables, whichever
    other rows hold the same physical blocks."""
    compare("paged_attention_decode_loop", _loop(student), SHARED)


def check_loop_uses_the_scale_it_is_given(student):
    """the loop multiplies the scores by the scale it is given, whatever it is"""
    compare("paged_attention_decode_loop", _loop(student), SCALED)


def check_vectorized_matches(student):
    """paged_attention_decode (vectorized) gives the same result on every case

    Rule: paged_attention_decode computes the same attention as the loop: for every sequence
    and head, softmax(scale * q · k) over the tokens τ < L, times their values."""
    for case in (ONE_BLOCK, SCATTERED, LONG, BATCH, GQA, LARGE, FAR_BELOW, SHARED, SCALED):
        compare("paged_attention_decode", student.attention.paged_attention_decode, case)


HALF_TOLERANCE = 1e-2
"""float16 holds about three decimal digits: the answers agree to this much."""


def check_half_precision_in_half_precision_out(student):
    """both functions return the query's dtype: float16 in, float16 out, still right"""
    for name in ("paged_attention_decode_loop", "paged_attention_decode"):
        function = getattr(student.attention, name)

        def in_half(*args, function=function, name=name):
            got = function(*(a.half() if _is_float(a) else a for a in args))
            if not isinstance(got, torch.Tensor) or got.dtype != torch.float16:
                dtype = got.dtype if isinstance(got, torch.Tensor) else type(got).__name__
                raise CheckFailed(
                    f"{name}(query, key_pool, value_pool, ...) given float16 returned {dtype}, "
                    "expected torch.float16. Return "
                    "the query's dtype: make the output with torch.zeros_like(query) or cast "
                    "it back"
                )
            return got.float()

        for case in (SCATTERED, GQA):
            half = Case(f"{case.what}, in float16", case.nan_hint, case.args, case.expected)
            compare(name, in_half, half, tolerance=HALF_TOLERANCE)


def _is_float(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


CRITERIA = tuple(
    Criterion(check)
    for check in (
        check_loop_one_block,
        check_loop_follows_the_block_table,
        check_loop_batch_reads_only_tokens_below_each_length,
        check_loop_grouped_query_attention,
        check_loop_online_softmax_is_stable,
        check_loop_online_softmax_starts_at_minus_infinity,
        check_loop_shared_blocks,
        check_loop_uses_the_scale_it_is_given,
        check_vectorized_matches,
        check_half_precision_in_half_precision_out,
    )
)
