"""A trace that ends early at a damaged line (a run cut off mid-write, a file edited), shown by
``minipaged tui``. ``trace replay`` prints the steps before the damage, names the line and
exits 1; ``tui --trace T --screenshot OUT`` drew those steps and exited 0 without a word, and
so did the live app when it was quit, though it showed the damage in its status line. A script
that records and screenshots traces took the picture of half a run for the run. Now both say
what ``trace replay`` says, on one line, and exit 1; the picture of what could be read is
still written; an intact trace still exits 0."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minipaged import cli, trace
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine
from minipaged.sampling import SamplingParams
from tui.command import failed

DAMAGES = {
    "cut off mid-line": lambda lines: lines[:-1] + [lines[-1][:40]],
    "a line that is no JSON": lambda lines: lines[:3] + ["not json"] + lines[3:],
    "a line of NUL bytes": lambda lines: lines[:2] + ["\x00" * 20],
}


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> list[str]:
    engine = LLMEngine(load_model("tiny"), block_size=4)
    engine.add_request({"prompt_token_ids": [5, 6, 7]}, SamplingParams(max_tokens=6))
    steps = []
    while engine.has_unfinished():
        steps.append(engine.step())
    path = tmp_path_factory.mktemp("trace") / "run.jsonl"
    trace.save(path, {"model": "tiny"}, steps)
    return path.read_text().splitlines()


def written(tmp_path, lines: list[str]) -> str:
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_the_live_app_quit_on_a_damaged_trace_exits_1_saying_where(damage, lines, tmp_path, capsys):
    recorded = trace.load(written(tmp_path, DAMAGES[damage](lines)))
    assert recorded.steps and recorded.error  # some steps, then the damage
    app = SimpleNamespace(return_code=0, error=None, trace=recorded)
    assert failed(app) == 1
    err = capsys.readouterr().err
    assert err == f"minipaged tui: the trace ends early: {recorded.error}\n"


def test_a_screenshot_of_a_damaged_trace_is_written_and_exits_1(lines, tmp_path, capsys):
    path = written(tmp_path, DAMAGES["cut off mid-line"](lines))
    out = tmp_path / "shot.svg"
    assert cli.main(["tui", "--trace", path, "--screenshot", str(out)]) == 1
    captured = capsys.readouterr()
    assert out.read_text().startswith("<svg") and f"wrote {out}" in captured.out
    assert captured.err.count("\n") == 1 and "the trace ends early" in captured.err
    assert f"line {len(lines)} is cut off or corrupt" in captured.err


def test_an_intact_trace_still_exits_0(lines, tmp_path, capsys):
    app = SimpleNamespace(return_code=0, error=None, trace=trace.load(written(tmp_path, lines)))
    assert failed(app) == 0 and capsys.readouterr().err == ""
    app = SimpleNamespace(return_code=0, error=None, trace=None)  # a live run
    assert failed(app) == 0
