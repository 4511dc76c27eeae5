"""Exercise 05, part 2: preemption, by swapping or by recomputation (source text §6).

Your ``Scheduler`` is the library's, with ``_preempt`` left for you to write: ``schedule()``
calls it on the latest arrival among the running requests when the device pool cannot give
every running sequence its next slot. Fill in the region marked ``# --- your code here ---``,
then run

    minipaged exercises check 5

What you can use:

- ``group.seqs``: the request's sequences (``seq.seq_id``), ``group.request_id``,
  ``group.status``; the queues ``self.waiting`` and ``self.swapped``, kept in arrival order
  by ``_insert_by_arrival(queue, group)``;
- ``self.block_manager`` (``bm``): ``can_swap_out(ids)``, ``swap_out(ids)``, ``free(id)``,
  ``record(event)``;
- ``out``: the step's ``SchedulerOutput``, with ``blocks_to_swap_out`` and ``preempted``.
"""

from __future__ import annotations

from minipaged import scheduler
from minipaged.events import Preempt
from minipaged.scheduler import SchedulerOutput, _insert_by_arrival
from minipaged.sequence import SequenceGroup, Status


class Scheduler(scheduler.Scheduler):
    def _preempt(self, group: SequenceGroup, out: SchedulerOutput) -> None:
        """Take ``group``'s blocks off the device.

        Swap (``self.preemption == "swap"``, or a group of several sequences, whose shared
        blocks recomputation would lose) when the host pool can take its blocks: swap them
        out, add the copies to ``out.blocks_to_swap_out``, mark it SWAPPED and queue it in
        ``self.swapped``. Otherwise recompute: free each sequence's blocks, keep its token
        ids (prompt and generated), mark it WAITING and queue it in ``self.waiting``.

        Either way, record ``Preempt(request_id, seq ids, mode)`` with ``mode`` ``"swap"`` or
        ``"recompute"`` before changing anything, and add ``group`` to ``out.preempted``."""
        # --- your code here (about 15 lines) ---
        raise NotImplementedError("exercise 05: swap the group out, or free it to recompute")
