"""What a request must be for an engine to take it, checked by ``LLMEngine.add_request``
before anything is queued or recorded: an id that events, traces and the TUI can name
(``check_request_id``) and that no request in flight holds (``check_id_free``), and a prompt
and sampling that fit (``check_fits``): within the model's context, the scheduler's limits,
and the blocks an empty device pool gives (``RequestRejected`` otherwise). A refused request
queues nothing: the others run on.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection

from minipaged.block_manager import AllocStatus, BlockManager
from minipaged.sampling import SamplingParams
from minipaged.scheduler import Scheduler
from minipaged.unknown_key import UnknownKey


class RequestRejected(ValueError):
    """A request that can never run on this engine: admission says NEVER for everything it
    may come to hold (its sequences at full length need more blocks than an empty device pool
    gives while keeping its watermark free). Nothing else is affected: other requests run.
    ``num_blocks`` is what it needs, ``limit`` what an empty pool gives."""

    def __init__(self, message: str, num_blocks: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.num_blocks = num_blocks
        self.limit = limit


class UnknownRequest(UnknownKey):
    """An id no unfinished request holds (``LLMEngine.abort_request``): a ``ValueError`` and a
    ``KeyError`` (``UnknownKey``), the latter for code written when it was one. Nothing is
    changed: the engine and its requests run on."""


SHOWN_IDS = 10
"""The most request ids a message lists: an engine may hold thousands in flight."""


def shown_ids(requests: Collection[str]) -> str:
    """The ids of ``requests`` for a message: the first ``SHOWN_IDS`` in order, and how many
    more there are."""
    ids = sorted(requests)
    more = f" and {len(ids) - SHOWN_IDS:,} more" if len(ids) > SHOWN_IDS else ""
    return f"{ids[:SHOWN_IDS]}{more}"


MAX_REQUEST_ID_LENGTH = 256
"""The longest request id, in characters. Every event of a request names it, and so every
line of a trace and every row of the TUI's tables: an id of a megabyte made each of its
events a megabyte. 256 holds any UUID, prefix and counter a caller builds (vLLM's are
under 40), as a file name's 255 bytes hold any name."""


def check_request_id(request_id: object, fix: str) -> None:
    """Refuse a request id that is not a non-blank string of at most
    ``MAX_REQUEST_ID_LENGTH`` characters (events and traces name it), with ``fix`` the way
    out."""
    if not isinstance(request_id, str):
        raise TypeError(f"request_id must be a string, got {request_id!r:.60}; {fix}")
    if not request_id.strip():
        raise ValueError(f"request_id must name the request, got {request_id!r}; {fix}")
    if len(request_id) > MAX_REQUEST_ID_LENGTH:
        raise ValueError(
            f"request_id must be at most {MAX_REQUEST_ID_LENGTH} characters (every event and "
            f"trace line names it), got {len(request_id):,} starting {request_id[:40]!r}; "
            f"{fix}"
        )


def check_id_free(request_id: str, in_flight: Collection[str]) -> None:
    """The request-id rule (vLLM's): an id names at most one request in flight. An id that a
    waiting, running or swapped-out request holds is refused; once that request finishes or
    is aborted its id is free, and a new request may take it."""
    if request_id in in_flight:
        raise ValueError(
            f"request id {request_id!r} is already in use by a request in flight; pick another, "
            "or wait until that request finishes (or abort it)"
        )


def automatic_id(arrival: int, in_flight: Collection[str]) -> str:
    """The id of a request added without one: its arrival number, or the next number no
    request in flight holds (a caller may have named one of theirs ``"3"``)."""
    return next(name for name in map(str, itertools.count(arrival)) if name not in in_flight)


def check_fits(
    token_ids: list[int],
    params: SamplingParams,
    max_model_len: int,
    scheduler: Scheduler,
    block_manager: BlockManager,
) -> None:
    """``ValueError`` for a prompt of ``token_ids`` the model (a context of ``max_model_len``)
    or the batch (``scheduler``'s limits) cannot take; ``RequestRejected`` when admission
    (``block_manager.can_allocate``) says NEVER for everything the request may come to
    hold."""
    if len(token_ids) >= max_model_len:
        raise ValueError(
            f"the prompt has {len(token_ids)} tokens but the model's context is "
            f"{max_model_len} tokens (max_model_len, else max_position_embeddings), with "
            "room needed for at least one new token; shorten the prompt"
        )
    scheduler.check_prompt(len(token_ids))
    if params.num_sequences > scheduler.max_num_seqs:
        raise ValueError(
            f"the request runs {params.num_sequences} sequences but max_num_seqs is "
            f"{scheduler.max_num_seqs}; lower n / beam_width or raise max_num_seqs"
        )
    # Everything the request may come to hold, unshared (preemption breaks sharing), must
    # be admissible on an empty pool: then it can always run alone, and never spins.
    length = min(len(token_ids) + params.max_tokens, max_model_len)
    if block_manager.can_allocate(*[length] * params.num_sequences) is not AllocStatus.NEVER:
        return
    needed = params.num_sequences * block_manager.blocks_needed(length)
    block_size, pool, kept = (
        block_manager.block_size,
        block_manager.device.num_blocks,
        block_manager.watermark_blocks,
    )
    limit = pool - kept
    raise RequestRejected(
        f"the request needs up to {needed} blocks ({params.num_sequences} sequence(s) "
        f"of up to {length} tokens, B={block_size}) but the device pool can give only "
        f"{limit} blocks, {limit * block_size} token slots (num_gpu_blocks="
        f"{pool} x B={block_size}, {kept} kept free as "
        "the watermark); lower max_tokens, n or beam_width, or give the pool more blocks "
        "(num_gpu_blocks)",
        needed,
        limit,
    )
