"""How the engine runs speculative decoding inside one step.

After the scheduler has reserved every running sequence's next slot (the root's, position
$P$), ``Speculator.draft`` takes the decode rows of eligible requests out of the plain batch,
grows each one's token tree and forks its branches (their copy-on-write pairs join the step's
copies, which run before any forward pass). After the plain pass, ``Speculator.verify`` runs
the one verify pass over every tree, accepts, adopts the kept branch and frees the rest. So no
branch outlives its step: preemption, swapping and recomputation between steps only ever see
plain sequences, and a sequence that must make room has no branches left to drop.

Eligible: a request with one sequence (no parallel samples, no beams), decoding (not
prefilling), with room for at least one guess and the bonus token before ``max_tokens`` and
the model's context end. Others decode as usual in the same step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minipaged.block_manager import BlockManager
from minipaged.checkpoint import load_model
from minipaged.decoding import Sampler
from minipaged.kv_cache import KVCache
from minipaged.model import Llama, LlamaConfig
from minipaged.models import model_directory
from minipaged.scheduler import ScheduledSeq, SchedulerOutput
from minipaged.sequence import SequenceGroup
from minipaged.speculative.acceptance import accept
from minipaged.speculative.branches import Branches, adopt, fork_branches
from minipaged.speculative.config import SpeculativeConfig
from minipaged.speculative.drafters import DraftModelDrafter, NgramDrafter
from minipaged.speculative.events import Accept, Propose, Prune, Verify
from minipaged.speculative.fits import check_loaded_draft, check_speculation_fits
from minipaged.speculative.tree import Drafter, TokenTree, grow_tree
from minipaged.speculative.verify import fallback_note, verify


@dataclass(slots=True)
class Drafted:
    """One sequence under speculation this step: its row, its tree and the tree's branches."""

    item: ScheduledSeq
    tree: TokenTree
    branches: Branches


def make_drafter(
    config: SpeculativeConfig,
    target: Llama,
    budget: int,
    draft_shape: LlamaConfig | None = None,
) -> Drafter:
    """The drafter ``config`` names, checked with the step's token ``budget`` first
    (``minipaged.speculative.fits``). A draft model is loaded like the target (same dtype and
    device) from ``draft_shape``, its config.json as ``LLM`` read it (read here when None); one
    passed loaded must have the target's dtype and device."""
    draft_shape = check_speculation_fits(config, target.config, budget, draft_shape)
    if config.method == "ngram":
        return NgramDrafter(config.ngram_max, config.ngram_min)
    draft = config.draft_model
    param = next(target.parameters())
    if isinstance(draft, Llama):
        check_loaded_draft(draft, param.dtype, param.device)
    else:
        directory = model_directory(draft)
        draft = load_model(directory, dtype=param.dtype, device=param.device, config=draft_shape)
    return DraftModelDrafter(draft)


