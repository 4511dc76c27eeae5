"""The grader's side of a grading child: start it, ask it, end it, and stand-ins for the
objects it keeps, so that a criterion's checks run here, in the grader, unchanged.

``RemoteStudent`` is what a check sees as ``student``: ``student.block_manager`` is a
``Proxy`` of the module in the child, and every attribute, call or ``repr`` on a proxy is one
request (``minipaged.grader.child``). Values come back as data (``minipaged.grader.wire``);
objects stay in the child and come back as proxies; what the student's code raised is raised
here again, as the same built-in or library exception or as a stand-in class of the same name.
A proxy claims the library class it derives from (``isinstance(bm, BlockManager)``), and
arrays passed to a call are written back after it, as the student's code left them.

Nothing the child sends is run or trusted: a check compares it, and decides. The child may
die, hang or babble; each request then raises ``ChildGone`` (or ``TimeLimitExceeded`` at the
criterion's deadline) after ending the child's whole process group, and the next criterion
starts a new child.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from minipaged.grader import wire
from minipaged.grader.delegation import LibraryDelegation
from minipaged.grader.student import StudentImportError
from minipaged.grader.time_limit import TimeLimitExceeded

STARTUP_SECONDS = 300.0
"""How long a child may take to start (import the library, before any student code runs)."""


class ChildGone(BaseException):
    """The grading child ended, or sent what is not an answer, during a criterion: the message
    says why, in words a student can act on. A BaseException, so that no check swallows it."""


class WallClockSpent(ChildGone):
    """The grading of the whole submission ran past ``Limits.wall_seconds``."""


class StudentExit(Exception):
    """The student's code called ``sys.exit(code)`` (``SystemExit`` in the child)."""

    def __init__(self, code) -> None:
        super().__init__(code)
        self.code = code


class StudentBaseException(Exception):
    """The student's code raised a ``BaseException`` that is not an ``Exception``
    (``KeyboardInterrupt``, or one of its own): here, only a failure of the criterion."""


