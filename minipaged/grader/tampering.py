"""The grader's own code in a grading child, as it was before a student's code loaded.

Some of the checks' work runs next to the student's code (``student.run(helper, ...)``:
building a scene their scheduler mutates, asking their properties about a state, watching a
kernel's shared memory), in the child their code runs in, where it can rebind the grader's
names: ``minipaged.grader.ex06_invariants.judge = ...`` or
``shared_memory_races.watch_shared_memory = ...``. ``Snapshot`` records every name of the
grader's modules and of their classes before the student's code loads, and ``changed()`` names
the first that no longer holds what it held; the child then runs no helper. The audit hook of
``minipaged.grader.delegation`` refuses the other way in, a new ``__code__`` for a function of
the library's.

This is a tripwire in a process the student's code shares, not a wall: code that rebinds the
child's own request loop can answer anything. What it cannot do is compute a right answer it
was not written to compute, nor hide from the grader a copy it compiled to compute one, or a
refusal it met (the guards tell those on a pipe of their own: ``minipaged.grader.notices``);
and the checks that judge run in the grader.
"""

from __future__ import annotations

import importlib.machinery
import sys

WATCHED = ("minipaged.grader.",)
"""The modules whose names are recorded: the grader's (the library's own functions that an
exercise grades are stubbed, not recorded)."""


class Snapshot:
    """Every name of the watched modules, and of the classes they define, with the object it
    held (kept here, so that an id is never reused): those imported already, now, and each
    imported later as its import ends, before the code that imported it goes on."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, str], object] = {}
        self._modules: dict[str, object] = {}
        for name, module in list(sys.modules.items()):
            if name.startswith(WATCHED) and module is not None:
                self.record(name, module)
        sys.meta_path.insert(0, _Recorder(self))

    def record(self, name: str, module) -> None:
        self._modules[name] = module
        for attribute, value in list(vars(module).items()):
            self._held[(name, "", attribute)] = value
            if isinstance(value, type) and value.__module__ == name:
                for member, held in list(vars(value).items()):
                    self._held[(name, attribute, member)] = held

    def changed(self) -> str:
        """The first recorded name that now holds something else (``"module.Class.name"``), or
        a watched module that is not the one recorded; ``""`` when all are as they were."""
        for name, module in list(sys.modules.items()):
            if name.startswith(WATCHED) and self._modules.get(name) is not module:
                return name
        for (name, owner, attribute), value in self._held.items():
            place = vars(self._modules[name])
            if owner:
                cls = place.get(owner)
                place = vars(cls) if isinstance(cls, type) else {}
            if place.get(attribute, _GONE) is not value:
                return ".".join(part for part in (name, owner, attribute) if part)
        return ""


_GONE = object()


class _Recorder:
    """The first finder of ``sys.meta_path``: a watched module's loader, wrapped so that its
    names are recorded the moment it has run."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def find_spec(self, fullname: str, path=None, target=None):
        if not fullname.startswith(WATCHED):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Recording(spec.loader, self.snapshot)
        return spec


class _Recording:
    """A loader that runs ``loader``'s module, then records it."""

    def __init__(self, loader, snapshot: Snapshot) -> None:
        self.loader, self.snapshot = loader, snapshot

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.snapshot.record(module.__name__, module)

    def __getattr__(self, name: str):  # get_source, get_filename, ...: the loader's
        return getattr(self.loader, name)
