"""What crosses between the grader and the child that runs a student's code: plain data, strictly
checked, never code.

A message is a length-prefixed JSON document (``minipaged.grader.frames``), never pickle, so
that reading one can build nothing but data. Python values travel as JSON with one-key tags for
what JSON lacks::

    [..]                      a list            {"T": [..]}     a tuple
    {"D": [[k, v], ..]}       a dict            {"S": [..]}     a set (frozenset: "F")
    {"C": "mod:Class", "f": {..}}   a dataclass the grader reads by value (``VALUE_TYPES``)
    {"E": "mod:Enum", "n": "NAME"}  a member of a library enum
    {"A": {kind, dtype, shape, b64}} a torch tensor or numpy array, by its bytes
    {"H": 7, "c": [..]}       a handle: an object that stays in the child (``c``: its classes)
    {"X": 7, "q": "Err", "b": [..]}  an exception class defined in the child (``b``: its bases)
    {"N": "mod:Name"}         a class of the library or of Python itself, by name

The child encodes (``Encoder``); the grader decodes (``decode``) and refuses anything else:
a wrong tag, a class it does not know, a tensor whose bytes do not match its shape. A name is
resolved only in modules the grader has already imported, so a message can make it import
nothing.
"""

from __future__ import annotations

import base64
import builtins
import dataclasses
import enum
import importlib
import itertools
import sys
from collections.abc import Callable
from typing import Any

from minipaged.grader.frames import ProtocolError

VALUE_TYPES = frozenset(
    {
        "minipaged.block_table:BlockTable",
        "minipaged.block_state:AppendResult",
        "minipaged.block_state:TableState",
        "minipaged.block_state:BlockState",
        "minipaged.scheduler:ScheduledSeq",
        "minipaged.scheduler:SchedulerOutput",
        "minipaged.grader.ex05_preemption:Scene",
        "minipaged.grader.ex06_invariants:Verdict",
        "minipaged.study.recorded_waste:RecordedRun",
    }
)
"""Dataclasses that travel by value (a copy); every event of ``minipaged.events`` does too.
Anything else a student's code returns stays in the child and travels as a handle."""

LIBRARY = ("minipaged", "cuda_kernels")
"""The packages whose classes a message may name (besides Python's built-in exceptions)."""

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64")
DTYPES += ("uint8", "bool")


_PLAIN = (int, float, str, bool, type(None))


def _plain(values: list, depth: int) -> bool:
    """Whether ``values`` is lists of numbers, strings, booleans and None only, nested at most
    64 deep: JSON as it is, on either side."""
    if depth > 64:
        return False
    return all(type(v) in _PLAIN or (type(v) is list and _plain(v, depth + 1)) for v in values)


# -- encoding, in the child ------------------------------------------------------------------


def type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _is_library(name: str) -> bool:
    return name.split(":")[0].split(".")[0] in LIBRARY


