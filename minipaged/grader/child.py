"""The grading child (``minipaged.grader.child_start`` runs its ``main``). It loads a
student's files and runs what the grader asks of them, answering with what they returned; it
decides nothing.

It starts in its own temporary folder, not the student's, whose ``minipaged/`` (or any module
named like one it imports) would otherwise shadow the library before any guard is up; it moves
into the student's folder, and puts it first on ``sys.path``, only once guarded and confined.
Before any student code loads (``minipaged.grader.child_setup``) it limits itself (address
space, CPU time, file size), splits into a supervisor that keeps every process the student's
code starts within its reach and a worker that runs that code
(``minipaged.grader.process_tree``), stubs the library functions the exercise grades
(``minipaged.grader.delegation``), records what their code compiles at run time
(``minipaged.grader.runtime_code``), telling the grader of it and of every refusal on a pipe
of their own (``minipaged.grader.notices``), confines its writes and reads
(``minipaged.grader.confinement``, ``minipaged.grader.readable``), tries the GPU where it is
the GPU criteria's child, and sends a first message saying how it is confined and whether it
can use the GPU: student code has not run yet, so that line is the child's own. Then it serves
requests, one at a time, on a pair of pipes:

- ``load``: import the student's files (or the library's modules, for ``--solution``);
- ``getattr``, ``call``, ``repr``: on an object the child keeps, by handle;
- ``run``: a helper of the grader's own (``minipaged.grader.*``) with the student's modules,
  for work that must happen next to their code (building a scene their scheduler mutates,
  launching a kernel around their device function);
- ``reset``: forget every object but the modules, between criteria.

Each answer is ``{"v": value}`` or ``{"raised": ...}`` (what the student's code raised, with
the line of their file it came from), or ``{"left": ...}``: the threads the student's code left
running after the request (``minipaged.grader.left_running``); each also tells ``own``, the CPU
seconds the child spent on it outside the student's code (``minipaged.grader.harness_time``).
Whatever a student's code
raises, ``BaseException``s included, is an answer, not the child's end. A process forked by
student code closes the channel at once, so only this process ever answers on it. What the
student's code prints goes to a file the grader shows, never to the channel. What this process
holds that a student's code can read or change, and why no criterion turns on it:
``minipaged.grader.remote``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
from pathlib import Path

from minipaged.grader import frames, wire
from minipaged.grader.child_setup import fault, gpu_problem, limit_resources, prepare
from minipaged.grader.delegation import LibraryDelegation
from minipaged.grader.harness_time import HarnessTime
from minipaged.grader.left_running import itimers_left, running_threads, threads_left

CHANNEL_LOST = 87
"""The exit status of a child whose channel to the grader is gone (closed by student code)."""


def why_it_ended(status: int | None, limits) -> str:
    """Why a child ended while it ran a student's code, in words a student can act on."""
    if status is None or status == CHANNEL_LOST:
        return (
            "the grading process closed its channel to the grader: does your code close file "
            "descriptors it did not open?"
        )
    if status >= 0:
        return (
            f"your code ended the grading process (exit status {status}), as os._exit() does: "
            "return a value or raise an exception instead"
        )
    number = -status
    name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else number
    if number == signal.SIGXCPU:
        return (
            f"the grading process used its {limits.cpu_seconds} s of CPU time and was stopped: "
            "a loop that never ends?"
        )
    if number == signal.SIGKILL:
        return (
            "the grading process was killed (SIGKILL): by your code, or for running out of "
            "memory? Does your code allocate without bound?"
        )
    if number in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE):
        return (
            f"the grading process crashed ({name}) in native code: an index past an array's "
            "end in a kernel, or a tensor of the wrong shape or type?"
        )
    return f"the grading process was stopped by the signal {name}: does your code send signals?"


