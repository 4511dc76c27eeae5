"""Traces: a run's step outputs saved as JSON Lines, replayable without the model.

Line 1 is a header: ``{"format": "minipaged-trace", "version": 1, ...}`` with whatever the
recorder describes (model, engine configuration, requests). Every other line is one
``StepOutput``: new tokens, events (``Event.to_dict``), the block state
after the step, the live sequences, the queues and the requests that finished. Loading a trace
gives back equal ``StepOutput`` objects, so the TUI and ``minipaged trace replay`` treat a
recorded run exactly like a live one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from minipaged.block_manager import BlockState, TableState
from minipaged.engine import CompletionOutput, RequestOutput, SeqView, StepOutput
from minipaged.events import event_from_dict

FORMAT = "minipaged-trace"
VERSION = 1


@dataclass(frozen=True)
class Trace:
    """A loaded trace: the recorder's header (model, engine settings, prompts) and every step."""

    header: dict
    steps: list[StepOutput]


def step_to_dict(step: StepOutput) -> dict:
    """One step as JSON-ready data (integer keys become strings, tuples lists)."""
    state = step.state
    return {
        "step": step.step,
        "new_tokens": {str(seq): token for seq, token in step.new_tokens.items()},
        "events": [event.to_dict() for event in step.events],
        "state": {
            "block_size": state.block_size,
            "tables": {str(seq): asdict(table) for seq, table in state.tables.items()},
            "device_refcounts": list(state.device_refcounts),
            "host_refcounts": list(state.host_refcounts),
            "device_free": list(state.device_free),
            "host_free": list(state.host_free),
            "cached": list(state.cached),
        },
        "sequences": {str(seq): asdict(view) for seq, view in step.sequences.items()},
        "queues": {name: list(ids) for name, ids in step.queues.items()},
        "finished": [asdict(output) for output in step.finished],
        "num_prefill_tokens": step.num_prefill_tokens,
        "num_decode_tokens": step.num_decode_tokens,
        "num_cached_tokens": step.num_cached_tokens,
    }


def step_from_dict(record: dict) -> StepOutput:
    """The inverse of ``step_to_dict``: an equal ``StepOutput``."""
    state = record["state"]
    return StepOutput(
        step=record["step"],
        new_tokens={int(seq): token for seq, token in record["new_tokens"].items()},
        events=tuple(event_from_dict(event) for event in record["events"]),
        state=BlockState(
            block_size=state["block_size"],
            tables={
                int(seq): TableState(tuple(t["blocks"]), t["num_tokens"], t["pool"])
                for seq, t in state["tables"].items()
            },
            device_refcounts=tuple(state["device_refcounts"]),
            host_refcounts=tuple(state["host_refcounts"]),
            device_free=tuple(state["device_free"]),
            host_free=tuple(state["host_free"]),
            cached=tuple(state["cached"]),
        ),
        sequences={
            int(seq): SeqView(**{**view, "token_ids": tuple(view["token_ids"])})
            for seq, view in record["sequences"].items()
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


def save(path: str | Path, header: dict, steps: Iterable[StepOutput]) -> None:
    """Write a trace: the header line, then one line per step."""
    with Path(path).open("w", encoding="utf-8") as file:
        file.write(json.dumps({"format": FORMAT, "version": VERSION, **header}) + "\n")
        for step in steps:
            file.write(json.dumps(step_to_dict(step)) + "\n")


def load(path: str | Path) -> Trace:
    """Read a trace written by ``save``; raises ``ValueError`` naming the file and line for
    anything that is not a minipaged trace of a known version."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: record one with `minipaged trace record`")
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0]) if lines else {}
        if header.get("format") != FORMAT:
            raise ValueError(f"line 1 is not a {FORMAT} header")
        if header.get("version") != VERSION:
            raise ValueError(f"trace version {header.get('version')!r}; this reads {VERSION}")
        steps = []
        for number, line in enumerate(lines[1:], start=2):
            try:
                steps.append(step_from_dict(json.loads(line)))
            except KeyError as error:
                raise ValueError(f"line {number}: the step lacks the field {error}") from error
            except (ValueError, TypeError) as error:
                raise ValueError(f"line {number}: {error}") from error
    except ValueError as error:
        raise ValueError(f"{path} is not a readable minipaged trace: {error}") from error
    return Trace(header, steps)
