"""What the engine returns: per request, vLLM's ``RequestOutput`` with a ``CompletionOutput``
per sequence; per step, a ``StepOutput`` with the new tokens, the block manager's events and a
snapshot of the block state. Plain values: the TUI, traces and statistics import them from
here, without the engine (or torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from minipaged.block_state import BlockState
from minipaged.events import Event

if TYPE_CHECKING:  # the records hold tensors; this module stays free of torch
    from minipaged.attention_probe import AttentionRecord


@dataclass
class CompletionOutput:
    """One generated sequence: its new tokens (the prompt excluded), their text, the sum of
    their log-probabilities, and why it stopped (``"stop"`` or ``"length"``)."""

    index: int
    token_ids: list[int]
    text: str
    cumulative_logprob: float
    finish_reason: str | None


@dataclass
class RequestOutput:
    """vLLM's result type: ``outputs[i].token_ids`` and ``outputs[i].text`` per sequence
    (best first for beam search). ``error`` says why a rejected or aborted request stopped."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SeqView:
    """A live sequence as a step saw it: its tokens so far (prompt included) and its queue."""

    request_id: str
    seq_id: int
    token_ids: tuple[int, ...]
    prompt_len: int
    status: str


@dataclass(frozen=True)
class StepOutput:
    """Everything one step did: ``new_tokens`` (seq id -> token), the block manager's
    ``events`` in order, the block ``state`` after the step, every live sequence, the queues
    (request ids), the requests that finished, and how many tokens were prefilled / decoded /
    found in the prefix cache (prefill skipped). Made by one builder, ``LLMEngine.report``.

    ``state`` and ``sequences`` are None when the caller of ``LLMEngine.step`` asked for no
    snapshot (``LLM.generate`` with nobody watching the steps).

    ``drafted``: with speculative decoding, the step as it stood once the drafters' branches
    were forked, before the verify pass pruned them (its events are the first
    ``len(drafted.events)`` of ``events``, and it made no token); the step's end state shows
    only the kept branch. None when nothing was drafted. Not recorded in traces, and not
    compared: a replayed step equals the live one.

    ``attention``: what each scheduled row's attention read and computed, when the engine's
    probe is on (``minipaged.attention_probe``; the TUI's attention view); None otherwise, and
    in traces."""

    step: int
    new_tokens: dict[int, int]
    events: tuple[Event, ...]
    state: BlockState | None
    sequences: dict[int, SeqView] | None
    queues: dict[str, tuple[str, ...]]
    finished: tuple[RequestOutput, ...]
    num_prefill_tokens: int
    num_decode_tokens: int
    num_cached_tokens: int = 0
    drafted: StepOutput | None = field(default=None, compare=False, repr=False)
    attention: tuple[AttentionRecord, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def tokens(self) -> dict[int, int]:
        """DESIGN.md's name for ``new_tokens``: the tokens this step made, seq id -> token."""
        return self.new_tokens

    @property
    def snapshot(self) -> BlockState | None:
        """DESIGN.md's "block-state snapshot": ``state``, the block state after the step."""
        return self.state

    block_state = snapshot

    @classmethod
    def empty(cls, state: BlockState) -> StepOutput:
        """Step 0 over ``state``: nothing made, nothing queued (a replayed trace's first frame,
        which has no engine to report it)."""
        return cls(0, {}, (), state, {}, {"waiting": (), "running": (), "swapped": ()}, (), 0, 0)