class Harness:
    """Serves the grader's requests on the channel ``requests`` / ``answers``, keeping every
    object it hands out in ``encoder.objects``; only the process that started it answers."""

    def __init__(self, requests: int, answers: int, number: int, folder: Path | None) -> None:
        self.requests, self.answers = requests, answers
        self.owner = os.getpid()
        self.number, self.folder = number, folder
        self.encoder = wire.Encoder()
        self.student = None
        self.modules: set[int] = set()
        self.untouched = None  # the grader's names before the student's code loaded
        self.meter: HarnessTime | None = None  # a request's own work, told with its answer

    def disown(self) -> None:
        """In a process forked by student code: let go of the channel."""
        for fd in (self.requests, self.answers):
            with contextlib.suppress(OSError):
                os.close(fd)

    def answer(self, document: dict) -> None:
        if os.getpid() != self.owner:
            os._exit(0)
        try:
            frames.write_frame(self.answers, document)
        except OSError:  # the student's code closed or broke the channel
            os._exit(CHANNEL_LOST)

    def serve(self) -> None:
        self.meter = HarnessTime()  # from here on, no student finalizer runs in the harness's
        while True:
            try:
                request = frames.read_frame(self.requests)
            except EOFError:
                return
            ident = request.get("id") if isinstance(request, dict) else None
            before = running_threads()
            answer = self.attempt(request)
            if left := threads_left(before, self.folder):  # the grader ends this child
                answer = {"left": left}
            elif timer := itimers_left():  # so too for a timer whose signal comes later
                answer = {"later": timer}
            # The CPU this answer's encoding and writing takes goes with the next answer.
            own, self.meter = self.meter.own(), HarnessTime()
            try:
                self.answer({"id": ident, "own": own, **answer})
            except BaseException as error:  # e.g. a result that cannot travel
                self.answer({"id": ident, "own": own, "raised": self.raised(error)})

    def attempt(self, request: dict) -> dict:
        """The answer to ``request``: what it returned, or what it raised, every failure being
        an answer. What the student's exception holds (its text, arguments, the frames it
        went through and their objects) is read and let go as the student's time."""
        try:
            return self.handle(request)
        except BaseException as error:
            failed = error
        with self.meter.theirs(collecting=True):
            answer = {"raised": self.raised(failed)}
            del failed
        return answer

    def handle(self, request: dict):
        op = request["op"]
        if op == "load":
            with self.meter.theirs():
                return {"v": self.load(request.get("solution", False))}
        if op == "reset":  # the objects' finalizers run now, as the student's time
            with self.meter.theirs(collecting=True):
                self.encoder.forget(self.modules)
            return {"v": None}
        if op == "run":
            module, _, name = request["helper"].partition(":")
            if not module.startswith("minipaged.grader."):
                raise ValueError(f"no helper {request['helper']}")
            changed = self.untouched.changed() if self.untouched is not None else ""
            if changed:
                raise LibraryDelegation(
                    f"your code changed the grader's {changed}: the checks run their own code "
                    "next to yours, and grade only what your own functions return"
                )
            helper = getattr(importlib.import_module(module), name)
            args, kwargs, arrays = self.arguments(request)
            with self.meter.theirs():  # the helper's work beside their code is not told apart
                result = helper(self.student, *args, **kwargs)
            return self.with_arrays(result, arrays)
        target = self.encoder.objects[request["h"]]
        if op == "getattr":
            with self.meter.theirs():
                value = getattr(target, request["name"])
            return {"v": self.encoder.encode(value)}
        if op == "repr":
            with self.meter.theirs():
                return {"v": repr(target)[:2000]}
        if op == "list":
            with self.meter.theirs():
                value = list(target)
            return {"v": self.encoder.encode(value)}
        if op == "call":
            args, kwargs, arrays = self.arguments(request)
            with self.meter.theirs():
                if "name" in request:
                    target = getattr(target, request["name"])
                result = target(*args, **kwargs)
            return self.with_arrays(result, arrays)
        raise ValueError(f"no operation {op!r}")

    def arguments(self, request: dict) -> tuple[list, dict, list]:
        """The request's arguments, and the arrays among them (to send back after the call,
        which may have written into them)."""

        def handle(ident: int, classes: list[str]):
            return self.encoder.objects[ident]

        def exception_class(document: dict):
            raise ValueError("an exception class is not an argument")

        args = wire.decode(request.get("args", []), handle, exception_class)
        kwargs = wire.decode(request.get("kwargs", {"D": []}), handle, exception_class)
        return args, kwargs, wire.arrays_in(args + list(kwargs.values()))

    def with_arrays(self, result, arrays: list) -> dict:
        """The answer to a call: its result, and the arrays it was given as they are now."""
        return {"v": self.encoder.encode(result), "a": [self.encoder.encode(a) for a in arrays]}

    def load(self, solution: bool) -> dict:
        from minipaged.grader.exercises import exercise
        from minipaged.grader.student import load_folder, load_solution
        from minipaged.grader.tampering import Snapshot

        ex = exercise(self.number)
        if solution:
            self.student = load_solution(ex.solution)
        else:
            self.untouched = Snapshot()
            self.student = load_folder(self.folder, tuple(ex.solution))
        self.modules = {self.encoder.handle(m) for m in self.student.modules.values()}
        return self.encoder.encode({"modules": self.student.modules, "errors": self.student.errors})

    def raised(self, error: BaseException) -> dict:
        """What to tell the grader of ``error``: its class, text, arguments and the line of the
        student's file it came from. Never raises: an exception whose class, arguments or
        exit code raise when read (a property, a metaclass) is told as what it did, for the
        call that raised it, and the child answers on."""
        where = _safe(lambda: self.student.where(error)) if self.student is not None else ""
        try:
            return self._described(error, where)
        except BaseException as failure:
            kind = _safe(lambda failure=failure: type(failure).__name__)
            text = (
                "your code raised an exception the grader cannot read (reading its class, "
                f"arguments or exit code raised {kind}): "
                "raise a built-in exception, such as ValueError, with a message"
            )
            cls = {"N": "builtins:Exception"}
            return {"cls": cls, "args": [text], "text": text, "where": where, "code": None}

    def _described(self, error: BaseException, where: str) -> dict:
        text = _safe(lambda: str(error))
        try:
            args = self.encoder.encode(list(error.args))
        except BaseException:  # arguments that cannot travel
            args = [text]
        cls = type(error)  # not error.__class__, which the student's class may redefine
        code = error.code if issubclass(cls, SystemExit) else None
        return {
            "cls": self.encoder.exception_class(cls),
            "args": args,
            "text": text[:4000],
            "where": where,
            "code": code if code is None or type(code) in (int, str) else _safe(lambda: code),
        }


