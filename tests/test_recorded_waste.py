"""The three wastes of a recorded run (``minipaged.study.recorded_waste``): §2's formulas on a
run's lengths agree with what the engine's tables held and with what the simulator's allocators
span for the same lengths; bad input is refused in one line that says what to do."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged.grader.ex13_runs import EDGES, RUNS, generated_run, generated_runs, recorded
from minipaged.study import recorded_waste
from minipaged.study.baselines import OrcaAllocator, PagedAllocator, StaticAllocator
from minipaged.study.orca_baselines import OrcaReservationAllocator
from minipaged.study.recorded_waste import RecordedRun, replay


def spans_minus(spans, values) -> list[int]:
    return [sum(s[q] - v[q] for q in s) for s, v in zip(spans, values, strict=True)]


@pytest.mark.parametrize("name", ["queued", "preempted"])
def test_paged_waste_is_what_the_recorded_tables_held_and_the_simulator_spans(name):
    run = recorded(name)
    simulated = replay(run, PagedAllocator(run.capacity // run.block_size, run.block_size))
    assert recorded_waste.paged_waste(run) == recorded_waste.table_waste(run)
    assert recorded_waste.paged_waste(run) == spans_minus(simulated, run.lengths)


@pytest.mark.parametrize("name", ["queued", "preempted"])
def test_the_recorded_runs_queue_and_preempt(name):
    """What the checks promise of the shipped runs: some sequence leaves the device and comes
    back, and steps hold different sets of sequences."""
    run = recorded(name)
    returned = [
        seq
        for seq in run.final_lengths
        if any(
            seq in run.lengths[k] and seq not in run.lengths[k - 1] and k > 0
            for k in range(len(run.lengths))
        )
    ]
    assert returned, f"{name}: no sequence was preempted and came back"


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_static_and_orca_waste_are_what_the_simulators_allocators_span(rng):
    run = generated_run(rng)
    finals = [{s: run.final_lengths[s] for s in lengths} for lengths in run.lengths]
    static = replay(run, StaticAllocator(run.max_length * len(run.final_lengths)))
    assert recorded_waste.static_waste(run) == spans_minus(static, finals)
    delta = run.block_size + 1
    orca = replay(run, OrcaAllocator(4 * (run.max_length + delta) * len(run.final_lengths), delta))
    assert recorded_waste.orca_waste(run, delta) == spans_minus(orca, run.lengths)
    assert recorded_waste.orca_waste(run, run.block_size) == recorded_waste.paged_waste(run)


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_fragmentation_stalls_are_the_simulators_oracle_stalls(rng):
    run = generated_run(rng, draw_capacity=True)
    oracle = OrcaReservationAllocator(run.capacity, "oracle")
    replay(run, oracle)
    stalls = recorded_waste.fragmentation_stalls(run, run.final_lengths)
    assert len(stalls) == oracle.stalls
    assert all(run.lengths[k].keys() >= {seq} for k, seq in stalls)


def test_the_edge_run_wastes_nothing_where_a_block_is_full():
    assert recorded_waste.paged_waste(EDGES)[1] == 0  # l = B and l = L_max = 2B
    assert recorded_waste.static_waste(EDGES)[1] == 2  # sequence 0 ends at 6 of L_max = 8


def test_a_contiguous_pool_with_holes_that_add_up_stalls_a_newcomer():
    lengths = ({0: 3, 1: 2, 2: 2, 3: 3}, {1: 2, 3: 3}, {1: 2, 3: 3, 4: 1})
    run = RecordedRun(1, 10, 10, lengths, lengths)
    assert recorded_waste.fragmentation_stalls(run, {0: 3, 1: 2, 2: 2, 3: 3, 4: 4}) == [(2, 4)]
    assert recorded_waste.fragmentation_stalls(run, {0: 3, 1: 2, 2: 2, 3: 3, 4: 6}) == []
    assert recorded_waste.fragmentation_stalls(run, {0: 3, 1: 2, 2: 2, 3: 3, 4: 3}) == []


def test_from_steps_of_a_live_engine_run_reads_the_device_tables():
    from minipaged.block_manager import BlockManager
    from minipaged.outputs import StepOutput

    bm = BlockManager(num_gpu_blocks=8, block_size=4)
    bm.allocate(0, 5)
    bm.allocate(1, 4)
    run = recorded_waste.from_steps([StepOutput.empty(bm.snapshot())], max_length=16)
    assert run.lengths == ({0: 5, 1: 4},) and run.blocks == ({0: 2, 1: 1},)
    assert run.capacity == 32 and recorded_waste.paged_waste(run) == [3]


def test_a_run_that_does_not_hold_together_is_refused_in_one_line_with_the_fix():
    queued = recorded("queued")
    for change, words in [
        ({"max_length": 10}, "more than max_length (L_max) 10: raise max_length"),
        ({"blocks": ()}, "lengths has 42 steps but blocks has 0: give both for every step"),
        ({"block_size": 0}, "block_size must be a positive integer, got 0"),
        ({"blocks": ({},) * 42}, "give both for the same sequences"),
    ]:
        with pytest.raises(ValueError) as caught:
            replace(queued, **change)
        assert words in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ValueError, match=r"the buffer sequence 5 asks for\) must be a positive"):
        recorded_waste.fragmentation_stalls(queued, {seq: 8 for seq in range(5)})
    with pytest.raises(ValueError, match=r"asks for\) must be a positive integer, got 0"):
        recorded_waste.fragmentation_stalls(queued, dict.fromkeys(range(6), 0))
    with pytest.raises(ValueError, match="the run has no steps: record at least one"):
        recorded_waste.from_steps([], max_length=8)


def test_a_refused_growth_in_a_replay_says_to_give_more_capacity():
    with pytest.raises(ValueError, match=r"cannot grow sequence .* give it more capacity"):
        replay(recorded("queued"), OrcaAllocator(40, 4))


def test_the_shipped_runs_are_traces_of_the_embedded_model():
    for name in ("queued", "preempted"):
        header = json.loads((RUNS / f"{name}.jsonl").read_text().splitlines()[0])
        assert header["format"] == "minipaged-trace" and header["model"] == "tiny"
        assert header["engine"]["block_size"] == 4


def test_the_generated_runs_are_the_same_for_a_seed_and_differ_between_seeds():
    """What a failure's name promises (``generated_runs(seed=...)[i]`` makes its run again),
    and what keeps a hand-in from storing the answers to the runs a grading draws."""
    assert generated_runs(7) == generated_runs(7)
    assert generated_runs(7) != generated_runs(8)
    edges = [run for run in generated_runs(7) if run.block_size == 1 or run.max_length == 1]
    assert edges, "B = 1 and L_max = 1 come up in a set of generated runs"
