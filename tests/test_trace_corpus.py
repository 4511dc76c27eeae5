"""A bad trace is refused in one line that names the line, the field and the problem, and
nothing it claims is built before it is checked.

The corpus: a good recorded run (the ``tour`` scenario: forks, copy-on-write, swaps,
recomputation, prefix hits), mutated field by field in its header, its first keyframe and the
delta lines richest in events: every value replaced by one of the wrong type, sign or size,
every key removed, every line cut short. Each mutated trace either loads whole (the mutation
was harmless: a string for a string) and then replays in the TUI, or ends at a line with one
line of error that names a field of the step; ``minipaged trace replay`` and ``minipaged tui
--trace`` print that line and exit 1, never a traceback.
"""

from __future__ import annotations

import copy
import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from minipaged import cli, trace
from minipaged.checkpoint import model_directory
from minipaged.trace_schema import STEP_FIELDS, Budget
from tests.recorded_runs import recorded_lines
from tui.app import PagedApp

pytestmark = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)

HUGE = 30_000_000
WRONG = {  # what each kind of JSON value is replaced by
    int: ("x", -1, -(2**63), 2**63, HUGE, 1.5, True, None, [3], math.nan, -0.0),
    float: ("x", None, [1.0], math.nan, math.inf, -math.inf, -0.0),
    str: (5, None, ["x"], {"a": 1}, "²", ""),
    bool: (1, "true", None),
    list: ("x", None, {}, 7, [[0, HUGE - 1]], [None]),
    dict: ([], None, "x", 7),
    type(None): (5, "x", []),
}
LEADS = (*STEP_FIELDS, "the step", "a delta line", "its JSON", "is longer")
JSON_ERRORS = (  # the line is no JSON: NaN and 1e400 are refused by json_input, not by a field
    "Expecting",
    "Unterminated",
    "Extra data",
    "Invalid",
    "line is longer",
    "no JSON number",
    "past the largest a float holds",
)


@pytest.fixture(scope="module")
def good() -> tuple[list[str], list[int]]:
    """The tour's trace as lines, and the line numbers (1-based) to mutate."""
    lines = list(recorded_lines("tour"))
    records = [json.loads(line) for line in lines[1:]]
    kinds = [len({e["kind"] for e in r["events"]}) for r in records]
    deltas = [i for i, r in enumerate(records) if not r["keyframe"]]
    richest = max(deltas, key=lambda i: (kinds[i], -i))
    finishing = next(i for i, r in enumerate(records) if r["finished"] and not r["keyframe"])
    return lines, sorted({1, 2, richest + 2, finishing + 2})


