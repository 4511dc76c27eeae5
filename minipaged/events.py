"""What the block manager did, one small frozen record per change.

Every change to the block state is an event, so the TUI can draw it, a trace can replay it and a
test can assert on it. Each event carries enough to draw itself (sequence, logical index,
physical block, refcount after) and narrates itself in one line: the narration lives with the
event type, not in the TUI.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import ClassVar

SeqId = int


@dataclass(frozen=True, slots=True)
class Event(ABC):
    """Base of every event: ``kind`` names it in traces; ``narrate()`` says why it happened."""

    kind: ClassVar[str]

    @abstractmethod
    def narrate(self) -> str:
        """One line, in the source text's terms, saying what happened and why."""

    def blocks_in(self, pool: str) -> frozenset[int]:
        """The blocks of ``pool`` (``"device"`` or ``"host"``) this event changed: the blocks
        the TUI marks for it. None, unless the event type says otherwise."""
        return frozenset()

    def seq_ids(self) -> frozenset[SeqId]:
        """The sequences this event is about (the TUI highlights it when one is selected)."""
        return frozenset()

    def to_dict(self) -> dict:
        """A JSON-ready record: ``{"kind": ..., field: value, ...}`` (tuples become lists)."""
        return {"kind": self.kind, **asdict(self)}


class BlockChange(Event):
    """The shape ``Alloc``, ``Free``, ``Incref`` and ``Decref`` share: sequence ``seq``
    changed the refcount of one ``block`` of one ``pool``. They differ in what they say
    about it, not in what they touch."""

    __slots__ = ()
    seq: SeqId
    block: int
    pool: str

    def blocks_in(self, pool: str) -> frozenset[int]:
        return frozenset({self.block}) if pool == self.pool else frozenset()

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})


@dataclass(frozen=True, slots=True)
class Alloc(BlockChange):
    """A free block became ``seq``'s logical block ``logical_index`` ($\\mathcal{R}=1$)."""

    kind: ClassVar[str] = "alloc"

    seq: SeqId
    logical_index: int
    block: int
    pool: str = "device"

    def narrate(self) -> str:
        return (
            f"seq {self.seq} takes free {self.pool} block {self.block} "
            f"as its logical block {self.logical_index} (R=1)"
        )


@dataclass(frozen=True, slots=True)
class Free(BlockChange):
    """``seq`` let go of ``block``, which nobody else held: $\\mathcal{R}=0$, it is free."""

    kind: ClassVar[str] = "free"

    seq: SeqId
    block: int
    pool: str = "device"

    def narrate(self) -> str:
        return f"seq {self.seq} releases {self.pool} block {self.block}: R=0, it is free again"


@dataclass(frozen=True, slots=True)
class Incref(BlockChange):
    """``seq`` now shares ``block`` too; ``refcount`` is $\\mathcal{R}[p]$ after the change."""

    kind: ClassVar[str] = "incref"

    seq: SeqId
    logical_index: int
    block: int
    refcount: int
    pool: str = "device"

    def narrate(self) -> str:
        return (
            f"seq {self.seq} shares {self.pool} block {self.block} "
            f"as its logical block {self.logical_index}: R={self.refcount}"
        )


@dataclass(frozen=True, slots=True)
class Decref(BlockChange):
    """``seq`` let go of ``block`` while others still hold it ($\\mathcal{R}[p] > 0$ after)."""

    kind: ClassVar[str] = "decref"

    seq: SeqId
    block: int
    refcount: int
    pool: str = "device"

    def narrate(self) -> str:
        return (
            f"seq {self.seq} lets go of {self.pool} block {self.block}; "
            f"{self.refcount} other table(s) still hold it (R={self.refcount})"
        )


@dataclass(frozen=True, slots=True)
class Fork(Event):
    """``child`` got a copy of ``parent``'s block table; no key or value was copied (§5)."""

    kind: ClassVar[str] = "fork"

    parent: SeqId
    child: SeqId
    blocks: tuple[int, ...]

    def blocks_in(self, pool: str) -> frozenset[int]:
        return frozenset(self.blocks) if pool == "device" else frozenset()

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.parent, self.child})

    def narrate(self) -> str:
        return (
            f"seq {self.child} forks from seq {self.parent}: copies its table "
            f"{list(self.blocks)} and raises each refcount by 1; no KV is copied"
        )


