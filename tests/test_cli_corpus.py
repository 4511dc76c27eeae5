"""Bad values for every option of every subcommand, generated from the parser itself: a new
option is covered the day it is added. Each case is refused where it is typed (exit status 2,
one line that names the option), before anything loads, so the whole corpus runs in seconds.
Beside it: options that mean nothing without another or contradict a third, files named for
reading that are not readable files, and error lines kept short however long the value."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from minipaged import cli
from minipaged.arguments import LONGEST_MESSAGE

USAGE = 2

HUGE = "x" * 100_000
UNWRITABLE = ["/proc/minipaged-out"] if Path("/proc/self").is_dir() else []
"""A path in a folder no file can be made in, even by root: refused where it is typed, not
after the benchmark, grading or run whose output it was to hold."""
BAD_VALUES = {
    "integer": [
        "",
        "   ",
        "2.5",
        "nan",
        "1e400",
        "ten",
        "a\x00b",
        "1" * 5000 + "x",
        "9" * 40,
        HUGE,
    ],
    "number": ["", "   ", "nan", "inf", "1e400", "1e300", "-1e300", "ten", "a\x00b", HUGE],
    "text": ["", "   ", "a\x00b"],
    "path": ["", "   ", "a\x00b"],
    "output_file": ["", "   ", "a\x00b", *UNWRITABLE],
    "output_folder": ["", "   ", "a\x00b", *UNWRITABLE, "/etc/hostname/under-a-file"],
    "choices": ["", "   ", "a\x00b", "Ελίζαβετ", HUGE],
    "origin_flag": ["", "   ", "a\x00b", "*", "javascript:alert(1)", "https://x.org/p", HUGE],
    "host_flag": ["", "   ", "a\x00b", "http://localhost", "localhost:8000", "[::1]", HUGE],
    "size": ["", "x", "120", "0x40", "120x0", "-5x40", "1e3x40", "120x40x2", "100000x100000", HUGE]
    + ["²x40", "120x٤٠", "9" * 5000 + "x40"],
}
"""Values each kind of option refuses, by the name of its argparse type (``minipaged.arguments``),
or ``choices`` for an option with a list of them. Every number has an upper bound: a finite
1e300 overflowed ``simulate --hbm-gb``'s budget in bytes, and an integer past ``MAX_COUNT``
sizes nothing any run can hold."""

FREE_TEXT = {
    ("generate", "--prompt"): "any text is a prompt (an empty one is refused by the engine)",
    ("trace record", "--prompt"): "as generate's",
    ("tui", "--prompt"): "as generate's",
    ("tui", "--keys"): "key names, checked against the key map by tui.command.screenshot_keys",
    ("bench", "names"): "benchmark names, checked against the benchmarks before any runs",
    ("exercises init", "directory"): "a folder to create, checked by the grader's init",
    ("exercises check", "--memory-limit"): "GiB or inf, checked by grader.time_limit.limits_from",
    ("exercises check", "--time-limit"): "seconds or inf, as --memory-limit",
}
"""Options whose values are judged after parsing, each with where; every other option that
takes a value has a type or choices that refuse bad ones as they are typed."""


def leaves(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """Every runnable subcommand: its words (``("trace", "record")``) and its parser."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield words, parser
    for action in subparsers:
        for name, child in action.choices.items():
            yield from leaves(child, (*words, name))


def valued_options():
    """``(words, action)`` for every option or positional that takes a value."""
    for words, parser in leaves(PARSER):
        for action in parser._actions:
            if action.nargs != 0 and not isinstance(action, argparse._HelpAction):
                yield words, action


def name_of(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else action.dest


def kind_of(action: argparse.Action) -> str | None:
    if action.choices is not None:
        return "choices"
    name = getattr(action.type, "__name__", None)
    name = {"exercise_number": "integer"}.get(name, name)  # an integer the TUI can run
    return name if name in BAD_VALUES else None


PARSER = cli.build_parser()
"""The parser ``cli.main`` builds, built once: the corpus's hundreds of values are refused
while parsing, and building the parser costs more than parsing."""


def run(argv: list[str], capsys, main=cli.main) -> tuple[int, str, str]:
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse exits on bad usage
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def assert_usage_error(argv: list[str], capsys, *names: str, main=cli.main) -> str:
    status, out, err = run(argv, capsys, main)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err[:500]!r}"
    assert status == USAGE, f"exit {status}: {lines[0][:300]!r}"
    assert lines[0].startswith("minipaged")
    assert len(lines[0]) < LONGEST_MESSAGE + 200, f"a line of {len(lines[0]):,} characters"
    for name in names:
        assert name in lines[0], f"the message should name {name!r}: {lines[0][:300]!r}"
    return lines[0]


