"""Swap chosen by the policy alone, without asking whether the host has room.

Fails: swap_falls_back_to_recompute_without_host_room
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
        if wants_swap:
            bm.record(Preempt(group.request_id, tuple(ids), "swap"))
            out.blocks_to_swap_out.extend(bm.swap_out(ids))
            group.status = Status.SWAPPED
            _insert_by_arrival(self.swapped, group)
        else:
            bm.record(Preempt(group.request_id, tuple(ids), "recompute"))
            for seq_id in ids:
                bm.free(seq_id)
            group.status = Status.WAITING
            _insert_by_arrival(self.waiting, group)
        out.preempted.append(group)
