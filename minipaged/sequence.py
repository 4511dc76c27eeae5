"""Requests and their sequences, as the scheduler sees them.

A request (``SequenceGroup``) starts as one sequence holding the prompt. After the prompt's
forward pass, parallel sampling ($n$) or beam search ($K$) forks it into several sequences that
share the prompt's blocks (source text §5). The scheduler moves whole groups between the
waiting, running and swapped queues, because a group's sequences share blocks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the scheduler, and exercise 05's grading child, load
    import torch  # this module without paying for torch's import (seconds)

    from minipaged.sampling import SamplingParams


class Status(enum.Enum):
    """Which scheduler queue a request is in (or that it is done)."""

    WAITING = "waiting"  # not in the cache: new, or preempted by recomputation
    RUNNING = "running"  # its blocks are on the device
    SWAPPED = "swapped"  # its blocks are in the host pool
    FINISHED = "finished"


@dataclass(eq=False, slots=True)
class Sequence:
    """One stream of tokens.

    Invariant: while RUNNING or SWAPPED, the cache holds keys and values for every token but
    the last, ``len(token_ids) - 1`` of them: the last sampled token is computed by the next
    step, which also yields the token after it. A WAITING sequence has nothing cached. With
    chunked prefill, a request part way through its prompt holds the first $t$ only, its
    table's ``num_tokens``, fewer than ``len(token_ids) - 1``; the next chunk goes on from
    there.
    """

    seq_id: int
    token_ids: list[int]
    prompt_len: int
    cumulative_logprob: float = 0.0
    finish_reason: str | None = None
    num_chunks: int = 0  # prefill chunks computed since it was last admitted (chunked prefill)

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len :]

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(eq=False, slots=True)
class SequenceGroup:
    """One request: its prompt, its parameters and its live sequences.

    ``seqs`` holds the sequences still generating; finished ones move to ``finished``. The
    request is done when ``seqs`` is empty. ``generator`` draws this request's samples, so a
    seeded request samples the same tokens however the scheduler interleaves it with others.
    """

    request_id: str
    arrival: int
    params: SamplingParams
    seqs: list[Sequence]
    generator: torch.Generator
    prompt: str | None = None
    status: Status = Status.WAITING
    finished: list[Sequence] = field(default_factory=list)
    forked: bool = False  # whether the prompt has been forked into n samples or K beams

    @property
    def prompt_token_ids(self) -> list[int]:
        first = (self.seqs or self.finished)[0]
        return first.token_ids[: first.prompt_len]

    @property
    def is_finished(self) -> bool:
        return not self.seqs
