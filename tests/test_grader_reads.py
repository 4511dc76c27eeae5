"""Student code cannot read the library's solution while it is graded: not the module's source,
not its compiled copy, by no route (Python's ``open``, another program, ``ctypes``), while
everything else it may need stays readable.

Each attack below fails its criterion if the read succeeds and answers rightly if it did not,
so a PASS is the proof that nothing was read.
"""

from __future__ import annotations

import pytest

from minipaged.grader import confinement, readable
from minipaged.grader.grading import grade
from minipaged.grader.report import PASS
from tests.test_grader_integrity import submission

pytestmark = pytest.mark.skipif(
    confinement.abi()[0] < 1, reason=confinement.abi()[1] or "no Landlock"
)

FAIL_IF_READ = "\n    if data:\n        raise RuntimeError(f'read {{len(data)}} bytes of the library')\n    return {answer}"  # noqa: E501

BY_ANOTHER_PROGRAM = (
    "import subprocess, minipaged.memory as m\n"
    "    data = subprocess.run(['cat', m.__file__], capture_output=True).stdout"
)
BY_CTYPES = (
    "import ctypes, os, minipaged\n"
    "    libc = ctypes.CDLL(None)\n"
    "    path = os.path.join(os.path.dirname(minipaged.__file__), {name!r}).encode()\n"
    "    fd = libc.open(path, 0)\n"
    "    buffer = ctypes.create_string_buffer(4096)\n"
    "    data = buffer.raw[: libc.read(fd, buffer, 4096)] if fd >= 0 else b''"
)
BY_PYC = (
    "import glob, os, subprocess, minipaged\n"
    "    pattern = os.path.join(os.path.dirname(minipaged.__file__), '__pycache__', 'memory.*')\n"
    "    data = b''.join(subprocess.run(['cat', p], capture_output=True).stdout"
    " for p in glob.glob(pattern))"
)


def test_no_route_reads_the_mirrored_module_and_the_rest_stays_readable(tmp_path):
    answers = {
        "logical_block": "t // block_size",
        "block_offset": "t % block_size",
        "num_logical_blocks": "-(-num_tokens // block_size)",
    }
    # Another module of the library stays readable, by the same route.
    other = BY_CTYPES.format(name="sequence.py")
    sequence = f"{other}\n    if not data:\n        raise RuntimeError('sequence.py unreadable')\n    return t // block_size"  # noqa: E501
    folder = submission(
        tmp_path / "reader",
        logical_block=BY_ANOTHER_PROGRAM + FAIL_IF_READ.format(answer=answers["logical_block"]),
        block_offset=BY_CTYPES.format(name="memory.py")
        + FAIL_IF_READ.format(answer=answers["block_offset"]),
        num_logical_blocks=BY_PYC + FAIL_IF_READ.format(answer=answers["num_logical_blocks"]),
    )
    report = grade(1, folder)
    outcomes = {r.name: (r.outcome, r.message[:200]) for r in report.results}
    assert "not of the library's solution" in report.confinement
    assert "writes only" in report.confinement  # and what the network may do, either way
    assert "no TCP connections" in report.confinement or "network unconfined" in report.confinement
    for name in answers:
        assert outcomes[name] == (PASS, ""), name
    folder = submission(tmp_path / "other", logical_block=sequence)
    outcomes = {r.name: (r.outcome, r.message[:200]) for r in grade(1, folder).results}
    assert outcomes["logical_block"] == (PASS, "")


def test_the_read_rules_leave_out_only_the_hidden_files(tmp_path):
    """Below the places listed, every path is readable but the hidden ones: a folder on the
    way to a hidden file may only be listed, its other entries are readable whole."""
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    for name in ("pkg/memory.py", "pkg/sequence.py", "pkg/__pycache__/memory.cpython-311.pyc"):
        (tmp_path / name).write_text("x")
    (tmp_path / "pkg" / "__pycache__" / "sequence.cpython-311.pyc").write_text("x")
    (tmp_path / "other").mkdir()
    hidden = [tmp_path / "pkg/memory.py", tmp_path / "pkg/__pycache__/memory.cpython-311.pyc"]
    whole, listing = readable.read_rules([tmp_path], hidden)
    assert set(listing) == {tmp_path, tmp_path / "pkg", tmp_path / "pkg" / "__pycache__"}
    assert set(whole) == {
        tmp_path / "other",
        tmp_path / "pkg" / "sequence.py",
        tmp_path / "pkg" / "__pycache__" / "sequence.cpython-311.pyc",
    }


FIND = '''
import gc as _gc
import minipaged.memory as _library


def _originals(route, name):
    """What ``route`` reaches of the library's function ``name``, other than its stub."""
    stub, found = getattr(_library, name), []
    if route == "closure":
        found += [c.cell_contents for c in stub.__closure__ or ()]
    elif route == "traceback":
        try:
            stub(7, 2)
        except BaseException as error:
            tb = error.__traceback__
            while tb is not None:
                found += list(tb.tb_frame.f_locals.values())
                tb = tb.tb_next
    else:
        try:
            found += _gc.get_objects()
        except BaseException:
            pass
    inner = [v for f in found if isinstance(f, dict) for v in f.values()]
    inner += [v for f in found + inner if isinstance(f, tuple | list) for v in f]
    return [
        f for f in found + inner
        if callable(f) and getattr(f, "__name__", "") == name and f is not stub
        and getattr(f, "__module__", "") == "minipaged.memory"
    ]
'''
"""A student's helper that looks for the library's own function behind its stub, by one route."""


def test_the_librarys_functions_are_out_of_reach_of_the_students_code(tmp_path):
    """A closure, a traceback's frames and the garbage collector each reach nothing: every
    answer is right only if the library's function was not found."""
    routes = {"logical_block": "closure", "block_offset": "traceback", "num_logical_blocks": "gc"}
    right = {
        "logical_block": "t // block_size",
        "block_offset": "t % block_size",
        "num_logical_blocks": "-(-num_tokens // block_size)",
    }
    bodies = {
        name: f"found = _originals({route!r}, {name!r})\n    "
        f"if found:\n        raise RuntimeError(f'reached {{found}}')\n    return {right[name]}"
        for name, route in routes.items()
    }
    folder = submission(tmp_path / "finder", **bodies)
    with open(folder / "memory.py", "a") as f:
        f.write(FIND)
    outcomes = {r.name: (r.outcome, r.message[:300]) for r in grade(1, folder).results}
    for name in routes:
        assert outcomes[name] == (PASS, ""), name
