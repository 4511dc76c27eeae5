"""Decoding: from one step's logits to every request's next tokens (source text §5).

Parallel sampling draws $n$ first tokens and forks the prompt's sequence $n - 1$ times; beam
search keeps the $K$ best (beam, token) pairs, forking a beam chosen twice and freeing a beam
chosen never. Forks and frees go through the block manager, so the sequences share every block
they have in common and copy only where they diverge.

The log-softmax, the greedy choices and the sampling distributions of the whole batch are one
call each (``sampling.sample_rows``). A sampling request draws from its own generator, so a
seeded request gets the same tokens however the scheduler batches it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import torch
from torch import Tensor

from minipaged import beam_search
from minipaged.block_manager import BlockManager
from minipaged.sampling import sample_rows
from minipaged.scheduler import ScheduledSeq
from minipaged.sequence import Sequence, SequenceGroup


class Sampler:
    """The engine's sampler, the pipeline's stage after the model (DESIGN.md): greedy,
    temperature, top-k / top-p, $n$ samples and beam search. Picks tokens (the draws are
    ``sampling.sample_rows``'), makes the fork and free decisions of §5, and says when a
    sequence is done. Sequence ids come from here, so forks and beams never reuse one."""

    def __init__(self, eos_ids: frozenset[int], max_model_len: int):
        self.block_manager: BlockManager | None = None  # the step's, set by decode
        self.eos_ids = eos_ids  # a sequence ends at any of them (Llama 3 lists several)
        self.max_model_len = max_model_len
        self._seq_ids = itertools.count()

    def new_seq_id(self) -> int:
        return next(self._seq_ids)

    def sample(
        self,
        block_manager: BlockManager,
        scheduled: list[ScheduledSeq],
        logits: Tensor | None,
        new_tokens: dict[int, int],
    ) -> list[SequenceGroup]:
        """Choose the next token of every scheduled sequence from its row of ``logits``
        ``[len(scheduled), vocab]`` into ``new_tokens`` (seq id -> token), and return the
        requests that got tokens, in batch order. Parallel samples and beams fork here; beams
        that lose are freed, and a beam search that is done frees all its beams, all through
        ``block_manager`` (passed each step: the TUI may plug in a student's). Deciding which
        sequences are finished, and freeing them, is the caller's next step.

        Only the rows whose ``samples`` is set choose a token (today, every row: see
        ``ScheduledSeq.samples``)."""
        self.block_manager = block_manager
        rows = [row for row, item in enumerate(scheduled) if item.samples]
        if logits is None or not rows:
            return []
        logits = logits[rows] if len(rows) < len(scheduled) else logits
        sampling = [scheduled[row] for row in rows]
        logprobs = torch.log_softmax(logits.float(), dim=-1)  # [rows, vocab]
        # Every row's tokens in one batched call (beam rows draw none: _beam_step picks theirs),
        # then every chosen token's log-probability in one gather.
        counts = [self._num_tokens(item) for item in sampling]
        tokens = sample_rows(
            logits,
            [item.group.params for item in sampling],
            [item.group.generator for item in sampling],
            counts,
        )
        drawn = [row for row, row_tokens in enumerate(tokens) for _ in row_tokens]
        flat = [token for row_tokens in tokens for token in row_tokens]
        chosen = iter(logprobs[drawn, flat].tolist())  # in row order, as drawn and flat list them
        chosen_logprobs = [[next(chosen) for _ in row_tokens] for row_tokens in tokens]
        by_group: dict[SequenceGroup, list[int]] = defaultdict(list)
        for row, item in enumerate(sampling):
            by_group[item.group].append(row)
        for group, group_rows in by_group.items():
            if group.params.use_beam_search:
                items = [sampling[row] for row in group_rows]
                self._beam_step(group, items, logits[group_rows], new_tokens)
            else:
                for row in group_rows:
                    seq = sampling[row].seq
                    self._extend(group, seq, tokens[row], chosen_logprobs[row], new_tokens)
                group.forked = True
        return list(by_group)

    def finish_reason(self, group: SequenceGroup, seq: Sequence) -> str | None:
        """``"stop"`` (EOS or a stop token), ``"length"`` (max_tokens or the context), or
        None while ``seq`` goes on. Beam search handles EOS itself: a beam ending in EOS
        becomes a finished hypothesis."""
        params, last = group.params, seq.token_ids[-1]
        if not params.ignore_eos and last in self.eos_ids and not params.use_beam_search:
            return "stop"
        if last in params.stop_token_ids:
            return "stop"
        length = len(seq.token_ids)  # output_ids would copy the tokens to count them
        if length - seq.prompt_len >= params.max_tokens or length >= self.max_model_len:
            return "length"
        return None

    @staticmethod
    def _num_tokens(item: ScheduledSeq) -> int:
        """Tokens to draw for one row: none for a beam (``_beam_step`` picks them), $n$ for a
        prompt's first step with $n > 1$ (it forks into $n$ samples), else one."""
        params = item.group.params
        if params.use_beam_search:
            return 0
        fork = item.is_prefill and not item.group.forked and params.n > 1
        return params.n if fork else 1

    def _extend(
        self,
        group: SequenceGroup,
        seq: Sequence,
        tokens: list[int],
        logprobs: list[float],
        new_tokens: dict[int, int],
    ) -> None:
        """Append one row's token to its sequence, or, for a prompt's first step with $n > 1$,
        its $n$ tokens to $n$ sequences: the prompt's and $n - 1$ forks that share every prompt
        block (the first divergent write into a shared, partly filled block will copy it)."""
        seqs = [seq] + [self._fork(group, seq) for _ in tokens[1:]]
        for each, token, logprob in zip(seqs, tokens, logprobs, strict=True):
            each.token_ids.append(token)
            each.cumulative_logprob += logprob
            new_tokens[each.seq_id] = token

    def _beam_step(
        self,
        group: SequenceGroup,
        items: list[ScheduledSeq],
        logits: Tensor,
        new_tokens: dict[int, int],
    ) -> None:
        params = group.params
        beams = [item.seq for item in items]
        eos = frozenset() if params.ignore_eos else self.eos_ids
        candidates, ended = beam_search.select(
            logits, [seq.cumulative_logprob for seq in beams], params.beam_width, eos
        )
        length = len(beams[0].token_ids) + 1  # every beam's, with this step's token
        if length - beams[0].prompt_len >= params.max_tokens or length >= self.max_model_len:
            # The last step: as in transformers, only the first beam_width candidates by
            # score (EOS ones included) end as hypotheses, not the backups ranked below them.
            candidates = candidates[: params.beam_width - len(ended)]
        for candidate in ended:
            parent = beams[candidate.parent]
            hypothesis = Sequence(
                self.new_seq_id(),
                [*parent.token_ids, candidate.token],
                parent.prompt_len,
                candidate.score,
                "stop",
            )
            group.finished.append(hypothesis)
        # Fork before anyone appends, so every child copies its parent's table as it was.
        children: dict[int, list[Sequence]] = defaultdict(list)
        for candidate in candidates:
            parent = beams[candidate.parent]
            own = children[candidate.parent]
            own.append(parent if not own else self._fork(group, parent))
        for index, parent in enumerate(beams):
            if index not in children:  # no candidate extends this beam: drop it
                self.block_manager.free(parent.seq_id)
        order = []
        for candidate in candidates:
            seq = children[candidate.parent].pop(0)
            seq.token_ids.append(candidate.token)
            seq.cumulative_logprob = candidate.score
            new_tokens[seq.seq_id] = candidate.token
            order.append(seq)
        group.seqs = order  # best first
        group.forked = True
        if _beams_done(group):
            for seq in group.seqs:
                self.block_manager.free(seq.seq_id)
            group.seqs = []

    def _fork(self, group: SequenceGroup, parent: Sequence) -> Sequence:
        child = Sequence(self.new_seq_id(), list(parent.token_ids), parent.prompt_len)
        child.cumulative_logprob = parent.cumulative_logprob
        self.block_manager.fork(parent.seq_id, child.seq_id)
        group.seqs.append(child)
        return child


def ranked(group: SequenceGroup) -> list[Sequence]:
    """A finished request's sequences in output order: the best hypotheses by length-normalized
    score for beam search (``num_returned`` of them), else in the order they were made."""
    params = group.params
    if not params.use_beam_search:
        return sorted(group.finished, key=lambda s: s.seq_id)
    return sorted(group.finished, key=lambda s: -_normalized(group, s))[: params.num_returned]


def _beams_done(group: SequenceGroup) -> bool:
    """transformers' stopping rule (early_stopping=False): K finished hypotheses, and no live
    beam can still beat the worst of them."""
    width = group.params.beam_width
    if len(group.finished) < width or not group.seqs:
        return False
    # the worst of the beam_width best hypotheses: only those can still be returned
    worst = sorted((_normalized(group, s) for s in group.finished), reverse=True)[width - 1]
    return _normalized(group, group.seqs[0]) <= worst


def _normalized(group: SequenceGroup, seq: Sequence) -> float:
    return beam_search.normalized(
        seq.cumulative_logprob, len(seq.output_ids), group.params.length_penalty
    )