def test_every_option_that_takes_a_value_refuses_bad_ones_where_it_is_typed():
    """An option without a type or choices accepts anything at parse time; one added that
    way must say, in ``FREE_TEXT``, where its value is judged."""
    untyped = [
        (" ".join(words), name_of(action))
        for words, action in valued_options()
        if kind_of(action) is None and (" ".join(words), name_of(action)) not in FREE_TEXT
    ]
    assert not untyped, f"options with no type that checks their value: {untyped}"


CASES = [
    pytest.param(words, action, value, id=f"{' '.join(words)} {name_of(action)} {value[:8]!r}")
    for words, action in valued_options()
    if kind_of(action) is not None
    for value in BAD_VALUES[kind_of(action)]
]


@pytest.mark.parametrize(("words", "action", "value"), CASES)
def test_a_bad_value_is_a_one_line_usage_error_naming_the_option(capsys, words, action, value):
    argv = [*words, *([name_of(action), value] if action.option_strings else [value])]
    if not action.option_strings:  # the positionals before it take good values
        positionals = [a for a in dict(leaves(PARSER))[words]._actions if not a.option_strings]
        argv[len(words) : len(words)] = [
            word for each in positionals[: positionals.index(action)] for word in example(each)
        ]
    shown = name_of(action) if action.option_strings else action.metavar or action.dest
    assert_usage_error(argv, capsys, shown, main=PARSER.parse_args)


def test_the_corpus_runs_through_the_command_line_as_well(capsys):
    assert_usage_error(["generate", "--prompt", "x", "--n", "2.5"], capsys, "--n")


# -- options that mean something only beside another, or not beside a third ----------------

EXAMPLES = {
    "--steps": ["3"],
    "--size": ["80x24"],
    "--keys": ["n"],
    "--host": ["0.0.0.0"],
    "--port": ["9000"],
    "--allow-origin": ["https://course.example.org"],
    "--max-sessions": ["2"],
    "--path": ["."],
    "--batch": ["."],
    "--solution": [],
    "--n": ["2"],
    "--temperature": ["0"],  # greedy: what --top-p and --top-k cannot go beside
    "--top-p": ["0.5"],
    "--top-k": ["5"],
    "--beam-width": ["2"],
    "--max-tokens": ["5"],
    "--prompt": ["Emma"],
    "--scenario": ["beam"],
    "--exercise": ["2"],
    "--trace": ["run.jsonl"],
    "--serve": [],
    "--screenshot": ["shot.svg"],
    "file": ["run.jsonl"],
    "number": ["1"],  # an exercise
    "--device": ["cpu"],
    "--model": ["tiny"],
    "--speculative-config": ['{"method": "ngram"}'],
}
"""A value for each option in a pair (``arguments.requires`` and ``excludes``) that its type
takes; ``example`` makes one for the rest."""


def example(action: argparse.Action) -> list[str]:
    """The words that give ``action`` a value its type accepts."""
    if name_of(action) in EXAMPLES:
        return EXAMPLES[name_of(action)]
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(list(action.choices)[-1])]
    return {"integer": ["2"], "number": ["0.5"]}[kind_of(action)]


def pairs():
    for words, parser in leaves(PARSER):
        for action in parser._actions:
            needed = getattr(action, "required_option", None)
            if needed is not None:
                yield pytest.param(words, action, needed, "alone", id=f"{name_of(action)} alone")
            for other, *_ in getattr(action, "excluded_options", ()):
                ids = f"{name_of(action)} with {name_of(other)}"
                yield pytest.param(words, action, other, "together", id=ids)


def essentials(parser, action, other, how) -> list[str]:
    """What the command needs besides the pair, so that the pair is what it refuses: its
    positionals and required options, and what each of the pair ``requires``."""
    needed = [a for a in parser._actions if a.required and a not in (action, other)]
    if how == "together":
        needed += [a.required_option for a in (action, other) if hasattr(a, "required_option")]
    words = []
    for each in dict.fromkeys(needed):
        flag = [name_of(each)] if each.option_strings else []
        words += [*flag, *example(each)]
    return words


