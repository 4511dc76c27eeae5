"""A value checked in two places is checked by one rule: what the command line accepts for a
sampling flag is what ``SamplingParams`` accepts for its field (both ask
``minipaged.sampling_rules``), a request's seed is the engine's kind of seed, and a typed
integer is read one way by every flag, the TUI's go-to-step box and ``tui --size``
(``minipaged.typed_numbers``). Generated over
every sampling flag of every subcommand and a set of edge values, so a new flag or a rule
changed on one side only shows up here."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from minipaged import SamplingParams
from minipaged.cli import build_parser
from minipaged.config import EngineConfig
from minipaged.python_numbers import MAX_COUNT
from minipaged.typed_numbers import integer_between, read_integer, read_real
from tests.test_cli_corpus import leaves
from tui.command import MAX_SIZE, parse_size
from tui.go_to_step import step_asked

FLAG_FIELDS = {
    "--max-tokens": "max_tokens",
    "--temperature": "temperature",
    "--top-p": "top_p",
    "--top-k": "top_k",
    "--n": "n",
    "--beam-width": "beam_width",
}
"""The sampling flags and the ``SamplingParams`` field each one fills."""

EDGE_WORDS = [
    "0", "-0", "1", "2", "-1", "-2", "0.001", "0.009", "0.01", "1e-300", "1e-45", "0.5", "1.0",
    "1.5", "2.0", "65", "257", "100000", "nan", "inf", "-inf", "1e400", str(2**63), "ten", "",
]  # fmt: skip
"""Words on both sides of every sampling field's bounds, and words that are no number."""


SAMPLING_COMMANDS = [("generate",), ("trace", "record"), ("tui",)]
"""The subcommands that build ``SamplingParams`` from their flags (``simulate``'s ``--n`` is
the simulator's workload, not a request's)."""


def sampling_flags():
    """``(subcommand words, flag, field)`` for each sampling flag of every subcommand."""
    found = []
    for words, parser in leaves(build_parser()):
        if words not in SAMPLING_COMMANDS:
            continue
        for action in parser._actions:
            for flag in action.option_strings:
                if flag in FLAG_FIELDS:
                    found.append((words, flag, FLAG_FIELDS[flag]))
    return found


def library_accepts(field: str, word: str) -> bool:
    """Whether ``SamplingParams`` takes the number ``word`` reads as, for ``field`` (beam search
    on for ``beam_width``, which needs it)."""
    kind = int if field in ("max_tokens", "top_k", "n", "beam_width") else float
    try:
        value = kind(word)
    except ValueError:
        return False
    beam = {"use_beam_search": True, "temperature": 0} if field == "beam_width" else {}
    try:
        SamplingParams(**beam, **{field: value})
    except ValueError:
        return False
    return True


def command_line_accepts(words: tuple[str, ...], flag: str, word: str) -> bool:
    """Whether the subcommand's parser takes ``flag word`` (with a prompt, which the flag
    needs, and a trace to write for ``trace record``): a refusal is argparse's exit, status 2."""
    needed = ["--prompt", "x"] + (["run.jsonl"] if words == ("trace", "record") else [])
    try:
        build_parser().parse_args([*words, *needed, f"{flag}={word}"])
    except SystemExit as refused:
        assert refused.code == 2
        return False
    return True


@pytest.mark.parametrize("word", EDGE_WORDS)
@pytest.mark.parametrize("words, flag, field", sampling_flags(), ids=str)
def test_a_sampling_flag_accepts_what_sampling_params_accepts(words, flag, field, word, capsys):
    assert command_line_accepts(words, flag, word) == library_accepts(field, word), (
        f"minipaged {' '.join(words)} {flag}={word!r} and SamplingParams({field}=...) disagree"
    )
    if not library_accepts(field, word):  # refused where it is typed, naming the flag
        assert f"argument {flag}" in capsys.readouterr().err


def test_every_subcommand_that_samples_is_covered():
    covered = {(words, flag) for words, flag, _ in sampling_flags()}
    for words in SAMPLING_COMMANDS[:2]:
        assert {(words, flag) for flag in FLAG_FIELDS} <= covered
    assert {(("tui",), flag) for flag in ("--n", "--beam-width", "--max-tokens")} <= covered