@dataclass(frozen=True, slots=True)
class CowCopy(Event):
    """Copy-on-write (§5, case 2): ``seq`` was about to write token ``position`` into ``src``,
    which ``refcount_before`` tables shared (``seq`` and those in ``shared_with``); it copied the
    first ``num_tokens`` rows ($o$) into its own new block ``dst`` and writes there instead."""

    kind: ClassVar[str] = "cow-copy"

    seq: SeqId
    position: int
    logical_index: int
    src: int
    dst: int
    num_tokens: int
    refcount_before: int
    shared_with: tuple[SeqId, ...] = ()

    def blocks_in(self, pool: str) -> frozenset[int]:
        return frozenset({self.src, self.dst}) if pool == "device" else frozenset()

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        others = ", ".join(f"seq {s}" for s in self.shared_with) or "another table"
        return (
            f"seq {self.seq} writes token {self.position} into block {self.src}, shared with "
            f"{others} (R={self.refcount_before}): copy-on-write of {self.num_tokens} "
            f"token(s) to block {self.dst}"
        )


@dataclass(frozen=True, slots=True)
class SwapOut(Event):
    """``seq``'s blocks moved to host memory (§6, swapping); ``mapping`` is (device, host) pairs."""

    kind: ClassVar[str] = "swap-out"

    seq: SeqId
    mapping: tuple[tuple[int, int], ...]

    def blocks_in(self, pool: str) -> frozenset[int]:
        side = 0 if pool == "device" else 1  # mapping pairs are (device, host)
        return frozenset(pair[side] for pair in self.mapping)

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        moves = ", ".join(f"{d}->{h}" for d, h in self.mapping)
        return f"seq {self.seq} swaps out to host memory: device->host blocks {moves}"


@dataclass(frozen=True, slots=True)
class SwapIn(Event):
    """``seq``'s blocks came back to the device (§6); ``mapping`` is (host, device) pairs."""

    kind: ClassVar[str] = "swap-in"

    seq: SeqId
    mapping: tuple[tuple[int, int], ...]

    def blocks_in(self, pool: str) -> frozenset[int]:
        side = 1 if pool == "device" else 0  # mapping pairs are (host, device)
        return frozenset(pair[side] for pair in self.mapping)

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        moves = ", ".join(f"{h}->{d}" for h, d in self.mapping)
        return f"seq {self.seq} swaps back in: host->device blocks {moves}"


@dataclass(frozen=True, slots=True)
class Preempt(Event):
    """The device pool ran out while running sequences needed room to grow (§6): request
    ``request_id``, the latest arrival, gives up its device blocks. ``mode`` is ``"swap"``
    (blocks copied to host memory) or ``"recompute"`` (blocks dropped, token ids kept)."""

    kind: ClassVar[str] = "preempt"

    request_id: str
    seqs: tuple[SeqId, ...]
    mode: str

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset(self.seqs)

    def narrate(self) -> str:
        seqs = ", ".join(str(s) for s in self.seqs)
        if self.mode == "swap":
            how = "its blocks are copied to host memory and freed on the device"
        else:
            how = "its blocks are freed; it keeps its token ids and will prefill them again"
        return (
            f"out of device blocks: request {self.request_id} (seq {seqs}), the latest "
            f"arrival, is preempted by {self.mode}: {how}"
        )


@dataclass(frozen=True, slots=True)
class Recompute(Event):
    """A sequence preempted by recomputation is admitted again: its prompt and generated
    tokens, ``num_tokens`` in all, go through one prefill to rebuild its cache (§6)."""

    kind: ClassVar[str] = "recompute"

    seq: SeqId
    num_tokens: int

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        return (
            f"seq {self.seq} returns: its {self.num_tokens} tokens (prompt + generated) are "
            "prefilled again to rebuild its KV cache"
        )


