"""Stand-ins, in the grader, for the objects a grading child keeps (``minipaged.grader.remote``):
a check calls and reads them as it would the student's objects, and each use is one request.

``RemoteStudent`` is what a check sees as ``student``; ``Proxy`` is any object of the student's
code; ``_Arguments`` sends a call's arguments and writes the arrays among them back afterwards,
as the student's code left them, so that a kernel that fills a tensor in place is seen to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minipaged.grader import wire
from minipaged.grader.child_errors import ChildGone
from minipaged.grader.student import StudentImportError
from minipaged.grader.time_limit import TimeLimitExceeded

if TYPE_CHECKING:
    from minipaged.grader.remote import GradingChild

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
            text = self._child.ask({"op": "repr", "h": self._handle})
        except TimeLimitExceeded as error:  # the message tells the time-out, not a vague object
            return f"<an object of your code: its __repr__ ran past {error.seconds:g} s>"
        except (Exception, ChildGone):  # only for messages
            text = None
        return text if type(text) is str else "<an object of your code>"  # not a str subclass

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
        self.arrays = wire.arrays_in(list(args) + list(kwargs.values()))
        encoder = _ArgumentEncoder()
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

    def clock(self, seconds: float):
        """A clock of ``seconds`` of the student's time in the child, running beside the
        criterion's (``GradingChild.side_clock``)."""
        return self._child.side_clock(seconds)

    def run(self, helper, *args, **kwargs):
        sent = _Arguments(args, kwargs)
        name = f"{helper.__module__}:{helper.__qualname__}"
        answer = self._child.ask({"op": "run", "helper": name, **sent.document})
        return sent.written_back(self._child, answer)

    @staticmethod
    def where(error: BaseException) -> str:
        return getattr(error, "student_where", "")