class GradingChild:
    """One child process that runs one exercise's student code for the criteria that run in
    one place (``runs_in``): started, and started again after it dies, on demand."""

    def __init__(self, number: int, runs_in: str, folder: Path | None, limits) -> None:
        self.number, self.runs_in, self.folder, self.limits = number, runs_in, folder, limits
        self.temp = Path(tempfile.mkdtemp(prefix="minipaged-grading-"))
        self.process: subprocess.Popen | None = None
        self.deadline: float | None = None
        self.confinement = ""
        self.loaded: dict | None = None
        self.broken = ""  # why this code cannot be loaded at all: every criterion fails so
        self.wall_deadline: float | None = None
        self._proxies: dict[int, Proxy] = {}
        self._classes: dict = {}  # by handle, or ("python", name) for stand-ins
        self._next = 0
        self.arrays: list = []  # the arrays the last call sent, as the child sent them back

    # -- the process ---------------------------------------------------------------------

    def start(self) -> None:
        """Start a child and load the student's code in it, within the current deadline."""
        requests_read, self._requests = os.pipe()
        self._answers, answers_write = os.pipe()
        os.set_blocking(self._requests, False)
        command = [sys.executable, "-m", "minipaged.grader.child", str(self.number)]
        command += ["--channel", f"{requests_read},{answers_write}", "--temp", str(self.temp)]
        command += ["--path", str(self.folder)] if self.folder is not None else []
        command += ["--gpu"] if self.runs_in == "gpu" else []
        memory = None if self.runs_in == "gpu" else self.limits.memory_gib
        command += ["--memory-gib", str(memory)] if memory is not None else []
        cpu = self.limits.cpu_seconds
        command += ["--cpu-seconds", str(cpu)] if cpu is not None else []
        with open(self.temp / "output.txt", "ab") as output:
            self.process = subprocess.Popen(
                command,
                env=self._environment(),
                cwd=self.folder or self.temp,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                pass_fds=(requests_read, answers_write),
                start_new_session=True,  # one process group to end, apart from the grader's
            )
        os.close(requests_read)
        os.close(answers_write)
        self._pidfd = os.pidfd_open(self.process.pid) if hasattr(os, "pidfd_open") else None
        hello = self._receive(time.monotonic() + STARTUP_SECONDS, "starting")
        if not isinstance(hello, dict) or not isinstance(hello.get("hello"), str):
            self._fail("sent a first message that is not its greeting")
        self.confinement = hello["hello"][:300]
        self.deadline = time.monotonic() + self.limits.check_seconds
        try:
            self.loaded = self.ask({"op": "load", "solution": self.folder is None})
        except (TimeLimitExceeded, WallClockSpent) as error:
            self.broken = (
                f"importing your files was still running after {self.limits.check_seconds:g} s"
                if isinstance(error, TimeLimitExceeded)
                else f"importing your files was still running when {error}"
            ) + ": is there a loop that never ends at import time (outside any function)?"
            raise ChildGone(self.broken) from None
        except ChildGone as gone:
            self.broken = f"importing your files ended the grading process: {gone}"
            raise ChildGone(self.broken) from None

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("TMPDIR", "XDG_CACHE_HOME", "NUMBA_CACHE_DIR", "MPLCONFIGDIR"):
            env[name] = str(self.temp)
        if self.runs_in == "simulator":
            env["NUMBA_ENABLE_CUDASIM"] = "1"
        else:
            env.pop("NUMBA_ENABLE_CUDASIM", None)
        return env

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """End the child's whole process group (what its code started too), and wait for the
        child a bounded time. Never waits on what a grandchild still holds."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        for fd in (self._requests, self._answers, self._pidfd):
            if fd is not None:
                os.close(fd)
        self.process = self._pidfd = None
        self.loaded = None
        self._proxies, self._classes = {}, {}

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.temp, ignore_errors=True)

    def output(self, lines: int = 6) -> str:
        """The last ``lines`` lines the student's code (or Python, dying) printed."""
        try:
            with open(self.temp / "output.txt", "rb") as f:
                f.seek(max(f.seek(0, os.SEEK_END) - 4096, 0))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    # -- requests ------------------------------------------------------------------------

    def ask(self, request: dict) -> Any:
        """Send ``request``; return the decoded answer, or raise what the student's code raised
        (or ``ChildGone``, ``TimeLimitExceeded``)."""
        if self.process is None:
            raise ChildGone("the grading process is gone")
        self._next += 1
        ident = self._next
        deadlines = [d for d in (self.deadline, self.wall_deadline) if d is not None]
        deadline = min(deadlines, default=None)
        self._send({"id": ident, **request}, deadline)
        answer = self._receive(deadline, "answering")
        if not isinstance(answer, dict) or answer.get("id") != ident:
            self._fail("answered a question it was not asked")
        try:
            if "raised" in answer and len(answer) == 2:
                raise self._exception(answer["raised"])
            if "v" not in answer or not set(answer) <= {"id", "v", "a"}:
                raise wire.ProtocolError("an answer without a value")
            arrays = answer.get("a", [])
            self.arrays = wire.decode(arrays, self.proxy, self._exception_class)
            return wire.decode(answer["v"], self.proxy, self._exception_class)
        except wire.ProtocolError as error:
            self._fail(f"sent something the grader cannot read ({error})")

    def _send(self, document: dict, deadline: float | None) -> None:
        view = memoryview(wire.frame(document))
        while view:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            _, ready, _ = select.select([], [self._requests], [], wait)
            if not ready:
                self._timed_out()
            try:
                view = view[os.write(self._requests, view) :]
            except BrokenPipeError:
                self._ended()

    def _receive(self, deadline: float | None, doing: str) -> Any:
        try:
            return wire.read_frame(self._answers, deadline, self._pidfd)
        except TimeoutError:
            self._timed_out()
        except EOFError:
            self._ended()
        except wire.ProtocolError as error:
            self._fail(f"sent something the grader cannot read while {doing} ({error})")

    def _timed_out(self):
        self.stop()
        if self.wall_deadline is not None and time.monotonic() >= self.wall_deadline:
            raise WallClockSpent(
                f"the grading of this submission reached its {self.limits.wall_seconds:g} s "
                "limit in all"
            )
        raise TimeLimitExceeded(self.limits.check_seconds)

    def _stand_in(self, cls: type) -> type:
        """A ``StudentBaseException`` named like ``cls``, a BaseException of Python's."""
        key = ("python", cls.__qualname__)
        if key not in self._classes:
            body = {"__module__": "your code", "__str__": _their_text}
            self._classes[key] = type(cls.__name__, (StudentBaseException,), body)
        return self._classes[key]

    def reset(self) -> None:
        """Between criteria: the child forgets every object but the modules; so do we."""
        self.ask({"op": "reset"})
        self._proxies = {h: p for h, p in self._proxies.items() if p in self._modules()}
        self._classes.clear()

    def _modules(self) -> list:
        modules = (self.loaded or {}).get("modules") or {}
        return list(modules.values()) if isinstance(modules, dict) else []

    def _ended(self):
        status = self.process.wait(timeout=10) if self.process else None
        tail = self.output()
        self.stop()
        raise ChildGone(why_it_ended(status, self.limits) + (f"\n{tail}" if tail else ""))

    def _fail(self, what: str):
        self.stop()
        raise ChildGone(
            f"the grading process {what}: does your code write to file descriptors it did not "
            "open, or start processes that do?"
        )

    # -- values --------------------------------------------------------------------------

    def proxy(self, handle: int, classes: list[str]) -> Proxy:
        return Proxy(self, handle, classes)

    def _exception_class(self, document: dict) -> type:
        if "N" in document:
            return wire.resolve(document["N"], BaseException) or Exception
        qualname, handle = document.get("q"), document.get("X")
        if not isinstance(qualname, str) or type(handle) is not int:
            raise wire.ProtocolError("an exception class without a name")
        if handle not in self._classes:
            name = qualname[:200].rpartition(".")[2] or "Error"
            bases = document.get("b", [])
            bases = tuple(self._exception_class(b) for b in wire._list(bases)[:4]) or (Exception,)
            bases = tuple(b if issubclass(b, Exception) else StudentBaseException for b in bases)
            body = {"__module__": "your code", "__str__": _their_text}
            try:
                self._classes[handle] = type(name, bases, body)
            except TypeError:  # bases whose layouts conflict
                self._classes[handle] = type(name, (Exception,), body)
        return self._classes[handle]

    def _exception(self, raised: Any) -> BaseException:
        if not isinstance(raised, dict):
            raise wire.ProtocolError("a malformed exception")
        cls = self._exception_class(raised.get("cls") or {})
        args = raised.get("args", [])
        args = (
            tuple(wire.decode(args, self.proxy, self._exception_class))
            if type(args) is list
            else ()
        )
        text, where = str(raised.get("text", ""))[:4000], str(raised.get("where", ""))[:200]
        if issubclass(cls, SystemExit):
            error: BaseException = StudentExit(raised.get("code"))
        else:
            if not issubclass(cls, Exception) and not issubclass(cls, LibraryDelegation):
                cls = self._stand_in(cls)  # KeyboardInterrupt must not stop the grader
            error = cls.__new__(cls)
            error.args = args
        error.student_text, error.student_where = text, where
        return error


