"""A confined grading child imports, and its guards judge, a library module whose file was
replaced after the child was confined (``minipaged.grader.confined_imports``).

Landlock's rule for a file in a folder that also holds a hidden module names that file's inode;
an editor, ``git`` or ``pip`` replaces a file with a new one. ``minipaged tui --exercise 3``
stopped at step 1 with ``PermissionError`` when a file of ``minipaged/`` was saved while it
ran. One process confined as the child is, over a package of two modules: the parent replaces
the one it may read once the process is confined, and the process then imports it. A file
listed for a rule and removed before the rule is made (a temporary file of another process's
``.pyc`` or editor) is no rule: the child starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from minipaged.grader.confinement import abi
from tests.stuck import STUCK_AFTER_S

pytestmark = pytest.mark.skipif(not abi()[0], reason=f"no Landlock here: {abi()[1]}")

CHILD = """
import sys
from pathlib import Path

from minipaged.grader import readable
from minipaged.grader.confined_imports import import_as_read, read_before_confinement
from minipaged.grader.confinement import confine
from minipaged.grader.provenance import codes_of

root = Path(sys.argv[1])
sys.path.insert(0, str(root))
hidden = root / "pkg" / "hidden.py"
whole, listing = readable.read_rules([*readable.roots(None, root / "temp"), root], [hidden])
rules = ([*whole, root / "pkg" / "gone.py"], listing)  # listed, then removed before confine
import_as_read(read_before_confinement(*rules))
print(confine([root / "temp"], [], rules, None), flush=True)
sys.stdin.readline()  # the parent has replaced pkg/late.py
import pkg.late

print(pkg.late.VALUE, len(codes_of(pkg.late.__file__)) > 0, flush=True)
try:
    hidden.read_bytes()
except PermissionError:
    print("hidden", flush=True)
"""
"""Confined as a grading child is (``child_setup.prepare``), then told to import ``pkg.late``:
prints its ``VALUE``, whether the guards find its code, and that the hidden module stays
unread."""


def test_a_module_replaced_after_confinement_imports_as_it_was_read(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (tmp_path / "temp").mkdir()
    for name, text in {"__init__.py": "", "late.py": "VALUE = 1\n", "hidden.py": "X = 0\n"}.items():
        (package / name).write_text(text)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    confined = child.stdout.readline()
    assert confined.startswith("confined"), confined + child.stderr.read()
    replacement = package / "late.py.new"
    replacement.write_text("VALUE = 2\n")
    os.replace(replacement, package / "late.py")  # a new inode, as an editor or git writes
    out, err = child.communicate("go\n", timeout=STUCK_AFTER_S)
    assert child.returncode == 0, err[-2000:]
    assert out.split() == ["1", "True", "hidden"], err[-2000:]
    assert Path(package / "late.py").read_text() == "VALUE = 2\n"
