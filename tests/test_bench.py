"""``minipaged bench`` and ``minipaged simulate`` run end to end in quick mode: every
sub-benchmark prints its table, writes its plot and emits valid JSON. Speeds are not checked:
they are measurements, not specifications."""

import contextlib
import io
import json
from pathlib import Path

import pytest

import minipaged
from minipaged import cli
from minipaged.checkpoint import model_directory
from minipaged.study import bench
from minipaged.study.bench import SUBBENCHMARKS, default_out, kernels, rounds, run_many
from minipaged.study.bench.rounds import time_rounds

pytestmark = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the engine and fork benchmarks need the embedded tiny model",
)

TITLES = {
    "memory": "KV-cache waste per allocator",
    "sharing": "Copy-on-write savings",
    "fork": "Fork cost against prompt length",
    "kernels": "Paged decode attention vs contiguous",
    "engine": "Engine throughput",
    "block-size": "Block size: waste against kernel time",
    "tui": "TUI step time with 8 sequences",
    "kv-dtype": "The price of a narrower KV cache",
    "speculative": "Speculative tree decoding",
    "chunked": "Chunked prefill: time between tokens",
}


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(list(argv))
    return status, out.getvalue()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One quick run of every sub-benchmark through the CLI: its folder, what it printed, the
    reports it made (a second run for ``--json`` would repeat the slowest fixture here) and
    the times of every round its sub-benchmarks took, call by call."""
    out = tmp_path_factory.mktemp("bench")
    reports, timed_rounds = [], []

    def recording(*args, **kwargs):
        reports.extend(run_many(*args, **kwargs))
        return reports

    def recording_rounds(*args, **kwargs):
        timed_rounds.append(time_rounds(*args, **kwargs))
        return timed_rounds[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench, "run_many", recording)
        patch.setattr(rounds, "time_rounds", recording_rounds)
        status, printed = run_cli("bench", "--quick", "--out", str(out))
    assert status == 0
    assert [r.name for r in reports] == list(SUBBENCHMARKS)
    return out, printed, reports, timed_rounds


@pytest.fixture(scope="module")
def tables(full_run):
    out, printed, *_ = full_run
    return out, printed


@pytest.fixture(scope="module")
def as_json(full_run):
    """The full run's reports as ``--json`` prints them."""
    return json.loads(json.dumps({r.name: r.as_dict() for r in full_run[2]}))


def test_json_prints_what_the_reports_hold(full_run, tmp_path):
    """``--json`` prints the same objects ``as_json`` builds from the full run's reports: the
    model-free sub-benchmarks (no timings) match the full run's exactly."""
    names = ["memory", "sharing"]
    status, printed = run_cli("bench", *names, "--quick", "--json", "--out", str(tmp_path))
    assert status == 0
    got = json.loads(printed)
    want = json.loads(json.dumps({r.name: r.as_dict() for r in full_run[2] if r.name in names}))
    for report in (*got.values(), *want.values()):  # the same plots, in another folder
        report["plots"] = [Path(plot).name for plot in report["plots"]]
    assert got == want


def test_every_subbenchmark_has_a_title_here():
    assert set(TITLES) == set(SUBBENCHMARKS)


@pytest.mark.parametrize("name", sorted(SUBBENCHMARKS))
def test_bench_prints_each_table_and_writes_its_plot(tables, name):
    out, printed = tables
    assert TITLES[name] in printed
    plot = out / f"{name}.svg"
    assert plot.read_text().lstrip().startswith("<?xml") and "<svg" in plot.read_text()


@pytest.mark.parametrize("name", sorted(SUBBENCHMARKS))
def test_bench_json_has_each_report_with_rows_for_its_columns(as_json, name):
    report = as_json[name]
    assert report["title"].startswith(TITLES[name])
    assert report["rows"], "a report with no rows"
    keys = {column["key"] for column in report["columns"]}
    missing = [sorted(keys - row.keys()) for row in report["rows"] if not keys <= row.keys()]
    assert not missing, f"rows without a value for a column: {missing}"


def test_a_full_run_writes_the_results_page_with_every_table_and_plot(tables):
    out, _ = tables
    page = (out / "index.md").read_text()
    for name in SUBBENCHMARKS:
        assert f"]({name}.svg)" in page
        assert f"## {TITLES[name]}" in page
    assert "```python" not in page  # the docs tests would run it


def test_engine_bench_generates_the_same_greedy_tokens_as_transformers(as_json):
    rows = as_json["engine"]["rows"]
    ours = [row for row in rows if row["system"].startswith("minipaged")]
    assert {row["workload"] for row in ours} == {"uniform", "mixed"}
    for row in ours:
        assert row["same_tokens"] == f"{row['requests']} of {row['requests']}"