def _their_text(error) -> str:
    return getattr(error, "student_text", "")


def why_it_ended(status: int | None, limits) -> str:
    """Why a child ended while it ran a student's code, in words a student can act on."""
    if status is None:
        return "the grading process stopped answering"
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


# -- stand-ins ---------------------------------------------------------------------------------

_DUNDERS = frozenset({"__name__", "__qualname__", "__module__"})


class Proxy:
    """An object of the student's code, kept in the child. Attributes and calls are requests;
    equality is identity (one proxy per object); ``__class__`` is the library class it derives
    from, if any, so that ``isinstance`` works as it would on the object itself."""

    __slots__ = ("__weakref__", "_child", "_classes", "_handle")

    def __new__(cls, child: GradingChild, handle: int, classes: list[str]):
        cache = child._proxies
        found = cache.get(handle)
        if found is None:
            found = object.__new__(cls)
            object.__setattr__(found, "_child", child)
            object.__setattr__(found, "_handle", handle)
            object.__setattr__(found, "_classes", classes)
            cache[handle] = found
        return found

    def __getattr__(self, name: str):
        if name.startswith("__") and name not in _DUNDERS:
            raise AttributeError(name)
        return self._child.ask({"op": "getattr", "h": self._handle, "name": name})

    def __setattr__(self, name, value):
        raise AttributeError(f"the grader cannot set {name} on an object of your code")

    def __call__(self, *args, **kwargs):
        sent = _Arguments(args, kwargs)
        answer = self._child.ask({"op": "call", "h": self._handle, **sent.document})
        return sent.written_back(self._child, answer)

    def __repr__(self) -> str:
        try:
            return self._child.ask({"op": "repr", "h": self._handle})
        except (Exception, ChildGone, TimeLimitExceeded):  # only for messages
            return "<an object of your code>"

    def __contains__(self, item) -> bool:
        return bool(self._dunder("__contains__", item))

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        return self._dunder("__len__")

    def __getitem__(self, key):
        return self._dunder("__getitem__", key)

    def __iter__(self):
        return iter(self._child.ask({"op": "list", "h": self._handle}))

    def _dunder(self, name: str, *args):
        sent = _Arguments(args, {})
        answer = self._child.ask({"op": "call", "h": self._handle, "name": name, **sent.document})
        return sent.written_back(self._child, answer)

    @property
    def __class__(self):
        for name in self._classes:
            found = wire.resolve(name)
            if found is not None:
                return found
        return Proxy

    def __eq__(self, other) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class _Arguments:
    """A call's arguments as sent, and the arrays among them, to be written back."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.arrays: list = []
        encoder = _ArgumentEncoder()
        _collect(list(args) + list(kwargs.values()), self.arrays)
        self.document = {"args": encoder.encode(list(args)), "kwargs": encoder.encode(dict(kwargs))}

    def written_back(self, child: GradingChild, result: Any) -> Any:
        """``result``, once the arrays sent are overwritten with the child's (``child.arrays``)."""
        after = child.arrays
        if not isinstance(after, list) or len(after) != len(self.arrays):
            raise ChildGone("the grading process sent back arrays that were not the ones sent")
        for local, remote in zip(self.arrays, after, strict=True):
            if (
                type(remote) is not type(local)
                or remote.shape != local.shape
                or remote.dtype != local.dtype
            ):
                raise ChildGone("the grading process sent back an array of another shape or type")
            local[...] = remote
        return result


