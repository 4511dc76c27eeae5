"""Every line the event log shows is true when it is shown.

The events of each step are replayed, in the order the TUI tells them (``tui.story``), over a
model of the block state ($\\mathcal{T}_r$, $\\mathcal{R}[p]$, the prefix cache's blocks) that
starts from the step before's snapshot. Each event's narration is a claim about the state at
that moment ("takes *free* block 5", "R=2", "shared with seq 3", "found *cached*") and is
checked before the event is applied; at the end of the step the model must equal the step's
own snapshot. One property over every scenario's run catches the whole class: a hit narrated
after the blocks it explains were taken, a swap-in narrated before its host blocks exist, a
copy-on-write naming the wrong sharers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from minipaged.block_state import BlockState
from minipaged.checkpoint import model_directory
from minipaged.events import (
    Alloc,
    CowCopy,
    Decref,
    Event,
    Fork,
    Free,
    Incref,
    PrefixEvict,
    PrefixHit,
    PrefixInsert,
    Recompute,
    SwapIn,
    SwapOut,
)
from tui.scenarios import SCENARIOS
from tui.story import fold, headline, in_story_order

STEPS = 60  # each scenario's first steps: every mechanism of the tour happens by step 40

needs_model = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)


class Untrue(AssertionError):
    """A narration that the block state at its moment contradicts."""


@dataclass
class Replay:
    """The block state as the narrations so far describe it."""

    block_size: int
    tables: dict[int, tuple[str, list[int]]] = field(default_factory=dict)  # seq -> pool, T_r
    refcounts: dict[str, list[int]] = field(default_factory=dict)
    cached: set[int] = field(default_factory=set)
    hit: dict[int, set[int]] = field(default_factory=dict)  # seq -> blocks its hit named

    @classmethod
    def of(cls, state: BlockState) -> Replay:
        return cls(
            state.block_size,
            {seq: (t.pool, list(t.blocks)) for seq, t in state.tables.items()},
            {"device": list(state.device_refcounts), "host": list(state.host_refcounts)},
            set(state.cached),
        )

    def holders(self, pool: str, block: int) -> set[int]:
        return {s for s, (p, blocks) in self.tables.items() if p == pool and block in blocks}

    def check(self, claim: bool, event: Event, why: str) -> None:
        if not claim:
            raise Untrue(f"{event.narrate()!r} is untrue when shown: {why}")

    def apply(self, e: Event) -> None:
        R = self.refcounts
        if isinstance(e, PrefixHit):
            self.check(e.seq not in self.tables, e, f"seq {e.seq} already holds blocks")
            self.check(set(e.blocks) <= self.cached, e, f"cached are {sorted(self.cached)}")
            self.check(e.num_tokens == len(e.blocks) * self.block_size, e, "tokens ≠ blocks·B")
            self.hit[e.seq] = set(e.blocks)
        elif isinstance(e, Alloc):
            self.check(R[e.pool][e.block] == 0, e, f"R[{e.block}] = {R[e.pool][e.block]}")
            fresh = e.pool == "host" or e.block not in self.cached
            self.check(fresh or e.block in self.hit.get(e.seq, ()), e, "its old KV is cached")
            self.take(e.seq, e.pool, e.logical_index, e.block)
        elif isinstance(e, Incref):
            before = R[e.pool][e.block]
            self.check(before > 0 and e.refcount == before + 1, e, f"R was {before}")
            self.take(e.seq, e.pool, e.logical_index, e.block)
        elif isinstance(e, (Free, Decref)):
            after = R[e.pool][e.block] - 1
            said = 0 if isinstance(e, Free) else e.refcount
            self.check(after == said, e, f"R becomes {after}")
            R[e.pool][e.block] = after
            pool, blocks = self.tables.get(e.seq, (e.pool, []))
            if e.block in blocks and pool == e.pool:  # a release (not a CoW's decref)
                blocks.reverse()
                blocks.remove(e.block)  # tables release their last block first
                blocks.reverse()
                if not blocks:
                    del self.tables[e.seq]
        elif isinstance(e, Fork):
            parent = self.tables.get(e.parent, ("", []))
            self.check(parent == ("device", list(e.blocks)), e, f"T_parent is {parent}")
            self.check(e.child not in self.tables, e, f"seq {e.child} already has a table")
        elif isinstance(e, CowCopy):
            pool, blocks = self.tables.get(e.seq, ("", []))
            self.check(blocks[e.logical_index : e.logical_index + 1] == [e.src], e, "T_r[j]")
            self.check(R["device"][e.src] == e.refcount_before, e, f"R = {R['device'][e.src]}")
            others = self.holders("device", e.src) - {e.seq}
            self.check(set(e.shared_with) == others, e, f"held by {sorted(others)}")
            self.check(R["device"][e.dst] == 0 and e.dst not in self.cached, e, "dst not free")
            R["device"][e.dst] = 1
            blocks[e.logical_index] = e.dst
        elif isinstance(e, (SwapOut, SwapIn)):
            src, dst = ("device", "host") if isinstance(e, SwapOut) else ("host", "device")
            old = [a for a, _ in e.mapping]
            self.check(self.tables.get(e.seq) == (src, old), e, f"T_r is {self.tables.get(e.seq)}")
            for a, b in e.mapping:
                R[src][a] -= 1
                R[dst][b] += 1
            self.tables[e.seq] = (dst, [b for _, b in e.mapping])
        elif isinstance(e, PrefixInsert):
            held = self.tables.get(e.seq, ("", []))[1]
            self.check(set(e.blocks) <= set(held), e, f"T_r is {held}")
            self.check(not set(e.blocks) & self.cached, e, "already cached")
            self.cached |= set(e.blocks)
        elif isinstance(e, PrefixEvict):
            self.check(e.block in self.cached, e, "not cached")
            self.check(R["device"][e.block] == 0, e, f"R = {R['device'][e.block]}")
            self.cached.discard(e.block)
        elif isinstance(e, Recompute):
            self.check(e.seq not in self.tables, e, f"seq {e.seq} still holds its blocks")

    def take(self, seq: int, pool: str, j: int, block: int) -> None:
        self.refcounts[pool][block] += 1
        _, blocks = self.tables.setdefault(seq, (pool, []))
        if j == len(blocks):
            blocks.append(block)
        else:
            raise Untrue(f"seq {seq} takes block {block} as logical block {j} of {blocks}")

    def equals(self, state: BlockState) -> bool:
        return Replay.of(state).tables == self.tables and (
            Replay.of(state).refcounts,
            set(state.cached),
        ) == (self.refcounts, self.cached)


def replay(steps, shown) -> None:
    """Replay each step's events in the order ``shown`` gives, from the step before's state."""
    before = None
    for step in steps:
        model = Replay.of(before) if before else Replay(step.state.block_size)
        if before is None:  # step 1 starts from empty pools of the snapshot's sizes
            model.refcounts = {
                "device": [0] * len(step.state.device_refcounts),
                "host": [0] * len(step.state.host_refcounts),
            }
        for event in shown(step.events):
            try:
                model.apply(event)
            except Untrue as untrue:
                raise Untrue(f"step {step.step}: {untrue}") from None
        assert model.equals(step.state), f"step {step.step}: the events do not add up"
        before = step.state


def shown_by_the_log(events):
    return [event for line in fold(in_story_order(events)) for event in line.events]


@pytest.fixture(scope="module")
def runs():
    out = {}
    for name, scenario in SCENARIOS.items():
        if name == "custom":
            continue
        engine = scenario.build()
        out[name] = [engine.step() for _ in range(STEPS) if engine.has_unfinished()]
    return out


@needs_model
def test_every_narration_in_every_scenario_is_true_in_the_order_the_log_shows_it(runs):
    for name, steps in runs.items():
        try:
            replay(steps, shown_by_the_log)
        except AssertionError as error:
            raise AssertionError(f"scenario {name}: {error}") from None


@needs_model
def test_the_engine_records_a_prefix_hit_before_the_blocks_it_gives(runs):
    """The engine's own order, which a trace keeps and any reader of ``step.events`` sees."""
    replay(runs["tour"], list)
    replay(runs["prefix"], list)


