"""Speculative steps as two frames, so the branches can be seen before they are pruned.

The engine forks a tree's branches, verifies them and prunes them within one step, so the
step's end state shows only the kept branch. ``TwoFrameEngine`` wraps an engine with
speculative decoding and shows each such step twice: first right after the branches are forked
(the drafter's tree as forked tables sharing the prefix's blocks, the proposals and their
copy-on-write copies), then at the step's end (the verify pass, the accepted tokens, the
pruning). Everything else is the wrapped engine's.
"""

from __future__ import annotations

from minipaged.engine import LLMEngine, SeqView, StepOutput


class TwoFrameEngine:
    """An ``LLMEngine`` whose speculative steps each yield two ``StepOutput``s (see above);
    every other attribute is the wrapped engine's."""

    def __init__(self, engine: LLMEngine) -> None:
        if engine.speculator is None:
            raise ValueError("TwoFrameEngine shows speculative steps: build the engine with one")
        self.engine = engine
        self._pending: StepOutput | None = None
        self._peek: StepOutput | None = None
        engine.speculator.on_drafted = self._capture

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    def has_unfinished(self) -> bool:
        return self._pending is not None or self.engine.has_unfinished()

    def step(self) -> StepOutput:
        if self._pending is not None:
            done, self._pending = self._pending, None
            return done
        done = self.engine.step()
        if self._peek is None:
            return done
        peek, self._peek, self._pending = self._peek, None, done
        return peek

    def _capture(self) -> None:
        """Called by the speculator while the branches exist: the frame they are drawn in
        takes this step's events so far, and the step after it takes the rest."""
        engine = self.engine
        engine.step_count += 1  # the peek is a step of its own in the timeline
        scheduler = engine.scheduler
        sequences = {
            seq.seq_id: SeqView(
                group.request_id,
                seq.seq_id,
                tuple(seq.token_ids),
                seq.prompt_len,
                group.status.value,
            )
            for queue in (scheduler.waiting, scheduler.running, scheduler.swapped)
            for group in queue
            for seq in group.seqs
        }
        self._peek = StepOutput(
            step=engine.step_count,
            new_tokens={},
            events=tuple(engine.block_manager.pop_events()),
            state=engine.block_manager.snapshot(),
            sequences=sequences,
            queues={
                name: tuple(g.request_id for g in getattr(scheduler, name))
                for name in ("waiting", "running", "swapped")
            },
            finished=(),
            num_prefill_tokens=0,
            num_decode_tokens=0,
        )
