"""How steps travel from the model thread to the UI, and how demand travels back.

The model runs in a thread worker so the UI never waits on a forward pass. From the start it
computes the whole run ahead of the cursor (the timeline strip shows how far it has got), so
a jump or a seek rarely has to wait; a caller may still lower the demand with ``want``.

Steps wait in a buffer until the UI thread drains it. A burst of steps costs one message: the
thread posts ``StepsReady`` only when the buffer was empty, and a queued ``StepsReady``
replaces an older one, so the handler runs once and takes them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from textual.message import Message

from minipaged.engine import LLMEngine
from minipaged.outputs import StepOutput
from tui.speculative_frames import frames

EVERYTHING = 1 << 30
"""Demand for every step of the run (a jump looking ahead)."""


class StepFeed:
    """One run's handoff. Thread-safe; a new run gets a new feed, so messages that name an old
    feed are recognised as stale and ignored."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._buffer: list[StepOutput] = []
        self._wanted = EVERYTHING
        self.stopped = threading.Event()
        """Set by the model thread as it leaves, whether the run ended or was cancelled."""

    def want(self, count: int) -> None:
        """Ask for ``count`` steps in all (UI thread)."""
        with self._changed:
            self._wanted = count
            self._changed.notify_all()

    def wait_for_demand(self, produced: int, timeout: float) -> bool:
        """Block until more than ``produced`` steps are wanted, or ``timeout`` seconds pass;
        say whether another step is wanted (model thread)."""
        with self._changed:
            return self._changed.wait_for(lambda: produced < self._wanted, timeout)

    def put(self, step: StepOutput) -> bool:
        """Buffer ``step``; say whether the UI must be told (the buffer was empty) (model
        thread)."""
        with self._changed:
            self._buffer.append(step)
            return len(self._buffer) == 1

    def drain(self) -> list[StepOutput]:
        """Every buffered step, oldest first (UI thread)."""
        with self._changed:
            steps, self._buffer = self._buffer, []
            return steps


class RunStarted(Message):
    """The engine is built and its requests queued: ``opening`` is frame 0."""

    def __init__(self, feed: StepFeed, opening: StepOutput, tokenizer: object, kv: dict) -> None:
        super().__init__()
        self.feed, self.opening, self.tokenizer = feed, opening, tokenizer
        self.kv = kv  # KVCache.summary(): the element type and bytes of a block


class StepsReady(Message):
    """Steps are waiting in ``feed``; drain it."""

    def __init__(self, feed: StepFeed) -> None:
        super().__init__()
        self.feed = feed

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StepsReady) and message.feed is self.feed


class RunEnded(Message):
    """The model thread stopped: the run is complete, or ``error`` says why it could not run
    (and what to do about it); ``loading`` says it failed before the first step (the model,
    its tokenizer or the block manager could not be built)."""

    def __init__(self, feed: StepFeed, error: str | None = None, loading: bool = False) -> None:
        super().__init__()
        self.feed, self.error, self.loading = feed, error, loading


def produce(
    build: Callable[[], LLMEngine],
    feed: StepFeed,
    post: Callable[[Message], object],
    cancelled: Callable[[], bool],
) -> None:
    """The model thread's whole job: ``build`` the engine, post ``RunStarted``, then step
    while the UI wants steps, posting ``StepsReady`` for each burst and ``RunEnded``
    at the end. Checks ``cancelled()`` at least every 0.1 s and stops when it is true; sets
    ``feed.stopped`` however it leaves."""
    try:
        try:
            engine = build()
        except Exception as error:  # a corrupt checkpoint or tokenizer may raise anything
            post(RunEnded(feed, f"{type(error).__name__}: {error}", loading=True))
            return
        post(RunStarted(feed, engine.report(), engine.tokenizer, engine.kv_cache.summary()))
        produced = 0
        while not cancelled() and engine.has_unfinished():
            if not feed.wait_for_demand(produced, timeout=0.1):
                continue
            try:
                step = engine.step()
            except Exception as error:  # the engine may raise anything mid-run (a kernel, say)
                post(RunEnded(feed, f"step {produced + 1} failed: {type(error).__name__}: {error}"))
                return
            for frame in frames(step, produced + 1):  # two for a speculative step
                produced += 1
                if feed.put(frame):
                    post(StepsReady(feed))
        if not cancelled():
            post(RunEnded(feed))
    finally:
        feed.stopped.set()
