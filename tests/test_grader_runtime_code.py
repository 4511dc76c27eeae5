"""What a student's code compiles while it is graded (``minipaged.grader.runtime_code``): the
attacks that hide a copy this way are in ``hostile_corpus`` (``NEVER_ON_DISK``); here, honest
code that compiles at run time without knowing it (a ``@dataclass``, a ``namedtuple``, an
``Enum``, a helper module of their own imported late, a small ``exec`` of their own) is graded
like any other, and the judge reads only well-formed records."""

from __future__ import annotations

from exercise01_answers import answered
from test_grader_similarity import disguised

from minipaged.grader.grading import grade
from minipaged.grader.report import PASS
from minipaged.grader.runtime_code import Judge

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