@pytest.mark.parametrize(("words", "action", "other", "how"), list(pairs()))
def test_an_option_without_the_one_it_needs_or_beside_its_contrary_is_refused(
    capsys, words, action, other, how
):
    argv = [*words, *essentials(dict(leaves(PARSER))[words], action, other, how)]
    argv += [name_of(action), *example(action)]
    if how == "together":
        argv += [name_of(other), *example(other)]
    line = assert_usage_error(argv, capsys, name_of(action), name_of(other))
    assert ("leave" in line) and ("is for" in line if how == "alone" else "together" in line)


def test_the_pairs_cover_the_flags_the_tui_would_otherwise_ignore():
    found = {(name_of(p.values[1]), p.values[3]) for p in pairs()}
    for flag in ("--steps", "--size", "--keys", "--host", "--port", "--path", "--solution"):
        assert (flag, "alone") in found
    assert ("--trace", "together") in found and ("--serve", "together") in found


def test_the_pairs_cover_the_sampling_flags_beam_search_or_greedy_decoding_would_ignore():
    found = {(" ".join(p.values[0]), name_of(p.values[1]), name_of(p.values[2])) for p in pairs()}
    for command in ("generate", "trace record"):
        for sampling in ("--temperature", "--top-p", "--top-k"):
            assert (command, "--beam-width", sampling) in found
        assert (command, "--beam-width", "--n") not in found  # the n best of the K beams
        for cut in ("--top-p", "--top-k"):
            assert (command, cut, "--temperature") in found
    assert ("tui", "--beam-width", "--n") not in found
    assert ("simulate", "--n", "--beam-width") not in found  # as generate reads the pair
    for engine_flag in ("--block-size", "--num-gpu-blocks", "--enable-chunked-prefill"):
        assert ("tui", "--trace", engine_flag) in found  # a replay runs nothing new
    for command in ("generate", "trace record", "tui"):  # speculation drafts for one sequence
        for several in ("--beam-width", "--n"):
            assert (command, "--speculative-config", several) in found


def test_speculation_beside_one_sample_is_not_refused():
    """``--n 1`` is one sequence a request: speculation drafts for it."""
    cli.build_parser().parse_args(
        ["generate", "--prompt", "Emma", "--n", "1", "--speculative-config", '{"method":"ngram"}']
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--prompt", "Emma", "--beam-width", "2", "--temperature", "0.8"],
        ["generate", "--prompt", "Emma", "--beam-width", "2", "--top-k", "40"],
    ],
    ids=" ".join,
)
def test_a_typed_flag_counts_as_given_even_at_its_default_value(capsys, argv):
    """``--temperature 0.8`` is generate's default, and beam search would still ignore it."""
    assert_usage_error(argv, capsys, "--beam-width", "together")


@pytest.mark.parametrize(
    "command", [["generate"], ["trace", "record", "out.jsonl"], ["tui"]], ids=" ".join
)
def test_a_typed_n_of_one_beside_beams_is_refused_though_it_is_the_default(
    capsys, tmp_path, monkeypatch, command
):
    """``SamplingParams`` reads n=1 as every beam: ``--n 1 --beam-width 2`` would return two
    where one was asked for. Refused before any model loads or file is written."""
    monkeypatch.chdir(tmp_path)
    argv = [*command, "--prompt", "Emma", "--beam-width", "2", "--n", "1"]
    assert_usage_error(argv, capsys, "--n 1", "--beam-width 2", "leave --n out")
    assert list(tmp_path.iterdir()) == []


def test_greedy_decoding_with_a_cut_is_refused_but_sampling_with_one_is_not(capsys):
    argv = ["generate", "--prompt", "Emma", "--top-k", "5"]
    assert_usage_error([*argv, "--temperature", "0"], capsys, "--top-k", "--temperature 0")
    assert PARSER.parse_args([*argv, "--temperature", "0.5"]).top_k == 5


# -- files named for reading, and files to write ---------------------------------------------