def test_engine_bench_mixed_workload_pads_static_batches_to_their_longest_request(as_json):
    """transformers runs each static batch as long as its longest request; continuous
    batching refills a finished sequence's place, so it needs fewer forward passes."""
    mixed = {row["system"]: row for row in as_json["engine"]["rows"] if row["workload"] == "mixed"}
    theirs = mixed.pop("transformers (static batches)")
    assert mixed and all(row["passes"] < theirs["passes"] for row in mixed.values())
    assert all(row["tokens"] == theirs["tokens"] for row in mixed.values())


def test_every_timing_row_says_how_many_threads_it_used(as_json):
    for name in ("fork", "engine", "block-size"):
        assert all(row["threads"] >= 1 for row in as_json[name]["rows"]), name


def test_fork_copies_no_key_or_value_and_touches_one_refcount_per_block(as_json):
    for row in as_json["fork"]["rows"]:
        assert row["fork_bytes"] == 0
        assert row["blocks_touched"] == row["blocks"] == -(-row["prompt_tokens"] // 16)


def test_fork_at_llama_3_8b_copies_its_whole_kv_and_labels_how_it_was_timed(as_json):
    llama = [row for row in as_json["fork"]["rows"] if row["cache"].startswith("Llama-3-8B")]
    one_layer, every_layer = llama
    assert one_layer["prompt_tokens"] == every_layer["prompt_tokens"] == 2048
    assert one_layer["copy_bytes"] == 2048 * 2 * 8 * 128 * 2  # K and V, 8 KV heads, d_h 128, fp16
    assert every_layer["copy_bytes"] == 32 * one_layer["copy_bytes"]
    assert one_layer["how"] == "measured"
    assert every_layer["how"].startswith("computed: 32 ×")  # quick mode measures one layer


def test_kernels_bench_says_why_the_numba_kernel_did_not_run_on_cpu(as_json):
    assert any("Numba: not run" in note for note in as_json["kernels"]["notes"])


def test_simulate_prints_a_row_per_allocator_and_valid_json():
    argv = ["simulate", "--hbm-gb", "20", "--requests", "20", "--page-kb", "64"]
    status, printed = run_cli(*argv)
    assert status == 0
    for name in ("static", "text's orca ΔL=256", "vattention 64 KB pages", "paged B=16"):
        assert name in printed
    status, printed = run_cli(*argv, "--json")
    assert status == 0
    assert [row["allocator"] for row in json.loads(printed)["rows"]][-1] == "paged B=16"


def test_bench_run_outside_the_repository_writes_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, printed = run_cli("bench", "memory", "--quick")
    assert status == 0
    assert TITLES["memory"] in printed
    assert list(tmp_path.iterdir()) == []


def test_results_go_to_the_project_docs_only_from_the_repository_root(tmp_path):
    root = Path(minipaged.__file__).resolve().parent.parent
    assert default_out(root) == Path("docs") / "results"
    assert default_out(root / "docs") is None
    # A folder that looks like a repository root but is not the one whose code is running.
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text("site_name: another project\n")
    assert default_out(tmp_path) is None


def test_unknown_benchmark_is_an_error(capsys):
    assert cli.main(["bench", "nonsense", "--quick"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err


def test_kv_dtype_bench_prices_each_narrower_cache_against_float32(as_json):
    rows = {row["kv_cache_dtype"]: row for row in as_json["kv-dtype"]["rows"]}
    assert list(rows) == ["float32", "float16", "fp8_e4m3", "fp8_e5m2"]
    assert rows["float32"]["max_logit_error"] == 0 and rows["float32"]["greedy_agreement"] == 1
    # fewer bits, more error: float16 keeps 10 mantissa bits, e4m3 3, e5m2 2
    errors = [rows[name]["mean_logit_error"] for name in rows]
    assert errors == sorted(errors) and errors[1] > 0
    # the same bytes hold 1/b blocks: FP8 twice float16's (give or take the last whole block)
    assert rows["fp8_e4m3"]["llama_blocks"] // 2 == rows["float16"]["llama_blocks"]
    assert rows["fp8_e5m2"]["tiny_blocks"] == 4 * rows["float32"]["tiny_blocks"]
    assert all(1 < row["perplexity"] < 2048 for row in rows.values())  # below the vocabulary


def test_speculative_bench_keeps_greedy_tokens_and_needs_fewer_passes_and_blocks(as_json):
    rows = {row["system"]: row for row in as_json["speculative"]["rows"]}
    assert all(row["same_tokens"] == "yes" for row in rows.values())
    assert rows["draft model"]["passes_per_token"] < rows["plain"]["passes_per_token"]
    for name in ("n-gram", "draft model"):
        assert rows[name]["peak_blocks"] < rows[name]["peak_copy_blocks"]


def test_chunked_bench_bounds_the_stall_and_delays_the_long_prompt_in_the_simulation(as_json):
    """At Llama-3-8B's scale the roofline is deterministic: a budget of 256 tokens keeps
    every gap near a decode step's, where one whole prefill stalls the decodes, and the long
    prompt's own first token comes later for it (the trade-off)."""
    rows = {r["system"]: r for r in as_json["chunked"]["rows"] if "sim" in r["where"]}
    off, small = rows["off"], rows["budget 256"]
    assert small["tbt_max"] < off["tbt_max"] / 3
    assert small["long_ttft"] > off["long_ttft"]
    assert {r["where"] for r in as_json["chunked"]["rows"]} == {"tiny", "Llama-3-8B (sim.)"}


def test_kernels_bench_rows_hold_paging_fp8_and_the_stream_read(as_json, full_run):
    """Each row: the machine's streaming read, the twin over shuffled and in-order blocks and
    over FP8 pools, every GB/s with its share of the stream read."""
    rows = as_json["kernels"]["rows"]
    kernel_rounds = [times for times in full_run[3] if "numba_cpu_in_order" in times]
    assert len(kernel_rounds) == len(rows)
    for row, times in zip(rows, kernel_rounds, strict=True):
        assert row["stream_gbps"] > 0
        # Each ratio is the median of the rounds' own ratios, of the paths it names, in this
        # order (the median times' ratio can be far from it: in a 3-round run at a load of 4,
        # FP8's median time was 11.7 times fp32's while its rounds' median ratio was 1.13).
        paired = rounds.paired_ratio
        assert row["numba_cpu_paging"] == paired(times["numba_cpu"], times["numba_cpu_in_order"])
        assert row["numba_cpu_fp8_vs_fp32"] == paired(times["numba_cpu_fp8"], times["numba_cpu"])
        assert row["numba_cpu_ms"] == rounds.median_ms(times["numba_cpu"])
        assert row["numba_cpu_paging_spread"] >= 0
        assert row["numba_cpu_paging_text"].startswith(f"{row['numba_cpu_paging']:.3f} ±")
        fp8, fp32 = times["numba_cpu_fp8"], times["numba_cpu"]
        assert row["numba_cpu_fp8_spread"] == rounds.spread(fp8, fp32)
        assert row["numba_cpu_fp8_text"] == kernels.ratio_text(
            row["numba_cpu_fp8_vs_fp32"], row["numba_cpu_fp8_spread"]
        )
        for path in ("sdpa", "vectorized", "numba_cpu", "numba_cpu_in_order", "numba_cpu_fp8"):
            assert row[f"{path}_of_stream"] == row[f"{path}_gbps"] / row["stream_gbps"]
        assert row["max_error"] < 1e-5 and row["fp8_error"] < 0.5


def test_a_quick_kernels_run_says_its_reads_may_come_from_a_cache(as_json):
    assert kernels.QUICK_NOTE in as_json["kernels"]["notes"]


def test_the_results_page_renders_every_table_as_a_table(tables):
    """A ``|`` left unescaped in a header cell (``max |Δ|``) makes Markdown show the whole
    table as text: every table of the page must come out as an HTML table."""
    markdown = pytest.importorskip("markdown")
    out, _ = tables
    page = (out / "index.md").read_text()
    html = markdown.markdown(page, extensions=["tables"])
    header_rows = page.count("\n| --- |")
    assert html.count("<table>") == header_rows
    assert "<p>|" not in html


def test_a_cell_or_header_holding_a_pipe_stays_one_markdown_cell():
    from minipaged.study.report import Column, Report

    report = Report("x", "T", [Column("a", "max |Δ|"), Column("b", "b")], [{"a": "|x|", "b": 1}])
    header, _, row = report.markdown().splitlines()[2:5]
    assert header == "| max \\|Δ\\| | b |"
    assert row == "| \\|x\\| | 1 |"


def test_a_partial_run_refreshes_only_its_own_sections_of_the_results_page():
    from minipaged.study.report import Column, Report

    page = "# Results\n\n## A\n\nold a\n\n## B\n\nold b\n"
    new_b = Report("b", "B", [Column("v", "v")], [{"v": 2}])
    new_c = Report("c", "C", [Column("v", "v")], [{"v": 3}])
    updated = bench.replace_sections(page, [new_b, new_c], bench.Options())
    assert updated.startswith("# Results\n\n## A\n\nold a\n\n## B\n\n| v |")
    assert "old b" not in updated and "| 2 |" in updated
    assert updated.rstrip().endswith("| 3 |"), "a section the page lacked is added at the end"
