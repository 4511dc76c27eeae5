"""A sweep of every ``minipaged`` subcommand and every option, generated from the parser, with
a family of bad values by what the option takes, beside ``test_cli_corpus`` (which tries each
kind's malformed words where they are typed):

- a number just past each end of the range its type declares (``arguments.integer`` and
  ``real`` say it in ``bounds``), and ``-1`` and ``0`` where the range starts above them:
  refused where typed, naming the option;
- for each option that names something to read (a trace, a model, a student's folder, a
  class's folder), a path where nothing is, an empty folder and a file of noise, one of which
  is always the wrong kind and the other two nothing it could use: refused by the command
  itself, with status 2 or 1, in one line naming the path and the option it was given to
  (``arguments.naming``), without a traceback, and with nothing written anywhere;
- every setting of ``LLM`` and every parameter of ``BlockManager``, five wrong values each:
  a ``TypeError`` or ``ValueError`` naming the parameter.

A new option is swept the day it is added: the families are chosen by its type, and an option
that reads a path but takes none of these types fails ``test_every_path_option_is_swept``.
"""

from __future__ import annotations

import argparse
import math

import pytest
from test_cli_corpus import (
    FREE_TEXT,
    PARSER,
    assert_usage_error,
    example,
    leaves,
    name_of,
    valued_options,
)

from minipaged import cli

# -- numbers just past their range, refused where they are typed -----------------------------


def past_the_range(action: argparse.Action) -> list[str]:
    """Words for ``action`` just outside the ``bounds`` its type declares."""
    low, high = action.type.bounds
    words = []
    if low is not None:
        step = 1 if action.type.__name__ == "integer" else max(abs(low), 1) * 1e-3
        below = low - step
        words += [str(int(below)) if action.type.__name__ == "integer" else repr(below)]
        words += [w for w in ("-1", "0") if float(w) < low and w not in words]
    if high is not None and math.isfinite(high):
        above = high + 1 if action.type.__name__ == "integer" else high * (1 + 1e-3) + 1e-3
        words += [str(int(above)) if action.type.__name__ == "integer" else repr(above)]
    return words


BOUNDED = [
    pytest.param(words, action, value, id=f"{' '.join(words)} {name_of(action)} {value}")
    for words, action in valued_options()
    if hasattr(action.type, "bounds")
    for value in past_the_range(action)
]


def test_the_sweep_reaches_every_subcommand_with_a_bounded_number():
    swept = {" ".join(p.values[0]) for p in BOUNDED}
    assert {"demo", "generate", "trace record", "tui", "simulate", "bench"} <= swept
    assert {"exercises check", "exercises hint"} <= swept


@pytest.mark.parametrize(("words", "action", "value"), BOUNDED)
def test_a_number_just_past_its_declared_range_is_refused_naming_the_option(
    capsys, words, action, value
):
    parser = dict(leaves(PARSER))[words]
    argv = [*words, *needed_words(parser, action), name_of(action), value]
    assert_usage_error(argv, capsys, name_of(action), main=PARSER.parse_args)


def needed_words(parser: argparse.ArgumentParser, action: argparse.Action) -> list[str]:
    """What ``parser``'s command needs besides ``action``: its positionals and required
    options, and the option ``action`` is meaningless without (``arguments.requires``)."""
    needed = [
        a for a in parser._actions if a.required and a is not action and a.nargs not in ("*", "?")
    ]
    needed += [action.required_option] if hasattr(action, "required_option") else []
    words = []
    for each in dict.fromkeys(needed):
        words += [*([name_of(each)] if each.option_strings else []), *example(each)]
    return words


# -- paths to read that hold nothing the command can use ------------------------------------

READS = ("path", "text")
"""The types of an option that may name something to read; ``FREE_TEXT`` and ``NO_PATH`` say
which of them are judged otherwise."""

NO_PATH = {
    ("exercises init", "--site-url"): "a web address, checked as it is typed (test_cli_corpus)",
}


def path_options():
    for words, action in valued_options():
        kind = getattr(action.type, "__name__", None)
        where = (" ".join(words), name_of(action))
        if kind in READS and where not in FREE_TEXT and where not in NO_PATH:
            yield words, action


def test_every_path_option_is_swept():
    swept = {(" ".join(words), name_of(action)) for words, action in path_options()}
    for option in [("trace replay", "file"), ("tui", "--trace"), ("tui", "--path")]:
        assert option in swept
    for option in [("exercises check", "--path"), ("exercises check", "--batch")]:
        assert option in swept
    assert ("generate", "--model") in swept and ("exercises check", "directory") in swept


NOTHING_TO_USE = {
    "nothing there": lambda root: root / "missing",
    "an empty folder": lambda root: root / "empty",
    "a file of noise": lambda root: root / "noise.bin",
}


class Accepted(BaseException):
    """A command went on to its work with a path it should have refused."""


