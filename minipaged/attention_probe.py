"""A probe on the model's paged attention: what one engine step actually read and computed, kept
for the TUI's attention view (source text §4) so that it never recomputes from a cache that has
changed since.

The probe is off unless a caller asks for it (``ModelRunner.record_attention``): ``LLM.generate``
and the benchmarks pass no observer to the model, and pay one ``is None`` test per layer.

When it is on, each layer of a step hands the probe its queries and its attention output, right
after ``minipaged.backend.paged_attention`` has written the step's keys and values and read
them back; the probe then copies, for every scheduled row, the physical blocks
$\\mathcal{T}_r[0], \\ldots, \\mathcal{T}_r[n-1]$ the row read, as they were at that moment.

Memory cost per step: for each scheduled row, $N_L \\cdot n \\cdot N_{KV} \\cdot B \\cdot d_h$
floats for the keys and as many for the values ($n$ the row's blocks), plus
$2 N_L \\cdot q \\cdot N_Q \\cdot d_h$ for its $q$ queries and outputs; four bytes each. For the
embedded tiny model ($N_L = 4$, $N_{KV} = 2$, $N_Q = 4$, $d_h = 32$) that is 2 KiB per slot a
row reads (its blocks' $B$ slots each): about 100 KiB a step for a 50-token sequence. The TUI's
``tour`` records 5.4 MB over its 38 steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from minipaged.fp8 import dequantize_unchecked
from minipaged.gather import per_kv_head
from minipaged.kv_cache import KVCache

Observer = Callable[[int, Tensor, Tensor], None]
"""``observe(layer, query, output)``: one layer's queries and attention output
``[N, N_Q, d_h]``, called by ``Llama.forward`` after the layer's paged attention."""


@dataclass(frozen=True, eq=False)  # eq on tensors would be ambiguous
class AttentionRecord:
    """One scheduled row of one step, as the model computed it.

    Sequence ``seq_id`` with block table ``block_table`` ($\\mathcal{T}_r$, the $n$ entries
    read) held ``seq_len`` tokens once the step had written its own; the step computed the
    queries at ``positions`` (one for a decode; a prompt or a chunk's several, each seeing the
    positions up to its own). Per layer, in float32:

    - ``query``, ``output`` ``[N_L, len(positions), N_Q, d_h]``: $q$ after RoPE, and the
      attention output the backend returned (before ``o_proj``);
    - ``keys``, ``values`` ``[N_L, n, N_KV, B, d_h]``: the physical blocks the row read, in
      logical order (block $j$ is physical block ``block_table[j]``). Slots past ``seq_len``
      hold whatever the pool held: nothing reads them.
    """

    seq_id: int
    block_table: tuple[int, ...]
    seq_len: int
    positions: range
    scale: float
    query: Tensor
    output: Tensor
    keys: Tensor
    values: Tensor

    @property
    def block_size(self) -> int:
        return self.keys.shape[3]

    @property
    def nbytes(self) -> int:
        """What keeping this record costs, in bytes."""
        return sum(t.nbytes for t in (self.query, self.output, self.keys, self.values))


@dataclass(frozen=True, slots=True)
class Row:
    """A scheduled row as the probe needs it: which sequence, its table, its queries."""

    seq_id: int
    block_table: tuple[int, ...]
    positions: range


class AttentionProbe:
    """Collects one step's ``AttentionRecord``s: ``observer`` for the model's forward pass,
    then ``take`` once it is done. Guarantee: ``take`` returns exactly one record per row given
    to ``observer``, or nothing if the forward pass did not finish."""

    def __init__(self) -> None:
        self._rows: Sequence[Row] = ()
        self._layers: list[tuple[Tensor, Tensor, list[Tensor], list[Tensor]]] = []
        self._scale = 0.0

    def observer(self, rows: Sequence[Row], kv_cache: KVCache, scale: float) -> Observer:
        """An observer for one forward pass over ``rows`` (in batch order) on ``kv_cache``."""
        self._rows, self._layers, self._scale = rows, [], scale

        def observe(layer: int, query: Tensor, output: Tensor) -> None:
            pools = (kv_cache.key[layer], kv_cache.value[layer])
            scales = kv_cache.scales(layer, query.dtype)
            read: tuple[list[Tensor], list[Tensor]] = ([], [])
            for row in rows:
                blocks = torch.tensor(row.block_table, dtype=torch.long, device=query.device)
                for pool, name, out in zip(pools, ("k_scale", "v_scale"), read, strict=True):
                    # [n, N_KV, B, d_h]: a copy, so later steps' writes do not change it
                    scale = per_kv_head(scales.get(name), 3)  # [N_KV, 1, 1] or None
                    out.append(dequantize_unchecked(pool[blocks], scale).float())  # indexing copies
            self._layers.append((query.float().clone(), output.float().clone(), *read))

        return observe

    def take(self) -> tuple[AttentionRecord, ...]:
        """The records of the last forward pass (and forget them)."""
        layers, self._layers = self._layers, []
        if not layers:
            return ()
        records, start = [], 0
        for i, row in enumerate(self._rows):
            rows = slice(start, start + len(row.positions))
            start = rows.stop
            records.append(
                AttentionRecord(
                    row.seq_id,
                    row.block_table,
                    row.positions.stop,
                    row.positions,
                    self._scale,
                    query=torch.stack([query[rows] for query, *_ in layers]),
                    output=torch.stack([output[rows] for _, output, *_ in layers]),
                    keys=torch.stack([keys[i] for *_, keys, _ in layers]),
                    values=torch.stack([values[i] for *_, values in layers]),
                )
            )
        return tuple(records)
