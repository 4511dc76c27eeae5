"""``bench kernels`` measures what its columns say: the streaming-read probe reads memory, not a
cache; paged ÷ in order is the cost of the shuffled block table (a paged path slowed on purpose
shows in it, and nowhere else; every timed call starts from the same caches, so no path pays
for the one before it); FP8 rows count the bytes they read; the three tables fit in a
100-column terminal; and the FP8 row decoder the CPU twins use decodes exactly as torch does.

Timings are measurements, so the only timed assertions here compare a path with a planted
twofold slowdown, or a cache with memory, where the gap is far wider than any noise."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from rich.console import Console

from minipaged import attention
from minipaged.study.bench import Options, bandwidth, cpu_clock, kernels, rounds
from minipaged.study.report import Report

QUICK = Options(quick=True)
FULL = Options()
"""A full run's options, for the rows whose timings are asserted: ``measure`` then reads
``EVICT_MULTIPLE`` last-level caches before each call, where ``QUICK`` reads
``bandwidth.QUICK_BYTES``, which a large cache holds."""


def is_identity(block_tables: torch.Tensor) -> bool:
    flat = block_tables.flatten()
    return torch.equal(flat, torch.arange(flat.numel(), dtype=flat.dtype))


def shuffled_and_slowed(*args, **kwargs):
    """A planted defect: the vectorized reference, which then, when the blocks are shuffled,
    keeps its core busy three times as long as the call took (a kernel whose paging costs 4×:
    large enough to show through a loaded machine's noise). Spinning on the thread's own CPU
    clock, the clock a one-thread row is timed by, makes it 4× on any machine: running the call
    four times did not, since the three calls after the first found the keys and values in
    the cache, and on a machine with a 480 MiB cache the plant cost 1.6×."""
    start = time.thread_time()
    output = attention.paged_attention_decode(*args, **kwargs)
    if not is_identity(args[3]):
        until = time.thread_time() + 3 * (time.thread_time() - start)
        while time.thread_time() < until:
            pass
    return output


@pytest.fixture(scope="module")
def planted_row():
    plants = {"planted": shuffled_and_slowed, "honest": attention.paged_attention_decode}
    return kernels.measure(1, 512, 16, FULL, repeats=9, kernels=plants)


def test_a_slowdown_planted_in_the_paged_path_shows_in_paged_over_in_order(planted_row):
    assert planted_row["planted_paging"] > 2.0
    assert planted_row["honest_paging"] < 2.0
    assert planted_row["planted_paging"] > 1.5 * planted_row["honest_paging"]


def test_the_planted_slowdown_leaves_the_in_order_path_alone(planted_row):
    assert planted_row["planted_in_order_ms"] < 0.5 * planted_row["planted_ms"]
    assert planted_row["honest_in_order_ms"] > 0.5 * planted_row["honest_ms"]


def test_every_kernel_runs_paged_in_order_and_fp8_on_the_same_keys_and_values():
    inputs = kernels.decode_inputs(2, 40, 16, "cpu")
    assert not is_identity(inputs.paged[3])
    assert is_identity(inputs.in_order[3])
    # Paged and in order read one pool, each block once: only the order of the reads differs.
    for paged, in_order in zip(inputs.paged[1:3], inputs.in_order[1:3], strict=True):
        assert paged is in_order
    assert sorted(inputs.paged[3].flatten().tolist()) == list(range(len(inputs.paged[1])))
    want = attention.paged_attention_decode(*inputs.paged)
    sdpa_in_order = torch.nn.functional.scaled_dot_product_attention(
        *inputs.sdpa_in_order(), enable_gqa=True
    )
    torch.testing.assert_close(
        attention.paged_attention_decode(*inputs.in_order), sdpa_in_order.squeeze(2)
    )
    fp8 = attention.paged_attention_decode(*inputs.fp8, **inputs.fp8_scales)
    assert inputs.fp8[1].element_size() == 1
    torch.testing.assert_close(fp8, want, atol=0.1, rtol=0.1)  # e4m3 keeps 3 mantissa bits
    sdpa = torch.nn.functional.scaled_dot_product_attention(*inputs.sdpa, enable_gqa=True)
    torch.testing.assert_close(sdpa.squeeze(2), want)


def test_fp8_gbps_counts_the_quarter_of_the_bytes_it_reads(planted_row):
    fp32_bytes = planted_row["honest_gbps"] * planted_row["honest_ms"]
    fp8_bytes = planted_row["honest_fp8_gbps"] * planted_row["honest_fp8_ms"]
    assert fp8_bytes == pytest.approx(fp32_bytes / 4)


@pytest.fixture(scope="module")
def default_probe() -> torch.Tensor:
    """``bandwidth.probe_tensor()`` as ``bench kernels`` makes it, made once for the tests that
    read it: at ``CACHE_MULTIPLE`` last-level caches it is gigabytes on a machine that reports
    a large one, and writing every page of it took longer than the reads it is made for."""
    return bandwidth.probe_tensor()


def test_the_stream_probe_reads_at_a_rate_memory_can_deliver(default_probe):
    probe = default_probe
    assert probe.numel() * 4 >= bandwidth.MIN_CACHE_MULTIPLE * bandwidth.cache_bytes()
    row = kernels.measure(1, 64, 16, FULL, repeats=3, kernels={}, probe=probe)
    assert 0.5 < row["stream_gbps"] < 2000, row["stream_gbps"]
    assert row["sdpa_of_stream"] == pytest.approx(row["sdpa_gbps"] / row["stream_gbps"])


def best_gbps(tensor: torch.Tensor, repeats: int) -> float:
    read = bandwidth.streaming_read(tensor)
    read()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - start)
    return tensor.numel() * tensor.element_size() / best / 1e9


def test_the_stream_probe_reads_from_memory_not_from_a_cache(default_probe):
    """The same read of a tensor that fits in the L2 cache runs much faster than the probe:
    so the probe's rate is memory's, not a cache's. Best of many tries, on one thread, so that
    a busy machine slows neither figure."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        in_cache = best_gbps(torch.ones(64 * 2**10), repeats=200)  # 256 KiB
        from_memory = best_gbps(default_probe, repeats=5)
    finally:
        torch.set_num_threads(previous)
    assert in_cache > 1.5 * from_memory, (in_cache, from_memory)


def test_the_stream_probe_refuses_a_size_a_cache_could_hold():
    cache = bandwidth.cache_bytes()
    with pytest.raises(ValueError, match=r"last-level cache.*give at least"):
        bandwidth.probe_tensor(nbytes=cache)


@pytest.mark.parametrize(("text", "size"), [("32K\n", 32768), ("1M", 2**20), ("512", 512)])
def test_cache_sizes_are_read_as_linux_writes_them(text, size):
    assert bandwidth.parse_size(text) == size


def widest_rows(names: list[str]) -> list[dict]:
    """Rows with the widest values a run prints: seconds-long references on a busy machine,
    a GPU's thousands of GB/s."""
    row = {"batch": 4, "context": 8192, "block_size": 16, "threads": 2, "rounds": 61}
    row["load"] = "9.9→9.9"  # the widest: 12.3 prints as 12
    row |= {f"{name}_ms": 46029.24 for name in kernels.PATHS}
    row |= {f"{name}_ratio": 123.45 for name in kernels.REFERENCES}
    row |= {"max_error": 4.6e-07, "fp8_error": 3.6e-02, "stream_gbps": 4012.3}
    row["sdpa_bandwidth"] = kernels.bandwidth_text(4012.3, 1.0)
    for name in names:
        for suffix in kernels.SUFFIXES:
            row[f"{name}{suffix}_ms"] = 46029.24
            row[f"{name}{suffix}_bandwidth"] = kernels.bandwidth_text(4012.3, 1.0)
        row |= {f"{name}_ratio": 12.34, f"{name}_paging": 1.234, f"{name}_fp8_vs_fp32": 12.34}
        row[f"{name}_paging_text"] = kernels.ratio_text(1.234, 0.123)
        row[f"{name}_fp8_text"] = kernels.ratio_text(12.345, 1.234)
    return [row, {**row, "batch": 1, "threads": 1}]


@pytest.mark.parametrize("names", [["numba_cpu"], ["numba_cuda"], []], ids=str)
def test_each_table_fits_a_100_column_terminal_without_cutting_a_header(names):
    every, views = kernels.columns(names)
    report = Report("kernels", "t", every, widest_rows(names), views=views)
    console = Console(width=100, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(report.rich_table())
    text = captured.get()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert len(report.tables()) == 3


def test_a_report_split_into_tables_prints_its_own_title_above_them():
    """The terminal shows the title the results page and ``--json`` give (``bench`` prints
    many reports in a row: each view's title alone would not say whose it is)."""
    every, views = kernels.columns(["numba_cpu"])
    title = "Paged decode attention vs contiguous (§4)"
    report = Report("kernels", title, every, widest_rows(["numba_cpu"]), views=views)
    console = Console(width=100, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(report.rich_table())
    assert captured.get().splitlines()[0] == title


def test_decoded_row_decodes_every_fp8_byte_as_torch_does():
    """The CPU twins' row decoder, compiled and as plain Python, on all 256 bytes of both
    formats (zeros of both signs, subnormals, the largest values, NaN and inf): times the
    format's multiplier, NaN where torch has NaN, the same float32 everywhere else."""
    numba = pytest.importorskip("numba", reason="the twins' decoder needs numba")
    from cuda_kernels.fp8 import FP8_DTYPES, decode_fields, decoded_row

    compiled = numba.njit(
        lambda row, fields, halves, scratch: decoded_row(row, fields, halves, scratch).copy()
    )
    every_byte = np.arange(256, dtype=np.uint8)
    for dtype in FP8_DTYPES:
        want = torch.arange(256, dtype=torch.uint8).view(dtype).float().numpy()
        fields = decode_fields(dtype)
        for decode in (compiled, decoded_row):
            scratch = (np.empty(256, np.int16), np.empty(256, np.float32))
            with np.errstate(invalid="ignore"):  # e5m2's signalling NaNs stay NaN, quietly
                got = decode(every_byte, fields, *scratch) * fields.multiplier
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 too
    float_row, float_fields = np.ones(8, np.float32), decode_fields(torch.float32)
    assert float_fields.multiplier == 1
    scratch = (np.empty(8, np.int16), np.empty(8, np.float32))
    assert compiled(float_row, float_fields, *scratch).sum() == 8


DECODE_EVERY_BYTE = """
import numba, numpy as np, torch
from cuda_kernels.fp8 import FP8_DTYPES, decode_fields, decoded_row
compiled = numba.njit(
    lambda row, fields, halves, scratch: decoded_row(row, fields, halves, scratch).copy()
)
every_byte = np.arange(256, dtype=np.uint8)
for dtype in FP8_DTYPES:
    scratch = np.empty(256, np.int16), np.empty(256, np.float32)
    got = compiled(every_byte, decode_fields(dtype), *scratch)
    print(dtype, got.view(np.uint32).tolist())
"""
"""A process that prints every FP8 byte of both formats decoded by a compiled twin's
decoder, as float32 bits."""


def decoded_bits(**numba_settings: str) -> str:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    run = subprocess.run(
        [sys.executable, "-c", DECODE_EVERY_BYTE],
        env=env | numba_settings,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def test_the_decoder_gives_the_same_bits_on_an_x86_core_without_float16_conversion(tmp_path):
    """Numba told to compile for a plain x86-64 (no F16C): the decoder moves float16's bits
    into float32's itself instead of calling a conversion routine the JIT lacks (which
    aborted the process), and gives the same bits, NaN payloads included, as the hardware's
    conversion does."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("an x86-64 machine compiles for a plain x86-64 core")
    plain = decoded_bits(
        NUMBA_CPU_NAME="x86-64", NUMBA_CPU_FEATURES="", NUMBA_CACHE_DIR=str(tmp_path)
    )
    assert plain == decoded_bits()


def test_only_a_target_with_a_float16_instruction_converts_in_hardware():
    from cuda_kernels.fp8 import converts_half_in_hardware

    x86 = "x86_64-unknown-linux-gnu"
    assert converts_half_in_hardware((x86, "znver3", "+avx2,+f16c,+fma"))
    assert not converts_half_in_hardware((x86, "x86-64", ""))
    assert not converts_half_in_hardware((x86, "x86-64", "+avx,-f16c"))
    assert converts_half_in_hardware(("aarch64-unknown-linux-gnu", "generic", ""))
    assert not converts_half_in_hardware(("powerpc64le-unknown-linux-gnu", "pwr8", ""))


def test_a_paired_ratio_divides_out_what_a_round_shared():
    """Round 2 ran twice as slow for both paths (the machine got busy): the rounds' own
    ratios are all 1.1, while the ratio of the medians is not."""
    paged, in_order = [1.1, 2.2, 1.1], [1.0, 2.0, 1.0]
    assert rounds.paired_ratio(paged, in_order) == pytest.approx(1.1)
    assert rounds.spread(paged, in_order) == pytest.approx(0.0)
    slow_paged = [1.1, 2.2, 2.2]  # the same in-order rounds; the paged path slowed once
    assert np.median(slow_paged) / np.median(in_order) == pytest.approx(2.2)
    assert rounds.paired_ratio(slow_paged, in_order) == pytest.approx(1.1)
    assert rounds.paired_ratio([2.0, 2.0, 9.0], [1.0, 1.0]) == 2.0  # the rounds both ran


def test_the_spread_grows_with_the_noise_between_rounds_and_is_reproducible():
    gen = np.random.default_rng(1)
    in_order = [1.0] * 25
    quiet, noisy = (list(1.0 + gen.normal(0, sd, 25)) for sd in (0.005, 0.1))
    assert rounds.spread(quiet, in_order) < 0.01 < rounds.spread(noisy, in_order)
    assert rounds.spread(noisy, in_order) == rounds.spread(noisy, in_order)


def test_rounds_stop_at_the_fewest_once_settled_and_at_the_most_if_never():
    paths = {"a": lambda: None, "b": lambda: None}
    settled = rounds.time_rounds(paths, "cpu", 4, 50, settled=lambda times: True)
    assert len(settled["a"]) == 4
    never = rounds.time_rounds(paths, "cpu", 4, 7, settled=lambda times: False)
    assert len(never["a"]) == len(never["b"]) == 7
    slow_once = rounds.time_rounds(paths, "cpu", 4, 7, lambda times: False, only_first={"b"})
    assert (len(slow_once["a"]), len(slow_once["b"])) == (7, 4)
    with pytest.raises(ValueError, match=r"min_rounds <= max_rounds, got 5 and 3"):
        rounds.time_rounds(paths, "cpu", 5, 3)


def test_ratios_settle_when_every_pair_is_known_within_the_precision():
    steady = {"p": [1.02] * 9, "o": [1.0] * 9, "f": [0.9] * 9}
    assert rounds.ratios_settled([("p", "o"), ("f", "p")])(steady)
    shaky = dict(steady, f=[0.9, 1.3, 0.7, 1.2, 0.8, 1.1, 0.6, 1.4, 0.9])
    assert not rounds.ratios_settled([("p", "o"), ("f", "p")])(shaky)
    assert rounds.ratios_settled([("p", "o")])(shaky)


def test_each_timed_call_starts_from_the_same_state_whatever_ran_before_it():
    """A planted neighbour effect: a path takes 20 ms when its state was just cleared (by the
    ``stream`` path, as the streaming read clears the caches) and 10 ms once it is warm, so
    in rounds ``a, b, stream`` the path ``a`` always pays and ``b`` never does. Two paths that
    do the same work must come out equal once every call starts from the same state."""
    state = {"warm": False}

    def work():
        time.sleep(0.010 if state["warm"] else 0.020)
        state["warm"] = True

    def clear():
        state["warm"] = False

    paths = {"a": work, "b": lambda: work(), "stream": clear}
    biased = rounds.time_rounds(paths, "cpu", 9, 9, clock=cpu_clock.wall_seconds)
    assert max(np.divide(biased["a"], biased["b"])) > 1.5  # a round that ran a before b
    fair = rounds.time_rounds(paths, "cpu", 9, 9, before_each=clear, clock=cpu_clock.wall_seconds)
    assert rounds.paired_ratio(fair["a"], fair["b"]) == pytest.approx(1.0, abs=0.2)


def test_a_path_timed_second_of_a_pair_is_not_favoured_by_its_place_in_the_round():
    """A planted order effect that clearing the caches does not remove: a twin path takes 50 ms
    right after the other twin path and 100 ms after anything else, as whichever of paged and in
    order was timed second ran a few percent faster, with the caches cleared before each, on
    the machine this was written on. Rounds reverse their order one to the next, so ``a`` and
    ``b``, which do the same work, come out equal; in one fixed order ``a`` would take twice as
    long as ``b`` in every round. (Sleeps of 10 and 20 ms came out 1.17 apart on a machine at a
    load of 10, overslept by its scheduler: the planted times are long beside that.)"""
    last = {"name": None}

    def path(name: str, twin: bool):
        def call():
            if twin:
                after_other = last["name"] in ("a", "b") and last["name"] != name
                time.sleep(0.050 if after_other else 0.100)
            last["name"] = name

        return call

    names = {"sdpa": False, "a": True, "b": True, "stream": False}
    paths = {name: path(name, twin) for name, twin in names.items()}
    sleeps = {"settled": lambda times: True, "clock": cpu_clock.wall_seconds}  # sleeps: wall
    times = rounds.time_rounds(paths, "cpu", 4, 50, **sleeps)
    assert len(times["a"]) == 4
    assert rounds.paired_ratio(times["a"], times["b"]) == pytest.approx(1.0, abs=0.1)
    odd = rounds.time_rounds(paths, "cpu", 3, 50, **sleeps)
    assert len(odd["a"]) == 4  # a settled run stops after an even count of rounds


def test_bench_kernels_clears_the_caches_before_every_timed_call(monkeypatch):
    cleared = []
    monkeypatch.setattr(bandwidth, "cache_evictor", lambda device, quick: lambda: cleared.append(1))
    row = kernels.measure(1, 64, 16, QUICK, repeats=3, kernels={})
    assert len(cleared) == 3 * len(kernels.PATHS) == 3 * row["rounds"]


class Made(Exception):
    """Ends a run once the tensor a test looks at is made."""


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_only_a_quick_run_streams_and_clears_less_than_the_cache_holds(monkeypatch, quick):
    """A full run's probe is ``CACHE_MULTIPLE`` last-level caches and its read before each call
    ``EVICT_MULTIPLE``: neither can be served by the cache. Only ``--quick`` reads
    ``QUICK_BYTES`` for both. The tensors are made on torch's meta device, which allocates
    nothing, so the gigabytes a full run streams are sized here without being written."""
    made = {}
    probe_tensor, cache_evictor = bandwidth.probe_tensor, bandwidth.cache_evictor

    def probe(device, nbytes=None, *, quick):
        made["probe"] = probe_tensor("meta", nbytes, quick=quick).nbytes
        raise Made

    def evictor(device, *, quick):
        made["evict"] = cache_evictor("meta", quick=quick).nbytes
        raise Made

    monkeypatch.setattr(bandwidth, "streaming_read", lambda tensor: tensor)  # what it reads
    monkeypatch.setattr(bandwidth, "probe_tensor", probe)
    monkeypatch.setattr(bandwidth, "cache_evictor", evictor)
    options = Options(quick=quick)
    with pytest.raises(Made):
        kernels.run(options)
    with pytest.raises(Made):
        kernels.measure(1, 64, 16, options, repeats=3, kernels={})
    cache = bandwidth.cache_bytes()
    if quick:
        assert made == {"probe": bandwidth.QUICK_BYTES, "evict": bandwidth.QUICK_BYTES}
    else:
        assert made["probe"] >= bandwidth.CACHE_MULTIPLE * cache
        assert made["evict"] >= bandwidth.EVICT_MULTIPLE * cache


def test_the_cache_evictor_reads_twice_the_last_level_cache(monkeypatch):
    monkeypatch.setattr(bandwidth, "streaming_read", lambda tensor: tensor)  # what it reads
    tensor = bandwidth.cache_evictor()
    assert tensor.numel() * tensor.element_size() >= 2 * bandwidth.cache_bytes()


def test_a_row_states_the_machines_load_at_its_start_and_its_end(monkeypatch):
    """A reader can tell a run that other work shared the cores with: the load average before
    the row's rounds and after them, read from the system each time; NaN where there is none."""
    loads = iter([0.5, 12.3])
    monkeypatch.setattr(kernels.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    assert kernels.measure(1, 64, 16, QUICK, repeats=3, kernels={})["load"] == "0.5→12"
    monkeypatch.delattr(kernels.os, "getloadavg")  # as on Windows
    assert kernels.measure(1, 64, 16, QUICK, repeats=3, kernels={})["load"] == "nan→nan"


def synthetic_rounds(fp8_noise: list[float]):
    """A ``time_rounds`` that times nothing: every path takes 1 ms in each of 8 rounds, the
    paged path 2% more, and the FP8 path 0.9 ms times ``fp8_noise`` round by round. It keeps
    the ``settled`` test ``measure`` gave it."""
    given = {}

    def time_rounds(paths, device, min_rounds, max_rounds, settled, *rest):
        given["settled"] = settled
        times = {name: [1e-3] * 8 for name in paths}
        times["honest"] = [1.02e-3] * 8
        times["honest_fp8"] = [0.9e-3 * noise for noise in fp8_noise]
        return times

    return time_rounds, given


STEADY, SHAKY = [1.0] * 8, [1.0, 1.3, 0.7, 1.2, 0.8, 1.1, 0.6, 1.4]


@pytest.mark.parametrize(("fp8_noise", "settles"), [(STEADY, True), (SHAKY, False)])
def test_a_row_takes_rounds_until_fp8_over_fp32_is_settled_too(monkeypatch, fp8_noise, settles):
    """Paged ÷ in order is steady in both cases; only FP8's rounds differ, so a row that
    settled on paging alone would stop with FP8 ÷ fp32 anywhere in its wide interval."""
    fake, given = synthetic_rounds(fp8_noise)
    monkeypatch.setattr(rounds, "time_rounds", fake)
    plain = {"honest": attention.paged_attention_decode}
    row = kernels.measure(1, 64, 16, QUICK, repeats=4, kernels=plain, max_repeats=20)
    times = {"honest": [1.02e-3] * 8, "honest_in_order": [1e-3] * 8}
    times["honest_fp8"] = [0.9e-3 * noise for noise in fp8_noise]
    assert given["settled"](times) is settles
    assert row["settled"] is settles
    assert row["honest_paging"] == pytest.approx(1.02)
    assert row["honest_fp8_vs_fp32"] == rounds.paired_ratio(times["honest_fp8"], times["honest"])
    assert row["honest_fp8_spread"] == rounds.spread(times["honest_fp8"], times["honest"])
    assert (row["honest_fp8_spread"] > 0.02) is not settles


def test_the_notes_name_each_row_that_stopped_at_the_cap_unsettled():
    rows = [
        {"batch": 1, "context": 8192, "block_size": 16, "threads": 2, "settled": False},
        {"batch": 4, "context": 1024, "block_size": 16, "threads": 1, "settled": True},
    ]
    note = kernels.settling_note(rows, cap=62)
    assert "cap of 62 rounds" in note and "1×8,192 B=16 at 2 thread(s)" in note
    assert "4×1,024" not in note
    assert "Every row settled" in kernels.settling_note(rows[1:], cap=62)
