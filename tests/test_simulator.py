"""The model-free simulator and its workloads: reproducible, exact on hand-counted cases, and
true to each allocator's guarantees at scale."""

import contextlib
import io
from fractions import Fraction
from pathlib import Path

import pytest

from minipaged import cli, memory
from minipaged.study.baselines import OrcaAllocator, PagedAllocator, StaticAllocator
from minipaged.study.bench.memory import kv_budget_bytes, make_allocators
from minipaged.study.bench.sharing import count_blocks
from minipaged.study.simulator import Simulation, simulate
from minipaged.study.workloads import Request, make_workload

LLAMA_8B = memory.PRESETS["llama-3-8b"]


def savings(requests: list[Request], num_blocks: int = 64) -> Fraction:
    """1 - (blocks in use) / (blocks the tables span), summed over every step, as a fraction."""
    alloc = PagedAllocator(num_blocks, block_size=16)
    result = Simulation(alloc, requests).run()
    return Fraction(result.shared / (result.reserved + result.shared)).limit_denominator(1000)


def test_parallel_sampling_savings_equal_a_hand_count_for_full_prompt_blocks():
    # Prompt of 32 = two full blocks, shared by both samples. Each sample's token 33 opens a
    # block of its own: 4 blocks in use, 6 if nothing were shared, until both finish at 48.
    assert savings([Request(32, (16, 16))]) == Fraction(1, 3)


def test_parallel_sampling_savings_equal_a_hand_count_with_a_partial_prompt_block():
    # Prompt of 20: block 0 full, block 1 holds 4 tokens. The first sample to write copies
    # block 1 (copy-on-write); the second then owns it alone: 3 blocks in use against 4.
    assert savings([Request(20, (12, 12))]) == Fraction(1, 4)


def test_sharing_bench_counts_no_savings_without_forks():
    counted = count_blocks("alpaca", 4, n=1)
    assert counted["savings"] == 0
    assert counted["with_cow"] == counted["without_cow"]


def test_simulation_is_reproducible_with_a_seed():
    def run(seed: int) -> list[dict]:
        requests = make_workload("alpaca", 20, beam_width=3, seed=seed)
        budget = kv_budget_bytes(20, 16)
        allocators = make_allocators(LLAMA_8B, budget, page_kb=(64,))
        return [r.as_dict() for r in simulate(allocators, requests, seed=seed)]

    assert run(seed=1) == run(seed=1)
    assert run(seed=1) != run(seed=2)


def test_workloads_are_seeded_and_within_bounds():
    a = make_workload("enterprise", 200, n=3, seed=7)
    assert a == make_workload("enterprise", 200, n=3, seed=7)
    assert all(500 <= r.prompt_len <= 1000 and len(r.output_lens) == 3 for r in a)
    assert all(out >= 1 and r.prompt_len + out <= r.max_len for r in a for out in r.output_lens)
    # n adds samples without changing the first: rows for n = 2, 4, 6 compare the same requests.
    first = [(r.prompt_len, r.output_lens[0]) for r in make_workload("enterprise", 200, seed=7)]
    assert first == [(r.prompt_len, r.output_lens[0]) for r in a]
    beams = make_workload("chat", 50, beam_width=4, seed=7)
    assert all(r.beam and len(set(r.output_lens)) == 1 for r in beams)


def test_every_allocator_ends_empty_and_only_contiguous_ones_stall():
    requests = make_workload("enterprise", 60, seed=0)
    allocators = make_allocators(LLAMA_8B, kv_budget_bytes(20, 16), page_kb=(64, 2048))
    results = {r.allocator: r for r in simulate(allocators, requests)}
    for alloc in allocators:
        assert alloc.reserved == 0, f"{alloc.name} leaked"
    for name in ("static", "paged B=16", "vattention 64 KB pages", "vattention 2048 KB pages"):
        assert results[name].stalls == 0 and results[name].external == 0
    # Orca (Max) reserves L_max like static allocation, and so behaves exactly like it.
    assert {**results["orca (max)"].as_dict(), "allocator": "static"} == results["static"].as_dict()
    assert results["text's orca ΔL=256"].stalls > 0 and results["text's orca ΔL=256"].external > 0
    assert results["static"].preemptions == 0  # it reserved L_max up front
    assert results["paged B=16"].unused_per_seq == pytest.approx(7.5, abs=0.25)


def test_static_internal_waste_is_lmax_minus_the_final_length():
    # One request alone: from the first decode step its buffer holds L_max = 1,000 slots,
    # of which 1,000 - 110 are never written (internal) and the rest written later.
    alloc = StaticAllocator(capacity=1000)
    result = Simulation(alloc, [Request(100, (10,), max_len=1000)]).run()
    assert result.measured == "all"
    # Steps 1-9 hold the buffer; step 10 writes the last token and releases it.
    assert result.internal == pytest.approx(9 * 890 / (10 * 1000))
    assert result.reservation == pytest.approx(sum(110 - (100 + s) for s in range(1, 10)) / 10e3)


def test_preempted_requests_are_recomputed_and_all_finish():
    requests = make_workload("enterprise", 30, n=2, seed=3)
    alloc = PagedAllocator(num_blocks=300, block_size=16)  # room for about four requests
    result = Simulation(alloc, requests).run()
    assert result.preemptions > 0
    assert alloc.reserved == 0 and not alloc.manager.tables


def test_a_request_larger_than_the_cache_is_reported():
    with pytest.raises(ValueError, match="does not fit the empty KV cache"):
        Simulation(StaticAllocator(capacity=4096), [Request(10, (10,))]).run()


def test_a_request_that_cannot_grow_even_alone_is_reported_instead_of_retried_forever():
    # Four beams of up to 512 tokens need all 2,048 slots; Orca's contiguous buffers, grown
    # 64 slots at a time, find no hole to grow into at 448 tokens, even alone in the cache.
    requests = make_workload("chat", 10, seed=0, max_len=512, beam_width=4)
    with pytest.raises(ValueError, match="cannot grow even alone in the KV cache of 2048 slots"):
        Simulation(OrcaAllocator(2048, delta=64), requests).run()


def test_kv_budget_needs_room_beside_the_weights():
    assert kv_budget_bytes(80, 16) == 64 * 10**9
    with pytest.raises(ValueError, match="no room for a KV cache"):
        kv_budget_bytes(80, 140)


GOLDEN = Path(__file__).parent / "golden"
SIMULATE_RUNS = {
    "beam4": ["--requests", "60", "--beam-width", "4"],
    "n3-chat": ["--requests", "60", "--n", "3", "--workload", "chat"],
}


@pytest.mark.parametrize("output", ["txt", "json"])
@pytest.mark.parametrize("name", SIMULATE_RUNS)
def test_simulate_prints_byte_for_byte_what_it_printed_before_the_fast_manager_moved(
    name, output, monkeypatch
):
    """``tests/golden`` holds what ``minipaged simulate`` printed (at 160 columns) when the
    simulator's shortcuts still lived in the core block manager; moving them to
    ``minipaged.study.fast_manager`` must change no byte, table or JSON."""
    monkeypatch.setenv("COLUMNS", "160")
    argv = ["simulate", *SIMULATE_RUNS[name], *(["--json"] if output == "json" else [])]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(argv) == 0
    assert printed.getvalue() == (GOLDEN / f"simulate-{name}.{output}").read_text()
