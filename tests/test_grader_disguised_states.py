"""Exercise 06's states as grading shows them (``broken_states.disguise``): each hand-built
broken state still breaks its rule alone, each state of a random program breaks the rules it
broke, and none is the state a student's property could build, or store, and look up."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from hypothesis.stateful import invariant

from minipaged import invariants
from minipaged.block_manager import BlockManager
from minipaged.grader import bug_zoo
from minipaged.grader.broken_states import BROKEN_STATES, disguise, disguised, preset
from minipaged.grader.ex06_invariants import CRITERIA, _manager_in, reference_problems
from minipaged.grader.grading import run_criteria
from minipaged.grader.properties import (
    BlockManagerMachine,
    BlockManagerProgram,
    SimulatedKV,
    run_programs,
)
from minipaged.grader.report import FAIL
from minipaged.grader.student import Student


def _broken_rules(manager, kv, last_write) -> set[int]:
    machine = BlockManagerMachine()
    machine.see(manager, kv, last_write)

    def fails(method) -> bool:
        try:
            method()
        except AssertionError:
            return True
        return False

    broken = {
        1: bool(invariants.refcounts_match_tables(manager.snapshot())),
        2: bool(invariants.free_iff_unreferenced(manager.snapshot())),
        3: fails(machine.writes_land_in_private_blocks),
        4: fails(machine.every_sequence_reads_back_its_own_tokens),
        5: fails(machine.after_all_freed),
    }
    return {rule for rule, failed in broken.items() if failed}


def _seen(manager, kv, last_write) -> str:
    """A state as a property's lookup would print it: everything it can read."""
    slots = {pool: sorted(kv.slots[pool].items()) for pool in ("device", "host")}
    return repr((manager.snapshot(), slots, sorted(kv.written.items()), last_write))


@pytest.mark.parametrize("state", BROKEN_STATES, ids=lambda s: s.name)
def test_a_disguised_state_breaks_its_rule_alone_and_is_never_the_state_itself(state):
    """The reference properties find the rule ``state`` breaks, and only it (rule 5's states
    break rule 1 or 2 too, and hold no table), in every disguise; no disguise prints as the
    state ``state.build()`` makes, so a property that looks states up finds none of them."""
    plain = _seen(*state.build())
    for seed in range(20):
        manager, kv, last_write = disguised(state, random.Random(seed))
        broken = _broken_rules(manager, kv, last_write)
        if state.rule == 5:
            assert 5 in broken and not manager.tables
        else:
            assert broken - {5} == {state.rule}, seed
        for name in ("one pool per table", "M = ceil(L / B)"):
            assert invariants.check(manager)[name] == []
        assert _seen(manager, kv, last_write) != plain


class _Broken(Exception):
    """A program reached a state that breaks a rule: recording stops there."""


def _reached(manager_class: type, examples: int) -> list[tuple]:
    """Every state the random programs reach against ``manager_class``, as a property is shown
    it: (manager, kv, last_write, end), each a copy, up to the first that breaks a rule. A
    broken manager's crash ends its programs too; the states before it are kept."""
    states = []

    class Recorder(BlockManagerProgram):
        def _keep(self, end: bool) -> None:
            kv = SimulatedKV(self.kv.block_size)
            kv.slots = {pool: dict(slots) for pool, slots in self.kv.slots.items()}
            kv.written = {seq: list(tokens) for seq, tokens in self.kv.written.items()}
            state = self.manager.snapshot()
            states.append((_manager_in(state), kv, self.last_write, end))
            if reference_problems(state, kv, self.last_write, end):
                raise _Broken

        @invariant()
        def keep(self):
            self._keep(end=False)

        def after_all_freed(self):
            self._keep(end=True)

    try:
        run_programs(Recorder, manager_class, max_examples=examples, shrink=False)
    except Exception:  # _Broken, or a zoo member's crash
        assert states
    return states


def _verdicts(manager, kv, last_write, end: bool) -> tuple:
    """Which of the five rules a state breaks as it is judged (rule 5 at a program's end, the
    others elsewhere), and which of the library's invariants."""
    rules = _broken_rules(manager, kv, last_write)
    found = invariants.check(manager.snapshot())
    return rules & {5} if end else rules - {5}, {name for name, p in found.items() if p}


@pytest.mark.parametrize(
    "manager_class",
    (BlockManager, bug_zoo.LeakOnFree, bug_zoo.DoubleFree, bug_zoo.StaleTableAfterSwap),
    ids=lambda m: m.__name__,
)
def test_a_program_state_in_disguise_breaks_what_it_broke_and_prints_as_no_stored_state(
    manager_class,
):
    """Every state of the programs' first examples against the library, and a zoo member's up
    to its first broken state, breaks the same rules and library invariants in a disguise as
    it does plainly, and prints otherwise."""
    rng, broken = random.Random(6), 0
    examples = 4 if manager_class is BlockManager else 100  # a member's first broken state
    for manager, kv, last_write, end in _reached(manager_class, examples):
        hidden, seen, written_at = disguise(manager, kv, last_write, rng, end=end)
        plain = _verdicts(manager, kv, last_write, end)
        assert _verdicts(hidden, seen, written_at, end) == plain
        assert not end or not hidden.tables
        assert _seen(hidden, seen, written_at) != _seen(manager, kv, last_write)
        broken += plain != (set(), set())
    assert (broken > 0) == (manager_class is not BlockManager)


def test_a_block_id_outside_its_pool_stays_outside_and_names_no_added_block():
    """A broken manager's table can hold an id its pool lacks (a host id kept after a swap
    in): in a disguise it is still outside the pool, not one of the blocks added."""
    manager, kv, last_write = preset({0: ([0, 4], 3, "device")}, device=([1, 0, 0], [1, 2]))
    for seed in range(20):
        hidden, seen, written_at = disguise(manager, kv, last_write, random.Random(seed))
        outside = hidden.tables[0].blocks[1]
        assert outside >= hidden.device.num_blocks
        assert _verdicts(hidden, seen, written_at, False) == _verdicts(manager, kv, None, False)


def test_properties_that_look_up_the_librarys_states_catch_no_member():
    """The programs are derandomized, so the states they reach against the library are public:
    properties that failed on any state missing from a stored set of them raised no false
    alarm and caught every zoo member (whose programs leave the set at a broken state),
    checking nothing. Shown each state in a disguise, they fail on the first: a false alarm."""
    stored = {_seen(m, kv, w) for m, kv, w, _ in _reached(BlockManager, examples=LOOKED_UP)}

    class LookedUp(BlockManagerProgram):
        @invariant()
        def a_state_the_library_reaches(self):
            assert _seen(self.manager, self.kv, self.last_write) in stored, "not the library's"

        def after_all_freed(self):
            self.a_state_the_library_reaches()

    looked_up = Student({"properties": SimpleNamespace(BlockManagerMachine=LookedUp)})
    members = [c for c in CRITERIA if c.name in ("catches_LeakOnFree", "catches_DoubleFree")]
    for result in run_criteria(members, looked_up):
        assert result.outcome == FAIL, result
        assert "FalseAlarm" in result.message and "not the library's" in result.message


LOOKED_UP = 10
"""Programs whose states the lookup stores: enough for LeakOnFree's and DoubleFree's to leave
them at a broken state, and for the lookup to catch both where its states are shown plainly."""
