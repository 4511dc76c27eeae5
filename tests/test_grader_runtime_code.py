"""What a student's code compiles while it is graded (``minipaged.grader.runtime_code``): the
attacks that hide a copy this way are in ``hostile_corpus`` (``NEVER_ON_DISK``); here, honest
code that compiles at run time without knowing it (a ``@dataclass``, a ``namedtuple``, an
``Enum``, a helper module of their own imported late, a small ``exec`` of their own) is graded
like any other, and the judge reads only well-formed records."""

from __future__ import annotations

from exercise01_answers import answered
from test_grader_similarity import disguised

from minipaged.grader.compiled_copies import Judge
from minipaged.grader.grading import grade
from minipaged.grader.report import PASS

HONEST_RUN_TIME = """

import collections as _collections
import dataclasses as _dataclasses
import enum as _enum


@_dataclasses.dataclass(frozen=True)
class _Request:
    tokens: int
    block_size: int = 16


_Pair = _collections.namedtuple("_Pair", "block offset")
_Pool = _enum.Enum("_Pool", "device host")
_half = {}
exec("def half(x):\\n    return x // 2\\n", _half)
"""

LATE = (
    "import dataclasses\n"
    "    import helpers\n"
    "    made = dataclasses.make_dataclass('Made', ['t', 'b'])(t, block_size)\n"
    "    return helpers.offset(made.t, made.b)"
)
"""Exercise 01's block_offset, right, through a helper module and a dataclass made when
called."""


def test_honest_code_that_compiles_at_run_time_passes_every_criterion(tmp_path):
    folder = answered(tmp_path / "student", {"return o = t mod B": LATE})
    (folder / "memory.py").write_text((folder / "memory.py").read_text() + HONEST_RUN_TIME)
    (folder / "helpers.py").write_text("def offset(t, block_size):\n    return t % block_size\n")
    report = grade(1, folder)
    failed = {r.name: r.message for r in report.results if r.outcome != PASS}
    assert not failed, failed


def test_the_judge_names_the_line_and_reads_only_well_formed_records():
    judge = Judge(3)
    source = disguised("minipaged.block_manager")
    found = judge([["block_manager.py:12", "<string>", source]])
    assert found.startswith("code your block_manager.py:12 compiled at run time")
    assert "BlockManager.fork" in found
    assert judge([["x", "<string>", "def f():\n    return 1\n"]]) == ""
    assert judge([["x", 3, source], "not a record", None]) == ""
    assert judge("not a list") == ""


def test_a_python_is_known_by_its_file_not_its_name(tmp_path):
    """Each way to start the interpreter under another name is seen for what it is (the
    arguments of a program-start audit event); the programs the escape tests start are not."""
    import glob
    import os
    import shutil
    import sys

    from minipaged.grader.interpreters import python_finder

    runs_python = python_finder()
    copy = tmp_path / "cc"
    shutil.copy(os.path.realpath(sys.executable), copy)
    (tmp_path / "link").symlink_to(sys.executable)
    (tmp_path / "script").write_text(f"#!{copy}\nprint(1)\n")
    (tmp_path / "via-env").write_text("#!/usr/bin/env python3\nprint(1)\n")
    loader = sorted(glob.glob("/lib*/ld-linux*.so*"))
    pythons = {
        "a copy, renamed": (str(copy), [str(copy), "-c", "1"], None),
        "the running executable": ("/proc/self/exe", ["x", "-c", "1"], None),
        "a link": ([str(tmp_path / "link")],),
        "a script's #! line": (None, ["./script"], str(tmp_path), None),
        "#!/usr/bin/env python3": (str(tmp_path / "via-env"), ["via-env"], None),
        "a shell's cd": (f"cd {tmp_path} && ./cc -c 'print(1)'",),
        "a file descriptor": (os.open(copy, os.O_RDONLY), ["x"], None),
    }
    if loader:
        pythons["the dynamic loader"] = (loader[0], [loader[0], str(copy), "-c", "1"], None)
    for what, arguments in pythons.items():
        assert runs_python(arguments), what
    assert not runs_python((None, ["sleep", "61.25"], None, None))
    assert not runs_python((None, ["sh", "-c", f"sleep 1; echo late > {tmp_path}/x"], None, {}))


def test_a_python_is_known_whatever_the_student_s_code_changed(tmp_path, monkeypatch):
    """The judge runs in the student's process: what it reads it reads with code of its own,
    so standard-library functions rebound (``posixpath``'s, which ``os.path.join`` and
    ``realpath`` call), ``os.environ`` replaced or changed, ``PATH`` set in the C environment
    only, a ``str`` subclass for a word, change nothing it finds; a program that embeds a
    Python (``gdb``) is one. The corpus's ``a-python-looked-for-where-it-is-not``,
    ``a-python-taken-for-a-library-file`` and ``a-word-that-encodes-as-another-program`` are
    these, tried for real."""
    import os
    import posixpath
    import shutil
    import sys

    from minipaged.grader.interpreters import PYTHON, python_finder

    real = os.path.realpath(sys.executable)
    folder, name = os.path.split(real)
    copy = shutil.copy(real, tmp_path / "cc")
    (tmp_path / "library").mkdir()
    runs_python = python_finder((f"{tmp_path}/library/",))  # its files: judged by inode only
    monkeypatch.setattr(posixpath, "_get_sep", lambda p: b"/" if type(p) is bytes else "/x/")
    monkeypatch.setattr(posixpath, "abspath", lambda p: f"{tmp_path}/library/cc")
    assert runs_python((None, [name, "-c", "1"], None, {"PATH": folder})) == PYTHON
    assert runs_python((str(copy), ["cc"], None, None)) == PYTHON
    monkeypatch.undo()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pyx").symlink_to(real)  # on no PATH but the one set below
    monkeypatch.setattr(os, "environ", {"PATH": f"{tmp_path}/bin"})
    assert runs_python((None, ["pyx"], None, None)) == PYTHON
    monkeypatch.undo()
    (tmp_path / "script").write_text("#!/usr/bin/env pyx\nprint(1)\n")  # found on its PATH
    assert runs_python((None, [f"{tmp_path}/script"], None, {"PATH": f"{tmp_path}/bin"}))
    monkeypatch.setenv("PATH", "/nowhere")
    os.putenv("PATH", f"{tmp_path}/bin")  # the C environment only: what a shell searches
    assert runs_python(("exec pyx",)) == PYTHON
    monkeypatch.undo()

    class Word(str):
        def encode(self, *args):
            return real.encode()

    assert "an object of" in runs_python((Word("true"), ["true"], None, None))
    assert "an environment holding" in runs_python((None, ["true"], None, {"A": Word("b")}))
    monkeypatch.setattr(os.environ, "decodevalue", lambda value: folder, raising=False)
    assert "os.environ" in runs_python((None, ["true"], None, None))
    monkeypatch.undo()
    assert runs_python((None, ["true"], None, os.environ)) == ""
    if shutil.which("gdb"):
        assert runs_python((None, ["gdb", "-batch", "-ex", "python print(1)"], None, None))
