"""One query's decode, block by block, with every number the source text's §4 names: what the
TUI's attention view shows, computed from an ``AttentionRecord`` (what the engine's attention
actually read at that step, ``minipaged.attention_probe``).

For query position $t$ of sequence $r$ in one layer and query head $h$ (reading KV head
$h \\div (N_Q/N_{KV})$), with $L = t + 1$ tokens visible, logical block $j$ is physical block
$p = \\mathcal{T}_r[j]$ and holds positions $jB \\ldots \\min((j+1)B, L) - 1$ in slots
$pB + o$. Reading it (``paged_attention_decode_loop``'s body, one head):

$s_\\tau = q \\cdot k_\\tau / \\sqrt{d_h}$;
$m_\\text{new} = \\max(m_\\text{old}, \\max_\\tau s_\\tau)$; with the factor
$c = e^{m_\\text{old} - m_\\text{new}}$ (1 when the max does not move),
$\\ell \\leftarrow c \\, \\ell + \\sum_\\tau e^{s_\\tau - m_\\text{new}}$ and
$\\text{acc} \\leftarrow c \\, \\text{acc} + \\sum_\\tau e^{s_\\tau - m_\\text{new}} v_\\tau$;

and the output is $\\text{acc} / \\ell$. The v2 kernel's view of the same query cuts the
positions into partitions, computes each one's $(m_k, \\ell_k, O_k)$ and merges them
(``minipaged.attention.combine_partitions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from minipaged.attention import combine_partitions, paged_attention_decode_partitions
from minipaged.attention_probe import AttentionRecord


@dataclass(frozen=True, slots=True)
class BlockRead:
    """Logical block ``j`` = physical block ``block`` ($p = \\mathcal{T}_r[j]$): the positions
    $\\tau$ it holds for this query, their slots $pB + o$ and scores $s_\\tau$; the running max
    before (``m_old``, $-\\infty$ before block 0) and after (``m``), the factor
    ``rescale`` $= e^{m_\\text{old} - m}$ that multiplies $\\ell$ and acc (1 when the max does
    not move), and the running sum ``l`` after the block."""

    j: int
    block: int
    positions: range
    slots: tuple[int, ...]
    scores: tuple[float, ...]
    m_old: float
    m: float
    rescale: float
    l: float  # noqa: E741  (the source text's l)

    @property
    def max_moved(self) -> bool:
        return self.m > self.m_old


@dataclass(frozen=True, slots=True)
class Partition:
    """Partition ``k`` of the v2 kernel: ``positions``, its max score ``m`` ($m_k$), its sum
    ``l`` ($\\ell_k = \\sum e^{s_\\tau - m_k}$), its weight in the merge
    $\\ell_k e^{m_k - m} / \\ell$ and its normalized output ``output`` ($O_k$, ``[d_h]``)."""

    k: int
    positions: range
    m: float
    l: float  # noqa: E741
    weight: float
    output: Tensor


@dataclass(frozen=True)
class Walk:
    """The decode of one query through one layer and head, block by block (module docstring).

    ``output`` is $\\text{acc}/\\ell$ after the last block; ``recorded`` is what the model's
    attention returned at that step (any backend) and ``max_delta`` $= \\max|\\Delta|$ between
    them. ``weights`` are the softmax weights of positions $0 \\ldots t$. ``partitions`` and
    ``merged`` are the v2 view (``partition_size`` tokens each)."""

    seq_id: int
    layer: int
    head: int
    kv_head: int
    sharing: tuple[int, ...]  # the query heads that read ``kv_head`` (GQA)
    position: int  # t, the query's position
    blocks: tuple[BlockRead, ...]
    weights: tuple[float, ...]
    output: Tensor
    recorded: Tensor
    max_delta: float
    partition_size: int
    partitions: tuple[Partition, ...]
    merged: Tensor

    @property
    def m(self) -> float:
        return self.blocks[-1].m

    @property
    def l(self) -> float:  # noqa: E743
        return self.blocks[-1].l


def partition_size_for(num_blocks: int, block_size: int, most: int = 4) -> int:
    """Whole blocks per partition so that a sequence of ``num_blocks`` blocks makes at most
    ``most`` partitions (vLLM uses 512 tokens; the TUI's sequences are far shorter)."""
    return block_size * max(1, math.ceil(num_blocks / most))


def walk(
    record: AttentionRecord, layer: int, head: int, query: int = -1, partition_size: int = 0
) -> Walk:
    """The walk of ``record``'s query number ``query`` (default: its last, the one a decode
    samples from) in ``layer`` and query ``head``. ``partition_size`` 0 picks one
    (``partition_size_for``). Raises ``IndexError`` naming a layer, head or query that is not
    there."""
    num_layers, num_queries, num_heads, _ = record.query.shape
    for name, value, count in (
        ("layer", layer, num_layers),
        ("head", head, num_heads),
        ("query", query, num_queries),
    ):
        if not -count <= value < count:
            raise IndexError(
                f"{name} {value} is not in this record, which has {count}: pick 0 to {count - 1}"
            )
    query %= num_queries
    num_kv_heads, block_size = record.keys.shape[2], record.block_size
    group = num_heads // num_kv_heads
    kv_head = head // group
    position = record.positions[query]
    seen = position + 1  # L: positions 0..t
    q = record.query[layer, query, head]  # [d_h]
    keys = record.keys[layer, :, kv_head]  # [n, B, d_h]
    values = record.values[layer, :, kv_head]

    blocks, m_old, l_run = [], -math.inf, 0.0
    acc = torch.zeros_like(q)
    for j in range(math.ceil(seen / block_size)):
        p = record.block_table[j]
        tokens = min(block_size, seen - j * block_size)
        scores = (keys[j, :tokens] @ q) * record.scale  # [tokens]
        m = max(m_old, float(scores.max()))
        rescale = math.exp(m_old - m)  # e^{m_old - m_new}: 0 before the first block
        p_curr = torch.exp(scores - m)
        l_run = rescale * l_run + float(p_curr.sum())
        acc = acc * rescale + p_curr @ values[j, :tokens]
        positions = range(j * block_size, j * block_size + tokens)
        slots = tuple(p * block_size + t % block_size for t in positions)
        blocks.append(
            BlockRead(j, p, positions, slots, tuple(scores.tolist()), m_old, m, rescale, l_run)
        )
        m_old = m
    output = acc / l_run
    every = torch.tensor([s for block in blocks for s in block.scores])
    weights = tuple(torch.softmax(every, dim=0).tolist())
    recorded = record.output[layer, query, head]

    size = partition_size or partition_size_for(len(blocks), block_size)
    m_k, l_k, o_k = paged_attention_decode_partitions(
        record.query[layer, query][None],  # [1, N_Q, d_h]
        record.keys[layer],  # the blocks read, as a pool: block j at index j
        record.values[layer],
        torch.arange(len(record.block_table), dtype=torch.int32)[None],
        torch.tensor([seen], dtype=torch.int32),
        record.scale,
        block_size,
        size,
    )
    merged = combine_partitions(m_k, l_k, o_k)[0, head]
    m_all = float(m_k[0, head].max())
    l_all = float((l_k[0, head] * torch.exp(m_k[0, head] - m_all)).sum())
    partitions = tuple(
        Partition(
            k,
            range(k * size, min((k + 1) * size, seen)),
            float(m_k[0, head, k]),
            float(l_k[0, head, k]),
            float(l_k[0, head, k]) * math.exp(float(m_k[0, head, k]) - m_all) / l_all,
            o_k[0, head, k],
        )
        for k in range(m_k.shape[-1])
        if k * size < seen
    )
    return Walk(
        record.seq_id,
        layer,
        head,
        kv_head,
        tuple(range(kv_head * group, (kv_head + 1) * group)),
        position,
        tuple(blocks),
        weights,
        output,
        recorded,
        float((output - recorded).abs().max()),
        size,
        partitions,
        merged,
    )