def test_a_hit_narrated_after_the_blocks_it_explains_is_caught():
    """The bug the tour showed at step 34: blocks 0-2 taken, then 'found cached in [0,1,2]'."""
    model = Replay(4, refcounts={"device": [0] * 4, "host": []}, cached={0, 1})
    with pytest.raises(Untrue, match="its old KV is cached"):
        model.apply(Alloc(1, 0, 0))
    model = Replay(4, refcounts={"device": [0] * 4, "host": []}, cached={0, 1})
    model.apply(PrefixHit(1, (0, 1), 8))
    model.apply(Alloc(1, 0, 0))
    with pytest.raises(Untrue, match="already holds"):
        model.apply(PrefixHit(1, (0, 1), 8))


def test_a_copy_on_write_that_names_the_wrong_sharer_is_caught():
    model = Replay(4, refcounts={"device": [3, 0], "host": []})
    model.tables = {0: ("device", [0]), 1: ("device", [0]), 2: ("device", [0])}
    with pytest.raises(Untrue, match=r"held by \[1, 2\]"):
        model.apply(CowCopy(0, 2, 0, 0, 1, 2, 3, (1,)))


def test_blocks_a_hit_takes_back_are_told_as_cached_and_a_recompute_counts_only_what_it_computes():
    events = [
        Recompute(1, 45),
        PrefixHit(1, (0, 1, 2), 12),
        Alloc(1, 0, 0),
        Alloc(1, 1, 1),
        Alloc(1, 2, 2),
        Alloc(1, 3, 5),
    ]
    lines = fold(in_story_order(events))
    assert [len(line.events) for line in lines] == [1, 1, 3, 1]
    assert "33 of its 45 tokens are prefilled again" in lines[0].text()
    assert lines[2].text().startswith("seq 1 takes back 3 cached block(s) nobody held: 0, 1, 2")
    assert lines[3].text() == Alloc(1, 3, 5).narrate()


def test_a_finish_headline_counts_only_the_blocks_the_finished_sequences_free():
    from minipaged.events import Finish, Free, Preempt
    from minipaged.outputs import StepOutput

    events = (Finish(0, "length", 9), Free(0, 3), Free(0, 4), Preempt("1", (1,), "recompute"))
    events += (Free(1, 5),)
    out = StepOutput(7, {}, events, None, {}, {}, (), 0, 1)
    assert "finish: s0, 2 blocks freed" in headline(out)
