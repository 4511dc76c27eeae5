"""``minipaged bench``: one sub-benchmark per quantitative claim of the source text.

=============  =================================================================  ==========
name           what it reports                                                    how
=============  =================================================================  ==========
memory         waste and max concurrency per allocator, beside §2/§3's theory     simulated
sharing        blocks with and without copy-on-write (§5), beside the vLLM paper  counted
fork           fork cost against prompt length, beside a deep copy of the KV      measured
kernels        one kernel over shuffled and in-order blocks, against memory (§4)  measured
engine         minipaged's continuous batching against transformers' generate     measured
block-size     waste against kernel time for $B$ = 8, 16, 32                      both
kv-dtype       logit error, perplexity, greedy agreement, blocks per KV dtype     measured
speculative    passes per token, acceptance, blocks of speculative tree decoding  both
chunked        time between tokens while long prompts arrive, chunked prefill     both
=============  =================================================================  ==========

Each sub-benchmark is a module with ``run(options) -> Report``. Speeds are ratios against a
baseline measured in the same run, never absolute claims; tests check that each runs, not how
fast.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from minipaged import atomic_write, replaceable
from minipaged.replaceable import PYTHON_FORCE, OutputKind
from minipaged.study.bench.plot import PLOT
from minipaged.study.report import Report, console

SUBBENCHMARKS = {
    "memory": "minipaged.study.bench.memory",
    "sharing": "minipaged.study.bench.sharing",
    "fork": "minipaged.study.bench.fork",
    "kernels": "minipaged.study.bench.kernels",
    "engine": "minipaged.study.bench.engine",
    "block-size": "minipaged.study.bench.block_size",
    "kv-dtype": "minipaged.study.bench.kv_dtype",
    "tui": "minipaged.study.bench.tui",
    "speculative": "minipaged.study.bench.speculative",
    "chunked": "minipaged.study.bench.chunked",
}

RESULTS = Path("docs") / "results"
"""The results page and its plots, relative to the repository root."""


def default_out(cwd: Path | None = None) -> Path | None:
    """Where files go when ``--out`` is not given: ``docs/results`` when the working directory
    ``cwd`` is the root of the repository whose code is running (the ``minipaged`` package
    imported is ``cwd/minipaged``, beside ``mkdocs.yml`` and ``docs/``), as under
    ``make bench``; None anywhere else, so that a run from another folder writes nothing."""
    cwd = (Path.cwd() if cwd is None else cwd).resolve()
    root = Path(__file__).resolve().parents[3]  # <root>/minipaged/study/bench/__init__.py
    is_root = cwd == root and (root / "mkdocs.yml").is_file() and (root / "docs").is_dir()
    return RESULTS if is_root else None


@dataclass(frozen=True)
class Options:
    """What every sub-benchmark may read: ``quick`` shrinks it to seconds (for tests), plots go
    to ``out`` (None: no files are written), ``device`` is where torch runs, ``model`` is the
    engine and fork benchmarks' model, ``backends`` the engine benchmark's attention backends
    (empty: its default for the device), ``kv_cache_dtype`` the memory benchmark's KV dtype
    (``"auto"``: the presets' BF16). A file in ``out`` that is no page or plot of a run is
    replaced only with ``force`` (``check_replaceable``)."""

    out: Path | None = None
    quick: bool = False
    device: str = "cpu"
    model: str = "tiny"
    seed: int = 0
    backends: tuple[str, ...] = ()
    kv_cache_dtype: str = "auto"
    force: bool = False


def run(name: str, options: Options) -> Report:
    """Run the sub-benchmark ``name`` (a key of ``SUBBENCHMARKS``) and return its report."""
    if name not in SUBBENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(SUBBENCHMARKS)}")
    report = importlib.import_module(SUBBENCHMARKS[name]).run(options)
    report.plots = [path for path in report.plots if path is not None]  # None: not written
    return report


def run_many(names: list[str], options: Options, as_json: bool = False) -> list[Report]:
    """Run each named sub-benchmark, printing its table (or, with ``as_json``, one JSON object
    of all reports on stdout; the files are the same either way). When every sub-benchmark
    ran, write the results page ``index.md`` beside the plots (when ``options.out`` names a
    folder); a partial run that is not ``quick`` refreshes its own sections of an existing one.

    One run writes into a folder at a time, whether it writes the page or only its plots (a
    quick partial run, or a partial run where no page is yet): the page's ``Replacement`` (its
    lock) is taken before the first benchmark runs and held until the run's last file is
    written, so a second run into the folder is refused at its start
    (``atomic_write.OutputBusy``), not after minutes of measuring; no run's plots replace
    another's while that one writes a page that shows its own; and a partial run reads the
    page it rewrites under that lock, so no run's sections are lost to another's read and write
    back. A run that writes no page drops its ``Replacement``: the page is left as it was."""
    check_replaceable(names, options)  # before minutes of measuring, not after
    if options.out is not None:  # made first: a folder that cannot be made stops no late run
        options.out.mkdir(parents=True, exist_ok=True)
    page = page_written(names, options)
    full = set(names) == set(SUBBENCHMARKS)
    out = console(stderr=as_json)
    with contextlib.ExitStack() as held:
        writer = None
        if options.out is not None:
            # A page this run does not write is only locked, and left as it was
            unwritten = page is None
            writer = atomic_write.Replacement(
                options.out / "index.md", replaces=PAGE, force=options.force or unwritten
            )
            held.callback(writer.discard)  # after a commit, nothing; else the page as it was
        reports = []
        for name in names:
            out.print(f"[dim]bench {name}...[/dim]")
            reports.append(run(name, options))
            if not as_json:
                out.print(reports[-1].rich_table())
        if as_json:
            json.dump({r.name: r.as_dict() for r in reports}, sys.stdout, indent=2)
            sys.stdout.write("\n")
        if page is not None and full:
            writer.file.write(results_page(reports, options))
            writer.commit()
        elif page is not None:  # read under the lock: no other run writes it meanwhile
            old = page.read_text(encoding="utf-8")
            writer.file.write(replace_sections(old, reports, options))
            writer.commit()
    if options.out is None:
        out.print("[dim]no files written: pass --out DIR for the plots and index.md[/dim]")
    elif page is not None and full:
        out.print(f"wrote {page} and {sum(len(r.plots) for r in reports)} plots")
    elif page is not None:
        out.print(f"updated {', '.join(r.name for r in reports)} in {page}")
    else:
        plots = sum(len(r.plots) for r in reports)
        out.print(
            f"wrote {plots} plots in {options.out}; {options.out / 'index.md'} left as it was"
        )
    return reports


def is_page(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, starts a results page ``results_page`` wrote."""
    return head.startswith(b"# Benchmark results\n")


