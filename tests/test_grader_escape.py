"""Student code cannot outlive its grading: every process it starts ends with the grading,
whatever process group or session it moved to, and a fork bomb is ended too.

Each escape starts a ``sleep`` whose argument is a number found nowhere else, the marker by
which the test looks for it in ``/proc`` after grading returns.
"""

from __future__ import annotations

import sys
import time

import pytest

from minipaged.grader.grading import Limits, grade
from minipaged.grader.process_tree import descendants, end_descendants
from minipaged.grader.report import PASS
from tests.stuck import STUCK_AFTER_S
from tests.test_grader_integrity import RIGHT, _alive, messages, submission

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the process tree is read from Linux's /proc"
)

SETSID = (
    "import os\n    if os.fork() == 0:\n        os.setsid()\n"
    "        if os.fork() == 0:\n            os.execvp('sh', ['sh', '-c', 'sleep 61.25; echo late > {late}'])\n"  # noqa: E501
    "        os._exit(0)\n    os.wait()\n    return t // block_size"
)
"""A double fork into a session of its own: the grandchild re-parents away from the child."""

POPEN = (
    "import subprocess\n    subprocess.Popen(['sleep', '62.25'], start_new_session=True, "
    "stdout=subprocess.PIPE)\n    return t % block_size"
)

SETPGID_THEN_EXIT = (
    "import os\n    if os.fork() == 0:\n        os.setpgid(0, 0)\n"
    "        os.execvp('sleep', ['sleep', '63.25'])\n    os._exit(3)"
)
"""The child dies itself, leaving a process in a group of its own."""

THREAD = (
    "import subprocess, threading, time\n"
    "        def later():\n            time.sleep(0.5)\n"
    "            subprocess.Popen(['sleep', '64.25'], start_new_session=True)\n"
    "        threading.Thread(target=later, daemon=True).start()\n"
    "        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes"
)
"""A daemon thread that starts a process after the criterion has its answer."""

MARKERS = ("61.25", "62.25", "63.25", "64.25")

WAITED_S = int(2 * STUCK_AFTER_S)
"""A sleeper looked for after a grading has ended sleeps longer than a wait for it to start
and a wait for its end together, so that only its being ended passes (sleeps of 66.25 and
67.25 s ended on their own within the wait for their end, and a sweep that ended nothing
passed)."""


def test_no_process_student_code_starts_outlives_the_grading(tmp_path):
    late = tmp_path / "late.txt"
    folder = submission(
        tmp_path / "escapes",
        logical_block=SETSID.format(late=late),
        block_offset=POPEN,
        num_logical_blocks=SETPGID_THEN_EXIT,
        kv_bytes_per_token=THREAD,
        slot="import time; time.sleep(1); raise ValueError('slow')",  # the thread's time
    )
    start = time.monotonic()
    report = grade(1, folder, limits=Limits(check_seconds=10.0, wall_seconds=60.0))
    assert time.monotonic() - start < 60
    failed = messages(report)
    for name, left in [
        ("logical_block", "1 process (pid "),  # the grandchild, orphaned to the supervisor
        ("block_offset", "1 process (pid "),
        ("kv_bytes_per_token", "1 "),  # its thread, or (past the grace) what it started
    ]:
        assert failed[name].startswith(f"your code left {left}"), (name, failed[name])
    assert "sleep 62.25" in failed["block_offset"]
    assert messages(report)["num_logical_blocks"].startswith(
        "your code ended the grading process (exit status 3)"
    )
    assert {m: _alive(m) for m in MARKERS} == {m: [] for m in MARKERS}
    assert not late.exists()


def test_a_fork_bomb_ends_with_the_grading(tmp_path):
    """128 processes, each in a session of its own, forked as a tree (each fork forks again)."""
    bomb = (
        "import os\n    first = os.getpid()\n    for _ in range(7):\n        os.fork()\n"
        "    if os.getpid() != first:\n        os.setsid()\n"
        "        os.execvp('sleep', ['sleep', '65.25'])\n    return t // block_size"
    )
    folder = submission(tmp_path / "bomb", logical_block=bomb, block_offset=RIGHT["block_offset"])
    start = time.monotonic()
    report = grade(1, folder, limits=Limits(check_seconds=5.0))
    assert time.monotonic() - start < 30  # the sleepers' 65 s, and the stretch's 50, not waited
    assert {r.name: r.outcome for r in report.results}["block_offset"] == PASS
    assert _alive("65.25") == []


def test_the_sweep_finds_a_process_that_left_its_parent_s_session(tmp_path):
    """``descendants`` follows parenthood, not group or session; ``end_descendants`` ends them."""
    import subprocess

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time; "
            f"subprocess.Popen(['sleep', '%d.25' % {WAITED_S + 66}], start_new_session=True); "
            "time.sleep(60)",
        ]
    )
    marker = f"{WAITED_S + 66}.25"  # not in the parent's command line, which has the sum's parts
    try:
        deadline = time.monotonic() + STUCK_AFTER_S
        while not _alive(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        [sleeper] = _alive(marker)
        assert sleeper in descendants(parent.pid)
        assert end_descendants(parent.pid) >= 1
        deadline = time.monotonic() + STUCK_AFTER_S
        while _alive(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(marker) == []
    finally:
        parent.kill()
        parent.wait()


def test_a_grader_killed_mid_grading_leaves_nothing_running(tmp_path):
    """The grader itself dies (SIGKILL: no clean-up of its own runs); the grading child's
    supervisor is told by the kernel (PR_SET_PDEATHSIG) and ends what the student started."""
    import signal
    import subprocess

    marker = f"{WAITED_S + 67.25:g}"
    folder = submission(tmp_path / "orphan")
    with open(folder / "memory.py", "a") as f:
        f.write(
            "\nimport subprocess, time\n"
            f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
            "while True:\n    time.sleep(0.1)\n"
        )
    grader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from minipaged.grader.grading import grade; grade(1, {str(folder)!r})",
        ]
    )
    try:
        deadline = time.monotonic() + STUCK_AFTER_S
        while not _alive(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _alive(marker), "the student's import never started its sleeper"
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    deadline = time.monotonic() + STUCK_AFTER_S
    while _alive(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(marker) == []
