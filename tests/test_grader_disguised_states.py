"""Exercise 06's states as grading shows them (``disguise.disguise``): each hand-built
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
from minipaged.grader.broken_states import BROKEN_STATES, preset
from minipaged.grader.disguise import disguise, disguised
from minipaged.grader.ex06_invariants import CRITERIA, RULES, _manager_in, reference_problems
from minipaged.grader.grading import run_criteria
from minipaged.grader.properties import (
    BlockManagerMachine,
    BlockManagerProgram,
    SimulatedKV,
    run_programs,
)
from minipaged.grader.report import FAIL, PASS
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


def _graded(machine: type) -> dict:
    """Every criterion of exercise 06 run on properties ``machine``, by name."""
    student = Student({"properties": SimpleNamespace(BlockManagerMachine=machine)})
    return {result.name: result for result in run_criteria(CRITERIA, student)}


RULE_CRITERIA = [f"rule_{rule}_on_its_own" for rule in RULES]


def _looking_up(stored: set[str], said: str) -> type:
    """Properties that check no rule: they fail, saying ``said``, on every state whose print
    (``_seen``) is not in ``stored``."""

    class LookedUp(BlockManagerProgram):
        @invariant()
        def a_stored_state(self):
            assert _seen(self.manager, self.kv, self.last_write) in stored, said

        def after_all_freed(self):
            self.a_stored_state()

    return LookedUp


def test_properties_that_look_up_the_librarys_states_score_nothing():
    """The programs are derandomized, so the states they reach against the library are public:
    properties that failed on any state missing from a stored set of them raised no false
    alarm and caught every zoo member (whose programs leave the set at a broken state), and
    failed on every hand-built broken state, checking nothing. Shown each state in a disguise,
    they fail on the first, and on the sound states the broken ones were made from: false
    alarms, every one."""
    stored = {_seen(m, kv, w) for m, kv, w, _ in _reached(BlockManager, examples=LOOKED_UP)}

    results = _graded(_looking_up(stored, "not the library's"))
    assert [r for r in results.values() if r.outcome != FAIL] == []
    for member in ("catches_LeakOnFree", "catches_DoubleFree"):
        said = results[member].message
        assert "false alarm, not a catch" in said and "not the library's" in said
    for name in RULE_CRITERIA:
        said = results[name].message
        assert "a false alarm" in said and " repaired, " in said and "not the library's" in said


LOOKED_UP = 10
"""Programs whose states the lookup stores: enough for LeakOnFree's and DoubleFree's to leave
them at a broken state, and for the lookup to catch both where its states are shown plainly."""


def test_properties_that_fail_on_every_state_score_nothing():
    """An ``assert False`` in every property fails on each hand-built broken state, and once
    passed all five rule criteria (45 points) so: each now fails as a false alarm on the sound
    state its broken ones were made from, named in the message."""

    class AlwaysFails(BlockManagerProgram):
        @invariant()
        def nothing_holds(self):
            raise AssertionError("nothing holds")

        def after_all_freed(self):
            raise AssertionError("nothing is freed")

    results = _graded(AlwaysFails)
    assert [r for r in results.values() if r.outcome != FAIL] == []
    for name in RULE_CRITERIA:
        said = results[name].message
        assert said.startswith(f"a false alarm: on a sound state made like rule {name[5]}")
        assert all(f"{s.name} repaired" in said for s in BROKEN_STATES if f"_{s.rule}_" in name)


def test_properties_that_know_the_hand_built_sound_states_score_no_rule():
    """The sound states are as public as the broken ones: properties that held on exactly the
    states ``BrokenState.sound`` builds, and failed elsewhere, would pass every rule criterion
    were the sound states shown as built. Shown disguised, they are false alarms."""
    known = {_seen(*state.sound()) for state in BROKEN_STATES}

    results = _graded(_looking_up(known, "not a sound one"))
    for name in RULE_CRITERIA:
        assert results[name].outcome == FAIL and "a false alarm" in results[name].message


@pytest.mark.parametrize("state", BROKEN_STATES, ids=lambda s: s.name)
def test_a_sound_state_breaks_no_rule_in_any_disguise_and_is_made_like_its_broken_one(state):
    """``state.sound()`` holds the same sequences, pools and pool sizes as ``state.build()``,
    so no property tells the two apart but by the rule; disguised, it breaks no rule."""
    (broken, _, _), (sound, _, _) = state.build(), state.sound()
    shape = [
        (
            {seq: (t.pool, t.num_tokens) for seq, t in m.snapshot().tables.items()},
            len(m.snapshot().device_refcounts),
            len(m.snapshot().host_refcounts),
        )
        for m in (broken, sound)
    ]
    assert shape[0] == shape[1]
    for seed in range(20):
        manager, kv, last_write = disguised(state, random.Random(seed), sound=True)
        end = state.rule == 5
        assert reference_problems(manager.snapshot(), kv, last_write, end) == [], seed
        assert _broken_rules(manager, kv, last_write) - ({5} if not end else set()) == set()


def test_a_false_alarm_is_not_hidden_by_a_leak_found_at_the_programs_end():
    """A property that fails on a sound state ends the program with a false alarm, but
    hypothesis still runs the program's teardown, whose ``after_all_freed`` then found
    LeakOnFree's real leak: that verdict replaced the alarm, and the criterion passed (a lookup
    of the library's states did so about one grading in five). Any alarm now decides."""

    class SeqZeroNeverRuns(BlockManagerProgram):
        @invariant()
        def no_seq_0(self):  # wrong: the first sequence a program allocates is seq 0
            assert 0 not in self.manager.snapshot().tables, "seq 0 is here"

        after_all_freed = BlockManagerMachine.after_all_freed  # right

    result = _graded(SeqZeroNeverRuns)["catches_LeakOnFree"]
    assert result.outcome == FAIL
    assert "false alarm, not a catch" in result.message and "seq 0 is here" in result.message