class Speculator:
    """Drafts, verifies and accepts for the engine (see the module docstring)."""

    def __init__(
        self,
        config: SpeculativeConfig,
        drafter: Drafter,
        model: Llama,
        kv_cache: KVCache,
        sampler: Sampler,
        backend: str = "torch",
    ) -> None:
        self.config = config
        self.drafter = drafter
        self.model = model
        self.kv_cache = kv_cache
        self.sampler = sampler
        self.backend = backend
        self.num_verify_passes = 0  # target forward passes that verified trees
        self.num_verified = 0  # trees verified (one per sequence and pass)
        self.num_proposed = 0
        self.num_accepted = 0
        self._branches: list[int] = []  # the branch tables of the step in flight

    def depth_for(self, item: ScheduledSeq) -> int:
        """How deep this row's tree may grow: one guess fewer than the tokens it may still
        write, so the bonus token always fits; 0 when it is not eligible."""
        group, seq = item.group, item.seq
        params = group.params
        if item.is_prefill or params.use_beam_search or params.n > 1:
            return 0
        room = min(
            params.max_tokens - len(seq.output_ids), self.sampler.max_model_len - len(seq.token_ids)
        )
        return max(0, min(self.config.num_speculative_tokens, room - 1))

    def draft(self, bm: BlockManager, plan: SchedulerOutput, budget: int) -> list[Drafted]:
        """Grow a tree and fork its branches for every eligible decode row of ``plan``; those
        rows leave ``plan.scheduled`` (the verify pass computes their root) and their copies
        join ``plan.blocks_to_copy``. ``budget`` is what the step's token budget has left after
        ``plan``: every guess is one more token of the verify pass, so the guesses of all the
        trees together stay within it, as vLLM counts speculative tokens in its budget."""
        self.drop_branches(bm)
        drafted = []
        for item in list(plan.scheduled):
            depth = self.depth_for(item)
            if depth == 0:
                continue
            seq, params = item.seq, item.group.params
            # Each guess costs one block while the step runs: the pool's room caps the tree
            # before anything is drafted, so no guess is drafted only to be cut.
            room = bm.device.num_free - bm.watermark_blocks
            tree = grow_tree(
                self.drafter,
                seq.token_ids,
                depth,
                self.config.branching,
                max(0, min(self.config.max_tree_nodes, room, budget)),
                params,
                item.group.generator,
            )
            ids = [self.sampler.new_seq_id() for _ in tree.nodes[1:]]
            budget -= len(ids)
            guesses = tree.nodes[1:]
            tokens, parents = tuple(n.token for n in guesses), tuple(n.parent for n in guesses)
            method = self.config.method
            bm.record(
                Propose(seq.seq_id, method, len(ids), tree.depth, tuple(ids), tokens, parents)
            )
            if not ids:
                continue
            token_ids = seq.token_ids if bm.prefix_cache is not None else None
            branches = fork_branches(
                bm, seq.seq_id, tree, iter(ids).__next__, plan.blocks_to_copy, token_ids
            )
            plan.blocks_to_copy += branches.copies
            self._branches += branches.node_seqs[1:]
            plan.scheduled.remove(item)
            drafted.append(Drafted(item, tree, branches))
        return drafted

    def drop_branches(self, bm: BlockManager) -> None:
        """Free the branches a step left behind when it raised before its verdict (Ctrl-C in
        the verify pass, say): the engine calls this before drafting and when it aborts."""
        for branch in self._branches:
            if branch in bm.tables:
                bm.free(branch)
        self._branches = []

    def verify(
        self, bm: BlockManager, drafted: list[Drafted], new_tokens: dict[int, int]
    ) -> list[SequenceGroup]:
        """The verify pass over every drafted tree, then each sequence's verdict: the kept
        branch adopted, the rest freed, the kept tokens and the bonus token appended (up to
        the first that finishes the sequence). Returns the requests that got tokens."""
        if not drafted:
            return []
        seqs = tuple(d.item.seq.seq_id for d in drafted)
        num_nodes = sum(len(d.tree) for d in drafted)
        bm.record(Verify(seqs, num_nodes, fallback_note(self.backend) or ""))
        all_logits = verify(
            self.model, self.kv_cache, [(d.tree, d.branches) for d in drafted], self.backend
        )
        self.num_verify_passes += 1
        verified = []
        for d, logits in zip(drafted, all_logits, strict=True):
            group, seq = d.item.group, d.item.seq
            verdict = accept(d.tree, logits, group.params, group.generator)
            free_before = bm.device.num_free
            pruned = adopt(bm, d.branches, verdict.last)
            kept = d.branches.node_seqs[verdict.last]
            returned = bm.device.num_free - free_before
            bm.record(Prune(seq.seq_id, kept, tuple(pruned), returned))
            tokens = [d.tree.nodes[i].token for i in verdict.accepted] + [verdict.bonus]
            rows = [0, *verdict.accepted]  # the node whose logits chose each token
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            written = []
            for token, row in zip(tokens, rows, strict=True):
                seq.token_ids.append(token)
                seq.cumulative_logprob += float(logprobs[row, token])
                written.append(token)
                if self.sampler.finish_reason(group, seq) is not None:
                    break
            self.num_verified += 1
            self.num_proposed += len(d.tree) - 1
            self.num_accepted += len(verdict.accepted)
            bm.record(Accept(seq.seq_id, tuple(written), len(d.tree) - 1))
            new_tokens[seq.seq_id] = written[-1]
            verified.append(group)
        return verified
