"""Every place the library holds a function a grading child replaces, and the stub put there;
and the check that what was replaced is then garbage (``minipaged.grader.delegation.guard``).

A function the library holds anywhere stays alive, and code that reads the process's memory
(``ctypes``) finds it whatever the audit hooks refuse: so the stub is put in every holder,
not only where the exercise names the function, and ``check_dropped`` proves none is left
(``tests/test_grader_dropped.py`` plants each kind of holder).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import sys
from types import FunctionType

LIBRARY_MODULES = ("minipaged.", "cuda_kernels.")
"""The packages whose modules, classes and objects hold the library's functions."""


def held_functions(function) -> list:
    """``function`` and every function it runs as its own: the Python function a Numba
    dispatcher compiles (``py_func``), the one a wrapper wraps (``__wrapped__``:
    ``functools.wraps``, ``lru_cache``, hypothesis's ``@invariant()``) or a
    ``functools.partial``, ``staticmethod`` or ``classmethod`` calls, to the last."""
    found = []
    while function is not None and all(function is not f for f in found) and len(found) < 16:
        found.append(function)
        space = getattr(function, "__dict__", None)
        space = space if type(space) is dict else {}
        inner = function.func if type(function) is functools.partial else None
        inner = function.__func__ if type(function) in (staticmethod, classmethod) else inner
        function = space.get("py_func", space.get("__wrapped__", inner))
    return found


def swapped(value, stubs: dict):
    """The stub for ``value`` if it is, or wraps, a function ``stubs`` replaces; else None."""
    if id(value) in stubs:
        return stubs[id(value)]
    if isinstance(value, property) and id(value.fget) in stubs:  # the same getter, elsewhere
        return property(stubs[id(value.fget)])
    if callable(value) and not isinstance(value, type):
        return next((stubs[id(f)] for f in held_functions(value) if id(f) in stubs), None)
    return None


def replace_aliases(stubs: dict) -> None:
    """Put each stub (by the id of what it replaces, in ``stubs``) wherever the library holds
    the function it replaces, or a wrapper of it, under another name: a module's attribute
    (``from minipaged.memory import slot``), a class's attribute (another class's method, or
    the class a frozen dataclass with slots replaced, which its methods' cells still hold), an
    item of a module's table or a field of a frozen record in one
    (``minipaged.invariants.INVARIANTS``), an attribute of a library object, a default
    argument, a closure's cell. What this misses, ``check_dropped`` finds, and the grading child
    refuses to start."""
    seen: set[int] = set()
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith(LIBRARY_MODULES):
            continue
        for attribute, value in list(vars(module).items()):
            replacement = swapped(value, stubs)
            if replacement is not None:
                setattr(module, attribute, replacement)
            elif type(value) in (list, dict):
                for key, item in list(value.items() if type(value) is dict else enumerate(value)):
                    if (replacement := swapped(item, stubs)) is not None:
                        value[key] = replacement
                    replace_inside(item, stubs, seen)
            elif type(value) is tuple:
                for item in value:
                    replace_inside(item, stubs, seen)
            else:
                replace_inside(value, stubs, seen)


def replace_inside(holder, stubs: dict, seen: set[int]) -> None:
    """The stubs put in place of what ``holder`` holds: a library class its attributes, a
    library function its default arguments and its closure's cells, a frozen record its
    fields."""
    if id(holder) in seen:
        return
    seen.add(id(holder))
    if isinstance(holder, type):
        if getattr(holder, "__module__", "").startswith(LIBRARY_MODULES):
            for name, member in list(vars(holder).items()):
                if (replacement := swapped(member, stubs)) is not None:
                    setattr(holder, name, replacement)
                else:
                    replace_inside(getattr(member, "__func__", member), stubs, seen)
        return
    if dataclasses.is_dataclass(holder):
        for field in dataclasses.fields(holder):
            if (replacement := swapped(getattr(holder, field.name), stubs)) is not None:
                object.__setattr__(holder, field.name, replacement)
    elif type(holder).__module__.startswith(LIBRARY_MODULES):
        # an object of the library's (a registry): its attributes
        for name, member in list(getattr(holder, "__dict__", {}).items()):
            if (replacement := swapped(member, stubs)) is not None:
                object.__setattr__(holder, name, replacement)
    if type(holder) is not FunctionType:  # one the library holds, wherever compiled
        return
    for cell in holder.__closure__ or ():
        if (replacement := swapped(_contents(cell), stubs)) is not None:
            cell.cell_contents = replacement
        else:
            replace_inside(_contents(cell), stubs, seen)
    if holder.__defaults__:
        holder.__defaults__ = tuple(swapped(d, stubs) or d for d in holder.__defaults__)
    if holder.__kwdefaults__:
        defaults = holder.__kwdefaults__.items()
        holder.__kwdefaults__ = {k: swapped(d, stubs) or d for k, d in defaults}


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return None


def check_dropped(gone: list) -> None:
    """Check that each function of ``gone`` (``(name, weak reference)``) is garbage: raise
    ``Undropped``, naming what still holds it, where one is alive after a collection."""
    gc.collect()
    alive = [(name, function()) for name, function in gone if function() is not None]
    if alive:
        count, (name, function) = len(alive), alive[0]
        del alive  # the holders named are the library's, not this list's
        holders = sorted({type(h).__name__ for h in gc.get_referrers(function)} - {"list"})
        raise Undropped(
            f"a grading child still holds the library's {name.replace(':', '.')} after "
            f"{count} of them were replaced (held by a {', a '.join(holders)}): "
            "holders.replace_aliases does not reach that holder; teach it to"
        )


class Undropped(RuntimeError):
    """A library function a grading child replaced is still alive: the grader's mistake."""