PAGE = OutputKind("a results page minipaged bench wrote", is_page)


def outputs(names: list[str], options: Options) -> list[tuple[str, Path | None, OutputKind]]:
    """What a run of ``names`` writes: its page (``page_written``) and each benchmark's plot,
    each with what it is and the kind of file it may replace; none without ``options.out``."""
    if options.out is None:
        return []
    plots = [(f"the {name} plot", options.out / f"{name}.svg", PLOT) for name in names]
    return [("the results page", page_written(names, options), PAGE), *plots]


def check_replaceable(names: list[str], options: Options, way: str = PYTHON_FORCE) -> None:
    """Refuse, before any benchmark runs, a run of ``names`` whose page or plots would replace
    a file of another kind (``replaceable.check_replaceable``), unless ``options.force``."""
    for what, path, kind in outputs(names, options):
        replaceable.check_replaceable(path, kind, options.force, what, way)


def page_written(names: list[str], options: Options) -> Path | None:
    """The results page a run of ``names`` writes (``run_many``), or None: a full run writes
    ``index.md`` in ``options.out``, a partial run that is not ``quick`` rewrites it when it is
    there, and a run with no folder writes nothing."""
    if options.out is None:
        return None
    page = options.out / "index.md"
    if set(names) == set(SUBBENCHMARKS) or (not options.quick and page.is_file()):
        return page
    return None


def replace_sections(page: str, reports: list[Report], options: Options) -> str:
    """``page`` with the section of each report (from its ``## title`` line to the next
    ``## ``) replaced by the report's new Markdown: a run of some sub-benchmarks refreshes
    their tables on an existing results page and leaves the others as they were measured."""
    for report in reports:
        new = report.markdown(relative_to=options.out)
        heading = new.splitlines()[0]
        lines = page.splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == heading]
        if not starts:
            page = page.rstrip("\n") + "\n\n" + new
            continue
        end = next(
            (i for i in range(starts[0] + 1, len(lines)) if lines[i].startswith("## ")),
            len(lines),
        )
        tail = "\n" if end < len(lines) else ""
        page = "".join(lines[: starts[0]]) + new + tail + "".join(lines[end:])
    return page


def results_page(reports: list[Report], options: Options) -> str:
    """The docs' results page: every report as Markdown, plots beside it."""
    import torch  # here, not at the top: `minipaged --help` should not wait for torch

    machine = f"{platform.machine()} with {os.cpu_count()} CPU cores"
    header = [
        "# Benchmark results",
        "",
        "Generated by `minipaged bench` (`make bench`); do not edit by hand. Each table says "
        "whether its numbers are simulated (model-free, lengths only), counted (the real block "
        "manager) or measured (wall time on the machine that ran it). Speeds are ratios "
        "against a baseline measured in the same run.",
        "",
        f"Measured on: {machine}, {options.device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s){', quick mode' if options.quick else ''}.",
        "",
    ]
    body = [report.markdown(relative_to=options.out) for report in reports]
    return "\n".join(header) + "\n" + "\n".join(body)