def _safe(text) -> str:
    try:
        return str(text())
    except BaseException as error:  # a student's __str__ that fails
        return f"<could not be shown: {type(error).__name__}>"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minipaged.grader.child")
    parser.add_argument("number", type=int)
    parser.add_argument("--channel", required=True, help="REQUESTS_FD,ANSWERS_FD")
    parser.add_argument("--notices", type=int, required=True, help="the guards' pipe's FD")
    parser.add_argument("--path", type=Path)
    parser.add_argument("--temp", type=Path, required=True)
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--tui", action="store_true", help="a TUI run's child: it grades nothing")
    parser.add_argument("--hands-over", action="store_true", help="keep Exercise.handed_over")
    parser.add_argument("--memory-gib", type=float)
    parser.add_argument("--cpu-seconds", type=int)
    args = parser.parse_args(argv)
    requests, answers = (int(fd) for fd in args.channel.split(","))
    limit_resources(args.memory_gib, args.cpu_seconds)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        from cuda_kernels import simulator

        simulator.shared_memory_garbage = True  # as on a GPU: nothing clears it for the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the grader, which ends us
    from minipaged.grader.process_tree import supervise

    supervise((requests, answers))  # from here on, the worker: what it starts cannot escape
    harness = Harness(requests, answers, args.number, args.path)
    os.register_at_fork(after_in_child=harness.disown)
    try:
        confined = prepare(args)
    except Exception as error:  # the grader's own fault: no student code has run
        harness.answer({"hello": "", "fault": fault(error)})
        return
    harness.answer({"hello": confined, "gpu": gpu_problem() if args.gpu else ""})
    harness.serve()


if __name__ == "__main__":
    main()