@pytest.fixture
def refusing_to_work(monkeypatch):
    """Every command's work replaced by ``Accepted``: an accepted path fails the test at once,
    instead of running a model, an app or a grading."""
    from minipaged.grader import command as grading
    from tui import command as tui

    def accepted(*args, **kwargs):
        raise Accepted

    monkeypatch.setattr(tui, "run_ending_on_signals", accepted)
    monkeypatch.setattr(tui, "exercise_replay", accepted)
    monkeypatch.setattr(grading, "grade", accepted)
    monkeypatch.setattr("minipaged.llm.LLM.generate", accepted)
    monkeypatch.setattr("minipaged.transcript.replay", accepted)
    monkeypatch.setattr("minipaged.study.bench.run", accepted)


KNOWN_MISSES: dict[tuple[str, str], str] = {}
"""Cases the sweep found that are not fixed yet, each with why: strict, so a fix is noticed."""


def marks(words: tuple[str, ...], action: argparse.Action, case: str) -> list:
    why = KNOWN_MISSES.get((f"{' '.join(words)} {name_of(action)}", case))
    return [pytest.mark.xfail(strict=True, reason=why, raises=pytest.fail.Exception)] if why else []


SWEPT = [
    pytest.param(
        words,
        action,
        case,
        id=f"{' '.join(words)} {name_of(action)} {case}",
        marks=marks(words, action, case),
    )
    for words, action in path_options()
    for case in NOTHING_TO_USE
]


@pytest.mark.parametrize(("words", "action", "case"), SWEPT)
def test_a_path_that_holds_nothing_to_use_is_refused_naming_it_and_nothing_is_written(
    capsys, tmp_path, monkeypatch, refusing_to_work, words, action, case
):
    root = tmp_path / "root"
    root.mkdir()
    (root / "empty").mkdir()
    (root / "noise.bin").write_bytes(bytes(range(256)) * 16)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    path = NOTHING_TO_USE[case](root)
    parser = dict(leaves(PARSER))[words]
    needed = needed_words(parser, action)
    if words[0] in ("generate", "trace") and words[-1] != "replay":
        needed += ["--prompt", "It is", "--max-tokens", "1"]
    given = [name_of(action), str(path)] if action.option_strings else [str(path)]
    if not action.option_strings:  # after the positionals before it
        positionals = [a for a in parser._actions if not a.option_strings]
        before_it = positionals[: positionals.index(action)]
        given = [w for each in before_it for w in example(each)] + given
        needed = [w for w in needed if w not in given]
    argv = [*words, *given, *needed]
    try:
        status = cli.main(argv)
    except Accepted:
        pytest.fail(f"minipaged {' '.join(argv)} went on to its work with {case}")
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert status in (1, 2) and len(lines) == 1, (status, err[:400])
    assert str(path) in lines[0] or path.name in lines[0], lines[0]
    assert not action.option_strings or name_of(action) in lines[0], "the option is not named"
    assert sorted(tmp_path.rglob("*")) == before, "something was written"


# -- the Python entry points a student calls, swept over their parameters --------------------


class Opaque:
    """A value of no kind any parameter takes, with a repr that is the same in every worker."""

    def __repr__(self) -> str:
        return "Opaque()"


WRONG = [Opaque(), [], -1, math.nan, "Ελίζαβετ"]
"""Wrong for every setting: no kind, a container, a negative count, NaN, text naming nothing."""


def entry_parameters():
    """``(callable, parameter)`` for ``LLM`` (each setting of ``EngineConfig``, by keyword, as
    ``LLM(block_size=...)`` takes it) and for ``BlockManager``'s constructor."""
    import inspect

    from minipaged import LLM
    from minipaged.block_manager import BlockManager
    from minipaged.config import settings_of

    for name in settings_of():
        if name != "block_manager_class":  # a class: its own corpus (test_api_corpus)
            yield pytest.param(LLM, name, id=f"LLM {name}")
    for name in inspect.signature(BlockManager).parameters:
        yield pytest.param(BlockManager, name, id=f"BlockManager {name}")


@pytest.mark.parametrize("value", WRONG, ids=repr)
@pytest.mark.parametrize(("entry", "name"), list(entry_parameters()))
def test_a_wrong_value_for_an_entry_point_is_refused_naming_the_parameter(entry, name, value):
    """Refused before anything loads: ``LLM`` checks its settings before the weights."""
    given = {"num_gpu_blocks": 8} if entry.__name__ == "BlockManager" else {}
    with pytest.raises((TypeError, ValueError)) as refused:
        entry(**given | {name: value})
    assert name in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(("entry", "typo"), [("LLM", "blocksize"), ("SamplingParams", "maxtokens")])
def test_a_misspelt_keyword_is_refused_naming_it(entry, typo):
    import minipaged

    with pytest.raises(TypeError, match=typo):
        getattr(minipaged, entry)(**{typo: 4})