@dataclass(frozen=True, slots=True)
class Finish(Event):
    """``seq`` stopped generating (``reason``: ``"stop"`` for EOS or a stop token, ``"length"``
    for max_tokens or the context limit); its blocks are released just after."""

    kind: ClassVar[str] = "finish"

    seq: SeqId
    reason: str
    num_tokens: int

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        why = "hit a stop token" if self.reason == "stop" else "reached its length limit"
        return f"seq {self.seq} {why} after {self.num_tokens} tokens and releases its blocks"


@dataclass(frozen=True, slots=True)
class PrefixHit(Event):
    """A new sequence found its first ``num_tokens`` tokens already cached in ``blocks``
    (§5/§7 prefix sharing): it takes them as they are, with no compute for those tokens."""

    kind: ClassVar[str] = "prefix-hit"

    seq: SeqId
    blocks: tuple[int, ...]
    num_tokens: int

    def blocks_in(self, pool: str) -> frozenset[int]:
        return frozenset(self.blocks) if pool == "device" else frozenset()

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        return (
            f"seq {self.seq} finds its first {self.num_tokens} tokens cached in blocks "
            f"{list(self.blocks)}: it shares them and skips their prefill"
        )


@dataclass(frozen=True, slots=True)
class PrefixInsert(Event):
    """``seq``'s full ``blocks`` were registered in the prefix cache, for later requests."""

    kind: ClassVar[str] = "prefix-insert"

    seq: SeqId
    blocks: tuple[int, ...]

    def blocks_in(self, pool: str) -> frozenset[int]:
        return frozenset(self.blocks) if pool == "device" else frozenset()

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        return f"seq {self.seq} registers full block(s) {list(self.blocks)} in the prefix cache"


@dataclass(frozen=True, slots=True)
class PrefixEvict(Event):
    """A cached block nobody held ($\\mathcal{R}=0$) was reused for new contents: the least
    recently released one goes first."""

    kind: ClassVar[str] = "prefix-evict"

    block: int

    def blocks_in(self, pool: str) -> frozenset[int]:
        return frozenset({self.block}) if pool == "device" else frozenset()

    def narrate(self) -> str:
        return f"cached block {self.block}, unused, is evicted from the prefix cache for reuse"


@dataclass(frozen=True, slots=True)
class Refuse(Event):
    """Admission said NEVER: request ``request_id`` needs ``num_blocks`` device blocks at
    most, more than the ``limit`` an empty pool gives while keeping its watermark free. It is
    refused up front, so it can never wait forever; other requests are not affected."""

    kind: ClassVar[str] = "refuse"

    request_id: str
    num_blocks: int
    limit: int

    def narrate(self) -> str:
        return (
            f"request {self.request_id} is refused: it needs up to {self.num_blocks} blocks, "
            f"but the device pool can give at most {self.limit} while keeping its watermark free"
        )


@dataclass(frozen=True, slots=True)
class Abort(Event):
    """Request ``request_id`` ended before it finished, for ``reason`` (its caller aborted
    it, or it can never fit the device pool again); ``seqs`` release their blocks just after."""

    kind: ClassVar[str] = "abort"

    request_id: str
    seqs: tuple[SeqId, ...]
    reason: str

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset(self.seqs)

    def narrate(self) -> str:
        seqs = ", ".join(str(s) for s in self.seqs) or "none live"
        return f"request {self.request_id} (seq {seqs}) is aborted: {self.reason}"


MEMORY_EVENTS = (Alloc, Free, Incref, Decref, Fork, CowCopy, SwapOut, SwapIn)
PREFIX_EVENTS = (PrefixHit, PrefixInsert, PrefixEvict)
REQUEST_EVENTS = (Preempt, Recompute, Finish, Refuse, Abort)
EVENTS: tuple[type[Event], ...] = MEMORY_EVENTS + PREFIX_EVENTS + REQUEST_EVENTS
"""Every event of this module: what the block manager, the scheduler and the engine record.
Speculative decoding adds its own (``minipaged.speculative.events.SPECULATIVE_EVENTS``); a
trace reads both lists (``minipaged.trace.EVENT_TYPES``)."""
