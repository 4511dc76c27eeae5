"""Exercise 06's broken states as grading shows them (``broken_states.disguised``): each still
breaks its rule alone, and none is the state a student's property could build and look up."""

from __future__ import annotations

import random

import pytest

from minipaged import invariants
from minipaged.grader.broken_states import BROKEN_STATES, disguised
from minipaged.grader.properties import BlockManagerMachine


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
