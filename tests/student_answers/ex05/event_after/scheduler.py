"""The Preempt event recorded after the frees it causes.

Fails: the_preempt_event_comes_first
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
            for seq_id in ids:
                bm.free(seq_id)
            bm.record(Preempt(group.request_id, tuple(ids), "recompute"))
            group.status = Status.WAITING
            _insert_by_arrival(self.waiting, group)
        out.preempted.append(group)
