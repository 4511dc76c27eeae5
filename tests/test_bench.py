"""``minipaged bench`` and ``minipaged simulate`` run end to end in quick mode: every
sub-benchmark prints its table, writes its plot and emits valid JSON. Speeds are not checked:
they are measurements, not specifications."""

import contextlib
import io
import json

import pytest

from minipaged import cli
from minipaged.checkpoint import model_directory
from minipaged.study.bench import SUBBENCHMARKS

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
}


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(list(argv))
    return status, out.getvalue()


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    status, printed = run_cli("bench", "--quick", "--out", str(out))
    assert status == 0
    return out, printed


@pytest.fixture(scope="module")
def as_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-json")
    status, printed = run_cli("bench", *SUBBENCHMARKS, "--quick", "--json", "--out", str(out))
    assert status == 0
    return json.loads(printed)


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
    assert all(keys & row.keys() for row in report["rows"])


def test_a_full_run_writes_the_results_page_with_every_table_and_plot(tables):
    out, _ = tables
    page = (out / "index.md").read_text()
    for name in SUBBENCHMARKS:
        assert f"]({name}.svg)" in page
        assert f"## {TITLES[name]}" in page
    assert "```python" not in page  # the docs tests would run it


def test_engine_bench_generates_the_same_greedy_tokens_as_transformers(as_json):
    ours = as_json["engine"]["rows"][0]
    assert ours["same_tokens"] == f"{ours['requests']} of {ours['requests']}"


def test_fork_copies_no_key_or_value_and_touches_one_refcount_per_block(as_json):
    for row in as_json["fork"]["rows"]:
        assert row["fork_bytes"] == 0
        assert row["blocks_touched"] == row["blocks"] == -(-row["prompt_tokens"] // 16)


def test_kernels_bench_says_why_the_numba_kernel_did_not_run_on_cpu(as_json):
    assert any("Numba: not run" in note for note in as_json["kernels"]["notes"])


def test_simulate_prints_a_row_per_allocator_and_valid_json():
    argv = ["simulate", "--hbm-gb", "20", "--requests", "20", "--page-kb", "64"]
    status, printed = run_cli(*argv)
    assert status == 0
    for name in ("static", "orca ΔL=256", "vattention 64 KB pages", "paged B=16"):
        assert name in printed
    status, printed = run_cli(*argv, "--json")
    assert status == 0
    assert [row["allocator"] for row in json.loads(printed)["rows"]][-1] == "paged B=16"


def test_unknown_benchmark_is_an_error(capsys):
    assert cli.main(["bench", "nonsense", "--quick"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err
