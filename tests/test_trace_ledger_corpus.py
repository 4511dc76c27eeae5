"""A trace whose events do not add up to its refcounts is refused whole, naming the line, the
step and the event (``minipaged.trace_accounting``), before the TUI or ``replay`` shows any
step of it.

The corpus is generated over a recorded run of the ``tour`` scenario (allocations, frees,
forks, copy-on-write, swaps out and in, prefix hits): every event that changes a refcount
dropped, duplicated, swapped with a later event of the same block, its refcount moved by one,
its block moved out of the pool; every step number sent back, repeated or skipped; every
line dropped or swapped with the next; every refcount a keyframe shows moved by one. Each is
loaded in-process (a few milliseconds each).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator

import pytest

from minipaged import cli, trace
from minipaged.checkpoint import model_directory
from tests.recorded_runs import recorded_lines, records

pytestmark = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)

COUNTED = {"alloc", "free", "incref", "decref", "cow-copy", "swap-out", "swap-in"}
"""The events that change a refcount."""

BLOCK_FIELDS = {  # where each kind names a block, as a path into its record
    "alloc": ("block",),
    "free": ("block",),
    "incref": ("block",),
    "decref": ("block",),
    "cow-copy": ("src",),
    "swap-out": ("mapping", 0, 1),
    "swap-in": ("mapping", 0, 1),
    "fork": ("blocks", 0),
    "prefix-hit": ("blocks", 0),
    "prefix-insert": ("blocks", 0),
    "prefix-evict": ("block",),
}


SEQUENCE = "step|state|keyframe|a delta line"
"""What a line out of sequence is refused by: its step number, a delta that no longer applies
(these end the trace there, as a damaged line does), or its refcounts."""


def blocks_touched(event: dict) -> set[tuple[str, int]]:
    if event["kind"] in ("swap-out", "swap-in"):
        first, second = ("device", "host") if event["kind"] == "swap-out" else ("host", "device")
        return {
            (pool, pair[i]) for pair in event["mapping"] for i, pool in enumerate((first, second))
        }
    if event["kind"] == "cow-copy":
        return {("device", event["src"]), ("device", event["dst"])}
    return {(event.get("pool", "device"), event["block"])}


def with_line(lines: tuple[str, ...], number: int, record: dict) -> list[str]:
    return [*lines[: number - 1], json.dumps(record), *lines[number:]]


def event_mutations(lines: tuple[str, ...]) -> Iterator[tuple[str, int, list[str], str]]:
    """``(what, line number, trace lines, the field the refusal must name)``."""
    header = json.loads(lines[0])["engine"]
    sizes = {"device": header["num_gpu_blocks"], "host": header["num_cpu_blocks"]}
    for number, record in enumerate(records(lines), start=2):
        events = record["events"]
        for i, event in enumerate(events):
            kind = event["kind"]
            if kind in BLOCK_FIELDS:
                bad = copy.deepcopy(record)
                *path, last = BLOCK_FIELDS[kind]
                place = bad["events"][i]
                for key in path:
                    place = place[key]
                pool = "host" if kind == "swap-out" else event.get("pool", "device")
                place[last] = sizes[pool]
                yield (
                    f"{kind} block out of the pool",
                    number,
                    with_line(lines, number, bad),
                    "events",
                )
            if kind not in COUNTED:
                continue
            dropped = {**record, "events": events[:i] + events[i + 1 :]}
            yield f"{kind} dropped", number, with_line(lines, number, dropped), "events|state"
            doubled = {**record, "events": events[: i + 1] + events[i:]}
            yield f"{kind} duplicated", number, with_line(lines, number, doubled), "events"
            for j in range(i + 1, len(events)):
                later = events[j]
                moves = {kind, later["kind"]} <= {"swap-out", "swap-in"}  # +1/-1 commute
                if (
                    not moves
                    and later["kind"] in COUNTED
                    and blocks_touched(event) & blocks_touched(later)
                ):
                    order = list(events)
                    order[i], order[j] = later, event
                    swapped = {**record, "events": order}
                    yield (
                        f"{kind} after a later {later['kind']}",
                        number,
                        with_line(lines, number, swapped),
                        "events",
                    )
            if kind in ("incref", "decref"):
                for by in (1, -1):
                    bad = copy.deepcopy(record)
                    bad["events"][i]["refcount"] += by
                    yield f"{kind} R{by:+}", number, with_line(lines, number, bad), "events"


def line_mutations(lines: tuple[str, ...]) -> Iterator[tuple[str, int, list[str], str]]:
    for number, record in enumerate(records(lines), start=2):
        for step in (record["step"] - 1, record["step"] + 1, 0):
            yield (
                f"step {step}",
                number,
                with_line(lines, number, {**record, "step": step}),
                SEQUENCE,
            )
        if number + 1 < len(lines):
            dropped = [*lines[: number - 1], *lines[number:]]
            yield "line dropped", number, dropped, SEQUENCE
            swapped = [*lines[: number - 1], lines[number], lines[number - 1], *lines[number + 1 :]]
            yield "line swapped with the next", number, swapped, SEQUENCE
        counts = record["state"].get("device_refcounts")
        if record["keyframe"] and counts and counts[1]:
            for by in (1, -1):
                bad = copy.deepcopy(record)
                bad["state"]["device_refcounts"][1][0][1] += by
                yield f"keyframe R{by:+}", number, with_line(lines, number, bad), "state"


def refusal(lines: list[str], tmp_path) -> str:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    try:
        loaded = trace.load(path)
    except trace.TraceError as error:
        return str(error)
    return loaded.error or ""


@pytest.fixture(scope="module")
def tour() -> tuple[str, ...]:
    return recorded_lines("tour")


def test_every_recorded_run_adds_up(tour, tmp_path):
    """The ledger refuses nothing a recorder wrote: the tour, and speculation's trees, whose
    branches fork, copy on write and are freed inside one step."""
    for lines in (tour, recorded_lines("speculative")):
        assert refusal(list(lines), tmp_path) == ""


def test_events_that_do_not_add_up_are_refused_naming_line_step_and_event(tour, tmp_path):
    unrefused, unnamed = [], []
    cases = [*event_mutations(tour), *line_mutations(tour)]
    for what, number, lines, field in cases:
        message = refusal(lines, tmp_path)
        if not message:
            unrefused.append(f"line {number}: {what}")
            continue
        named = re.search(rf": line {number}(, | is cut off or corrupt \()({field})", message)
        if named is None or "\n" in message:
            unnamed.append(f"line {number}: {what}: {message}")
    assert not unrefused, f"{len(unrefused)} of {len(cases)} loaded: {unrefused[:10]}"
    assert not unnamed, "\n".join(unnamed[:10])
    kinds = {what.split()[0] for what, *_ in cases}
    assert kinds >= COUNTED and len(cases) > 300, (kinds, len(cases))


def test_an_event_out_of_order_names_the_event_and_the_refcount_expected(tour, tmp_path):
    number, record = next(
        (n, r)
        for n, r in enumerate(records(tour), start=2)
        if r["events"][:1] and r["events"][0]["kind"] == "alloc" and not r["keyframe"]
    )
    alloc = record["events"][0]
    doubled = {**record, "events": [alloc, *record["events"]]}
    message = refusal(with_line(tour, number, doubled), tmp_path)
    assert f"line {number}, events.1 (alloc) takes device block {alloc['block']} at R=0" in message
    assert f"step {record['step']}" in message and "left R=1" in message


def test_a_trace_that_does_not_add_up_is_one_line_and_status_1_before_any_step(
    tour, tmp_path, capsys
):
    """``trace replay`` and ``tui --trace`` show no step of it: the whole file is refused."""
    records_ = records(tour)
    number = max(range(len(records_)), key=lambda i: len(records_[i]["events"])) + 2
    record = json.loads(tour[number - 1])
    record["events"] = record["events"][::-1]
    path = tmp_path / "reversed.jsonl"
    path.write_text("".join(line + "\n" for line in with_line(tour, number, record)))
    for command in (["trace", "replay", str(path)], ["tui", "--trace", str(path)]):
        assert cli.main(command) == 1
        out, err = capsys.readouterr()
        assert len(err.strip().splitlines()) == 1 and f"line {number}, " in err, err
        assert "Traceback" not in err and "step 1" not in out, out