@pytest.fixture
def odd_paths(tmp_path) -> dict[str, tuple[Path, str]]:
    """Paths that are not readable files, each with words its refusal must hold."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    os.mkfifo(tmp_path / "fifo")
    return {
        "missing": (tmp_path / "missing.jsonl", "does not exist"),
        "folder": (tmp_path / "folder", "is a folder"),
        "dangling link": (tmp_path / "dangling", "symbolic link"),
        "fifo": (tmp_path / "fifo", "not a regular file"),
        "under a file": (tmp_path / "file" / "run.jsonl", "is a file, not a folder"),
    }


@pytest.mark.parametrize("kind", ["missing", "folder", "dangling link", "fifo", "under a file"])
@pytest.mark.parametrize("command", [["trace", "replay"], ["tui", "--trace"]])
def test_a_trace_that_is_not_a_readable_file_is_refused_saying_what_it_is(
    capsys, odd_paths, command, kind
):
    path, words = odd_paths[kind]
    line = assert_usage_error([*command, str(path)], capsys, str(path))
    assert words in line


OUTPUT_FILES = [
    pytest.param(words, action, id=f"{' '.join(words)} {name_of(action)}")
    for words, action in valued_options()
    if kind_of(action) == "output_file"
]


@pytest.mark.parametrize(("words", "action"), OUTPUT_FILES)
@pytest.mark.parametrize("where", ["folder", "missing folder"])
def test_a_file_to_write_is_refused_before_any_work_when_it_cannot_be(
    capsys, tmp_path, words, action, where
):
    target = tmp_path if where == "folder" else tmp_path / "nowhere" / "out"
    flag = [name_of(action)] if action.option_strings else []
    line = assert_usage_error([*words, *flag, str(target)], capsys, str(target))
    assert ("is a folder" if where == "folder" else "does not exist") in line


def test_the_commands_that_write_a_file_check_it_where_it_is_typed():
    writers = {(" ".join(p.values[0]), name_of(p.values[1])) for p in OUTPUT_FILES}
    assert {("trace record", "file"), ("tui", "--screenshot")} <= writers
    assert {("exercises check", "--json"), ("exercises check", "--gradescope")} <= writers


OUTPUT_FOLDERS = [
    pytest.param(words, action, id=f"{' '.join(words)} {name_of(action)}")
    for words, action in valued_options()
    if kind_of(action) == "output_folder"
]


@pytest.mark.parametrize(("words", "action"), OUTPUT_FOLDERS)
def test_a_folder_to_write_into_is_refused_before_any_work_when_a_file_is_there(
    capsys, tmp_path, words, action
):
    (tmp_path / "results.txt").write_text("x")
    target = tmp_path / "results.txt"
    line = assert_usage_error([*words, name_of(action), str(target)], capsys, str(target))
    assert "is a file" in line


def test_the_commands_that_write_into_a_folder_check_it_where_it_is_typed():
    assert ("bench", "--out") in {
        (" ".join(p.values[0]), name_of(p.values[1])) for p in OUTPUT_FOLDERS
    }


def required_words(parser: argparse.ArgumentParser) -> list[str]:
    """Words that give every required option and positional of ``parser`` a value."""
    words = []
    for action in parser._actions:
        if action.option_strings and not action.required:
            continue
        if action.nargs in ("*", "?") or isinstance(action, argparse._HelpAction):
            continue
        value = EXAMPLES.get(name_of(action)) or (
            [str(list(action.choices)[-1])] if action.choices else ["x"]
        )
        words += [*action.option_strings[-1:], *value]
    return words


@pytest.mark.parametrize(
    ("words", "parser"), [pytest.param(w, p, id=" ".join(w)) for w, p in leaves(PARSER)]
)
def test_an_unknown_option_is_named_by_the_subcommand_it_was_typed_to(capsys, words, parser):
    """argparse leaves an unknown word to the root parser, which named ``minipaged`` and its
    ``--help``: the subcommand's own help is where the options it takes are."""
    argv = [*words, *required_words(parser), "--no-such-option"]
    line = assert_usage_error(argv, capsys, "--no-such-option", main=PARSER.parse_args)
    assert line.startswith(f"minipaged {' '.join(words)}: unrecognized arguments")
    assert line.endswith(f"see `minipaged {' '.join(words)} --help`")


def test_a_huge_value_is_echoed_only_in_part(capsys):
    line = assert_usage_error(["generate", "--prompt", "x", "--preemption", HUGE], capsys)
    assert "characters ...]" in line and "--preemption" in line


