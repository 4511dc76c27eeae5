"""Run a student's block manager on the model in a child process, and record the run as a trace.

``minipaged tui --exercise N --path DIR`` shows the student's code at work. Imported into the
TUI's own process, a loop that never ends would freeze it and a runaway allocation could take
the machine down. So the run happens here instead: the TUI pickles the scenario, starts
``python -m minipaged.grader.recorded_run``, which limits itself by the grader's ``Limits``
(address space, CPU time; the parent keeps the wall clock), and replays the trace the child
writes: every ``StepOutput`` the run made, up to the end or to the student's first exception,
whose message the header carries as ``"error"``. Resource isolation, not a security sandbox.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from minipaged import trace
from minipaged.grader.child import limit_resources
from minipaged.grader.grading import Limits, limit_arguments

MAX_STEPS = 5000
"""A run still going after this many steps is cut there: a scheduler that never finishes."""


def record_student_run(
    scenario, number: int, path: Path | None, model: str, limits: Limits | None = None
) -> tuple[trace.Trace, str | None]:
    """Run ``scenario`` on the block manager of exercise ``number`` (the student's files in
    ``path``, or the starter) in a limited child process; return its trace and the error that
    ended the run early, if any."""
    limits = limits or Limits(wall_seconds=300.0)
    with tempfile.TemporaryDirectory(prefix="minipaged-run-") as folder:
        scenario_file, trace_file = Path(folder) / "scenario.pickle", Path(folder) / "run.jsonl"
        scenario_file.write_bytes(pickle.dumps(scenario))
        command = [sys.executable, "-m", "minipaged.grader.recorded_run", str(number)]
        command += [str(scenario_file), str(trace_file), "--model", model]
        command += ["--path", str(path)] if path is not None else []
        command += limit_arguments(limits.memory_gib, limits.cpu_seconds)
        output = Path(folder) / "output.txt"
        with open(output, "wb") as sink:
            # Output to a file, not a pipe, and a session of its own: at the limit the whole
            # process group ends, and a process it left behind holds no pipe we wait on.
            child = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True
            )
        try:
            child.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            raise ValueError(
                f"running exercise {number}'s code took more than {limits.wall_seconds:g} s: "
                "is there a loop that never ends?"
            ) from None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
        if not trace_file.is_file():
            tail = "\n".join(output.read_text(errors="replace").strip().splitlines()[-6:])
            raise ValueError(f"running exercise {number}'s code failed:\n{tail}")
        recorded = trace.load(trace_file)
    return recorded, recorded.header.get("error")


def _record(number: int, scenario_file: Path, trace_file: Path, path, model: str) -> None:
    """In the child: build the engine on the student's block manager, step it to the end (or
    the first exception), and save every step."""
    from minipaged.grader.exercises import exercise
    from tui.scenarios import with_student_manager

    folder = Path(path or exercise(number).starter).resolve()
    scenario = with_student_manager(pickle.loads(scenario_file.read_bytes()), number, path)
    header = {"model": model, "scenario": scenario.title, "exercise": number}
    steps = []
    try:
        engine = scenario.build(model)
        while engine.has_unfinished() and len(steps) < MAX_STEPS:
            steps.append(engine.step())
    except Exception as error:  # the student's code failing is a result to show, not a crash
        frames = traceback.extract_tb(error.__traceback__)
        where = next(
            (
                f" ({Path(f.filename).name}, line {f.lineno})"
                for f in reversed(frames)
                if Path(f.filename).resolve().parent == folder
            ),
            "",
        )
        header["error"] = f"{type(error).__name__}: {error}{where} at step {len(steps) + 1}"
    trace.save(trace_file, header, steps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m minipaged.grader.recorded_run")
    parser.add_argument("number", type=int)
    parser.add_argument("scenario_file", type=Path)
    parser.add_argument("trace_file", type=Path)
    parser.add_argument("--path", type=Path)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--memory-gib", type=float)
    parser.add_argument("--cpu-seconds", type=int)
    args = parser.parse_args()
    limit_resources(args.memory_gib, args.cpu_seconds)
    _record(args.number, args.scenario_file, args.trace_file, args.path, args.model)
