"""A peer's test of what the last rounds added to the public surface, written from DESIGN.md
and the settings' own help (``minipaged generate --help``), as a team that never read the code
would test it: speculative decoding, FP8 KV-cache pools, chunked prefill, traces, ``exercises
init``, ``tui --serve``'s flags and ``bench``'s sub-benchmarks.

The promises checked are the ones a user relies on: a way of running that only changes how
the work is done (speculation, chunking, the KV dtype's pool size) never changes greedy
tokens; a recorded run replays; every refusal is one line with status 2 (bad usage) or 1 (a
broken file), with nothing written.
"""

from __future__ import annotations

import json

import pytest
import torch

from minipaged import LLM, SamplingParams, cli

PROMPTS = ["It is a truth universally acknowledged", "Emma Woodhouse, handsome, clever"]
GREEDY = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)


def greedy_tokens(**settings) -> list[list[int]]:
    llm = LLM("tiny", backend="torch", **settings)
    return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, GREEDY)]


@pytest.fixture(scope="module")
def plain() -> list[list[int]]:
    return greedy_tokens()


@pytest.mark.parametrize(
    "speculative",
    [
        {"method": "ngram"},
        {"method": "ngram", "num_speculative_tokens": 2, "branching": 1},
        {"method": "draft", "draft_model": "tiny-draft", "num_speculative_tokens": 3},
    ],
    ids=["ngram", "ngram-chain", "draft"],
)
def test_speculative_decoding_keeps_greedy_tokens(plain, speculative):
    """Speculation only guesses; the target verifies every guess, so greedy output is the
    target's own (vLLM's guarantee, and §'s: the model decides every token)."""
    assert greedy_tokens(speculative=speculative) == plain


def test_speculative_settings_are_taken_as_json_text_too(plain):
    assert greedy_tokens(speculative='{"method": "ngram"}') == plain


@pytest.mark.parametrize("budget", [32, 48, 64])
def test_chunked_prefill_keeps_greedy_tokens_for_any_budget(plain, budget):
    chunked = greedy_tokens(
        enable_chunked_prefill=True, max_num_batched_tokens=budget, max_num_seqs=4
    )
    assert chunked == plain


def test_a_prompt_past_the_budget_is_refused_without_chunked_prefill_and_runs_with_it():
    long_prompt = {"prompt_token_ids": list(range(1, 80))}
    llm = LLM("tiny", max_num_batched_tokens=40, max_num_seqs=4)
    with pytest.raises(ValueError, match=r"enable.chunked.prefill"):
        llm.generate([long_prompt], GREEDY)
    chunked = LLM("tiny", max_num_batched_tokens=40, max_num_seqs=4, enable_chunked_prefill=True)
    assert len(chunked.generate([long_prompt], GREEDY)[0].outputs[0].token_ids) == 10


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_an_fp8_cache_holds_one_byte_per_element(dtype):
    """``--kv-cache-dtype``'s help: fp8 is b = 1 byte, so the same memory holds four times the
    blocks of the tiny model's float32 cache."""
    fp8 = LLM("tiny", kv_cache_dtype=dtype).engine
    full = LLM("tiny").engine
    assert fp8.kv_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    assert torch.finfo(fp8.kv_cache.dtype).bits == 8
    assert fp8.block_manager.device.num_blocks == 4 * full.block_manager.device.num_blocks


def test_an_fp8_cache_generates_text():
    out = LLM("tiny", kv_cache_dtype="fp8_e4m3").generate(PROMPTS, GREEDY)
    assert all(len(o.outputs[0].token_ids) == 10 and o.outputs[0].text for o in out)


@pytest.mark.parametrize("dtype", ["float16", "int8", "fp8", "FP8_E4M3"])
def test_a_kv_cache_dtype_the_help_does_not_list_is_refused(dtype):
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        LLM("tiny", kv_cache_dtype=dtype)


def test_a_trace_replays_the_tokens_it_recorded(tmp_path, capsys):
    trace = tmp_path / "run.jsonl"
    argv = ["trace", "record", str(trace), "--prompt", "Emma", "--max-tokens", "4"]
    assert cli.main([*argv, "--temperature", "0"]) == 0
    recorded = capsys.readouterr().out
    lines = trace.read_text().splitlines()
    assert json.loads(lines[0])["prompts"] == ["Emma"] and len(lines) > 1
    assert cli.main(["trace", "replay", str(trace)]) == 0
    replayed = capsys.readouterr().out
    text = recorded.splitlines()[0]
    assert text.strip() and text in replayed


def test_a_cut_trace_replays_what_it_holds_and_fails_in_one_line(tmp_path, capsys):
    trace = tmp_path / "run.jsonl"
    cli.main(["trace", "record", str(trace), "--prompt", "Emma", "--max-tokens", "6"])
    capsys.readouterr()
    trace.write_text(trace.read_text()[:-40])
    assert cli.main(["trace", "replay", str(trace)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(trace) in err and "Traceback" not in err


def test_exercises_init_makes_a_folder_check_grades_and_a_second_init_is_refused(tmp_path, capsys):
    folder = tmp_path / "ex01"
    assert cli.main(["exercises", "init", "1", str(folder)]) == 0
    assert (folder / "README.md").is_file()
    capsys.readouterr()
    assert cli.main(["exercises", "init", "1", str(folder)]) == 2  # never overwrites work
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["tui", "--serve", "--port", "0"],
        ["tui", "--serve", "--port", "65536"],
        ["tui", "--port", "9000"],  # a server's flag without --serve
        ["tui", "--serve", "--screenshot", "x.svg"],
        ["tui", "--serve", "--max-sessions", "0"],
    ],
    ids=" ".join,
)
def test_tui_serve_refuses_bad_flags_before_it_listens(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", ["memory", "sharing"])
def test_each_model_free_benchmark_runs_quick_and_writes_only_into_out(
    tmp_path, monkeypatch, capsys, name
):
    """Run from a folder of its own, beside --out: a file written anywhere but --out (the
    working folder, --out's parent) is seen there, and so is a plot not written into --out."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["bench", name, "--quick", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out"]
    assert list(elsewhere.iterdir()) == []
    assert [p.name for p in out.iterdir()] == [f"{name}.svg"]  # with --json, no index.md


def test_an_unknown_benchmark_is_refused_naming_the_benchmarks(capsys):
    assert cli.main(["bench", "speed", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "speed" in err and "memory" in err and err.count("\n") == 1
