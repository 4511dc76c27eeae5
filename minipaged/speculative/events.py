"""What speculative decoding does in a step, one frozen record each, narrated in §5's terms.

The block manager's own events (fork, copy-on-write, free, ...) already tell how the branches
are made and dropped; these four say why: a tree is proposed, verified, partly accepted and
pruned. ``SPECULATIVE_EVENTS`` lists them; traces read that list beside the block manager's
(``minipaged.trace.EVENT_TYPES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from minipaged.events import Event, SeqId


@dataclass(frozen=True, slots=True)
class Propose(Event):
    """The drafter guessed a tree of ``num_nodes`` tokens below ``seq``'s last token, up to
    ``depth`` deep; ``branches`` are the forked tables, one per guess. Guess $i$ is token
    ``tokens[i]`` below node ``parents[i]`` of the tree (0 is the root, ``seq``'s last token;
    guess $i$ is node $i + 1$), so the tree can be shown as tokens. Both are empty in traces
    recorded before they were kept."""

    kind: ClassVar[str] = "spec-propose"

    seq: SeqId
    method: str
    num_nodes: int
    depth: int
    branches: tuple[SeqId, ...]
    tokens: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq, *self.branches})

    def narrate(self) -> str:
        drafter = {"ngram": "n-gram", "draft": "draft-model"}.get(self.method, self.method)
        if not self.num_nodes:
            return f"seq {self.seq}: the {drafter} drafter has no guess; plain decode step"
        return (
            f"seq {self.seq}: the {drafter} drafter guesses {self.num_nodes} token(s), "
            f"{self.depth} deep; each guess gets a branch forked from its parent's "
            f"(seqs {', '.join(map(str, self.branches))}): prefix blocks shared, R[p] += 1"
        )


@dataclass(frozen=True, slots=True)
class Verify(Event):
    """One target forward pass read ``num_nodes`` tree nodes of ``seqs`` with the ancestors
    mask; ``note`` says when the backend's kernels were replaced by the reference."""

    kind: ClassVar[str] = "spec-verify"

    seqs: tuple[SeqId, ...]
    num_nodes: int
    note: str = ""

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset(self.seqs)

    def narrate(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return (
            f"one target pass verifies {self.num_nodes} tree node(s) of seq "
            f"{', '.join(map(str, self.seqs))}: each node sees the prefix and its own "
            f"ancestors{note}"
        )


@dataclass(frozen=True, slots=True)
class Accept(Event):
    """``seq`` kept ``len(tokens) - 1`` of ``num_proposed`` guesses plus the target's own next
    token (the last of ``tokens``)."""

    kind: ClassVar[str] = "spec-accept"

    seq: SeqId
    tokens: tuple[int, ...]
    num_proposed: int

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        kept = len(self.tokens) - 1
        return (
            f"seq {self.seq} accepts {kept} of {self.num_proposed} guesses and adds the "
            f"target's next token: {len(self.tokens)} token(s) {list(self.tokens)} from one pass"
        )


@dataclass(frozen=True, slots=True)
class Prune(Event):
    """The rejected ``branches`` were freed (``blocks_returned`` blocks came back); ``kept``
    is the branch that became ``seq``'s table (``seq`` itself when no guess was kept)."""

    kind: ClassVar[str] = "spec-prune"

    seq: SeqId
    kept: SeqId
    branches: tuple[SeqId, ...]
    blocks_returned: int

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq, *self.branches})

    def narrate(self) -> str:
        adopted = (
            f"branch {self.kept} becomes seq {self.seq}'s table, no key or value copied; "
            if self.kept != self.seq
            else ""
        )
        return (
            f"seq {self.seq}: {adopted}{len(self.branches)} rejected branch(es) freed, "
            f"{self.blocks_returned} block(s) back on the free list"
        )


SPECULATIVE_EVENTS: tuple[type[Event], ...] = (Propose, Verify, Accept, Prune)
"""Every event of this module, for traces to read (``minipaged.trace.EVENT_TYPES``)."""