class Encoder:
    """Turns what a student's code returned into a message, keeping each object that cannot
    travel by value in ``objects`` under a handle."""

    def __init__(self) -> None:
        self.objects: dict[int, Any] = {}
        self._handles: dict[int, int] = {}  # id(object) -> handle
        self._count = itertools.count(1)  # never reused, so a stale handle names nothing

    def handle(self, value: Any) -> int:
        key = id(value)
        if key not in self._handles:
            self._handles[key] = next(self._count)
            self.objects[self._handles[key]] = value
        return self._handles[key]

    def forget(self, keep: set[int]) -> None:
        """Drop every handle but ``keep`` (the modules), so a criterion's objects can go."""
        self.objects = {h: v for h, v in self.objects.items() if h in keep}
        self._handles = {id(v): h for h, v in self.objects.items()}

    def encode(self, value: Any, depth: int = 0) -> Any:
        if depth > 64:
            raise ValueError("nested more than 64 levels deep")
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            return value
        if kind is list:
            if _plain(value, depth):
                return value  # JSON as it is: json.dumps copies it now
            return [self.encode(v, depth + 1) for v in value]
        if kind is tuple:
            return {"T": [self.encode(v, depth + 1) for v in value]}
        if kind is dict:
            return {
                "D": [
                    [self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()
                ]
            }
        if kind in (set, frozenset):
            return {"S" if kind is set else "F": [self.encode(v, depth + 1) for v in value]}
        name = type_name(kind)
        if isinstance(value, enum.Enum) and _is_library(name):
            return {"E": name, "n": value.name}
        if dataclasses.is_dataclass(value) and (name in VALUE_TYPES or _is_event(name)):
            fields = {
                f.name: self.encode(getattr(value, f.name), depth + 1)
                for f in dataclasses.fields(value)
            }
            return {"C": name, "f": fields}
        array = _array(value)
        if array is not None:
            return {"A": array}
        if isinstance(value, type) and issubclass(value, BaseException):
            return self.exception_class(value)
        return self.other(value)

    def other(self, value: Any) -> dict:
        """An object that cannot travel by value: kept here, sent as a handle."""
        classes = [type_name(c) for c in type(value).__mro__[:-1]][:16]
        return {"H": self.handle(value), "c": classes}

    def exception_class(self, cls: type) -> dict:
        name = type_name(cls)
        if cls.__module__ == "builtins" or _is_library(name):
            return {"N": name}
        bases = [self.exception_class(b) for b in cls.__bases__ if issubclass(b, BaseException)]
        return {"X": self.handle(cls), "q": cls.__qualname__[:200], "b": bases[:4]}


def _is_event(name: str) -> bool:
    return name.startswith("minipaged.events:")


def _array(value: Any) -> dict | None:
    """A torch tensor or numpy array as its dtype, shape and bytes (numpy scalars as arrays of
    shape ``[]``); None for anything else. Read through ``sys.modules``: nothing is imported."""
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and type(value) is torch.Tensor:
        tensor = value.detach().cpu().contiguous()
        dtype = str(tensor.dtype).removeprefix("torch.")
        raw = tensor.view(torch.int16) if dtype == "bfloat16" else tensor
        data = raw.numpy().tobytes()
        return {"k": "torch", "d": dtype, "s": list(tensor.shape), "b": _b64(data)}
    if numpy is not None and isinstance(value, numpy.ndarray | numpy.generic):
        array = numpy.ascontiguousarray(value)
        return {
            "k": "numpy",
            "d": str(array.dtype),
            "s": list(array.shape),
            "b": _b64(array.tobytes()),
        }
    return None


def arrays_in(values: list) -> list:
    """The torch tensors and numpy arrays among ``values`` and the lists and tuples in them, in
    order: what a call may write into, which the child sends back after it."""
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    found = []
    for value in values:
        if type(value) in (list, tuple):
            found += arrays_in(list(value))
        elif (torch is not None and type(value) is torch.Tensor) or (
            numpy is not None and type(value) is numpy.ndarray
        ):
            found.append(value)
    return found


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- decoding, in the grader -----------------------------------------------------------------


def resolve(name: str, base: type = object) -> type | None:
    """The class ``mod:Qual`` if its module is already imported, is Python's or the library's,
    and the class is a subclass of ``base``; else None."""
    module_name, _, qualname = name.partition(":")
    if module_name != "builtins" and not _is_library(name):
        return None
    found: Any = builtins if module_name == "builtins" else sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None) if found is not None else None
    return found if isinstance(found, type) and issubclass(found, base) else None