class _ArgumentEncoder(wire.Encoder):
    def other(self, value: Any) -> dict:
        if type(value) is Proxy:
            return {"H": object.__getattribute__(value, "_handle"), "c": []}
        raise TypeError(f"the grader cannot send a {type(value).__name__} to the grading process")


def _collect(values: list, into: list) -> None:
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    for value in values:
        if type(value) in (list, tuple):
            _collect(list(value), into)
        elif (torch is not None and type(value) is torch.Tensor) or (
            numpy is not None and type(value) is numpy.ndarray
        ):
            into.append(value)


class RemoteStudent:
    """The student's work as a check sees it, in a grading child: ``student.<stem>`` is the
    module (a proxy), ``student.run(helper, ...)`` runs a grader helper next to it, and
    ``student.where(error)`` names the line an error came from."""

    def __init__(self, child: GradingChild) -> None:
        self._child = child
        self.files: dict = {}  # the student's files are the child's to read

    def __getattr__(self, stem: str):
        if stem.startswith("_"):
            raise AttributeError(stem)
        loaded = self._child.loaded or {}
        errors = loaded.get("errors") or {}
        if isinstance(errors, dict) and stem in errors:
            raise StudentImportError(str(errors[stem]))
        modules = loaded.get("modules") or {}
        if stem not in modules:
            raise AttributeError(f"no module {stem!r} under grading")
        return modules[stem]

    def run(self, helper, *args, **kwargs):
        sent = _Arguments(args, kwargs)
        name = f"{helper.__module__}:{helper.__qualname__}"
        answer = self._child.ask({"op": "run", "helper": name, **sent.document})
        return sent.written_back(self._child, answer)

    @staticmethod
    def where(error: BaseException) -> str:
        return getattr(error, "student_where", "")