UNMAKEABLE = {  # a folder init cannot make, under tmp_path, and words of the refusal
    "dangling link": ("dangling", "symbolic link"),
    "under a dangling link": ("dangling/ex01", "symbolic link"),
    "under a file": ("file/ex01", "is a file, not a folder"),
    **{f"named with {c!r}": (f"ex{c}01", f"control character {c!r}") for c in "\n\t\r\x1b\x7f"},
}


@pytest.mark.parametrize("kind", UNMAKEABLE)
def test_exercises_init_refuses_a_folder_it_cannot_make_saying_why(capsys, tmp_path, kind):
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "file").write_text("x")
    name, words = UNMAKEABLE[kind]
    target = tmp_path / name
    line = assert_usage_error(["exercises", "init", "1", str(target)], capsys, "exercises init")
    assert words in line
    assert not (tmp_path / "gone").exists() and (tmp_path / "file").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "file"]  # nothing made


def project_package_folders() -> list[str]:
    """A new folder inside each of the project's packages, and each package's own folder."""
    import importlib.util

    found = []
    for name in ("minipaged", "tui", "cuda_kernels"):
        package = importlib.util.find_spec(name).submodule_search_locations[0]
        found += [package, os.path.join(package, "grader", "ex01-mine")]
    return found


@pytest.mark.parametrize("target", project_package_folders())
def test_exercises_init_refuses_a_folder_inside_the_library(capsys, target):
    line = assert_usage_error(["exercises", "init", "1", target], capsys, "exercises init")
    assert "package" in line and "choose a folder of your own" in line
    assert not os.path.exists(os.path.join(target, "README.md"))
    assert not os.path.exists(os.path.join(os.path.dirname(target), "ex01-mine"))


@pytest.mark.skipif(not UNWRITABLE, reason="needs Linux's /proc, where no file can be made")
def test_exercises_init_refuses_a_place_no_file_can_be_made_naming_it(capsys):
    line = assert_usage_error(
        ["exercises", "init", "1", "/proc/minipaged/ex01"], capsys, "exercises init"
    )
    assert "/proc/minipaged/ex01" in line and "no file can be made in /proc" in line
    assert ".minipaged-probe" not in line  # the probe's own name means nothing to the user


def test_exercises_init_that_fails_partway_leaves_no_half_copy(capsys, tmp_path, monkeypatch):
    from minipaged import atomic_write

    create = atomic_write.create

    def second_fails(path, data):
        if sorted(p.name for p in path.parent.iterdir() if not p.name.startswith(".")):
            raise OSError(28, "No space left on device", str(path))
        create(path, data)

    monkeypatch.setattr(atomic_write, "create", second_fails)
    assert cli.main(["exercises", "init", "1", str(tmp_path / "ex01")]) != 0
    assert "No space left on device" in capsys.readouterr().err
    assert list((tmp_path / "ex01").iterdir()) == []  # a second init can begin again
    monkeypatch.setattr(atomic_write, "create", create)
    assert cli.main(["exercises", "init", "1", str(tmp_path / "ex01")]) == 0


@pytest.mark.parametrize("name", ["ex 01", "Emma's work", "a;rm -rf b", "$HOME", "ex01"])
def test_exercises_init_says_the_folder_as_a_shell_reads_it_back(
    capsys, tmp_path, monkeypatch, name
):
    """A folder with a space, a quote or a dollar is printed quoted where the student is told
    to go inside it, so the line can be copied into a shell; a plain name stays plain."""
    import shlex

    monkeypatch.chdir(tmp_path)
    status, out, _ = run(["exercises", "init", "1", name], capsys)
    assert status == 0 and (tmp_path / name / "README.md").is_file()
    assert f"then inside {shlex.quote(name)} run" in " ".join(out.split())


@pytest.mark.parametrize("size", ["²x40", "120x٤٠", "9" * 5000 + "x40", "+40x40"])
def test_a_size_of_digits_int_cannot_read_is_told_the_form_not_invalid_value(
    capsys, tmp_path, size
):
    """``str.isdigit`` says yes to "²" and to 5,000 nines, and ``int`` then raised: argparse
    said only "invalid size value" and echoed the whole value."""
    shot = str(tmp_path / "x.svg")
    line = assert_usage_error(["tui", "--size", size, "--screenshot", shot], capsys, "--size")
    assert "must look like 120x40" in line and len(line) < 300


