"""``--n N --beam-width K`` on the command line: the N best of K beams, as
``SamplingParams(n=N, use_beam_search=True, beam_width=K)`` returns them, end to end through
``generate``, ``trace record`` (and its replay) and ``tui``; N above K refused before any
model loads."""

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
