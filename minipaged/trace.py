"""Traces: a run's step outputs saved as JSON Lines, replayable without the model.

Line 1 is a header: ``{"format": "minipaged-trace", "version": 2, "keyframe_every": K, ...}``
with whatever the recorder describes (model, engine configuration, requests). Every other line
is one ``StepOutput`` (``minipaged.trace_lines``): a *keyframe* on the first step and every
K-th, holding the whole block state, and otherwise a *delta*, holding only what changed since
the line before.

Loading gives back equal ``StepOutput`` objects, so the TUI and ``minipaged trace replay``
treat a recorded run exactly like a live one. A damaged line (a file cut off mid-write, say)
ends the readable part: ``load`` returns the steps before it and says which line broke.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from minipaged import atomic_write
from minipaged.input_file import check_input_file
from minipaged.json_input import loads
from minipaged.outputs import StepOutput
from minipaged.replaceable import OutputKind
from minipaged.trace_accounting import Ledger
from minipaged.trace_lines import event_from_dict, step_from_dict, step_to_dict
from minipaged.trace_schema import (
    BYTES_PER_JSON_BYTE,
    Budget,
    Checker,
    Claims,
    TraceError,
    check_header,
)
from minipaged.trace_values import EVENT_TYPES

__all__ = [  # event_from_dict and EVENT_TYPES: where the events' reference page reads them
    "EVENT_TYPES",
    "TRACE",
    "Recorder",
    "Trace",
    "TraceError",
    "event_from_dict",
    "load",
    "read_header",
    "save",
    "starts_a_trace",
]

FORMAT = "minipaged-trace"
VERSION = 2
KEYFRAME_EVERY = 32
"""Steps between keyframes: a reader can start from any keyframe, and a delta line depends
on at most this many lines before it."""


@dataclass(frozen=True)
class Trace:
    """A loaded trace: the recorder's header (model, engine settings, prompts), every step
    that could be read and, when a line was damaged, ``error`` saying which."""

    header: dict
    steps: list[StepOutput]
    error: str | None = None


class Recorder:
    """Writes a trace as the run goes: the header at once, then one line per ``write``,
    flushed, so a run that is interrupted leaves a trace of every step it finished. The file
    takes ``path``'s place only at the first step (``minipaged.atomic_write``): a run refused
    before it leaves an existing trace as it was, and a symbolic link at ``path`` is replaced,
    never followed. The header and ``keyframe_every`` are checked by the rule ``load`` reads
    them by before anything is made: a recorder writes no trace that would not load. A file at
    ``path`` that is no trace is refused before anything is made, unless ``force``
    (``minipaged.replaceable``)."""

    def __init__(
        self,
        path: str | Path,
        header: dict,
        keyframe_every: int = KEYFRAME_EVERY,
        *,
        force: bool = False,
    ) -> None:
        line = header_line(header, keyframe_every)
        self.keyframe_every = keyframe_every
        self.num_steps = 0
        self._previous: StepOutput | None = None
        # Open for the recorder's lifetime, put in place by close() or the with block.
        self._replacement = atomic_write.Replacement(path, replaces=TRACE, force=force)
        self._file = self._replacement.file
        self._file.write(line)
        self._file.flush()

    def write(self, step: StepOutput) -> None:
        if not isinstance(step, StepOutput):  # before a line of it is written
            raise TypeError(
                f"Recorder.write takes a StepOutput (what LLMEngine.step returns), got "
                f"{type(step).__name__} {step!r:.60}"
            )
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


def header_line(header: dict, keyframe_every: int) -> str:
    """The first line of a trace: the recorder's own keys, then ``header``'s. Refused, naming
    the problem and the fix, where ``load`` would refuse it (``check_header``) or it is no
    JSON: a header that is no dict, that sets a key only the recorder sets, holds a value JSON
    cannot hold (NaN, a set, an object), or a ``keyframe_every`` that is no integer of at
    least 1."""
    if not isinstance(header, dict):
        raise TypeError(
            "a trace's header is a dict of what the run was (model, prompts, engine), got "
            f"{type(header).__name__} {header!r:.60}"
        )
    own = {"format": FORMAT, "version": VERSION, "keyframe_every": keyframe_every}
    taken = [key for key in own if key in header]
    if taken:
        raise ValueError(
            f"the header sets {', '.join(taken)}, which only the recorder sets: drop "
            f"{'it' if len(taken) == 1 else 'them'} from the header (pass keyframe_every to "
            "the recorder itself)"
        )
    try:
        line = json.dumps({**own, **header}, allow_nan=False)
        check_header(json.loads(line))
    except (TypeError, ValueError) as error:
        raise type(error)(
            f"the trace's header cannot be written as a trace that loads: {error}; give "
            "keyframe_every as an integer of at least 1 and header values JSON holds (text, "
            "finite numbers, lists and dicts of them)"
        ) from None
    return line + "\n"


def save(
    path: str | Path,
    header: dict,
    steps: Iterable[StepOutput],
    keyframe_every: int = KEYFRAME_EVERY,
    *,
    force: bool = False,
) -> None:
    """Write a trace: the header line, then one line per step; over a file that is no trace
    only with ``force`` (``Recorder``)."""
    with Recorder(path, header, keyframe_every, force=force) as recorder:
        for step in steps:
            recorder.write(step)


def load(
    path: str | Path,
    vocab_size: int | None = None,
    budget: Budget | None = None,
    check_events: bool = True,
) -> Trace:
    """Read a trace written by ``save``. Raises ``FileNotFoundError`` for a missing file and
    ``TraceError`` (a ``ValueError``) naming the file for a header that is not a minipaged
    trace of this version, or whose claims are out of range. A step line that is damaged or
    breaks the header's claims (``minipaged.trace_schema``: token ids below ``vocab_size``,
    every size within ``budget``, by default half the memory free now) ends the trace: the
    steps before it are returned, with ``error`` naming the line, the field and the last good
    line. Nothing a line describes is built before its sizes are checked.

    Each step's events must add up to its refcounts (``minipaged.trace_accounting``): a file
    whose events were reordered, dropped or edited was not written by a recorder, so none of it
    is replayed: ``TraceError`` names the line, the step and the event. ``check_events=False``
    leaves that out for a run of code under test, whose broken refcounts the replay shows."""
    path = _existing(path)
    budget = budget or Budget()
    steps: list[StepOutput] = []
    with path.open("rb") as file:
        header, claims = _read_header(path, file, budget, vocab_size)
        checker = Checker(claims, budget)
        ledger = Ledger() if check_events else None
        for number in itertools.count(2):
            limit = budget.left // BYTES_PER_JSON_BYTE
            line = file.readline(limit + 1)
            if not line:
                break
            previous = steps[-1] if steps else None
            try:
                if len(line) > limit:
                    raise TraceError(f"is longer than the {limit:,} bytes this machine can parse")
                record = checker.record(loads(line), previous)
                step = step_from_dict(record, previous)
                checker.result(step.state, step.sequences)
            except RecursionError:
                problem = "its JSON is nested too deeply"
            except (ValueError, TypeError, KeyError, AttributeError, IndexError) as error:
                problem = str(error).splitlines()[0] if str(error) else type(error).__name__
            else:
                if ledger is not None:
                    _add_up(ledger, step, path, number)
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


def _add_up(ledger: Ledger, step: StepOutput, path: Path, number: int) -> None:
    try:
        ledger.step(step)
    except TraceError as error:
        raise TraceError(
            f"{path}: line {number}, {error} (step {step.step}'s events do not add up); no "
            "step of this trace is replayed: record the run again with `minipaged trace record`"
        ) from None


def starts_a_trace(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, begins with a trace's header line (any version):
    a file ``minipaged trace record`` may replace without ``--force``. A header line longer
    than ``head`` (a run of long prompts) is known by its start, as ``header_line`` writes it."""
    line, newline, _ = head.partition(b"\n")
    if not newline and line.startswith(json.dumps({"format": FORMAT}).encode()[:-1]):
        return True
    try:
        header = loads(line)
    except ValueError:
        return False
    return isinstance(header, dict) and header.get("format") == FORMAT


TRACE = OutputKind("a minipaged trace", starts_a_trace)
"""What a recorder may replace without ``force``: a trace, of any version."""


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

    if not line.strip():
        raise refuse(
            "line 1 is empty, where a trace's header belongs; record one with "
            "`minipaged trace record`"
        )
    try:
        header = loads(line)
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise refuse(f"line 1 is not a JSON header ({error})") from error
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise refuse(f"line 1 is not a {FORMAT} header")
    version = header.get("version")
    if type(version) is not int:  # "2" would read "version '2'; this minipaged reads 2"
        got = f"{type(version).__name__} {version!r:.40}" if "version" in header else "none"
        raise refuse(
            f"line 1's version must be a JSON integer (this minipaged reads {VERSION}), got {got}"
        )
    if version != VERSION:
        raise refuse(
            f"line 1 says trace version {version!r}; this minipaged reads "
            f"version {VERSION}: record the run again with `minipaged trace record`"
        )
    return header
