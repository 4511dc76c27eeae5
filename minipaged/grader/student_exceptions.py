"""What a student's code raised in a grading child, raised again in the grader
(``minipaged.grader.remote``): as the same built-in or library exception, or as a class of the
same name made here, never as one that would act on the grader rather than fail a check.

- a ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``, ``GeneratorExit``,
  one of the student's own) comes as a ``StudentBaseException``: it must not stop the grader;
- ``SystemExit`` comes as ``StudentExit``;
- ``StopIteration`` and ``StopAsyncIteration``, and the student's subclasses of them, come as
  ``StudentStopIteration``: raised as themselves they would end a check's loop as if it were
  done (``map``, a generator, ``next``), its remaining cases unchecked.

The classes made here last until the child forgets its objects (``forget``): a class the
student's code defined is one handle in the child, one class here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minipaged.grader import frames, wire
from minipaged.grader.child_errors import (
    StudentBaseException,
    StudentExit,
    StudentStopIteration,
)
from minipaged.grader.delegation import LibraryDelegation


class StudentExceptions:
    """The exception classes of one grading child, made here. ``proxy(handle, classes)``: the
    grader's stand-in for an object the child keeps (an exception's arguments may be one)."""

    def __init__(self, proxy: Callable[[int, list[str]], Any]) -> None:
        self.proxy = proxy
        self.classes: dict = {}  # by handle, or ("python", name) for stand-ins

    def forget(self) -> None:
        self.classes.clear()

    def stand_in(self, cls: type) -> type:
        """A class named like ``cls``, an exception of Python's that must not act here as it
        would (or cannot be made without the arguments the child kept, as ExceptionGroup): a
        ``StudentStopIteration`` for StopIteration and StopAsyncIteration, a
        ``StudentBaseException`` for a BaseException that is not an Exception, else an
        Exception."""
        key = ("python", cls.__qualname__)
        if key not in self.classes:
            if issubclass(cls, StudentStopIteration.PROTOCOL):
                base = StudentStopIteration
            else:
                base = Exception if issubclass(cls, Exception) else StudentBaseException
            body = {"__module__": "your code", "__str__": _their_text}
            self.classes[key] = type(cls.__name__, (base,), body)
        return self.classes[key]

    def class_of(self, document: dict) -> type:
        """The class an exception class's ``document`` (``wire.Encoder.exception_class``) stands
        for here."""
        if "N" in document:
            found = wire.resolve(document["N"], BaseException) or Exception
            # a student's subclass of StopIteration derives from the stand-in, through here
            protocol = issubclass(found, StudentStopIteration.PROTOCOL)
            return self.stand_in(found) if protocol else found
        qualname, handle = document.get("q"), document.get("X")
        if not isinstance(qualname, str) or type(handle) is not int:
            raise frames.ProtocolError("an exception class without a name")
        if handle not in self.classes:
            name = qualname[:200].rpartition(".")[2] or "Error"
            bases = document.get("b", [])
            bases = tuple(self.class_of(b) for b in wire._list(bases)[:4]) or (Exception,)
            bases = tuple(b if issubclass(b, Exception) else StudentBaseException for b in bases)
            body = {"__module__": "your code", "__str__": _their_text}
            try:
                self.classes[handle] = type(name, bases, body)
            except TypeError:  # bases whose layouts conflict
                self.classes[handle] = type(name, (Exception,), body)
        return self.classes[handle]

    def exception(self, raised: Any) -> BaseException:
        """The exception an answer's ``raised`` (``minipaged.grader.child.Harness.raised``)
        tells of, to raise here."""
        if not isinstance(raised, dict):
            raise frames.ProtocolError("a malformed exception")
        cls = self.class_of(raised.get("cls") or {})
        args = raised.get("args", [])
        args = tuple(wire.decode(args, self.proxy, self.class_of)) if type(args) is list else ()
        text, where = str(raised.get("text", ""))[:4000], str(raised.get("where", ""))[:200]
        if issubclass(cls, SystemExit):
            error: BaseException = StudentExit(raised.get("code"))
        else:
            if not issubclass(cls, Exception) and not issubclass(cls, LibraryDelegation):
                cls = self.stand_in(cls)  # KeyboardInterrupt must not stop the grader
            try:
                error = cls.__new__(cls)
            except TypeError:  # a class that needs its arguments: ExceptionGroup's list
                error = self.stand_in(cls).__new__(self.stand_in(cls))
            error.args = args
        error.student_text, error.student_where = text, where
        return error


def _their_text(error) -> str:
    return getattr(error, "student_text", "")