@pytest.mark.skipif(not UNWRITABLE, reason="needs Linux's /proc, where no file can be made")
@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "memory", "--quick", "--out", "/proc/minipaged-out/plots"],
        ["trace", "record", "/proc/minipaged.jsonl", "--prompt", "Emma"],
        ["tui", "--screenshot", "/proc/minipaged.svg"],
        ["exercises", "check", "1", "--solution", "--json", "/proc/minipaged.json"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_an_output_no_file_can_be_made_for_is_refused_before_the_work(capsys, argv):
    line = assert_usage_error(argv, capsys, "cannot write /proc/minipaged")
    assert "no file can be made in /proc" in line


def test_the_writability_probe_leaves_nothing_behind(capsys, tmp_path):
    from minipaged.output_paths import output_file, output_folder

    assert output_file("a trace")(str(tmp_path / "run.jsonl")) == tmp_path / "run.jsonl"
    assert output_folder("a folder")(str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not UNWRITABLE, reason="needs Linux's /proc, where no file can be made")
def test_a_file_that_cannot_be_made_is_named_as_asked_not_by_its_temporary_name():
    """The library's own writes (``atomic_write``) said "/proc/.run.jsonl.uv7dng5g: No such
    file or directory", a name the user never gave."""
    from minipaged import atomic_write

    with pytest.raises(OSError) as refused:
        atomic_write.Replacement(Path("/proc/minipaged.jsonl"))
    assert refused.value.filename == "/proc/minipaged.jsonl"


EXERCISE_ACTIONS = {"init": "init N DIR", "hint": "hint N", "check": "check N [DIR]"}


@pytest.mark.parametrize("action", EXERCISE_ACTIONS)
@pytest.mark.parametrize("first", ["ex03", "./work", "/tmp", "three", "3.0", ""])
def test_a_folder_typed_where_the_exercise_number_goes_is_told_the_order(
    capsys, tmp_path, action, first
):
    """``exercises check DIR N`` (the folder first) said "invalid int value"; now the line
    names N, what was typed, and the order, and nothing is made or graded."""
    argv = ["exercises", action, first, *(["3"] if action != "hint" else [])]
    line = assert_usage_error(argv, capsys, f"exercises {action}", "argument N")
    assert f"got {first!r}" in line and f"`minipaged exercises {EXERCISE_ACTIONS[action]}`" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("number", ["0", "-1", "14", "99", "9" * 30])
@pytest.mark.parametrize("action", EXERCISE_ACTIONS)
def test_a_number_that_is_no_exercise_is_refused_where_it_is_typed(capsys, action, number):
    argv = ["exercises", action, number, *(["somewhere"] if action == "init" else [])]
    line = assert_usage_error(argv, capsys, f"no exercise {number}", "the exercises are 1..")
    assert "argument N" in line


def test_a_missing_folder_given_after_the_number_is_named_as_given(capsys, tmp_path):
    """``check N DIR`` with no DIR there: the line names the folder, without telling the
    student to use a flag they did not type."""
    gone = tmp_path / "gone"
    line = assert_usage_error(["exercises", "check", "3", str(gone)], capsys, str(gone))
    assert "is no folder" in line and "--path" not in line


# -- refusals that must come before the work (or the screen) is taken -----------------------

TOO_LATE = {
    "a prompt past the context": ["--prompt", "Emma " * 2000],
    "a request no empty pool holds": ["--prompt", "Emma", "--num-gpu-blocks", "2"],
    "a named scenario on too small a pool": ["--scenario", "parallel", "--num-gpu-blocks", "1"],
}


@pytest.mark.parametrize("case", TOO_LATE)
def test_the_tui_refuses_a_request_it_could_never_run_before_the_app_starts(capsys, tmp_path, case):
    """With ``--screenshot`` the app would run headless and fail inside (status 1, minutes for
    a big model); the refusal comes before it, as a usage error, and nothing is written."""
    shot = tmp_path / "shot.svg"
    line = assert_usage_error(["tui", *TOO_LATE[case], "--screenshot", str(shot)], capsys)
    assert "prompt" in line or "pool" in line
    assert not shot.exists()


def reads(module_name: str) -> set[str]:
    """The options a benchmark's module reads: each ``options.<dest>`` in its source, and
    ``threads`` where it times on torch's thread count (times something, or asks for the count,
    and never sets its own)."""
    import importlib
    import inspect
    import re

    source = inspect.getsource(importlib.import_module(module_name))
    read = set(re.findall(r"options\.(\w+)", source))
    times = "get_num_threads()" in source or "perf_counter" in source
    if times and "set_num_threads(" not in source:
        read.add("threads")
    return read


def test_bench_knows_which_benchmarks_read_each_option():
    """``READERS`` against the source: a benchmark reads an option where it says
    ``options.<dest>``, so an option added to one is refused nowhere it is read."""
    from minipaged.study.bench import SUBBENCHMARKS
    from minipaged.study.bench.command import READERS

    for name, module in SUBBENCHMARKS.items():
        for dest, (_, readers) in READERS.items():
            assert (dest in reads(module)) == (name in readers), f"{name} and {dest}"


def test_every_bench_option_is_read_by_every_benchmark_or_has_its_readers_named():
    """A new ``bench`` option must say who reads it, or it is accepted beside benchmarks that
    ignore it (``bench memory --threads 4`` was)."""
    from minipaged.study.bench.command import READ_BY_EVERY_BENCHMARK, READERS

    bench = dict(leaves(PARSER))[("bench",)]
    dests = {action.dest for action in bench._actions} - {"help"}
    assert dests == set(READERS) | set(READ_BY_EVERY_BENCHMARK)


def bench_ignoring_cases():
    """``bench NAME FLAG VALUE`` for every option and every benchmark that does not read it."""
    from minipaged.study.bench import SUBBENCHMARKS
    from minipaged.study.bench.command import READERS

    bench = dict(leaves(PARSER))[("bench",)]
    for action in bench._actions:
        if action.dest not in READERS:
            continue
        flag, readers = READERS[action.dest]
        value = action.choices[0] if action.choices else str(action.default)
        for name in SUBBENCHMARKS:
            if name not in readers:
                yield pytest.param([name, flag, value], id=f"{name} {flag}")


@pytest.fixture
def no_benchmark_runs(monkeypatch):
    """A refusal that fails to come must not run minutes of benchmarks (and write the docs'
    results page): running one fails the test at once."""
    import minipaged.study.bench as benchmarks

    def ran(*args, **kwargs):
        raise AssertionError("a benchmark ran")

    monkeypatch.setattr(benchmarks, "run_many", ran)


@pytest.mark.parametrize("argv", list(bench_ignoring_cases()))
def test_bench_refuses_an_option_the_chosen_benchmark_ignores_before_any_runs(
    capsys, no_benchmark_runs, argv
):
    assert_usage_error(["bench", *argv], capsys, argv[1], "leave")


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "memory", "sharing", "--device", "cpu"],
        ["bench", "memory", "kernels", "--threads", "2"],
        ["bench", "--seed", "3", "tui"],
    ],
    ids=" ".join,
)
def test_bench_refuses_an_option_no_chosen_benchmark_reads(capsys, no_benchmark_runs, argv):
    assert_usage_error(argv, capsys, "leave")


