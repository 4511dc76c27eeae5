"""The three wastes of the source text's §2, measured on a run the engine recorded.

A run of the paged engine records, after each step, every block table $\\mathcal{T}_r$ and the
tokens it holds (``StepOutput.state``, or a trace made by ``minipaged trace record``).
``RecordedRun`` keeps only what §2's formulas need from it: each sequence's length $l_i$ at
every step, its final length $L_i$, and what the engine actually allocated. The functions
below apply the formulas of ``minipaged.memory`` to those lengths:

- ``paged_waste``: the empty slots of each sequence's last block, $\\lceil l_i/B \\rceil B - l_i$
  (§3), which must equal what the recorded tables hold (``table_waste``) and what the
  simulator's paged allocator spans for the same lengths (``replay``);
- ``static_waste``: $L_{\\max} - L_i$ for each live sequence (§2's internal fragmentation);
- ``orca_waste``: $\\lceil l_i/\\Delta L \\rceil \\Delta L - l_i$ (§2's reservation
  fragmentation, the text's model of Orca);
- ``fragmentation_stalls``: the same arrivals and departures as contiguous buffers in a
  first-fit heap, and the requests §2's condition $\\max_j c(m_j) < C_{req} \\le \\sum_j c(m_j)$
  stalls (external fragmentation).

Every count is in token slots; ``ModelShape.kv_bytes`` turns one into bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from minipaged import memory, trace
from minipaged.outputs import StepOutput
from minipaged.study.baselines import ContiguousHeap, KVAllocator


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """A recorded run, as §2's formulas read it. Step $k$ of the run is index $k$ of
    ``lengths`` and ``blocks``: the sequences whose tables were in device memory after it.

    - ``block_size``: $B$; ``capacity``: the device pool in token slots,
      $\\mathcal{P}_{\\max} \\cdot B$; ``max_length``: $L_{\\max}$, what static allocation
      would reserve for every sequence.
    - ``lengths[k]``: sequence id $\\to l_i$, the tokens its table held after step $k$.
    - ``blocks[k]``: sequence id $\\to$ the blocks its table held, $|\\mathcal{T}_i|$.

    Guaranteed: both have the same sequences at every step, and every length is at least 1
    and at most ``max_length``. A sequence that leaves the device (it finished, or it was
    preempted) and comes back is absent from the steps between."""

    block_size: int
    capacity: int
    max_length: int
    lengths: tuple[dict[int, int], ...]
    blocks: tuple[dict[int, int], ...]

    def __post_init__(self) -> None:
        for name in ("block_size", "capacity", "max_length"):
            memory._check_int(name, getattr(self, name))
        if len(self.lengths) != len(self.blocks):
            raise ValueError(
                f"lengths has {len(self.lengths)} steps but blocks has {len(self.blocks)}: "
                "give both for every step"
            )
        for k, (lengths, blocks) in enumerate(zip(self.lengths, self.blocks, strict=True)):
            if lengths.keys() != blocks.keys():
                raise ValueError(
                    f"step {k}: lengths has sequences {sorted(lengths)}, blocks has "
                    f"{sorted(blocks)}: give both for the same sequences"
                )
            for seq, length in lengths.items():
                memory._check_int(f"lengths[{k}][{seq}]", length)
                if length > self.max_length:
                    raise ValueError(
                        f"step {k}: sequence {seq} holds {length} tokens, more than "
                        f"max_length (L_max) {self.max_length}: raise max_length"
                    )

    @property
    def final_lengths(self) -> dict[int, int]:
        """$L_i$: the most tokens each sequence's table ever held. The token a sequence
        samples last is never fed back, so its keys and values are never written."""
        final: dict[int, int] = {}
        for lengths in self.lengths:
            for seq, length in lengths.items():
                final[seq] = max(final.get(seq, 0), length)
        return final


def from_steps(steps: Iterable[StepOutput], max_length: int) -> RecordedRun:
    """The ``RecordedRun`` of an engine's step outputs (``LLM.generate(..., on_step=...)``, or
    ``trace.load(path).steps``); only tables in device memory count."""
    lengths, blocks = [], []
    block_size = capacity = None
    for step in steps:
        if step.state is None:
            raise ValueError(
                f"step {step.step} has no block state: record the run with on_step (or "
                "`minipaged trace record`), which keeps a snapshot of every step"
            )
        block_size = step.state.block_size
        capacity = len(step.state.device_refcounts) * block_size
        device = {s: t for s, t in step.state.tables.items() if t.pool == "device"}
        lengths.append({s: t.num_tokens for s, t in device.items() if t.num_tokens})
        blocks.append({s: len(device[s].blocks) for s in lengths[-1]})
    if block_size is None:
        raise ValueError("the run has no steps: record at least one")
    return RecordedRun(block_size, capacity, max_length, tuple(lengths), tuple(blocks))


def load(path: str | Path, max_length: int) -> RecordedRun:
    """The ``RecordedRun`` of a trace file written by ``minipaged trace record``."""
    return from_steps(trace.load(path).steps, max_length)


def table_waste(run: RecordedRun) -> list[int]:
    """What the engine's tables held empty at each step: $\\sum_i |\\mathcal{T}_i| B - l_i$."""
    return [
        sum(run.blocks[k][seq] * run.block_size - length for seq, length in lengths.items())
        for k, lengths in enumerate(run.lengths)
    ]


