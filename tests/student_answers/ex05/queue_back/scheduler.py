"""The preempted request appended at the back of the waiting queue.

Fails: a_victim_keeps_its_arrival_order
"""

from __future__ import annotations

from minipaged import scheduler
from minipaged.events import Preempt
from minipaged.scheduler import SchedulerOutput, _insert_by_arrival
from minipaged.sequence import SequenceGroup, Status


class Scheduler(scheduler.Scheduler):
    def _preempt(self, group: SequenceGroup, out: SchedulerOutput) -> None:
        bm = self.block_manager
        ids = [seq.seq_id for seq in group.seqs]
        wants_swap = self.preemption == "swap" or len(group.seqs) > 1
        if wants_swap and bm.can_swap_out(ids):
            bm.record(Preempt(group.request_id, tuple(ids), "swap"))
            out.blocks_to_swap_out.extend(bm.swap_out(ids))
            group.status = Status.SWAPPED
            _insert_by_arrival(self.swapped, group)
        else:
            bm.record(Preempt(group.request_id, tuple(ids), "recompute"))
            for seq_id in ids:
                bm.free(seq_id)
            group.status = Status.WAITING
            self.waiting.append(group)
        out.preempted.append(group)