@pytest.mark.parametrize(
    "names", [["memory", "memory"], ["sharing", "memory", "sharing"]], ids=" ".join
)
def test_bench_refuses_a_benchmark_named_twice_before_any_runs(capsys, no_benchmark_runs, names):
    assert_usage_error(["bench", *names, "--quick"], capsys, names[-1], "more than once")


def a_failing_demo(args):
    raise RuntimeError("planted failure")


@pytest.mark.parametrize("value", ["yes", "true", "2", " 1", "on"])
def test_a_traceback_switch_of_no_meaning_is_refused_before_any_work(monkeypatch, capsys, value):
    monkeypatch.setenv("MINIPAGED_TRACEBACK", value)
    monkeypatch.setitem(cli.COMMANDS, "demo", a_failing_demo)
    assert cli.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "MINIPAGED_TRACEBACK must be 1" in err and err.count("\n") == 1
    assert "planted failure" not in err


@pytest.mark.parametrize("value, shown", [("0", False), ("", False), ("1", True)])
def test_the_traceback_switch_shows_one_only_when_it_is_1(monkeypatch, capsys, value, shown):
    monkeypatch.setenv("MINIPAGED_TRACEBACK", value)
    monkeypatch.setitem(cli.COMMANDS, "demo", a_failing_demo)
    if shown:
        with pytest.raises(RuntimeError, match="planted failure"):
            cli.main(["demo"])
    else:
        assert cli.main(["demo"]) != 0
        assert "planted failure" in capsys.readouterr().err