def places(value: object, path: tuple = ()) -> Iterator[tuple]:
    """Every place in a JSON value, as a path of keys and indices (a long list: its ends)."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from places(item, (*path, key))
    elif isinstance(value, list):
        ends = range(len(value)) if len(value) <= 3 else (0, len(value) - 1)
        for i in ends:
            yield from places(value[i], (*path, i))


def at(value, path):
    for key in path:
        value = value[key]
    return value


def mutated(record: dict) -> Iterator[tuple[str, dict]]:
    """``(what, record)``: ``record`` with one value replaced or one key removed."""
    for path in places(record):
        current = at(record, path[:-1])
        old = current[path[-1]]
        for wrong in WRONG[type(old)]:
            new = copy.deepcopy(record)
            at(new, path[:-1])[path[-1]] = wrong
            yield f"{'.'.join(map(str, path))} = {wrong!r:.30}", new
        if isinstance(current, dict):
            new = copy.deepcopy(record)
            del at(new, path[:-1])[path[-1]]
            yield f"without {'.'.join(map(str, path))}", new


def corpus(lines: list[str], numbers: list[int]) -> Iterator[tuple[str, int, list[str]]]:
    """``(what, line number, trace lines)``: each mutation, in a trace cut two lines after
    the mutated one (what follows a bad line is never read)."""
    for number in numbers:
        head = lines[: number + 2]
        record = json.loads(lines[number - 1])
        for what, new in mutated(record):
            yield what, number, [*head[: number - 1], json.dumps(new), *head[number:]]
        line = lines[number - 1]
        for cut in (1, len(line) // 3, len(line) // 2, len(line) - 1):
            yield f"cut at {cut}", number, [*head[: number - 1], line[:cut], *head[number:]]
    yield "version 1", 1, [lines[0].replace('"version": 2', '"version": 1'), *lines[1:3]]
    yield "empty file", 1, []


def one_line_naming_a_field(error: str, number: int) -> bool:
    found = re.search(r": line (\d+)(?: is cut off or corrupt \((.*)\); |, )", error)
    if found is None or "\n" in error or int(found.group(1)) < number:
        return False
    problem = found.group(2) or error[found.end() :]
    return problem.startswith(LEADS) or any(word in problem for word in JSON_ERRORS)


@pytest.fixture(scope="module")
def loaded_corpus(good, tmp_path_factory) -> list[tuple[str, int, list[str], object]]:
    """``(what, line number, trace lines, what trace.load made of them)``: each mutation of
    the corpus loaded once (6 ms each, 15 s for the corpus), for the tests that judge the
    loader and the TUI; the outcome is a ``Trace`` or the ``TraceError`` of a bad header."""
    lines, numbers = good
    path = tmp_path_factory.mktemp("corpus") / "bad.jsonl"
    outcomes = []
    for what, number, bad in corpus(lines, numbers):
        try:
            outcome = trace.load(write(path, bad))
        except trace.TraceError as error:
            outcome = error
        outcomes.append((what, number, bad, outcome))
    return outcomes


def test_every_mutation_of_a_good_trace_loads_whole_or_is_refused_naming_line_and_field(
    loaded_corpus,
):
    refused = accepted = 0
    unhelpful = []
    for what, number, bad, loaded in loaded_corpus:
        if isinstance(loaded, trace.TraceError):  # a header, or events that do not add up
            message = str(loaded)
            refused += 1
            named = "line 1" in message if number == 1 else one_line_naming_a_field(message, number)
            if "\n" in message or not named:
                unhelpful.append((what, message))
            continue
        if loaded.error is None:
            accepted += 1
            assert len(loaded.steps) == len(bad) - 1, what
            continue
        refused += 1
        if not one_line_naming_a_field(loaded.error, number):
            unhelpful.append((what, loaded.error))
    assert not unhelpful, "\n".join(f"{what}: {message}" for what, message in unhelpful[:20])
    assert refused > 500 and accepted > 0, (refused, accepted)


def mutation(lines: list[str], number: int, path: tuple, value: object) -> list[str]:
    record = json.loads(lines[number - 1])
    at(record, path[:-1])[path[-1]] = value
    return [*lines[: number - 1], json.dumps(record), *lines[number:]]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_a_free_list_of_thirty_million_blocks_is_refused_before_it_is_built(good, tmp_path):
    lines, _ = good
    bad = mutation(lines, 2, ("state", "device_free"), [[0, HUGE - 1]])
    loaded = trace.load(write(tmp_path / "huge.jsonl", bad))
    assert loaded.steps == [] and "state.device_free.0.1 is not a block of the" in loaded.error


def test_a_pool_the_header_does_not_claim_is_refused(good, tmp_path):
    lines, _ = good
    bad = mutation(lines, 2, ("state", "device_refcounts", 0), HUGE)
    loaded = trace.load(write(tmp_path / "pool.jsonl", bad))
    assert "state.device_refcounts.0 gives the device pool 30,000,000 blocks" in loaded.error


def test_a_pool_larger_than_the_machine_can_hold_is_refused_before_it_is_built(good, tmp_path):
    lines, _ = good
    header = json.loads(lines[0])
    header["engine"]["num_gpu_blocks"] = 10**12
    bad = mutation([json.dumps(header), *lines[1:]], 2, ("state", "device_refcounts", 0), 10**12)
    started = time.monotonic()
    loaded = trace.load(write(tmp_path / "machine.jsonl", bad), budget=Budget(2**30))
    # Building 10**12 of anything takes over 1,000 s at a block a nanosecond; the refusal takes
    # milliseconds. A hundred seconds tells them apart on any machine, however busy.
    assert time.monotonic() - started < 100, "nothing of the claimed size is built"
    assert loaded.steps == [] and "this machine has free for it" in loaded.error


def test_a_line_longer_than_the_machine_can_parse_is_refused_unread(good, tmp_path):
    lines, _ = good
    path = write(tmp_path / "long.jsonl", [*lines[:3], "[" + "1," * 200_000 + "1]"])
    loaded = trace.load(path, budget=Budget(2**20 * 8))
    assert len(loaded.steps) == 2 and "line 4" in loaded.error and "longer than" in loaded.error


def test_a_token_id_outside_the_models_vocabulary_is_refused(good, tmp_path):
    lines, _ = good
    bad = mutation(lines, 2, ("new_tokens", "0"), 2048)
    assert trace.load(write(tmp_path / "a.jsonl", bad)).error is None  # no vocabulary given
    loaded = trace.load(tmp_path / "a.jsonl", vocab_size=2048)
    assert "new_tokens.0 must be an integer >= 0 and < 2,048, got 2048" in loaded.error


def test_a_step_number_that_does_not_count_up_is_refused(good, tmp_path):
    lines, _ = good
    bad = mutation(lines, 3, ("step",), 1)
    loaded = trace.load(write(tmp_path / "step.jsonl", bad))
    assert "line 3" in loaded.error and "step must count up" in loaded.error


def test_a_delta_further_from_its_keyframe_than_the_header_says_is_refused(good, tmp_path):
    lines, _ = good
    header = json.loads(lines[0])
    header["keyframe_every"] = 2
    loaded = trace.load(write(tmp_path / "every.jsonl", [json.dumps(header), *lines[1:]]))
    assert "line 4" in loaded.error and "the header says one every 2" in loaded.error


def test_deeply_nested_json_is_refused_not_a_recursion_error(good, tmp_path):
    lines, _ = good
    loaded = trace.load(write(tmp_path / "deep.jsonl", [*lines[:2], "[" * 100_000 + "]" * 100_000]))
    assert "line 3" in loaded.error and "nested too deeply" in loaded.error


CLI_CASES = [
    (2, ("state", "tables", "0", "num_tokens"), -4, "num_tokens"),
    (2, ("new_tokens", "0"), -1, "new_tokens.0"),
    (2, ("sequences", "0", "token_ids", 0), -7, "sequences.0.token_ids.0"),
    (2, ("state", "device_free"), [[0, HUGE - 1]], "state.device_free"),
    (2, ("state", "block_size"), 10**9, "state.block_size"),
    (2, ("events",), "x", "events"),
    (3, ("sequences", "0", "token_ids"), [2**40], "sequences.0.token_ids.0"),
]


@pytest.mark.parametrize(
    ("command", "number", "path", "value", "field"),
    [("trace replay", *case) for case in CLI_CASES]
    + [("tui --trace", *case) for case in CLI_CASES if case[0] == 2],
)
def test_a_bad_step_is_one_line_naming_the_line_and_field_with_status_1(
    good, tmp_path, capsys, command, number, path, value, field
):
    """``trace replay`` prints the steps before the bad line, then the line; ``tui --trace``
    of a trace whose first step is bad exits with it (with steps before it, the TUI opens on
    them and shows the line as its notice: the corpus test holds that)."""
    lines, _ = good
    bad = write(tmp_path / "bad.jsonl", mutation(lines, number, path, value))
    assert cli.main([*command.split(), str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"line {number}" in err[0] and field in err[0], err
    assert "Traceback" not in err[0] and "bug" not in err[0]


@pytest.mark.parametrize(
    "header_change",
    [
        {"model": 5},
        {"engine": {"block_size": -4}},
        {"engine": {"num_gpu_blocks": "many"}},
        {"engine": {"kv_cache": {"dtype": "float32", "b": 4, "bytes_per_block": float("inf")}}},
        {"prompts": "Emma"},
        {"keyframe_every": 0},
        {"version": 3},
    ],
    ids=repr,
)
def test_a_bad_header_is_one_line_naming_line_1_in_replay_and_the_tui(
    good, tmp_path, capsys, header_change
):
    lines, _ = good
    header = {**json.loads(lines[0]), **header_change}
    bad = write(tmp_path / "header.jsonl", [json.dumps(header), *lines[1:3]])
    for command in (["trace", "replay", str(bad)], ["tui", "--trace", str(bad)]):
        assert cli.main(command) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "line 1" in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize("version", ["2", 2.0, True, None, [2], "absent"], ids=repr)
def test_a_version_that_is_no_integer_is_named_by_its_type_not_mistaken_for_2(tmp_path, version):
    """``"2"`` was told "version '2'; this minipaged reads version 2", as if they differed in
    number; every version of another JSON type is named by its type."""
    header = {"format": trace.FORMAT} | ({} if version == "absent" else {"version": version})
    bad = write(tmp_path / "version.jsonl", [json.dumps(header)])
    got = "none" if version == "absent" else type(version).__name__
    with pytest.raises(trace.TraceError, match=rf"line 1's version must be a JSON integer .*{got}"):
        trace.read_header(bad)


def test_an_empty_file_is_named_empty(tmp_path):
    for content in ([], [""]):
        with pytest.raises(trace.TraceError, match="line 1 is empty, where a trace's header"):
            trace.read_header(write(tmp_path / "empty.jsonl", content))


def worth_replaying(loaded_corpus) -> Iterator[tuple[str, trace.Trace, bool]]:
    """``(what, loaded trace, draw)`` for the mutations worth showing in the TUI. ``draw`` is
    true for the first accepted mutation of each field of each line, and for the first refused
    one of each set of lines loaded: a refused mutation loads the lines before the bad one,
    which all its line's other refusals load too (17 sets for 1,024 refusals), so drawing them
    again draws the same steps. A fifth of the other refusals come with ``draw`` false, for
    their notice: its wording is the loader's, tested on all of them by the test above."""
    seen = set()
    for index, (what, number, bad, loaded) in enumerate(loaded_corpus):
        if number == 1 or isinstance(loaded, trace.TraceError) or not loaded.steps:
            continue
        field = (number, what.split(" = ")[0]) if loaded.error is None else None
        key = (field, tuple(bad[: 1 + len(loaded.steps)]) if field is None else None)
        if key not in seen or index % 5 == 0:
            yield what, loaded, key not in seen
        seen.add(key)


@pytest.mark.anyio
async def test_the_tui_replays_every_accepted_mutation_and_names_every_refused_one(
    good, loaded_corpus, tmp_path
):
    """Whatever the checks let through, the TUI draws; whatever they stop, it names.

    The TUI draws each field's first accepted mutation (118 fields) and each set of lines a
    refusal leaves (17), at its first and last step; drawing a trace costs a tenth of a second,
    so drawing all 1,170 would cost two minutes of CPU for the same steps drawn again. A fifth
    of the other refusals are replayed, and their notice checked, without drawing."""
    lines, _ = good
    drawn = named = 0
    app = PagedApp(trace=trace.load(write(tmp_path / "good.jsonl", lines)))
    async with app.run_test(size=(100, 30)) as pilot:
        for what, loaded, draw in worth_replaying(loaded_corpus):
            app.replay(loaded)
            if loaded.error:
                assert app.notice == f"the trace ends early: {loaded.error}", what
                named += 1
            if not draw:
                continue
            for step in (1, len(loaded.steps)):
                app.seek_step(step)
                await pilot.pause()
            assert app.return_code is None, what
            drawn += 1
    assert drawn > 100 and named > 200, (drawn, named)
