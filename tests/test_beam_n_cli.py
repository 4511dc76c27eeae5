"""``--n N --beam-width K`` on the command line: the N best of K beams, as
``SamplingParams(n=N, use_beam_search=True, beam_width=K)`` returns them, end to end through
``generate``, ``trace record`` (and its replay) and ``tui``; N above K refused before any
model loads. ``simulate`` reads the pair the same way: the K beams are simulated (they hold
the memory), the N best are returned, and it refuses what ``generate`` refuses, in the same
words."""

import contextlib
import io
import json

import pytest
from test_cli_corpus import assert_usage_error
from test_readme import request_texts, samples

from minipaged import cli
from tui.scenarios import custom

BEAMS = ["--prompt", "Emma", "--max-tokens", "3", "--beam-width", "3"]


def beam_texts(out: str) -> list[str]:
    """The sample texts of one request, as many as were printed, each checked distinct."""
    texts = samples(request_texts(out))
    assert len(set(texts)) == len(texts), texts
    return texts


def test_generate_returns_the_n_best_of_the_beams(capsys):
    assert cli.main(["generate", *BEAMS]) == 0
    every = beam_texts(capsys.readouterr().out)
    assert len(every) == 3
    assert cli.main(["generate", *BEAMS, "--n", "2"]) == 0
    best = beam_texts(capsys.readouterr().out)
    assert best == every[:2]  # the first two of the same three, best first


def test_trace_record_keeps_the_n_best_and_replays_them(capsys, tmp_path):
    trace = tmp_path / "beams.jsonl"
    assert cli.main(["trace", "record", str(trace), *BEAMS, "--n", "2"]) == 0
    recorded = beam_texts(capsys.readouterr().out)
    assert len(recorded) == 2
    assert cli.main(["trace", "replay", str(trace)]) == 0
    assert beam_texts(capsys.readouterr().out) == recorded


def test_tui_runs_the_n_best_of_the_beams(capsys, tmp_path):
    shot = tmp_path / "beams.svg"
    argv = ["tui", *BEAMS, "--n", "2", "--steps", "4", "--screenshot", str(shot)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert shot.stat().st_size > 0
    params = custom(("Emma",), n=2, beam_width=3).requests[0].params
    assert (params.num_sequences, params.num_returned) == (3, 2)


@pytest.mark.parametrize(
    "command", [["generate"], ["trace", "record", "out.jsonl"], ["tui"]], ids=" ".join
)
def test_more_best_beams_than_beams_is_refused_in_one_line(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    argv = [*command, *BEAMS, "--n", "4"]
    line = assert_usage_error(argv, capsys, "--n 4", "--beam-width 3", "lower --n")
    assert "raise --beam-width" in line
    assert list(tmp_path.iterdir()) == []  # nothing written, no model loaded first


SIMULATE = ["simulate", "--requests", "20", "--beam-width", "4", "--json"]


def simulated(argv: list[str]) -> dict:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(argv) == 0
    return json.loads(printed.getvalue())


def test_simulate_runs_the_k_beams_and_returns_the_n_best():
    """The N best are chosen from K beams that all ran: the memory is that of K beams."""
    every = simulated(SIMULATE)
    best = simulated([*SIMULATE, "--n", "2"])
    assert best["rows"] == every["rows"]
    assert "the 2 best returned" in best["notes"][0]
    assert "best returned" not in every["notes"][0]


@pytest.mark.parametrize("n", ["1", "5", "1024"])
def test_simulate_refuses_the_best_beams_generate_refuses_in_its_words(capsys, tmp_path, n):
    generate = ["generate", "--prompt", "Emma", "--beam-width", "4", "--n", n]
    said = assert_usage_error(generate, capsys, f"--n {n}", "--beam-width 4")
    line = assert_usage_error([*SIMULATE, "--n", n], capsys, f"--n {n}", "--beam-width 4")
    assert line.removeprefix("minipaged simulate:") == said.removeprefix("minipaged generate:")