def test_a_temperature_below_the_floor_is_refused_where_it_is_typed(capsys):
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["generate", "--prompt", "x", "--temperature", "0.001"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --temperature" in err and "pass 0 for greedy" in err
    assert err.startswith("minipaged generate: ") and err.count("\n") == 1


SEEDS = [0, 7, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1, -(2**63), 1.5, math.nan, True, "3", None]
SEEDS += [np.int64(5), np.uint64(2**64 - 1)]


def accepts(make) -> bool:
    try:
        make()
    except (ValueError, TypeError):
        return False
    return True


@pytest.mark.parametrize("seed", SEEDS, ids=repr)
def test_a_request_seed_and_the_engine_seed_follow_one_rule(seed):
    engine = accepts(lambda: EngineConfig(seed=seed))
    request = accepts(lambda: SamplingParams(seed=seed))
    assert request == (engine or seed is None), f"seed={seed!r}: engine {engine}, request {request}"


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5])
def test_a_refused_seed_says_the_same_words_on_both_sides(seed):
    with pytest.raises(ValueError) as engine:
        EngineConfig(seed=seed)
    with pytest.raises(ValueError) as request:
        SamplingParams(seed=seed)
    assert str(engine.value) == str(request.value)
    assert "from 0 to 18,446,744,073,709,551,615" in str(request.value)


@pytest.mark.parametrize("word", ["-1", str(2**64), "1.5"])
def test_the_seed_flag_refuses_what_the_engine_refuses(word, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "x", "--seed", word])
    assert "argument --seed" in capsys.readouterr().err


def test_the_largest_seed_runs_a_request():
    from minipaged import LLM

    llm = LLM("tiny", seed=2**64 - 1, num_gpu_blocks=16, backend="torch")
    params = SamplingParams(max_tokens=3, seed=2**64 - 1, ignore_eos=True)
    outputs = llm.generate(["It is", "It is"], [params, SamplingParams(max_tokens=3)])
    assert [len(out.outputs[0].token_ids) for out in outputs] == [3, 3]


