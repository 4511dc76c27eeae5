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

With chunked prefill (``enable_chunked_prefill``, ``minipaged.chunked_prefill``) a prompt need
not be computed in one step: the budget goes to the decodes first, then partly prefilled
requests go on with a chunk each, then waiting ones are admitted with a chunk of what is left.

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
from minipaged.chunked_prefill import StepBudget, chunk_event, chunk_size, extend, room_for
from minipaged.config import check_setting, check_token_budget
from minipaged.events import Abort, Preempt, Recompute
from minipaged.sequence import Sequence, SequenceGroup, Status


class SchedulerStuck(RuntimeError):
    """A step could make no progress although requests remain: the next one would be the
    same. Raised instead of spinning; the message names the queues and the pool."""


@dataclass(slots=True)
class ScheduledSeq:
    """One sequence in this step's batch: it computes ``num_query_tokens`` tokens with block
    table ``block_table``: one for a decode step; for a prefill, a whole prompt, what the
    prefix cache did not hold, or, with chunked prefill, a chunk of the prompt.

    - ``query_positions``: the positions computed, from ``first_position`` on (None: the
      sequence's last ``num_query_tokens``, as for every row but a chunk that stops short of
      the prompt's end). ``ModelRunner.prepare`` computes those positions.
    - ``samples``: whether the row's last query is the sequence's last token, so that its
      logits choose the next token (``Sampler.sample`` samples only such rows). A chunk
      before the prompt's last has no next token to choose.
    """

    group: SequenceGroup
    seq: Sequence
    num_query_tokens: int
    block_table: list[int]
    is_prefill: bool
    first_position: int | None = None

    @property
    def query_positions(self) -> range:
        """The positions $t$ this row computes."""
        end = len(self.seq.token_ids)
        first = end - self.num_query_tokens if self.first_position is None else self.first_position
        return range(first, first + self.num_query_tokens)

    @property
    def samples(self) -> bool:
        return self.query_positions.stop == len(self.seq.token_ids)


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
        enable_chunked_prefill: bool = False,
        long_prefill_token_threshold: int = 0,
    ) -> None:
        settings = {
            "preemption": preemption,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "enable_chunked_prefill": enable_chunked_prefill,
            "long_prefill_token_threshold": long_prefill_token_threshold,
        }
        for name, value in settings.items():  # the rules of EngineConfig's fields
            setattr(self, name, check_setting(name, value, resolved=True))  # np.int64(4) is 4
        check_token_budget(
            **{name: getattr(self, name) for name in settings if name != "preemption"}
        )
        if not all(hasattr(block_manager, verb) for verb in ("can_allocate", "allocate", "free")):
            raise TypeError(
                "block_manager must be a BlockManager (or a class with its methods), got "
                f"{block_manager!r:.60}"
            )
        self.block_manager = block_manager
        self.waiting: list[SequenceGroup] = []
        self.running: list[SequenceGroup] = []
        self.swapped: list[SequenceGroup] = []

    def check_prompt(self, num_tokens: int) -> None:
        """Refuse a prompt of ``num_tokens`` this scheduler could never prefill, as vLLM does:
        with chunking off a prompt is computed in one step, so it must fit the budget."""
        budget = self.max_num_batched_tokens
        if num_tokens > budget and not self.enable_chunked_prefill:
            raise ValueError(
                f"the prompt has {num_tokens} tokens but max_num_batched_tokens is {budget} "
                "(the most one step computes) and chunked prefill is off; pass "
                "--enable-chunked-prefill (enable_chunked_prefill=True) to prefill it over "
                "several steps, or raise max_num_batched_tokens"
            )

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
        """Decide this step: decode the running (preempting when full), swap back in, continue
        partly prefilled prompts, admit waiting requests. Returns the batch and the block
        copies to run before it."""
        out = SchedulerOutput()
        bm = self.block_manager
        prefilling: list[SequenceGroup] = []  # running, partly prefilled: they go on in 3

        # 1. Decode every running request, oldest first, preempting the newest when full.
        queue, self.running = self.running, []
        while queue:
            group = queue.pop(0)
            if self._is_prefilling(group):
                prefilling.append(group)
                self.running.append(group)
                continue
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
            if self._is_prefilling(group):
                _insert_by_arrival(prefilling, group)
            else:
                self._append_slots(group, out)
            _insert_by_arrival(self.running, group)

        # 3. Chunked prefill: partly prefilled requests go on, oldest first, with what is left.
        budget = self.max_num_batched_tokens - len(out.scheduled)
        for group in prefilling:
            budget -= self._continue_prefill(group, budget, out)

        # 4. Admit waiting requests, oldest first, while blocks and the token budget allow.
        num_seqs = sum(len(g.seqs) for g in self.running)
        while self.waiting and not self.swapped and not out.preempted:
            group = self.waiting[0]
            cached, size = self._first_chunk(group, budget)
            parts = [s.token_ids[: cached + size] for s in group.seqs]
            if size * len(parts) > budget and out.num_prefill_tokens:
                break  # chunking off: a whole prompt; only a step's first may pass the budget
            width = max(len(parts), group.params.num_sequences)  # a prompt forks into n
            status = bm.can_allocate(*[s.token_ids for s in group.seqs])
            if status is AllocStatus.NEVER:
                self._abort_never(group, out)
                continue
            if self.enable_chunked_prefill:  # the chunk's blocks, not the whole prompt's
                status = bm.can_allocate(*parts) if size else AllocStatus.LATER
            if num_seqs + width > self.max_num_seqs or not status:
                break
            self.waiting.pop(0)
            together = self.enable_chunked_prefill and len(parts) > 1  # see _first_chunk
            for seq, part in zip(group.seqs, parts, strict=True):
                # It was preempted by recomputation: after it sampled, or part way through
                # its prompt (chunks computed since it was admitted).
                if len(seq.token_ids) > seq.prompt_len or seq.num_chunks:
                    bm.record(Recompute(seq.seq_id, len(seq.token_ids)))
                seq.num_chunks = 0
                table = bm.allocate(seq.seq_id, len(part), None if together else part)
                # Tokens found in the prefix cache need no compute: prefill only the rest.
                query = len(part) - table.cached_tokens
                row = ScheduledSeq(group, seq, query, list(table.blocks), True)
                row.first_position = table.cached_tokens
                self._add_chunk(row, out)
                out.num_cached_tokens += table.cached_tokens
            budget -= size * len(parts)
            num_seqs += width
            group.status = Status.RUNNING
            _insert_by_arrival(self.running, group)
        if self.enable_chunked_prefill:
            bm.record(_spent(self.max_num_batched_tokens, out))
        if not (out.scheduled or out.preempted or out.aborted) and self.has_unfinished():
            raise SchedulerStuck(self._stuck_message())
        return out

    def _is_prefilling(self, group: SequenceGroup) -> bool:
        """Whether ``group`` is partly prefilled: a chunk has computed some of its tokens but
        not all up to its last (with chunking off, never: a prefill computes them all)."""
        bm = self.block_manager
        return any(bm.table(s.seq_id).num_tokens < len(s.token_ids) - 1 for s in group.seqs)

    def _first_chunk(self, group: SequenceGroup, budget: int) -> tuple[int, int]:
        """``(cached, size)`` for admitting ``group``: the tokens the prefix cache holds, then
        how many after them this step computes, per sequence: all of them with chunking off
        (the caller checks the budget); a chunk with it. A request of several sequences (one
        recomputed after preemption) takes no cached blocks while chunking, so that its
        sequences move through their prompts together."""
        seqs = group.seqs
        length = len(seqs[0].token_ids)
        if not self.enable_chunked_prefill:
            return 0, length  # allocate finds the cached part itself
        bm = self.block_manager
        cached = len(bm.prefix_hits(seqs[0].token_ids)) * bm.block_size if len(seqs) == 1 else 0
        cap = self.long_prefill_token_threshold
        return cached, chunk_size(length - cached, budget, len(seqs), cap)

    def _continue_prefill(self, group: SequenceGroup, budget: int, out: SchedulerOutput) -> int:
        """Schedule the next chunk of partly prefilled ``group`` within ``budget`` tokens and
        the free blocks; returns the tokens it takes. A chunk that gets no block preempts its
        request (§6), which makes room for the decodes that hold the rest."""
        bm = self.block_manager
        ids = [s.seq_id for s in group.seqs]
        computed = bm.table(ids[0]).num_tokens  # the same for each: they move together
        remaining = len(group.seqs[0].token_ids) - computed
        size = chunk_size(remaining, budget, len(ids), self.long_prefill_token_threshold)
        if size == 0:
            return 0  # the budget is spent: it goes on next step
        size = room_for(bm, ids, size)
        if size == 0:
            self.running.remove(group)
            self._preempt(group, out)
            return 0
        for seq in group.seqs:
            out.blocks_to_copy += extend(bm, seq, computed + size)
            table = bm.table(seq.seq_id)
            self._add_chunk(ScheduledSeq(group, seq, size, list(table.blocks), True, computed), out)
        return size * len(ids)

    def _add_chunk(self, row: ScheduledSeq, out: SchedulerOutput) -> None:
        """Add a prefill row to the batch, and with chunking on say which chunk it is."""
        out.scheduled.append(row)
        if self.enable_chunked_prefill:
            row.seq.num_chunks += 1
            event = chunk_event(row.seq, row.query_positions, len(row.block_table))
            self.block_manager.record(event)

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
            # A chunk may stop just short of a prompt's last token: then this row computes it.
            is_prefill = len(seq.token_ids) == seq.prompt_len
            row = ScheduledSeq(group, seq, 1, list(table.blocks), is_prefill)
            if is_prefill:
                self._add_chunk(row, out)
            else:
                out.scheduled.append(row)

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


def _spent(budget: int, out: SchedulerOutput) -> StepBudget:
    """How ``out`` spent the step's ``budget`` tokens, for the scheduler pane."""
    decodes = tuple(row.seq.seq_id for row in out.scheduled if not row.is_prefill)
    chunks = tuple(
        (row.seq.seq_id, row.num_query_tokens) for row in out.scheduled if row.is_prefill
    )
    return StepBudget(budget, decodes, chunks)
