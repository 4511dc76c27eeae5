"""The work under grading: a student's files, or the library's own modules (the solution).

Every exercise names its files after the library modules they mirror (``block_manager.py`` for
``minipaged.block_manager``), with the same classes and signatures, so one set of checks grades
either. Checks reach the work as attributes: ``student.block_manager.BlockManager``.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys
import traceback
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader
from pathlib import Path
from pkgutil import iter_modules
from types import ModuleType

_loads = itertools.count()


class SourceOnly(SourceFileLoader):
    """Loads a student's module from its source, never from a bytecode cache: a ``.pyc`` in
    their ``__pycache__`` (an unchecked hash-based one is used whatever the source says) runs
    code the grader never read. With no source date to check a cache against,
    ``SourceLoader.get_code`` neither reads nor writes one."""

    def path_stats(self, path: str):
        raise OSError("a student's module is compiled from its source")


def import_from_source(folders: list[Path]) -> None:
    """In a grading child, before the student's code loads: modules imported from ``folders``
    (theirs, and the one they may write besides) load from their source alone (``SourceOnly``),
    and neither a ``.pyc`` without a source nor a C extension there imports at all. Nor does a
    file named like a module of Python's or of an installed package (``torch.py``,
    ``random.py``): the library's own code imports such modules lazily, once the student's
    folder leads ``sys.path`` (exercise 05's checks imported torch so), and must get the
    installed one, never the student's."""
    roots = tuple(os.path.realpath(f) for f in folders)
    installed = installed_modules(folders)

    class StudentFolder(FileFinder):
        def find_spec(self, fullname: str, target=None):
            if fullname.partition(".")[0] in installed:
                return None  # the installed module's, which the next path entries find
            return super().find_spec(fullname, target)

    def hook(path: str) -> FileFinder:
        where = os.path.realpath(path or os.getcwd())
        if not any(where == root or where.startswith(root + os.sep) for root in roots):
            raise ImportError("not a student's folder")  # the next hook's
        return StudentFolder(path, (SourceOnly, SOURCE_SUFFIXES))

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()


def installed_modules(folders: list[Path]) -> frozenset[str]:
    """The top-level names Python's own modules and the installed packages take: every module
    on ``sys.path`` outside ``folders`` (a student's). A student's file of such a name is never
    imported for it (``import_from_source``)."""
    roots = tuple(os.path.realpath(f) for f in folders)
    others = [p for p in sys.path if not os.path.realpath(p or os.getcwd()).startswith(roots)]
    return frozenset(sys.stdlib_module_names) | {m.name for m in iter_modules(others)}


class StudentImportError(Exception):
    """A student's file could not be imported; every check that needs it fails with this."""


class Student:
    """The modules under grading, by file stem. ``files`` maps each stem to the student's file
    (empty for the solution), so an error can be traced to a line the student wrote."""

    def __init__(
        self,
        modules: dict[str, ModuleType | object],
        files: dict[str, Path] | None = None,
        errors: dict[str, str] | None = None,
    ) -> None:
        self._modules = modules
        self.files = files or {}
        self._errors = errors or {}

    @property
    def modules(self) -> dict[str, ModuleType | object]:
        """The modules that imported, by stem."""
        return dict(self._modules)

    @property
    def errors(self) -> dict[str, str]:
        """Why each file that did not import failed, by stem."""
        return dict(self._errors)

    def run(self, helper, *args, **kwargs):
        """``helper(self, *args, **kwargs)``: a grader helper next to the student's code (in a
        grading child, ``RemoteStudent.run`` sends it there)."""
        return helper(self, *args, **kwargs)

    def __getattr__(self, stem: str):
        if stem.startswith("_"):
            raise AttributeError(stem)
        if stem in self._errors:
            raise StudentImportError(self._errors[stem])
        try:
            return self._modules[stem]
        except KeyError:
            raise AttributeError(f"no module {stem!r} under grading") from None

    def where(self, error: BaseException) -> str:
        """``" (block_manager.py, line 42)"``: the deepest frame of ``error`` in a student's
        file, or ``""`` when it did not pass through one."""
        paths = {str(p.resolve()): p.name for p in self.files.values()}
        found = ""
        for frame, line in traceback.walk_tb(error.__traceback__):  # reads no source line
            name = paths.get(str(Path(frame.f_code.co_filename).resolve()))
            if name:
                found = f" ({name}, line {line})"
        return found


def load_folder(folder: Path, stems: tuple[str, ...]) -> Student:
    """Import ``stem.py`` from ``folder`` for every stem, each under a fresh module name so that
    two folders (or two loads of one) never share state. A file that fails to import is
    recorded, not raised: the checks that need it report the error."""
    modules: dict[str, ModuleType] = {}
    files: dict[str, Path] = {}
    errors: dict[str, str] = {}
    for stem in stems:
        path = folder / f"{stem}.py"
        files[stem] = path
        name = f"minipaged_student_{next(_loads)}_{stem}"
        spec = importlib.util.spec_from_file_location(
            name, path, loader=SourceOnly(name, str(path))
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        try:
            spec.loader.exec_module(module)
        except BaseException as error:  # a student's error is a result
            del sys.modules[name]
            line = f", line {error.lineno}" if isinstance(error, SyntaxError) else ""
            errors[stem] = f"could not import {path.name}{line}: {type(error).__name__}: {error}"
            continue
        modules[stem] = module
    return Student(modules, files, errors)


def load_solution(solution: dict[str, str]) -> Student:
    """The library modules that solve an exercise, by the student file stem they stand for:
    ``{"block_manager": "minipaged.block_manager"}``."""
    modules = {stem: importlib.import_module(name) for stem, name in solution.items()}
    return Student(modules)