@pytest.mark.parametrize("flag", ["--n", "--beam-width"])
@pytest.mark.parametrize("words", SAMPLING_COMMANDS, ids=" ".join)
def test_more_sequences_than_a_batch_holds_are_refused_before_the_model_loads(
    words, flag, tmp_path, capsys, monkeypatch
):
    from minipaged import cli, llm

    def never(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(llm.LLM, "__init__", never)
    target = [str(tmp_path / "run.jsonl")] if words == ("trace", "record") else []
    shot = ["--screenshot", str(tmp_path / "shot.svg")] if words == ("tui",) else []
    argv = [*words, *target, "--prompt", "x", flag, "33", "--max-num-seqs", "32", *shot]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{flag} 33 runs more sequences" in err and "--max-num-seqs 32" in err


SEED_WORDS = ["0", "1", "-1", str(2**32), str(2**63), str(2**64 - 1), str(2**64), "1.5", "x"]


def seed_flags():
    """``(subcommand words, parser)`` for every subcommand with a ``--seed``."""
    return [
        (words, parser)
        for words, parser in leaves(build_parser())
        if any("--seed" in action.option_strings for action in parser._actions)
    ]


@pytest.mark.parametrize("word", SEED_WORDS)
@pytest.mark.parametrize("words, parser", seed_flags(), ids=lambda v: str(v)[:20])
def test_every_seed_flag_takes_what_the_engine_takes(words, parser, word, capsys):
    action = next(a for a in parser._actions if "--seed" in a.option_strings)
    try:
        action.type(word)
        flag = True
    except argparse.ArgumentTypeError:
        flag = False
    engine = accepts(lambda: EngineConfig(seed=int(word)))
    assert flag == engine, f"minipaged {' '.join(words)} --seed {word}: {flag}, engine {engine}"


def test_the_seed_flags_found_include_the_benchmarks_and_the_engines():
    found = {words for words, _ in seed_flags()}
    assert {("generate",), ("simulate",), ("bench",), ("tui",), ("trace", "record")} <= found


def integer_setting_flags():
    """``(words, flag, rule)`` for every flag of every subcommand that fills an integer
    ``EngineConfig`` setting by its name (``dest``), the engine's own flags and the others
    (``simulate --block-size``, ``bench --seed``)."""
    from minipaged.config import settings_of

    for words, parser in leaves(build_parser()):
        for action in parser._actions:
            rule = settings_of().get(action.dest)
            if action.option_strings and rule is not None and rule.kind is int:
                yield pytest.param(
                    action, rule, id=f"{' '.join(words)} {action.option_strings[-1]}"
                )


@pytest.mark.parametrize(("action", "rule"), list(integer_setting_flags()))
def test_every_integer_setting_flag_takes_the_settings_range_and_no_more(action, rule):
    """``simulate --block-size 8192`` was taken by the flag and then refused by the library
    (which stops at 4,096) in the library's words, naming no flag."""

    def taken(word: int) -> bool:
        try:
            action.type(str(word))
        except argparse.ArgumentTypeError:
            return False
        return True

    low = int(rule.low or 0)
    assert taken(low) and not taken(low - 1)
    if rule.high is not None:
        assert taken(int(rule.high)) and not taken(int(rule.high) + 1)


def test_the_integer_setting_flags_found_include_simulates_block_size():
    found = {param.id for param in integer_setting_flags()}
    assert {"simulate --block-size", "generate --block-size", "bench --seed"} <= found


INTEGER_WORDS = ["0", "7", "-0", "-3", "007", "+3", " 3", "3 ", "3\n", "1_0", "٣", "²", "3.0"]
INTEGER_WORDS += ["1e3", "0x10", "", "-", str(MAX_COUNT), str(MAX_COUNT + 1), "9" * 4300]
INTEGER_WORDS += ["9" * 4301, "\x00", "1\x002"]
"""Integers as a person may type them, in every spelling Python's ``int`` reads or refuses."""


def rule_reads(word: str) -> int | None:
    try:
        return read_integer(word)
    except ValueError:
        return None


def integer_flags():
    """``(subcommand words, action)`` for every flag typed as an integer."""
    return [
        (words, action)
        for words, parser in leaves(build_parser())
        for action in parser._actions
        if getattr(action.type, "__name__", "") == "integer"
    ]


def typed(parse, word: str):
    """What ``parse`` makes of ``word``, or None where it refuses it."""
    try:
        return parse(word)
    except (argparse.ArgumentTypeError, ValueError):
        return None


@pytest.mark.parametrize("word", INTEGER_WORDS, ids=lambda word: repr(word[:12]))
def test_every_integer_flag_reads_a_word_as_the_one_rule_does(word):
    value = rule_reads(word)
    for words, action in integer_flags():
        taken = typed(action.type, word)
        where = f"minipaged {' '.join(words)} {action.option_strings or action.dest} {word!r:.20}"
        assert taken is None or taken == value, f"{where} read {taken}, the rule {value}"
        if value is None:
            assert taken is None, f"{where} was taken; the rule reads no integer there"


@pytest.mark.parametrize("word", INTEGER_WORDS, ids=lambda word: repr(word[:12]))
def test_the_go_to_step_box_takes_the_steps_that_steps_takes(word):
    steps = next(a for w, a in integer_flags() if w == ("tui",) and "--steps" in a.option_strings)
    assert step_asked(word, last=MAX_COUNT, finished=True) == typed(steps.type, word)


@pytest.mark.parametrize("word", INTEGER_WORDS, ids=lambda word: repr(word[:12]))
def test_each_side_of_a_size_is_read_by_the_one_rule(word):
    for size, side, high in ((f"{word}x40", 0, MAX_SIZE[0]), (f"40x{word}", 1, MAX_SIZE[1])):
        read = typed(parse_size, size)
        expected = typed(lambda text, high=high: integer_between(text, 1, high), word)
        assert (read and read[side]) == expected, f"--size {size!r:.30}: {read}"


REAL_WORDS = ["0", "1.5", "-1.5", ".5", "5.", "1e3", "1E-3", "+1.5", " 1.5", "1.5 ", "١.٥", "٨٠"]
REAL_WORDS += ["1_0.5", "0x1p3", "1e", "e3", ".", "-", "", "inf", "nan", "1e400", "1,5"]
"""Real numbers as a person may type them, in every spelling Python's ``float`` reads or not."""


def real_rule_reads(word: str) -> float | None:
    try:
        return read_real(word)
    except ValueError:
        return None


@pytest.mark.parametrize("word", REAL_WORDS, ids=repr)
def test_every_number_flag_reads_a_word_as_the_one_rule_does(word):
    value = real_rule_reads(word)
    flags = [
        (words, action)
        for words, parser in leaves(build_parser())
        for action in parser._actions
        if getattr(action.type, "__name__", "") in ("number", "limit")  # limit: or inf
    ]
    assert flags
    for words, action in flags:
        taken = typed(action.type, word)
        where = f"minipaged {' '.join(words)} {action.option_strings[0]} {word!r}"
        assert taken is None or taken == value, f"{where} read {taken}, the rule {value}"
        if value is None:
            assert taken is None, f"{where} was taken; the rule reads no number there"


def test_no_flag_reads_a_number_by_pythons_own_rule():
    """A flag typed ``int`` or ``float`` escapes the two tests above (they find the rule's
    types by name) and reads "٨٠" or "1_0" as Python does: every number flag goes through
    ``minipaged.typed_numbers``. ``exercises check --time-limit`` and ``--memory-limit`` did."""
    builtin = [
        f"minipaged {' '.join(words)} {action.option_strings or action.dest}"
        for words, parser in leaves(build_parser())
        for action in parser._actions
        if action.type in (int, float, complex)
    ]
    assert builtin == []