def decode(
    document: Any, handle: Callable[[int, list[str]], Any], exception_class: Callable
) -> Any:
    """The value ``document`` stands for. ``handle(id, classes)`` makes the stand-in of an
    object kept in the child; ``exception_class(document)`` the class of a child's exception."""

    def value(d: Any) -> Any:
        if d is None or type(d) in (bool, int, float, str):
            return d
        if type(d) is list:
            return d if _plain(d, 0) else [value(v) for v in d]
        # An exception class is the one value of three keys ({"X", "q", "b"}).
        if type(d) is not dict or len(d) not in ((1, 2, 3) if "X" in d else (1, 2)):
            raise ProtocolError(f"not a value: {str(d)[:80]}")
        tag = next(iter(d))
        body = d[tag]
        if tag == "T":
            return tuple(value(v) for v in _list(body))
        if tag == "D":
            return {_hashable(value(k)): value(v) for k, v in (_pair(p) for p in _list(body))}
        if tag in ("S", "F"):
            items = (_hashable(value(v)) for v in _list(body))
            return set(items) if tag == "S" else frozenset(items)
        if tag == "E":
            cls = resolve(_str(body), enum.Enum)
            if cls is None or _str(d.get("n")) not in cls.__members__:
                raise ProtocolError(f"no enum member {body}.{d.get('n')}")
            return cls[d["n"]]
        if tag == "C":
            return _dataclass(_str(body), d.get("f"), value)
        if tag == "A":
            return _decode_array(body)
        if tag == "H":
            return handle(_int(body), [_str(c) for c in _list(d.get("c", []))][:16])
        if tag in ("X", "N"):
            return exception_class(d)
        raise ProtocolError(f"unknown tag {tag!r}")

    return value(document)


def _dataclass(name: str, fields: Any, value: Callable) -> Any:
    if not (name in VALUE_TYPES or _is_event(name)):
        raise ProtocolError(f"{name} does not travel by value")
    importlib.import_module(name.partition(":")[0])  # one of the few modules named above
    cls = resolve(name)
    if cls is None or not dataclasses.is_dataclass(cls):
        raise ProtocolError(f"{name} is not a dataclass")
    if type(fields) is not dict or set(fields) != {f.name for f in dataclasses.fields(cls)}:
        raise ProtocolError(
            f"the fields of a {name} are not {sorted(f.name for f in dataclasses.fields(cls))}"
        )
    made = object.__new__(cls)
    for field_name, field_value in fields.items():
        object.__setattr__(made, field_name, value(field_value))
    return made


def _decode_array(body: Any) -> Any:
    if type(body) is not dict or set(body) != {"k", "d", "s", "b"} or body["d"] not in DTYPES:
        raise ProtocolError("a malformed array")
    shape = [_int(n) for n in _list(body["s"])]
    data = base64.b64decode(_str(body["b"]), validate=True)
    count = 1
    for n in shape:
        if n < 0:
            raise ProtocolError(f"an array of shape {shape}")
        count *= n
    import numpy

    width = 2 if body["d"] == "bfloat16" else numpy.dtype(body["d"]).itemsize
    if count * width != len(data):
        raise ProtocolError(f"an array of shape {shape} with {len(data)} bytes")
    if body["k"] == "numpy":
        return numpy.frombuffer(data, body["d"]).reshape(shape).copy()
    import torch

    if body["d"] == "bfloat16":
        raw = (
            torch.frombuffer(bytearray(data), dtype=torch.int16)
            if data
            else torch.empty(0, dtype=torch.int16)
        )
        return raw.view(torch.bfloat16).reshape(shape)
    dtype = getattr(torch, body["d"])
    flat = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
    return flat.reshape(shape)


def _list(d: Any) -> list:
    if type(d) is not list:
        raise ProtocolError(f"expected a list, got {str(d)[:40]}")
    return d


def _str(d: Any) -> str:
    if type(d) is not str:
        raise ProtocolError(f"expected a string, got {str(d)[:40]}")
    return d


def _int(d: Any) -> int:
    if type(d) is not int:
        raise ProtocolError(f"expected an integer, got {str(d)[:40]}")
    return d


def _pair(d: Any) -> tuple:
    if type(d) is not list or len(d) != 2:
        raise ProtocolError("a dict entry that is not a [key, value] pair")
    return d[0], d[1]


def _hashable(v: Any) -> Any:
    try:
        hash(v)
    except TypeError:
        raise ProtocolError(f"an unhashable key {type(v).__name__}") from None
    return v