def test_a_program_ends_at_its_first_failed_assert_and_its_teardown_judges_nothing():
    """Hypothesis runs a program's teardown after the assert that ended it: there the freed
    state of MissingCow breaks no rule, and an ``after_all_freed`` that fails on it (here, only
    after a catch) must not turn the catch before it into a false alarm."""

    class CatchesThenFailsAtTheEnd(BlockManagerProgram):
        caught = False  # the last state failed; a class's: each verdict has a new machine

        @invariant()
        def the_reference_properties(self):
            try:
                BlockManagerMachine.block_state_invariants_hold(self)
                BlockManagerMachine.writes_land_in_private_blocks(self)
                BlockManagerMachine.every_sequence_reads_back_its_own_tokens(self)
            except AssertionError:
                type(self).caught = True
                raise
            type(self).caught = False  # a new program's states

        def after_all_freed(self):
            if type(self).caught:
                raise AssertionError("after a catch")
            BlockManagerMachine.after_all_freed(self)

    results = _graded(CatchesThenFailsAtTheEnd)
    for member in ("catches_MissingCow", "catches_LostCowCopy"):
        assert results[member].outcome == PASS, results[member].message


def test_a_refcount_below_zero_once_all_is_freed_is_a_catch_not_a_false_alarm():
    """DoubleFree's forks forget R[p]'s increment, so freeing both tables drives R[p] below 0
    while the free list looks whole: an ``after_all_freed`` that asks R[p] = 0 of every block
    catches it (rule 1 holds at the end too)."""

    class OnlyAtTheEnd(BlockManagerProgram):
        def after_all_freed(self):
            state = self.manager.snapshot()
            counts = state.device_refcounts + state.host_refcounts
            assert all(r == 0 for r in counts), f"R = {counts} once all is freed"

    result = _graded(OnlyAtTheEnd)["catches_DoubleFree"]
    assert result.outcome == PASS, result.message
