"""Environment variables that change how the kernels run, with values Numba would ignore in
silence, misread or crash on (99,999 threads: a segmentation fault at the first kernel). Each
is refused before numba is imported, in one line naming the variable, the value and the way
out: by the command line (status 2, whatever the subcommand) and by the library when a kernel
backend is first asked for. Generated over every variable and a set of values."""

from __future__ import annotations

import itertools

import pytest

from minipaged import cli
from minipaged.backend import kernels_for
from minipaged.environment import MAX_THREADS, SWITCHES, THREAD_COUNTS, check_environment

GOOD = {
    **{name: ["0", "1", ""] for name in SWITCHES},
    **{name: ["1", "2", "16", str(MAX_THREADS), " 4", ""] for name in THREAD_COUNTS},
    "NUMBA_THREADING_LAYER": ["omp", "workqueue", "default", ""],
}
BAD = {
    **{name: ["yes", "true", "2", "-1", "on", "1.0"] for name in SWITCHES},
    **{
        name: ["0", "-1", "abc", "2.5", "+4", "1_0", "٤", str(MAX_THREADS + 1), "99999", "9" * 5000]
        for name in THREAD_COUNTS
    },
    "NUMBA_THREADING_LAYER": ["bogus", "OMP", "openmp", "tbb,omp"],
}


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in GOOD.items() for v in vs], ids=str)
def test_a_value_numba_reads_as_meant_is_taken(name, value):
    check_environment({name: value})


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in BAD.items() for v in vs], ids=str)
def test_a_value_numba_would_ignore_misread_or_crash_on_is_refused_naming_it(name, value):
    with pytest.raises(ValueError, match=name) as refused:
        check_environment({name: value})
    message = str(refused.value)
    assert "\n" not in message and len(message) < 300
    assert repr(value)[:20] in message or f"{int(value):,}" in message
    assert "unset it" in message


CASES = list(itertools.islice(((n, v) for n, vs in BAD.items() for v in vs), 0, None, 3))


@pytest.mark.parametrize(("name", "value"), CASES, ids=str)
def test_the_command_line_refuses_it_before_any_work(name, value, monkeypatch, capsys):
    monkeypatch.setenv(name, value)
    assert cli.main(["demo", "--steps", "1", "--no-pause"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.count("\n") == 1 and name in printed.err


@pytest.mark.parametrize("backend", ["numba", "numba-cpu"])
def test_a_kernel_backend_is_refused_before_numba_reads_it(backend, monkeypatch):
    monkeypatch.setenv("NUMBA_NUM_THREADS", "99999")
    with pytest.raises(ValueError, match="NUMBA_NUM_THREADS: must be between 1 and 1,024"):
        kernels_for(backend)
    monkeypatch.delenv("NUMBA_NUM_THREADS")
    assert kernels_for("torch") is None


def test_bench_threads_and_numba_threads_have_one_bound():
    import argparse

    from tests.test_cli_corpus import leaves

    bench = next(parser for words, parser in leaves(cli.build_parser()) if words == ("bench",))
    threads = next(a for a in bench._actions if "--threads" in a.option_strings)
    assert threads.type(str(MAX_THREADS)) == MAX_THREADS
    with pytest.raises(argparse.ArgumentTypeError, match=f"between 1 and {MAX_THREADS:,}"):
        threads.type(str(MAX_THREADS + 1))
