"""The code a grading child runs is the code the grader read: a student's modules load from
their source, never from a ``.pyc`` (one in ``__pycache__``, an unchecked hash-based one
above all, or one with no source), a file named like an installed module never stands in for
it, and a folder their code wrote to is judged again before the next child imports it. The
hostile corpus's ``a-copy-written-over-the-file-for-the-next-child`` grades the last in real
grading children."""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys

import pytest

from minipaged.grader import judged_folder
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.judged_folder import refused_now
from minipaged.grader.student import import_from_source, load_folder


def _pyc(source: str) -> bytes:
    """An unchecked hash-based ``.pyc`` of ``source``: used whatever its source file holds."""
    flags = (0b01).to_bytes(4, "little")  # hash-based, never checked against the source
    code = marshal.dumps(compile(source, "anything.py", "exec"))
    return importlib.util.MAGIC_NUMBER + flags + bytes(8) + code


def _cached(folder, stem: str, source: str) -> None:
    cache = folder / "__pycache__" / f"{stem}.{sys.implementation.cache_tag}.pyc"
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(_pyc(source))


def test_a_students_file_loads_from_its_source_not_from_its_cache(tmp_path):
    (tmp_path / "memory.py").write_text("SAID = 'the source'\n")
    _cached(tmp_path, "memory", "SAID = 'bytecode the grader never read'\n")
    assert load_folder(tmp_path, ("memory",)).memory.SAID == "the source"
    assert not (tmp_path / "__pycache__" / "memory.pyc").exists()


@pytest.fixture
def source_only(tmp_path):
    """``tmp_path`` importable as a grading child imports a student's folder; undone after."""
    hooks, path = list(sys.path_hooks), list(sys.path)
    import_from_source([tmp_path])
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path_hooks[:], sys.path[:] = hooks, path
        sys.path_importer_cache.clear()
        for name in ("judged_helper", "judged_sourceless", "tabnanny"):
            sys.modules.pop(name, None)


def test_a_module_their_file_imports_loads_from_its_source_too(source_only):
    (source_only / "judged_helper.py").write_text("SAID = 'the source'\n")
    _cached(source_only, "judged_helper", "SAID = 'bytecode'\n")
    assert importlib.import_module("judged_helper").SAID == "the source"


def test_a_pyc_with_no_source_does_not_import(source_only):
    (source_only / "judged_sourceless.pyc").write_bytes(_pyc("SAID = 'bytecode'\n"))
    with pytest.raises(ModuleNotFoundError, match="'judged_sourceless'"):
        importlib.import_module("judged_sourceless")


def test_a_file_named_like_an_installed_module_is_never_imported_for_it(source_only):
    (source_only / "tabnanny.py").write_text("raise ImportError('the student's, not Python's')\n")
    sys.modules.pop("tabnanny", None)
    assert importlib.import_module("tabnanny").__file__.startswith(os.path.dirname(os.__file__))


def test_a_folder_is_judged_again_once_written_and_only_then(tmp_path, monkeypatch):
    ex = EXERCISES[2]
    starter = (ex.starter / "allocator.py").read_text()
    (tmp_path / "allocator.py").write_text(starter)
    judged = []
    monkeypatch.setattr(
        judged_folder, "copies", lambda ex, folder: judged.append(1) or f"verdict {len(judged)}"
    )
    assert refused_now(ex, tmp_path) == refused_now(ex, tmp_path) == "verdict 1"
    before = os.stat(tmp_path / "allocator.py")
    (tmp_path / "allocator.py").write_text(starter.replace("pass", "...")[: len(starter)])
    os.utime(tmp_path / "allocator.py", ns=(before.st_atime_ns, before.st_mtime_ns))  # set back
    assert refused_now(ex, tmp_path) == "verdict 2"  # the change time cannot be set back
    (tmp_path / "__pycache__").mkdir()
    assert refused_now(ex, tmp_path) == "verdict 3"
    assert refused_now(ex, tmp_path) == "verdict 3"
