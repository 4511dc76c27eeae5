"""Checks for exercise 13: the three wastes of a recorded run (source text §2 and §3).

Part 1, the student's ``memory.py``: the four waste formulas of ``minipaged.memory``. Part 2,
their ``recorded_waste.py``: those formulas applied, step by step, to a run the engine
recorded (``minipaged.study.recorded_waste``). Expected values come from the library and are
cross-checked here against what the simulator's allocators (``minipaged.study.baselines``)
span for the same lengths, and against the block tables the engine itself recorded.

The runs measured are ``minipaged.grader.ex13_runs``'s.
"""

from __future__ import annotations

import math
from dataclasses import replace

from minipaged.grader.ex01_block_table import LARGE_T, expect_integer_division
from minipaged.grader.ex13_runs import (
    LEAVE_AS_ONE_ARRIVES,
    NEWCOMERS_IN_A_SET,
    NEWCOMERS_LISTED_OUT_OF_ORDER,
    STALL_CAPACITY,
    for_generated_runs,
    recorded,
    slot_run,
)
from minipaged.grader.report import CheckFailed, Criterion, expect
from minipaged.study import recorded_waste as library
from minipaged.study.baselines import OrcaAllocator, PagedAllocator, StaticAllocator
from minipaged.study.orca_baselines import OrcaReservationAllocator
from minipaged.study.recorded_waste import RecordedRun


def _series(got, run: RecordedRun, call: str) -> list:
    """``got`` as a list with one entry per step, or a failure that says what to return."""
    if not isinstance(got, list | tuple) or len(got) != len(run.lengths):
        raise CheckFailed(
            f"{call}: expected a list with one number per step of the run "
            f"({len(run.lengths)} steps), got {got!r}"
        )
    return list(got)


def _first_wrong_step(got: list, expected: list, run: RecordedRun, call: str, rule: str):
    """Fail at the first step where ``got`` differs, naming the step's lengths and the rule."""
    for k, (mine, right) in enumerate(zip(got, expected, strict=True)):
        if mine != right:
            live, final = dict(sorted(run.lengths[k].items())), run.final_lengths
            raise CheckFailed(
                f"{call}, step {k} (live sequences and their l_i: {live}; their L_i: "
                f"{ {s: final[s] for s in live} }): expected {right} slots, got "
                f"{mine}. The rule: {rule}"
            )


# -- part 1: the formulas (memory.py) --------------------------------------------------------


