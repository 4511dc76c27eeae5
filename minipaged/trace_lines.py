"""One step as one line of a trace, and back: a ``StepOutput`` as JSON-ready data
(``step_to_dict``) and the equal ``StepOutput`` from it (``step_from_dict``).

What happened in the step is stored whole: new tokens, events (``Event.to_dict``, read back by
``event_from_dict``), queues, finished requests, token counts. What the step left behind, the
block state $\\mathcal{T}_r$, $\\mathcal{R}[p]$ and the live sequences, is stored as a
*keyframe* (everything) or as a *delta*: only what changed since the step before (refcounts
that moved, tables and sequences that grew, by their new tails, free lists as runs of
consecutive ids). A keyframe is a delta from an empty state, so one decoder reads both.
``minipaged.trace`` decides which lines are keyframes and reads and writes the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from minipaged.block_state import BlockState, TableState
from minipaged.events import Event
from minipaged.outputs import CompletionOutput, RequestOutput, SeqView, StepOutput
from minipaged.trace_schema import TraceError
from minipaged.trace_values import EVENT_TYPES

_POOLS = ("device", "host")
_ORDERED = ("device_free", "host_free", "cached")  # block lists whose order matters


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
