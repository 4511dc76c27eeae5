"""Continuous batching over the block manager: who runs this step, and who must make room.

Three queues, each kept in arrival order (first come, first served):

- ``waiting``: requests with nothing cached (new, or preempted by recomputation);
- ``running``: requests whose blocks are on the device; every step decodes all of them;
- ``swapped``: requests whose blocks were moved to the host pool.

Each step (``Scheduler.schedule``):

1. every running sequence reserves the slot for its next token. When the device pool cannot
   give one, the latest arrival among the running requests is preempted (as vLLM does: the
   request that has waited least loses least) until the rest fit (source text §6);
2. if nobody was preempted, swapped requests come back while the device has room;
3. if nothing is swapped out, waiting requests are admitted while the pool keeps its
   watermark and the step's token budget allows: their prompts are prefilled in the same
   forward pass as everyone else's decode step.

Admission asks the block manager for an ``AllocStatus``, as vLLM does: ``OK`` admits, ``LATER``
waits for blocks to be released, ``NEVER`` (not even an empty pool could hold the request and
keep its watermark) aborts the request with its reason instead of letting it wait forever. The
same rule holds for a request coming back after preemption: it may have grown while it ran.
A step that can neither run, preempt, swap nor abort anything while work remains would repeat
forever: ``schedule`` raises ``SchedulerStuck`` instead.

Preemption policy: ``"recompute"`` frees a request's blocks and keeps its token ids, so it is
prefilled again later; ``"swap"`` copies its blocks to the host pool. A request with several
sequences (parallel samples, beams) is swapped whenever the host pool has room, whatever the
policy, because recomputing would lose the blocks its sequences share; with no room on the
host, any request falls back to recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minipaged.block_manager import AllocStatus, BlockManager
from minipaged.config import check_setting
from minipaged.events import Abort, Preempt, Recompute
from minipaged.sequence import Sequence, SequenceGroup, Status


class SchedulerStuck(RuntimeError):
    """A step could make no progress although requests remain: the next one would be the
    same. Raised instead of spinning; the message names the queues and the pool."""


@dataclass(slots=True)
class ScheduledSeq:
    """One sequence in this step's batch: it computes ``num_query_tokens`` tokens (a whole
    prompt, or what the prefix cache did not hold, for a prefill; one for a decode step) with
    block table ``block_table``.

    Two things hold for every row today that chunked prefill (a prompt computed over several
    steps) will break; each is named here, and read from here:

    - ``query_positions``: the tokens computed are the sequence's *last* ``num_query_tokens``
      (``ModelRunner.prepare`` computes those positions). A chunk that stops short of the
      prompt's end is not at the end.
    - ``samples``: the row's last query is the sequence's last token, so its logits choose the
      next token (``Decoder.decode`` samples only such rows). A chunk before the prompt's last
      one has no next token to choose.
    """

    group: SequenceGroup
    seq: Sequence
    num_query_tokens: int
    block_table: list[int]
    is_prefill: bool
    samples: bool = True  # always, until a prompt can be computed in chunks

    @property
    def query_positions(self) -> range:
        """The positions $t$ this row computes: always the sequence's last
        ``num_query_tokens``, until a prompt can be computed in chunks."""
        end = len(self.seq.token_ids)
        return range(end - self.num_query_tokens, end)


@dataclass(slots=True)
class SchedulerOutput:
    """The step's batch and the block copies to run before it, in this order: swap-outs
    (their device blocks may be reused by this very step), swap-ins, copy-on-write copies."""

    scheduled: list[ScheduledSeq] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[SequenceGroup] = field(default_factory=list)
    aborted: list[tuple[SequenceGroup, str]] = field(default_factory=list)  # (group, why)
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache

    @property
    def num_prefill_tokens(self) -> int:
        return sum(s.num_query_tokens for s in self.scheduled if s.is_prefill)


class Scheduler:
    """The three queues and the per-step decision described at the top of this module. It owns
    no tensors: it asks the ``BlockManager`` and hands the ``ModelRunner`` a plan."""

    def __init__(
        self,
        block_manager: BlockManager,
        preemption: str = "recompute",
        max_num_seqs: int = 32,
        max_num_batched_tokens: int = 2048,
    ) -> None:
        settings = {
            "preemption": preemption,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
        }
        for name, value in settings.items():
            check_setting(name, value, resolved=True)  # the rules of EngineConfig's fields
        self.block_manager = block_manager
        self.preemption = preemption
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: list[SequenceGroup] = []
        self.running: list[SequenceGroup] = []
        self.swapped: list[SequenceGroup] = []

    def add(self, group: SequenceGroup) -> None:
        """Queue a new request as waiting, in arrival order."""
        _insert_by_arrival(self.waiting, group)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def finish(self, group: SequenceGroup) -> None:
        """Drop a finished request from the running queue (its blocks are already freed)."""
        self.running.remove(group)
        group.status = Status.FINISHED

    def abort(self, group: SequenceGroup, reason: str) -> None:
        """End ``group`` wherever it is: out of its queue, its live sequences' blocks released
        (device or host) and finished with reason ``"abort"``, an ``Abort`` event recorded."""
        for queue in (self.waiting, self.running, self.swapped):
            if group in queue:
                queue.remove(group)
        bm = self.block_manager
        live = [seq.seq_id for seq in group.seqs if seq.seq_id in bm.tables]
        bm.record(Abort(group.request_id, tuple(seq.seq_id for seq in group.seqs), reason))
        for seq_id in live:
            bm.free(seq_id)
        for seq in group.seqs:  # what each sequence made so far is still reported
            seq.finish_reason = "abort"
        group.finished += group.seqs
        group.seqs = []
        group.status = Status.FINISHED

    def schedule(self) -> SchedulerOutput:
        """Decide this step: decode the running (preempting when full), swap back in, admit
        waiting requests. Returns the batch and the block copies to run before it."""
        out = SchedulerOutput()
        bm = self.block_manager

        # 1. Decode every running request, oldest first, preempting the newest when full.
        queue, self.running = self.running, []
        while queue:
            group = queue.pop(0)
            ids = [s.seq_id for s in group.seqs]
            fits = bm.can_append(*ids)
            while not fits and queue:
                self._preempt(queue.pop(), out)
                fits = bm.can_append(*ids)
            if fits:
                self._append_slots(group, out)
                self.running.append(group)
            else:
                self._preempt(group, out)

        # 2. Bring swapped requests back, oldest first, with room for their next tokens.
        while self.swapped and not out.preempted:
            group = self.swapped[0]
            ids = [s.seq_id for s in group.seqs]
            status = bm.can_swap_in(ids, extra_blocks=bm.next_token_blocks(*ids))
            if status is AllocStatus.NEVER:
                self._abort_never(group, out)
                continue
            if not status:
                break
            self.swapped.pop(0)
            out.blocks_to_swap_in += bm.swap_in(ids)
            group.status = Status.RUNNING
            self._append_slots(group, out)
            _insert_by_arrival(self.running, group)

        # 3. Admit waiting requests, oldest first, while blocks and the token budget allow.
        budget = self.max_num_batched_tokens - len(out.scheduled)
        num_seqs = sum(len(g.seqs) for g in self.running)
        while self.waiting and not self.swapped and not out.preempted:
            group = self.waiting[0]
            lengths = [len(s.token_ids) for s in group.seqs]
            prompts = [s.token_ids for s in group.seqs]
            first_prefill = out.num_prefill_tokens == 0
            if sum(lengths) > budget and not first_prefill:
                break
            width = max(len(lengths), group.params.num_sequences)  # a prompt forks into n
            status = bm.can_allocate(*prompts)
            if status is AllocStatus.NEVER:
                self._abort_never(group, out)
                continue
            if num_seqs + width > self.max_num_seqs or not status:
                break
            self.waiting.pop(0)
            for seq in group.seqs:
                length = len(seq.token_ids)
                if length > seq.prompt_len:  # it was preempted by recomputation
                    bm.record(Recompute(seq.seq_id, length))
                table = bm.allocate(seq.seq_id, length, seq.token_ids)
                # Tokens found in the prefix cache need no compute: prefill only the rest.
                query = length - table.cached_tokens
                out.scheduled.append(ScheduledSeq(group, seq, query, list(table.blocks), True))
                out.num_cached_tokens += table.cached_tokens
            budget -= sum(lengths)
            num_seqs += width
            group.status = Status.RUNNING
            _insert_by_arrival(self.running, group)
        if not (out.scheduled or out.preempted or out.aborted) and self.has_unfinished():
            raise SchedulerStuck(self._stuck_message())
        return out

    def _abort_never(self, group: SequenceGroup, out: SchedulerOutput) -> None:
        """Admission said NEVER for a request at the head of a queue: abort it, saying why."""
        bm = self.block_manager
        tokens = sum(len(seq.token_ids) for seq in group.seqs)
        limit = bm.device.num_blocks - bm.watermark_blocks
        reason = (
            f"its {len(group.seqs)} sequence(s) of {tokens} tokens in all can never fit the "
            f"device pool again: an empty pool gives {limit} blocks of B={bm.block_size} while "
            "keeping its watermark free; give it more blocks (num_gpu_blocks) or a lower watermark"
        )
        self.abort(group, reason)
        out.aborted.append((group, reason))

    def _stuck_message(self) -> str:
        bm = self.block_manager
        queues = ", ".join(
            f"{name} {[g.request_id for g in getattr(self, name)]}"
            for name in ("waiting", "running", "swapped")
        )
        return (
            f"the scheduler can make no progress ({queues}; {bm.device.num_free} of "
            f"{bm.device.num_blocks} device blocks free, watermark {bm.watermark_blocks}, "
            f"max_num_seqs {self.max_num_seqs}): the next step would be the same. Abort the "
            "request at the head of the queue, or give the pool more blocks"
        )

    def _append_slots(self, group: SequenceGroup, out: SchedulerOutput) -> None:
        for seq in group.seqs:
            result = self.block_manager.append_slot(seq.seq_id, seq.token_ids)
            if result.cow is not None:
                out.blocks_to_copy.append(result.cow)
            table = self.block_manager.table(seq.seq_id)
            out.scheduled.append(ScheduledSeq(group, seq, 1, list(table.blocks), False))

    def _preempt(self, group: SequenceGroup, out: SchedulerOutput) -> None:
        bm = self.block_manager
        ids = [s.seq_id for s in group.seqs]
        wants_swap = self.preemption == "swap" or len(ids) > 1
        mode = "swap" if wants_swap and bm.can_swap_out(ids) else "recompute"
        bm.record(Preempt(group.request_id, tuple(ids), mode))
        if mode == "swap":
            out.blocks_to_swap_out += bm.swap_out(ids)
            group.status = Status.SWAPPED
            _insert_by_arrival(self.swapped, group)
        else:
            for seq_id in ids:
                bm.free(seq_id)
            group.status = Status.WAITING
            _insert_by_arrival(self.waiting, group)
        out.preempted.append(group)


def _insert_by_arrival(queue: list[SequenceGroup], group: SequenceGroup) -> None:
    """Keep ``queue`` in arrival order, so its front is the oldest and its back the newest."""
    index = len(queue)
    while index > 0 and queue[index - 1].arrival > group.arrival:
        index -= 1
    queue.insert(index, group)