def paged_waste(run: RecordedRun) -> list[int]:
    """Paged internal waste at each step (§3): $\\sum_i \\lceil l_i/B \\rceil B - l_i$ over the
    live sequences, the empty slots of their last blocks."""
    return [
        sum(memory.paged_internal_waste(length, run.block_size) for length in lengths.values())
        for lengths in run.lengths
    ]


def static_waste(run: RecordedRun) -> list[int]:
    """Static allocation's internal waste at each step (§2): $\\sum_i L_{\\max} - L_i$ over
    the live sequences, the slots of their buffers that will never be written."""
    final = run.final_lengths
    return [
        sum(memory.static_internal_waste(final[seq], run.max_length) for seq in lengths)
        for lengths in run.lengths
    ]


def orca_waste(run: RecordedRun, delta: int) -> list[int]:
    """Reservation waste at each step (§2) of buffers grown $\\Delta L$ = ``delta`` slots at a
    time: $\\sum_i \\lceil l_i/\\Delta L \\rceil \\Delta L - l_i$ over the live sequences."""
    return [
        sum(memory.reservation_waste(length, delta) for length in lengths.values())
        for lengths in run.lengths
    ]


def fragmentation_stalls(run: RecordedRun, sizes: Mapping[int, int]) -> list[tuple[int, int]]:
    """External fragmentation (§2) of the run's arrivals and departures as contiguous buffers:
    a first-fit ``ContiguousHeap`` of ``run.capacity`` slots, where sequence $i$ asks for one
    buffer of ``sizes[i]`` slots at each step it appears (first, or back after it left).

    At each step, the buffers of the sequences gone since the step before are freed first;
    then the newcomers ask, in order of sequence id. A request no hole can hold is refused and
    never retried (its sequence holds no buffer until it leaves and comes back). Returns
    ``(step, sequence)`` for each refusal that §2's condition calls a stall: enough memory
    free in total, but no hole large enough."""
    for seq in run.final_lengths:  # every sequence asks: each needs a size first
        memory._check_int(f"sizes[{seq}] (the buffer sequence {seq} asks for)", sizes.get(seq))
    heap = ContiguousHeap(run.capacity)
    buffers: dict[int, tuple[int, int]] = {}  # seq -> (start, size)
    stalls, before = [], set()
    for k, lengths in enumerate(run.lengths):
        for seq in [s for s in buffers if s not in lengths]:
            heap.release(*buffers.pop(seq))
        for seq in sorted(lengths.keys() - before):
            start = heap.allocate(sizes[seq])
            if start is not None:
                buffers[seq] = (start, sizes[seq])
            elif memory.external_fragmentation_stalls(heap.hole_sizes(), sizes[seq]):
                stalls.append((k, seq))
        before = set(lengths)
    return stalls


def replay(run: RecordedRun, allocator: KVAllocator) -> list[dict[int, int]]:
    """The run's lengths replayed on one of the simulator's allocators
    (``minipaged.study.baselines``): at each step, sequences gone since the step before are
    released, newcomers admitted at their length (with their $L_i$, for an oracle), and the
    others grown token by token to theirs. Returns, per step, the slots $r_i$ each admitted
    sequence spans (``reserved_slots``). A refused admission leaves its sequence out, as in
    ``fragmentation_stalls`` (``allocator.stalls`` counts the stalls); a refused growth
    raises ``ValueError``: give the allocator more capacity."""
    final, spans, admitted = run.final_lengths, [], {}
    for k, lengths in enumerate(run.lengths):
        for seq in [s for s in admitted if s not in lengths]:
            allocator.release(seq)
            del admitted[seq]
        for seq, length in sorted(lengths.items()):
            if seq in admitted:
                for _ in range(length - admitted[seq]):
                    if not allocator.grow(seq):
                        raise ValueError(
                            f"step {k}: {allocator.name} cannot grow sequence {seq} in "
                            f"{allocator.capacity} slots: give it more capacity"
                        )
                admitted[seq] = length
            elif (k == 0 or seq not in run.lengths[k - 1]) and allocator.admit(
                seq, length, run.max_length, final_len=final[seq]
            ):
                admitted[seq] = length
        spans.append({seq: allocator.reserved_slots(seq) for seq in admitted})
    return spans
