"""Recompute cuts each sequence back to its prompt: the generated tokens are lost.

Fails: recomputed_request_prefills_prompt_and_generated
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
            for seq in group.seqs:
                del seq.token_ids[seq.prompt_len :]
            group.status = Status.WAITING
            _insert_by_arrival(self.waiting, group)
        out.preempted.append(group)
