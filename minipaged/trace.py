"""Traces: a run's step outputs saved as JSON Lines, replayable without the model.

Line 1 is a header: ``{"format": "minipaged-trace", "version": 2, "keyframe_every": K, ...}``
with whatever the recorder describes (model, engine configuration, requests). Every other line
is one ``StepOutput``. What happened in the step is stored whole: new tokens, events
(``Event.to_dict``), queues, finished requests, token counts. What the step left behind, the
block state $\\mathcal{T}_r$, $\\mathcal{R}[p]$ and the live sequences, is stored as a
*keyframe* on the first step and every K-th, and otherwise as a *delta*: only what changed
since the line before (refcounts that moved, tables and sequences that grew, by their new
tails). A keyframe is a delta from an empty state, so one decoder reads both.

Loading gives back equal ``StepOutput`` objects, so the TUI and ``minipaged trace replay``
treat a recorded run exactly like a live one. A damaged line (a file cut off mid-write, say)
ends the readable part: ``load`` returns the steps before it and says which line broke.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from minipaged import atomic_write
from minipaged.block_state import BlockState, TableState
from minipaged.events import Event
from minipaged.input_file import check_input_file
from minipaged.outputs import CompletionOutput, RequestOutput, SeqView, StepOutput
from minipaged.trace_schema import (
    BYTES_PER_JSON_BYTE,
    Budget,
    Checker,
    Claims,
    TraceError,
    check_header,
)
from minipaged.trace_values import EVENT_TYPES

__all__ = ["EVENT_TYPES", "Recorder", "Trace", "TraceError", "load", "read_header", "save"]

FORMAT = "minipaged-trace"
VERSION = 2
KEYFRAME_EVERY = 32
"""Steps between keyframes: a reader can start from any keyframe, and a delta line depends
on at most this many lines before it."""

_POOLS = ("device", "host")
_ORDERED = ("device_free", "host_free", "cached")  # block lists whose order matters


@dataclass(frozen=True)
class Trace:
    """A loaded trace: the recorder's header (model, engine settings, prompts), every step
    that could be read and, when a line was damaged, ``error`` saying which."""

    header: dict
    steps: list[StepOutput]
    error: str | None = None


def step_to_dict(step: StepOutput, previous: StepOutput | None = None) -> dict:
    """One step as JSON-ready data: a keyframe when ``previous`` is None, else a delta from
    ``previous`` (the step before it)."""
    before_state = previous.state if previous is not None else None
    before_seqs = previous.sequences if previous is not None else {}
    state = step.state
    changes: dict[str, Any] = {}
    if previous is None:
        changes["block_size"] = state.block_size
    for pool in _POOLS:
        key = f"{pool}_refcounts"
        old = getattr(before_state, key) if before_state else ()
        moved = _changed_entries(old, getattr(state, key))
        if moved is not None:
            changes[key] = moved
    for key in _ORDERED:
        new = getattr(state, key)
        if before_state is None or getattr(before_state, key) != new:
            changes[key] = _runs(new)
    old_tables = before_state.tables if before_state else {}
    tables = {seq: asdict(table) for seq, table in state.tables.items()}
    changes["tables"] = _diff_map({s: asdict(t) for s, t in old_tables.items()}, tables, "blocks")
    views = {seq: asdict(view) for seq, view in step.sequences.items()}
    sequences = _diff_map({s: asdict(v) for s, v in before_seqs.items()}, views, "token_ids")
    return {
        "step": step.step,
        "keyframe": previous is None,
        "new_tokens": {str(seq): token for seq, token in step.new_tokens.items()},
        "events": [event.to_dict() for event in step.events],
        "state": changes,
        "sequences": sequences,
        "queues": {name: list(ids) for name, ids in step.queues.items()},
        "finished": [asdict(output) for output in step.finished],
        "num_prefill_tokens": step.num_prefill_tokens,
        "num_decode_tokens": step.num_decode_tokens,
        "num_cached_tokens": step.num_cached_tokens,
    }


def step_from_dict(record: dict, previous: StepOutput | None = None) -> StepOutput:
    """The inverse of ``step_to_dict``: an equal ``StepOutput``. A delta needs ``previous``,
    the step decoded from the line before."""
    if not isinstance(record, dict):
        raise TraceError(f"a step must be a JSON object, got {type(record).__name__}")
    if not record["keyframe"] and previous is None:
        raise TraceError("a delta line with no keyframe before it")
    base = None if record["keyframe"] else previous
    changes = record["state"]
    old = base.state if base is not None else None
    pools = {}
    for pool in _POOLS:
        key = f"{pool}_refcounts"
        pools[key] = _apply_entries(getattr(old, key) if old else (), changes.get(key))
    ordered = {
        key: _from_runs(changes[key]) if key in changes else getattr(old, key) for key in _ORDERED
    }
    old_tables = {s: _fields(t) for s, t in old.tables.items()} if old else {}
    tables = _apply_map(old_tables, changes["tables"], "blocks")
    old_seqs = {s: _fields(v) for s, v in base.sequences.items()} if base else {}
    views = _apply_map(old_seqs, record["sequences"], "token_ids")
    return StepOutput(
        step=record["step"],
        new_tokens={int(seq): token for seq, token in record["new_tokens"].items()},
        events=tuple(event_from_dict(event) for event in record["events"]),
        state=BlockState(
            block_size=changes["block_size"] if old is None else old.block_size,
            tables={
                seq: TableState(tuple(t["blocks"]), t["num_tokens"], t["pool"])
                for seq, t in tables.items()
            },
            **pools,
            **ordered,
        ),
        sequences={
            seq: SeqView(**{**view, "token_ids": tuple(view["token_ids"])})
            for seq, view in views.items()
        },
        queues={name: tuple(ids) for name, ids in record["queues"].items()},
        finished=tuple(
            RequestOutput(
                **{**output, "outputs": [CompletionOutput(**c) for c in output["outputs"]]}
            )
            for output in record["finished"]
        ),
        num_prefill_tokens=record["num_prefill_tokens"],
        num_decode_tokens=record["num_decode_tokens"],
        num_cached_tokens=record["num_cached_tokens"],
    )


class Recorder:
    """Writes a trace as the run goes: the header at once, then one line per ``write``,
    flushed, so a run that is interrupted leaves a trace of every step it finished. The file
    takes ``path``'s place only at the first step (``minipaged.atomic_write``): a run refused
    before it leaves an existing trace as it was, and a symbolic link at ``path`` is replaced,
    never followed."""

    def __init__(
        self, path: str | Path, header: dict, keyframe_every: int = KEYFRAME_EVERY
    ) -> None:
        if keyframe_every < 1:
            raise ValueError(f"keyframe_every must be at least 1, got {keyframe_every}")
        self.keyframe_every = keyframe_every
        self.num_steps = 0
        self._previous: StepOutput | None = None
        # Open for the recorder's lifetime, put in place by close() or the with block.
        self._replacement = atomic_write.Replacement(path)
        self._file = self._replacement.file
        start = {"format": FORMAT, "version": VERSION, "keyframe_every": keyframe_every}
        self._file.write(json.dumps({**start, **header}) + "\n")
        self._file.flush()

    def write(self, step: StepOutput) -> None:
        previous = None if self.num_steps % self.keyframe_every == 0 else self._previous
        self._file.write(json.dumps(step_to_dict(step, previous)) + "\n")
        self._file.flush()
        self._replacement.publish()
        self._previous = step
        self.num_steps += 1

    def close(self) -> None:
        self._replacement.commit()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self, kind: type | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is not None and self.num_steps == 0:
            self._replacement.discard()  # refused before any step: keep what was there
        else:
            self.close()


def save(
    path: str | Path,
    header: dict,
    steps: Iterable[StepOutput],
    keyframe_every: int = KEYFRAME_EVERY,
) -> None:
    """Write a trace: the header line, then one line per step."""
    with Recorder(path, header, keyframe_every) as recorder:
        for step in steps:
            recorder.write(step)


def load(path: str | Path, vocab_size: int | None = None, budget: Budget | None = None) -> Trace:
    """Read a trace written by ``save``. Raises ``FileNotFoundError`` for a missing file and
    ``TraceError`` (a ``ValueError``) naming the file for a header that is not a minipaged
    trace of this version, or whose claims are out of range. A step line that is damaged or
    breaks the header's claims (``minipaged.trace_schema``: token ids below ``vocab_size``,
    every size within ``budget``, by default half the memory free now) ends the trace: the
    steps before it are returned, with ``error`` naming the line, the field and the last good
    line. Nothing a line describes is built before its sizes are checked."""
    path = _existing(path)
    budget = budget or Budget()
    steps: list[StepOutput] = []
    with path.open("rb") as file:
        header, claims = _read_header(path, file, budget, vocab_size)
        checker = Checker(claims, budget)
        for number in itertools.count(2):
            limit = budget.left // BYTES_PER_JSON_BYTE
            line = file.readline(limit + 1)
            if not line:
                break
            previous = steps[-1] if steps else None
            try:
                if len(line) > limit:
                    raise TraceError(f"is longer than the {limit:,} bytes this machine can parse")
                record = checker.record(json.loads(line), previous)
                step = step_from_dict(record, previous)
                checker.result(step.state, step.sequences)
            except RecursionError:
                problem = "its JSON is nested too deeply"
            except (ValueError, TypeError, KeyError, AttributeError, IndexError) as error:
                problem = str(error).splitlines()[0] if str(error) else type(error).__name__
            else:
                steps.append(step)
                continue
            kept = f"replayed the {len(steps)} step(s) up to line {number - 1}, the last good line"
            return Trace(
                header,
                steps,
                f"{path}: line {number} is cut off or corrupt ({problem}); "
                + (kept if steps else "no step before it was readable"),
            )
    return Trace(header, steps)


def read_header(path: str | Path, vocab_size: int | None = None) -> dict:
    """The checked header of the trace at ``path``, without reading its steps: what a replay
    needs first (the model, so that ``load`` can check token ids against its vocabulary)."""
    path = _existing(path)
    with path.open("rb") as file:
        return _read_header(path, file, Budget(), vocab_size)[0]


def _existing(path: str | Path) -> Path:
    return check_input_file(path, "record one with `minipaged trace record`")


def _read_header(
    path: Path, file: BinaryIO, budget: Budget, vocab_size: int | None
) -> tuple[dict, Claims]:
    limit = budget.left // BYTES_PER_JSON_BYTE
    line = file.readline(limit + 1)
    if len(line) > limit:
        raise TraceError(
            f"{path} is not a readable minipaged trace: line 1 is longer than the {limit:,} "
            "bytes this machine can parse"
        )
    header = _header(path, line)
    try:
        return header, check_header(header, vocab_size)
    except TraceError as error:
        raise TraceError(f"{path} is not a readable minipaged trace: line 1, {error}") from None


def _header(path: Path, line: bytes) -> dict:
    def refuse(why: str) -> TraceError:
        return TraceError(f"{path} is not a readable minipaged trace: {why}")

    try:
        header = json.loads(line)
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise refuse(f"line 1 is not a JSON header ({error})") from error
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise refuse(f"line 1 is not a {FORMAT} header")
    if header.get("version") != VERSION:
        raise refuse(
            f"line 1 says trace version {header.get('version')!r}; this minipaged reads "
            f"version {VERSION}: record the run again with `minipaged trace record`"
        )
    return header


def _changed_entries(old: tuple[int, ...], new: tuple[int, ...]) -> list | None:
    """``[size, [[index, value], ...]]`` for the entries of ``new`` that differ from ``old``
    (zeros where ``old`` is shorter); None when nothing changed."""
    if old == new:
        return None
    base = old if len(old) == len(new) else (0,) * len(new)
    return [len(new), [[i, v] for i, (u, v) in enumerate(zip(base, new, strict=True)) if u != v]]


def _apply_entries(old: tuple[int, ...], changed: list | None) -> tuple[int, ...]:
    if changed is None:
        return tuple(old)
    size, entries = changed
    values = list(old) if len(old) == size else [0] * size
    for index, value in entries:
        values[index] = value
    return tuple(values)


def _runs(values: Iterable[int]) -> list[list[int]]:
    """Block ids as ``[first, last]`` runs stepping by +1 or -1: a free list of 8,000 blocks
    handed out in order is one run."""
    runs: list[list[int]] = []
    for value in values:
        if runs:
            first, last = runs[-1]
            step = (1 if last > first else -1) if last != first else value - last
            if step in (1, -1) and value - last == step:
                runs[-1][1] = value
                continue
        runs.append([value, value])
    return runs


def _from_runs(runs: list[list[int]]) -> tuple[int, ...]:
    values: list[int] = []
    for first, last in runs:
        step = 1 if last >= first else -1
        values.extend(range(first, last + step, step))
    return tuple(values)


def _diff_map(old: dict[int, dict], new: dict[int, dict], grows: str) -> dict:
    """``{id: changed fields}`` for entries of ``new`` that are new or changed, ``{id: None}``
    for those that left, and ``"order"`` when the ids' order is not the one applying them
    gives. A list field ``grows`` that kept its start is stored as ``"append"``: its tail."""
    changes: dict[str, Any] = {str(key): None for key in old if key not in new}
    for key, fields in new.items():
        before = old.get(key, {})
        diff = {name: value for name, value in fields.items() if before.get(name) != value}
        grown, kept = list(fields[grows]), list(before.get(grows, ()))
        if grows in diff and kept and grown[: len(kept)] == kept:
            del diff[grows]
            diff["append"] = grown[len(kept) :]
        if diff or key not in old:
            changes[str(key)] = diff
    if list(new) != [key for key in old if key in new] + [key for key in new if key not in old]:
        changes["order"] = list(new)
    return changes


def _fields(record: TableState | SeqView) -> dict[str, Any]:
    """A record's fields by name, the values themselves (tuples and scalars, never changed in
    place): ``asdict`` would deep-copy every token id of every sequence at every step, which
    was most of the time a trace took to load."""
    return {field.name: getattr(record, field.name) for field in dataclasses.fields(record)}


def _apply_map(old: dict[int, dict], changes: dict, grows: str) -> dict[int, dict]:
    result = {key: dict(fields) for key, fields in old.items()}
    for key, diff in changes.items():
        if key == "order":
            continue
        seq = int(key)
        if diff is None:
            del result[seq]
            continue
        fields = result.setdefault(seq, {})
        if "append" in diff:
            fields[grows] = list(fields[grows]) + diff["append"]
        fields.update({name: value for name, value in diff.items() if name != "append"})
    if "order" in changes:
        result = {int(key): result[int(key)] for key in changes["order"]}
    return result


def event_from_dict(record: dict) -> Event:
    """Rebuild an event from ``Event.to_dict`` output (the trace format)."""
    record = dict(record)
    kind = record.pop("kind", None)
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown event kind {kind!r}; known kinds: {sorted(EVENT_TYPES)}")
    cls = EVENT_TYPES[kind]
    tuple_fields = {f.name for f in dataclasses.fields(cls) if str(f.type).startswith("tuple")}
    for name in tuple_fields & record.keys():
        record[name] = tuple(tuple(x) if isinstance(x, list) else x for x in record[name])
    return cls(**record)
