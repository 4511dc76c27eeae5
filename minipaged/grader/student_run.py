"""A student's code at work on the model, recorded for the TUI: ``minipaged tui --exercise N``.

This module is the TUI's one way into the grader. ``record`` runs a scenario (its requests and
engine settings) on the block manager an exercise builds from the student's code
(``Exercise.tui``; the checks' ``block_manager_class``) and returns the run as a trace, which
the TUI replays. The student's code runs as it does when graded: in a grading child
(``minipaged.grader.remote``), under the same ``Limits``, with the library's graded functions
stubbed out (``minipaged.grader.delegation``); each engine step is one request with the
per-criterion time limit, ``Limits.check_seconds``, so a step that never ends is stopped
there, and the whole run has a submission's ``Limits.wall_seconds``. The child writes each
step to a trace file in its own temporary folder; the trace reader (``minipaged.trace.load``)
checks every line of it. The error that stopped the run is worded as the grader words a
failed criterion (``grading.failure_message``).

A student's code records no events (the exercises do not ask for them), so the child wraps
their manager in ``minipaged.grader.witness.witnessed``: the TUI's counters and jumps show what
their methods did.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minipaged.grader.exercises import TUI_EXERCISES, exercise, listed, manager_of, tui_exercise
from minipaged.grader.student_folder import folder_of, graded_code

if TYPE_CHECKING:  # imported where used: the command line reads TUI_EXERCISES at its start
    from minipaged.config import EngineConfig
    from minipaged.grader.grading import Limits
    from minipaged.sampling import SamplingParams
    from minipaged.trace import Trace

__all__ = [
    "TUI_EXERCISES",
    "RecordedRun",
    "folder_of",
    "graded_code",
    "listed",
    "record",
    "tui_exercise",
]

MAX_STEPS = 5000
"""A run still going after this many steps is cut there: a scheduler that never finishes."""


@dataclass(frozen=True)
class RecordedRun:
    """Exercise ``number``'s run: the steps it made, and, when the student's code stopped
    it, ``error``: what it raised, in full, with the line of their file (``None`` for a run
    that finished), and ``step``, the step it stopped. ``unwritten``: the error is the
    starter's ``NotImplementedError``, and ``error`` names the functions the exercise asks
    for."""

    number: int
    trace: Trace
    error: str | None = None
    unwritten: bool = False
    step: int | None = None  # the step the error stopped


def record(
    number: int,
    path: Path | None,
    solution: bool,
    title: str,
    config: EngineConfig,
    requests: Sequence[tuple[str, SamplingParams]],
    limits: Limits | None = None,
    progress: Callable[[int], object] = lambda step: None,
) -> RecordedRun:
    """Run ``requests`` (the scenario ``title``) on ``config`` with exercise ``number``'s block
    manager: the student's files in ``path`` (``folder_of``), or the library's with
    ``solution``. ``progress(k)`` is called after each step k. Raises ``ValueError`` for an
    exercise the TUI does not run and ``FileNotFoundError`` for a folder without its files."""
    from minipaged import trace
    from minipaged.grader.child_errors import ChildGone
    from minipaged.grader.delegation import LibraryDelegation
    from minipaged.grader.grading import Limits, failure_message
    from minipaged.grader.library_copies import copies
    from minipaged.grader.proxies import Proxy, RemoteStudent
    from minipaged.grader.remote import STARTUP_SECONDS, GradingChild
    from minipaged.grader.time_limit import TimeLimitExceeded

    tui_exercise(number)
    limits = limits or Limits()
    folder = None if solution else folder_of(number, path).resolve()
    nothing = trace.Trace({"model": str(config.model), "scenario": title}, [])
    refused = copies(exercise(number), folder) if folder is not None else ""
    if refused:
        return RecordedRun(number, nothing, refused)
    # Closed at the block's end, or at a signal that ends the command inside it
    with GradingChild(number, "tui", folder, limits, Proxy) as child:
        student, steps, error = RemoteStudent(child), 0, None
        trace_file = child.temp / "run.jsonl"
        try:
            child.start()  # loads the student's files; a broken import fails the first request
            child.start_clock(STARTUP_SECONDS)  # the library warming up, not their code
            student.run(prepare, config.as_json(), requests[0][0])
            if not math.isinf(limits.wall_seconds):  # the whole run, as for a whole submission
                child.wall_deadline = time.monotonic() + limits.wall_seconds
            child.start_clock()
            plain = [[prompt, asdict(params)] for prompt, params in requests]
            run = student.run(start, number, title, config.as_json(), plain, str(trace_file))
            while steps < MAX_STEPS:
                child.start_clock()
                if not run.step():
                    break
                steps += 1
                progress(steps)
        except (Exception, ChildGone, LibraryDelegation, TimeLimitExceeded) as stopped:
            error, unwritten = (
                failure_message(stopped, student),
                isinstance(stopped, NotImplementedError),
            )
        else:
            unwritten = False
        # the student's refcounts may be wrong: the replay shows them, the ledger would refuse
        recorded = trace.load(trace_file, check_events=False) if trace_file.is_file() else nothing
    if unwritten:
        error += f"\nExercise {number:02d} asks you to write {asked_for(number)}."
    return RecordedRun(number, recorded, error, unwritten, None if error is None else steps + 1)


def asked_for(number: int) -> str:
    """``"BlockManager.append_slot in block_manager.py"``: the functions exercise ``number``
    grades, and the files they go in."""
    ex = exercise(number)
    stems = {module: stem for stem, module in ex.solution.items()}
    named = [
        f"{name.partition(':')[2]} in {stems[name.partition(':')[0]]}.py" for name in ex.graded
    ]
    return listed(named, "and")


# -- in the grading child ----------------------------------------------------------------------


def prepare(student, settings: dict, prompt: str) -> None:
    """The library's own engine, on the run's settings, writes one token of ``prompt``: torch,
    the model and its tokenizer are loaded and warm before the clock of the student's steps
    starts."""
    from minipaged.config import EngineConfig
    from minipaged.llm import LLM
    from minipaged.sampling import SamplingParams

    llm = LLM(config=EngineConfig(**settings))
    llm.generate([prompt], SamplingParams(max_tokens=1), show_progress=False)


class Run:
    """In the child: the engine on the exercise's block manager, stepped one request at a
    time, every step written to the trace file as it is made."""

    def __init__(
        self, student, number: int, title: str, settings: dict, requests: list, path: str
    ) -> None:
        from minipaged import trace
        from minipaged.config import EngineConfig
        from minipaged.grader.witness import witnessed
        from minipaged.llm import LLM
        from minipaged.sampling import SamplingParams

        manager = witnessed(manager_of(number, student))
        changes = dict(exercise(number).tui.settings)
        config = EngineConfig(**settings).replace(block_manager_class=manager, **changes)
        self.llm = LLM(config=config)
        for prompt, params in requests:
            self.llm.engine.add_request(prompt, SamplingParams(**params))
        engine = self.llm.engine
        header = {
            "model": str(config.model),
            "scenario": title,
            "exercise": number,
            "engine": {**config.as_json(), "kv_cache": engine.kv_cache.summary()},
        }
        self.recorder = trace.Recorder(path, header)

    def step(self) -> bool:
        """One engine step, written down; False once every request has finished."""
        engine = self.llm.engine
        if not engine.has_unfinished():
            self.recorder.close()
            return False
        self.recorder.write(engine.step())
        return True


def start(student, number: int, title: str, settings: dict, requests: list, path: str) -> Run:
    """The child's side of ``record``: a ``Run`` on ``student``'s block manager."""
    return Run(student, number, title, settings, requests, path)