def check_paged_internal_waste(student):
    """paged_internal_waste(L, B) is ceil(L / B) * B - L token slots: the last block's empty ones"""
    waste = student.memory.paged_internal_waste
    expect(waste(500, 16), 12, "§3: paged_internal_waste(L=500, B=16), 32 blocks of 16")
    for block_size in (1, 3, 4, 16):
        for length in [*range(1, 3 * block_size + 2), 0]:  # L = 0 last: it holds no block
            expected = -(-length // block_size) * block_size - length
            got = waste(length, block_size)
            call = f"paged_internal_waste(L={length}, B={block_size})"
            if got == block_size - length % block_size != expected:
                raise CheckFailed(
                    f"{call}: got {got}, B - (L mod B): a sequence that fills its last block "
                    f"exactly wastes nothing; expected {expected} = ceil(L/B)*B - L"
                )
            if got == -(-length // block_size) - length / block_size != expected:
                raise CheckFailed(
                    f"{call}: got {got}, counted in blocks; waste counts token slots, "
                    f"expected {expected} = ceil(L/B)*B - L"
                )
            expect(got, expected, f"{call}, the rule ceil(L/B)*B - L")
    _integer_ceiling(waste, "paged_internal_waste(L", "B")


def _integer_ceiling(waste, call: str, unit: str) -> None:
    """``waste(2**60 + 1, 16)``, ceil(x/16)*16 - x = 15, against float division's -1: past 2**53
    a float quotient rounds, so math.ceil(x / 16) is 2**56, one block short."""
    x = LARGE_T + 2
    rounded = math.ceil(x / 16) * 16 - x
    what = f"{call}=2**60 + 1, {unit}=16)"
    expect_integer_division(waste(x, 16), -(-x // 16) * 16 - x, rounded, what)


def check_static_internal_waste(student):
    """static_internal_waste(L, L_max) is L_max - L; a sequence longer than L_max is a ValueError"""
    waste = student.memory.static_internal_waste
    expect(waste(700, 8192), 7492, "§2: static_internal_waste(L=700, L_max=8192)")
    for length, max_length in [(1, 64), (63, 64), (64, 64), (1, 1), (0, 5)]:
        call = f"static_internal_waste(L={length}, L_max={max_length})"
        try:
            got = waste(length, max_length)
        except ValueError as error:
            raise CheckFailed(
                f"{call} raised ValueError ({error}): a sequence of at most L_max tokens fits "
                "its buffer; refuse only L > L_max"
            ) from None
        expect(got, max_length - length, f"{call}, the rule L_max - L")
    try:
        got = waste(65, 64)
    except ValueError:
        return
    raise CheckFailed(
        f"static_internal_waste(L=65, L_max=64) returned {got!r}: no buffer of L_max = 64 "
        "slots holds 65 tokens, so it must raise a ValueError"
    )


def check_reservation_waste(student):
    """reservation_waste(t, ΔL) is ceil(t / ΔL) * ΔL - t: slots reserved ahead of step t"""
    waste = student.memory.reservation_waste
    expect(waste(200, 256), 56, "§2: reservation_waste(t=200, ΔL=256)")
    for delta in (1, 3, 8, 256):
        for t in sorted({1, 2, delta - 1, delta, delta + 1, 2 * delta, 2 * delta + 1} - {0}):
            expected = -(-t // delta) * delta - t
            got = waste(t, delta)
            call = f"reservation_waste(t={t}, ΔL={delta})"
            if got == t % delta != expected:
                raise CheckFailed(
                    f"{call}: got {got}, t mod ΔL, the tokens already in the last chunk; the "
                    f"reservation is the chunk's empty end, expected {expected} = "
                    "ceil(t/ΔL)*ΔL - t"
                )
            expect(got, expected, f"{call}, the rule ceil(t/ΔL)*ΔL - t")
    _integer_ceiling(waste, "reservation_waste(t", "ΔL")


def check_external_fragmentation_stalls(student):
    """external_fragmentation_stalls(c, C_req) is True iff max c(m_j) < C_req <= sum c(m_j)"""
    stalls = student.memory.external_fragmentation_stalls
    for segments, request, expected, why in [
        ([300, 200, 500], 600, True, "1,000 free, no hole holds 600"),
        ([300, 200, 500], 400, False, "the hole of 500 holds 400"),
        ([300, 200, 500], 500, False, "the hole of 500 holds 500 exactly"),
        ([300, 200, 500], 1000, True, "exactly enough in total, in pieces"),
        ([300, 200, 500], 1001, False, "not enough in total: out of memory, not fragmentation"),
        ([4, 4], 6, True, "two runs of 4 free blocks, a request of 6"),
        ([7], 7, False, "one hole, exactly large enough"),
        ([], 1, False, "nothing free: out of memory, not fragmentation"),
    ]:
        expect(
            stalls(segments, request),
            expected,
            f"external_fragmentation_stalls({segments}, request={request}) ({why}); the rule "
            "max_j c(m_j) < C_req <= sum_j c(m_j)",
        )


# -- part 2: a recorded run (recorded_waste.py) ----------------------------------------------


def _spans_minus(spans: list[dict[int, int]], values: list[dict[int, int]]) -> list[int]:
    """Per step, the sum over sequences of ``spans - values``."""
    return [sum(s[q] - v[q] for q in s) for s, v in zip(spans, values, strict=True)]


def _paged_one(student, run: RecordedRun, name: str) -> None:
    call = f"paged_waste({name}, B={run.block_size})"
    got = _series(student.recorded_waste.paged_waste(run), run, call)
    expected = library.table_waste(run)
    per_sequence = -(-run.max_length // run.block_size)  # blocks: enough for every one at once
    roomy = PagedAllocator(len(run.final_lengths) * per_sequence, run.block_size)
    simulated = _spans_minus(library.replay(run, roomy), list(run.lengths))
    assert expected == simulated == library.paged_waste(run), "the library disagrees"
    blocks = [sum(-(-n // run.block_size) for n in ls.values()) for ls in run.lengths]
    if got == blocks != expected:
        raise CheckFailed(f"{call}: got {got}, the blocks in use; waste counts token slots")
    _first_wrong_step(
        got,
        expected,
        run,
        call,
        "each live sequence wastes ceil(l_i/B)*B - l_i slots, the empty end of its last "
        "block (§3): what the engine's block tables held empty, and what the simulator's "
        "paged allocator spans for the same lengths",
    )


def check_paged_waste_of_a_recorded_run(student):
    """paged_waste(run) is, at each step, the empty slots of every live sequence's last block"""
    for name in ("queued", "preempted"):
        _paged_one(student, recorded(name), f"recorded run {name!r}")
    for_generated_runs(lambda run, name: _paged_one(student, run, name))


def _static_one(student, run: RecordedRun, name: str) -> None:
    call = f"static_waste({name}, L_max={run.max_length})"
    got = _series(student.recorded_waste.static_waste(run), run, call)
    final = run.final_lengths
    spans = library.replay(run, StaticAllocator(run.max_length * len(final)))
    finals = [{s: final[s] for s in ls} for ls in run.lengths]
    expected = _spans_minus(spans, finals)
    assert expected == library.static_waste(run), "the library disagrees with the simulator"
    from_now = _spans_minus(spans, list(run.lengths))
    if got == from_now != expected:
        raise CheckFailed(
            f"{call}: got {got}, L_max - l_i from each sequence's length now; internal waste "
            "is what will never be written, L_max - L_i from its final length L_i "
            "(run.final_lengths)"
        )
    _first_wrong_step(
        got,
        expected,
        run,
        call,
        "each live sequence's buffer of L_max slots never writes L_max - L_i of them, L_i "
        "its final length (§2's internal fragmentation)",
    )


def check_static_waste_of_a_recorded_run(student):
    """static_waste(run) is, at each step, L_max - L_i summed over the live sequences"""
    for name in ("queued", "preempted"):
        _static_one(student, recorded(name), f"recorded run {name!r}")
    _static_one(student, replace(recorded("queued"), max_length=38), "'queued' at L_max = 38")
    for_generated_runs(lambda run, name: _static_one(student, run, name))


def _orca_one(student, run: RecordedRun, name: str, delta: int) -> None:
    call = f"orca_waste({name}, ΔL={delta})"
    got = _series(student.recorded_waste.orca_waste(run, delta), run, call)
    roomy = OrcaAllocator(4 * (run.max_length + delta) * len(run.final_lengths), delta)
    expected = _spans_minus(library.replay(run, roomy), list(run.lengths))
    assert expected == library.orca_waste(run, delta), "the library disagrees with the simulator"
    _first_wrong_step(
        got,
        expected,
        run,
        call,
        "a buffer grown ΔL slots at a time spans ceil(l_i/ΔL)*ΔL slots, so each live "
        "sequence has ceil(l_i/ΔL)*ΔL - l_i reserved ahead (§2's reservation fragmentation)",
    )


def check_orca_waste_of_a_recorded_run(student):
    """orca_waste(run, ΔL) is, at each step, ceil(l_i/ΔL)*ΔL - l_i summed over the live sequences"""
    for name in ("queued", "preempted"):
        for delta in (1, 4, 5, 16, 256):
            _orca_one(student, recorded(name), f"recorded run {name!r}", delta)
    for_generated_runs(lambda run, name: _orca_one(student, run, name, run.block_size + 2))


def _stalls_one(student, run: RecordedRun, name: str, sizes: dict[int, int]) -> None:
    asked = "each L_i" if sizes == run.final_lengths else sizes
    call = f"fragmentation_stalls({name}, capacity={run.capacity}, sizes={asked})"
    got = student.recorded_waste.fragmentation_stalls(run, sizes)
    if not isinstance(got, list | tuple):
        raise CheckFailed(f"{call}: expected a list of (step, sequence) pairs, got {got!r}")
    got = [tuple(pair) if isinstance(pair, list | tuple) else pair for pair in got]
    expected = library.fragmentation_stalls(run, sizes)
    if sizes == run.final_lengths:  # the simulator's Orca (oracle) reserves exactly L_i
        oracle = OrcaReservationAllocator(run.capacity, "oracle")
        library.replay(run, oracle)
        assert oracle.stalls == len(expected), "the library disagrees with the simulator"
    if got != expected:
        steps = "" if name.startswith("recorded") else f" (its steps: {list(run.lengths)})"
        raise CheckFailed(
            f"{call}{steps}: expected the stalls (step, sequence) {expected}, got {got}. The rule: "
            "at each step free the buffers of the sequences gone since the step before, then "
            "place each newcomer's buffer first fit, in order of sequence id (a sequence back "
            "from preemption is a newcomer); a refusal is a stall when max_j c(m_j) < C_req "
            "<= sum_j c(m_j) (§2)"
        )


def check_fragmentation_stalls_of_a_recorded_run(student):
    """fragmentation_stalls(run, sizes) lists the requests that find memory enough, in pieces"""
    for name, capacity in STALL_CAPACITY.items():
        run = replace(recorded(name), capacity=capacity)
        _stalls_one(student, run, f"recorded run {name!r}", run.final_lengths)
    # Holes of 3 and 2 (5 free) and a request of 4: a stall. Then a request of 6: not enough
    # in total, so no stall. A request of exactly 3 fits the first hole.
    holes = slot_run({0: 3, 1: 2, 2: 2, 3: 3}, {1: 2, 3: 3}, {1: 2, 3: 3, 4: 1}, {1: 2, 3: 3, 5: 1})
    for sizes, where in [
        ({0: 3, 1: 2, 2: 2, 3: 3, 4: 4, 5: 6}, "holes of 3 and 2 and a request of 4"),
        ({0: 3, 1: 2, 2: 2, 3: 3, 4: 3, 5: 6}, "a request of 3 fits the hole of 3 exactly"),
    ]:
        _stalls_one(student, holes, where, sizes)
    where = "sequence 2 leaves the step sequence 4 arrives, beside a hole of 2"
    _stalls_one(student, LEAVE_AS_ONE_ARRIVES, where, {0: 2, 1: 2, 2: 2, 3: 2, 4: 4})
    out_of_order = NEWCOMERS_LISTED_OUT_OF_ORDER
    where = "newcomers 5 and 4 in one step, listed 5 first: they ask in order of id"
    _stalls_one(student, out_of_order, where, out_of_order.final_lengths)
    where = "newcomers 9 and 16 in one step, gathered in a set: they ask in order of id"
    _stalls_one(student, NEWCOMERS_IN_A_SET, where, NEWCOMERS_IN_A_SET.final_lengths)
    for_generated_runs(
        lambda run, name: _stalls_one(student, run, name, run.final_lengths), draw_capacity=True
    )


CRITERIA = tuple(
    Criterion(check, on_the_library=check.__name__.endswith("_of_a_recorded_run"))
    for check in (
        check_paged_internal_waste,
        check_static_internal_waste,
        check_reservation_waste,
        check_external_fragmentation_stalls,
        check_paged_waste_of_a_recorded_run,
        check_static_waste_of_a_recorded_run,
        check_orca_waste_of_a_recorded_run,
        check_fragmentation_stalls_of_a_recorded_run,
    )
)
