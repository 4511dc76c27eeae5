"""What the engine returns: per request, vLLM's ``RequestOutput`` with a ``CompletionOutput``
per sequence; per step, a ``StepOutput`` with the new tokens, the block manager's events and a
snapshot of the block state (built only when read, ``Deferred``). ``minipaged.engine``
re-exports them all."""

from __future__ import annotations

from dataclasses import dataclass

from minipaged.block_state import BlockState
from minipaged.events import Event


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


class Deferred:
    """A field of a frozen dataclass that may be given as a function and is computed on first
    read (then kept): ``StepOutput.state`` and ``.sequences`` read as a ``BlockState`` and a
    dict, but a caller that never reads them (``LLM.generate``) never pays for building them."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, output: object, owner: type | None = None):
        if output is None:  # the dataclass asks for a default: there is none
            raise AttributeError(self.name)
        value = output.__dict__[self.name]
        if callable(value):
            value = output.__dict__[self.name] = value()
        return value

    def __set__(self, output: object, value: object) -> None:
        output.__dict__[self.name] = value


@dataclass(frozen=True)
class StepOutput:
    """Everything one step did: ``new_tokens`` (seq id -> token), the block manager's
    ``events`` in order, the block ``state`` after the step, every live sequence, the queues
    (request ids), the requests that finished, and how many tokens were prefilled / decoded /
    found in the prefix cache (prefill skipped).

    ``state`` and ``sequences`` are built when first read. The engine builds them before it
    changes anything they describe if this output is still held, so they always describe the
    moment the step ended, and an output dropped unread costs nothing (``LLMEngine.settle``)."""

    step: int
    new_tokens: dict[int, int]
    events: tuple[Event, ...]
    state: BlockState = Deferred()
    sequences: dict[int, SeqView] = Deferred()
    queues: dict[str, tuple[str, ...]]
    finished: tuple[RequestOutput, ...]
    num_prefill_tokens: int
    num_decode_tokens: int
    num_cached_tokens: int = 0
