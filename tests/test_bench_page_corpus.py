"""``bench``'s results page, ``index.md``, has one writer at a time. A partial run rewrote it
by reading it and writing it back, with no lock held while its benchmarks ran, so two runs
into one folder could each write back a page without the other's sections, and a run whose
page another was writing found out only after minutes of measuring. Now a run takes the page's
lock (``atomic_write.Replacement``) before its first benchmark and holds it until the page is
written; a run that writes only plots (a partial run with ``--quick``, or one where no page is
yet) holds the same lock, and drops it unwritten. ``--json`` changes what is printed, not what
is written; and the page and plots go in place of no file of ``--model``, as every other
command's outputs."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout

import pytest

from minipaged import atomic_write, cli
from minipaged.models import EMBEDDED_MODELS
from minipaged.study import bench
from minipaged.study.report import Column, Report

PAGE = "# Benchmark results\n\n## Memory\n\nold memory\n\n## Sharing\n\nold sharing\n"


class Folder:
    """A results folder ``path`` holding a page, whose sub-benchmarks report at once: the names
    that ran (``ran``), each calling ``during`` with the page's path while it runs."""

    def __init__(self, path):
        self.path, self.ran = path, []
        self.during = lambda page: None


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "index.md").write_text(PAGE)
    folder = Folder(tmp_path)

    def run(name, options):
        folder.ran.append(name)
        folder.during(options.out / "index.md")
        return Report(name, name.title(), [Column("v", "v")], [{"v": len(folder.ran)}])

    monkeypatch.setattr(bench, "run", run)
    return folder


def test_a_run_into_a_folder_whose_page_another_run_writes_is_refused_before_it_runs(folder):
    other = atomic_write.Replacement(folder.path / "index.md")  # another run, measuring
    try:
        with pytest.raises(atomic_write.OutputBusy, match="another run is writing it now"):
            bench.run_many(["memory"], bench.Options(out=folder.path))
    finally:
        other.discard()
    assert folder.ran == [], "refused at its start, not after its benchmarks ran"
    assert (folder.path / "index.md").read_text() == PAGE


def another_run_starts_during_each_benchmark(folder: Folder) -> list[str]:
    """The words of each refusal of another run that starts writing the page while one of
    ``folder``'s benchmarks runs (each start must be refused)."""
    refused = []

    def another_run_starts(page):
        with pytest.raises(atomic_write.OutputBusy) as busy:
            atomic_write.Replacement(page)
        refused.append(str(busy.value))

    folder.during = another_run_starts
    return refused


def test_no_other_run_writes_the_page_while_a_partial_run_measures(folder):
    refused = another_run_starts_during_each_benchmark(folder)
    bench.run_many(["memory", "sharing"], bench.Options(out=folder.path))
    assert len(refused) == 2, "the page is held from the first benchmark to the last"
    page = (folder.path / "index.md").read_text()
    assert "old" not in page and "| 1 |" in page and "| 2 |" in page
    assert sorted(p.name for p in folder.path.iterdir()) == ["index.md"]


@pytest.mark.parametrize("as_json", [False, True], ids=["tables", "json"])
def test_json_writes_the_page_as_tables_do(folder, as_json, capsys):
    bench.run_many(["sharing"], bench.Options(out=folder.path), as_json=as_json)
    printed = capsys.readouterr().out
    page = (folder.path / "index.md").read_text()
    assert "old memory" in page and "old sharing" not in page and "| 1 |" in page
    if as_json:
        assert list(json.loads(printed)) == ["sharing"]


def test_a_quick_partial_run_leaves_the_page_alone(folder):
    bench.run_many(["sharing"], bench.Options(out=folder.path, quick=True))
    assert (folder.path / "index.md").read_text() == PAGE


@pytest.mark.parametrize(
    "argv, written",
    [
        (["fork"], "index.md"),  # a partial run refreshes a page that is there
        (["fork", "--quick"], "fork.svg"),
    ],
    ids=["page", "plot"],
)
def test_bench_out_in_the_model_folder_replaces_none_of_its_files(tmp_path, capsys, argv, written):
    model = tmp_path / "model"
    shutil.copytree(EMBEDDED_MODELS["tiny"], model)
    (model / written).write_text("the model's own file\n")
    with redirect_stdout(io.StringIO()):
        status = cli.main(["bench", *argv, "--out", str(model), "--model", str(model)])
    err = capsys.readouterr().err
    assert status == 2, err
    assert f"{model / written}, a file of the model" in err and err.count("\n") == 1, err
    assert (model / written).read_text() == "the model's own file\n"


@pytest.mark.parametrize("quick, page", [(True, PAGE), (False, None)], ids=["quick", "no-page-yet"])
def test_a_run_that_writes_only_plots_holds_the_folder_as_a_page_writer_does(folder, quick, page):
    """A partial run with ``--quick``, and a partial run where no page is yet, write their plots
    and no page: they took no lock, so their plots replaced those of a full run writing a page
    that shows its own, and a full run started meanwhile was not refused."""
    if page is None:
        (folder.path / "index.md").unlink()
    other = atomic_write.Replacement(folder.path / "index.md")  # a full run, measuring
    try:
        with pytest.raises(atomic_write.OutputBusy, match="another run is writing it now"):
            bench.run_many(["sharing"], bench.Options(out=folder.path, quick=quick))
    finally:
        other.discard()
    assert folder.ran == [], "refused at its start, not after its benchmarks ran"
    refused = another_run_starts_during_each_benchmark(folder)
    bench.run_many(["memory", "sharing"], bench.Options(out=folder.path, quick=quick))
    assert len(refused) == 2, "the folder is held from the first benchmark to the last"
    written = sorted(p.name for p in folder.path.iterdir())
    assert written == ([] if page is None else ["index.md"]), "no page made, no lock file left"
    if page is not None:
        assert (folder.path / "index.md").read_text() == page
