"""Runs of the TUI's scenarios recorded as trace lines, built once a process and shared by the
trace corpora (a run costs seconds of model steps; loading its trace, milliseconds)."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

from minipaged import trace
from tui.scenarios import SCENARIOS


@functools.cache
def recorded_lines(scenario: str, keyframe_every: int = 8) -> tuple[str, ...]:
    """The lines of the trace of ``scenario`` run to its end on the tiny model, with the
    header ``trace record`` writes (B and both pool sizes)."""
    engine = SCENARIOS[scenario].build("tiny")
    steps = []
    while engine.has_unfinished():
        steps.append(engine.step())
    header = {
        "model": "tiny",
        "prompts": ["It is a truth"],
        "engine": {
            "block_size": engine.block_manager.block_size,
            "num_gpu_blocks": engine.block_manager.device.num_blocks,
            "num_cpu_blocks": engine.kv_cache.num_cpu_blocks,
            "kv_cache": engine.kv_cache.summary(),
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{scenario}.jsonl"
        trace.save(path, header, steps, keyframe_every=keyframe_every)
        assert trace.load(path).steps == steps
        return tuple(path.read_text().splitlines())


def records(lines: tuple[str, ...]) -> list[dict]:
    """The step lines as JSON objects (line ``n`` of the file is ``records(lines)[n - 2]``)."""
    return [json.loads(line) for line in lines[1:]]
