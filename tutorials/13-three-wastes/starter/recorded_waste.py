"""Exercise 13, part 2: the three wastes of §2, measured on a run the engine recorded.

Fill in each region marked ``# --- your code here ---``, then run

    minipaged exercises check 13

The names and signatures are those of ``minipaged.study.recorded_waste``. What you can use:

- ``run``, a ``RecordedRun`` (already loaded: no file to parse). ``run.lengths[k]`` maps each
  sequence whose block table was in device memory after step k to its length l_i;
  ``run.final_lengths`` maps every sequence to L_i, the most tokens it ever held;
  ``run.block_size`` is B, ``run.max_length`` L_max, ``run.capacity`` the device pool in
  slots. A sequence that was preempted is absent from the steps until it came back.
- The formulas of part 1, from the library: ``from minipaged.memory import
  paged_internal_waste`` (and the other three). Your memory.py is graded on its own, so a
  slip there does not fail this part twice.
- ``ContiguousHeap(capacity)``: a first-fit heap of slots. ``allocate(size)`` returns the start
  of the first hole that holds ``size`` slots (carving them off), or None when none does;
  ``release(start, size)`` gives a buffer back; ``hole_sizes()`` lists the holes c(m_j).

Each of the first three functions returns a list with one number per step of the run (0 at
a step with no sequence), in token slots.
"""

from __future__ import annotations

from collections.abc import Mapping

from minipaged.study.baselines import ContiguousHeap
from minipaged.study.recorded_waste import RecordedRun


def paged_waste(run: RecordedRun) -> list[int]:
    """At each step, the empty slots of every live sequence's last block, summed: the paged
    internal waste the engine's own block tables held (§3)."""
    # --- your code here (about 4 lines) ---
    raise NotImplementedError("exercise 13: sum ceil(l_i/B)*B - l_i over each step's sequences")


def static_waste(run: RecordedRun) -> list[int]:
    """At each step, L_max - L_i summed over the live sequences: what buffers of L_max slots,
    reserved up front, will never write (§2's internal fragmentation). L_i is the final
    length, not the length now: the slots between l_i and L_i will be written."""
    # --- your code here (about 5 lines) ---
    raise NotImplementedError("exercise 13: sum L_max - L_i over each step's sequences")


def orca_waste(run: RecordedRun, delta: int) -> list[int]:
    """At each step, the slots reserved ahead, ceil(l_i/ΔL)*ΔL - l_i, summed over the live
    sequences, when each sequence's buffer grows ΔL = delta slots at a time (§2's reservation
    fragmentation, the text's model of Orca)."""
    # --- your code here (about 4 lines) ---
    raise NotImplementedError("exercise 13: sum ceil(l_i/ΔL)*ΔL - l_i over each step's sequences")


def fragmentation_stalls(run: RecordedRun, sizes: Mapping[int, int]) -> list[tuple[int, int]]:
    """The same arrivals and departures as contiguous buffers: a ``ContiguousHeap`` of
    ``run.capacity`` slots, where sequence i asks for one buffer of ``sizes[i]`` slots at
    each step it appears in (first, or back after it left).

    At each step k: first release the buffers of the sequences that were in step k - 1 and
    are not in step k; then let each newcomer (in step k, not in step k - 1) ask for its
    buffer, in order of sequence id. A request no hole holds is refused and not retried.
    Return (k, i) for each refusal that is a stall by §2's condition, in that order."""
    # --- your code here (about 15 lines) ---
    raise NotImplementedError("exercise 13: replay the run on a ContiguousHeap")
