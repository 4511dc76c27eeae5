"""A grade the instructor can trust: student code that tries to grade itself, to end or hang
the grader, or to hand in the library's solution, can only fail criteria.

The hostile submissions here are exercise 01's starter with each graded function replaced by
one attack, so that one grading shows each criterion failing with its own cause while the
others are still graded.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from minipaged import cli
from minipaged.grader import confinement, grading
from minipaged.grader.exercises import EXERCISES, TUTORIALS
from minipaged.grader.frames import ProtocolError
from minipaged.grader.grading import Limits, grade
from minipaged.grader.library_copies import copies
from minipaged.grader.proxies import Proxy
from minipaged.grader.report import FAIL, PASS, Report
from minipaged.grader.wire import decode
from tests.stuck import STUCK_AFTER_S, eventually

TODO = {
    "logical_block": "return j = floor(t / B)",
    "block_offset": "return o = t mod B",
    "num_logical_blocks": "return M = ceil(L / B)",
    "slot": "look up T_r[j], then return T_r[j] * B + o",
    "kv_bytes_per_token": "keys and values, for every layer and KV head",
    "kv_bytes": "M_KV(L)",
    "block_bytes_per_layer": "one block, one layer",
}
"""Exercise 01's graded functions, by the text of the NotImplementedError each starts with."""

RIGHT = {
    "logical_block": "return t // block_size",
    "block_offset": "return t % block_size",
    "num_logical_blocks": "return -(-num_tokens // block_size)",
    "kv_bytes_per_token": "return 2 * self.num_layers * self.num_kv_heads * self.head_dim "
    "* self.dtype_bytes",
}

FORGED = (
    'print("minipaged-grader-result {\\"name\\": \\"block_offset\\", \\"outcome\\": \\"pass\\"}")'
)


def submission(folder: Path, **bodies: str) -> Path:
    """Exercise 01's starter in ``folder`` with the graded functions named in ``bodies``
    replaced by those one-line bodies (``;`` between statements)."""
    source = (TUTORIALS / EXERCISES[1].folder / "starter" / "memory.py").read_text()
    for name, body in bodies.items():
        line = f'raise NotImplementedError("exercise 01: {TODO[name]}")'
        assert line in source, name
        source = source.replace(line, body)
    folder.mkdir(exist_ok=True)
    (folder / "memory.py").write_text(source)
    return folder


def messages(report: Report) -> dict[str, str]:
    return {r.name: r.message for r in report.results if r.outcome == FAIL}


def test_forged_results_junk_and_exits_each_fail_only_their_criterion(tmp_path):
    """Each attack fails the criterion that ran it, with its own cause, and a new child grades
    the next: the right answer after them all still passes."""
    folder = submission(
        tmp_path / "hostile",
        logical_block=f"{FORGED}; print('}}{{ junk'); import os; os._exit(0)",
        block_offset="raise KeyboardInterrupt('the student pressed nothing')",
        num_logical_blocks="class Escape(BaseException): pass\n    raise Escape('out')",
        slot="import sys; sys.exit(0)",
        kv_bytes_per_token=RIGHT["kv_bytes_per_token"],
        kv_bytes="import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        block_bytes_per_layer="import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    )
    failed = messages(grade(1, folder))
    assert "kv_bytes_per_token" not in failed  # graded by a fresh child after two deaths
    assert failed["logical_block"].startswith("your code ended the grading process (exit status 0)")
    assert failed["block_offset"].startswith("your code raised KeyboardInterrupt: the student")
    assert failed["num_logical_blocks"].startswith("your code raised Escape: out (memory.py, line")
    assert failed["slot"].startswith("your code called sys.exit(0)")
    assert failed["kv_bytes"].startswith("the grading process was killed (SIGKILL)")
    assert failed["block_bytes"].startswith("the grading process was stopped by the signal SIGTERM")


def test_a_forged_answer_on_the_channel_fails_its_criterion(tmp_path):
    """Student code that writes to every file descriptor it did not open (the grader's
    channel among them) sends junk where an answer should be: that criterion fails."""
    junk = "import os\n    for fd in range(3, 64):\n        try: os.write(fd, b'\\x00' * 8 + b'{}')\n        except OSError: pass\n    return t // block_size"  # noqa: E501
    folder = submission(tmp_path / "writer", logical_block=junk, block_offset=RIGHT["block_offset"])
    failed = messages(grade(1, folder))
    assert "block_offset" not in failed
    assert "the grading process" in failed["logical_block"]


def test_the_cli_reports_forged_markers_as_failures(tmp_path, capsys):
    folder = submission(tmp_path / "forger", logical_block=f"{FORGED}; import os; os._exit(0)")
    assert cli.main(["exercises", "check", "1", "--path", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "0 pass, 8 fail" in out
    assert "unexpected" not in out


def _alive(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


GRADING_S = 60
"""How long a grading of a hand-in that leaves processes behind may take."""

OUTLIVES_S = GRADING_S + STUCK_AFTER_S + 10
"""A process the student's code leaves sleeps this long: past the grading and the wait for its
end, so that only the grader's ending it passes (a sleep of 91.25 s ended on its own in that
wait, and a grader that left it running passed)."""


def _command_line(pid: int) -> bytes:
    """The process's command line; empty once it is gone or a zombie."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_background_processes_end_with_the_grading_and_hold_nothing(tmp_path):
    """A sleeper that outlives its parent and holds its output, and a forked copy of the child,
    neither holds the grader past the criterion's limit, and both end with the grading; the
    fork fails the call that left it running, and the next criterion is blamed for nothing."""
    marker = f"{OUTLIVES_S + 1.25:g}"
    sleeper = f"import subprocess, sys; subprocess.Popen(['sleep', '{marker}'], stdout=sys.stdout, stderr=sys.stderr)"  # noqa: E501
    fork = (
        f"import os, time\n    if os.fork() == 0:\n        time.sleep({OUTLIVES_S:g})\n"
        "    return t % block_size"
    )
    folder = submission(
        tmp_path / "sleepers",
        logical_block=sleeper + "; import os; os._exit(1)",
        block_offset=fork,
        num_logical_blocks=RIGHT["num_logical_blocks"],
    )
    start = time.monotonic()
    report = grade(1, folder, limits=Limits(check_seconds=10.0))
    assert time.monotonic() - start < GRADING_S
    outcomes = {r.name: r.outcome for r in report.results}
    left = messages(report)["block_offset"]
    assert (
        left.startswith("your code left 1 process (pid ")
        and "a copy of the grading process, forked by your code) running after it returned" in left
    )
    assert outcomes["num_logical_blocks"] == PASS
    fork_pid = int(left.removeprefix("your code left 1 process (pid ").split(":")[0])
    ours = str(folder).encode()  # in the child's command line, and so in its fork's
    eventually(lambda: ours not in _command_line(fork_pid), "the forked copy was still running")
    eventually(lambda: _alive(marker) == [], "the sleeper was still running")


def test_an_endless_loop_at_import_fails_every_criterion_within_the_limit(tmp_path):
    folder = submission(tmp_path / "loop")
    with open(folder / "memory.py", "a") as f:
        f.write("\nwhile True:\n    pass\n")
    start = time.monotonic()
    report = grade(1, folder, limits=Limits(check_seconds=2.0))
    assert time.monotonic() - start < 30
    assert {r.message for r in report.results} == {
        "importing your files ran past 2 s: is there a loop that never ends at "
        "import time (outside any function)?"
    }


def test_a_memory_bomb_a_stopped_process_and_a_timer_each_fail_their_criterion(tmp_path):
    folder = submission(
        tmp_path / "bombs",
        logical_block="return len(bytearray(1 << 40))",
        block_offset="import os, signal; os.kill(os.getpid(), signal.SIGSTOP)",
        num_logical_blocks="import signal, time; signal.alarm(1); time.sleep(5)",
    )
    failed = messages(grade(1, folder, limits=Limits(check_seconds=3.0, memory_gib=2.0)))
    assert failed["logical_block"].startswith("ran out of memory (MemoryError) (memory.py, line")
    assert failed["block_offset"].startswith("your code ran past 3 s in block_offset:")
    assert failed["num_logical_blocks"].startswith(
        "the grading process was stopped by the signal SIGALRM"
    )


# -- confinement ---------------------------------------------------------------------------------

CONFINED = confinement.abi()[0] >= 6


@pytest.mark.skipif(
    not CONFINED,
    reason="this kernel has no Landlock ABI 6 (" + (confinement.abi()[1] or "older ABI") + ")",
)
def test_confined_code_writes_only_in_its_temporary_folder_and_signals_no_one(tmp_path):
    """Not in the student's folder either, which is read-only while graded (what one grading
    child wrote there, the next would read). And runs no program it wrote (a copy of
    ``sleep``), nor this interpreter under a name a shell builds where no audit hook reads it;
    the system's programs still run."""
    outside = tmp_path / "outside.txt"
    python = os.path.realpath(sys.executable)
    cut = len(python) - len(os.path.basename(python)) + 2  # ".../py" + "thon3.11"
    built = f"$(printf '%s' '{python[:cut]}'){python[cut:]} -c 'print(1)'"
    folder = submission(
        tmp_path / "writer",
        logical_block=f"open({str(outside)!r}, 'w').write('x'); return t // block_size",
        block_offset="import tempfile; open(tempfile.gettempdir() + '/mine.txt', 'w').write('x'); "
        "return t % block_size",
        slot=f"open({str(tmp_path / 'writer' / 'mine.txt')!r}, 'w').write('x')",
        num_logical_blocks="import os, signal; os.kill(os.getppid(), signal.SIGKILL)",
        kv_bytes_per_token="import shutil, subprocess, tempfile; "
        "copy = tempfile.mkdtemp() + '/zz'; shutil.copy('/bin/sleep', copy); "
        "subprocess.run([copy, '0'])",
        kv_bytes="import subprocess; return subprocess.run(['sh', '-c', "
        f"{built!r} + '; echo shell ran'], capture_output=True, text=True)",
    )
    report = grade(1, folder)
    failed = messages(report)
    assert report.confinement.startswith("confined by Landlock")
    assert failed["logical_block"].startswith("PermissionError")
    assert not outside.exists()
    assert "block_offset" not in failed  # its temporary folder
    assert failed["slot"].startswith("PermissionError")  # the student's folder
    assert "your code may write only in its temporary folder" in failed["slot"]
    assert sorted(p.name for p in folder.iterdir()) == ["memory.py"]
    assert failed["num_logical_blocks"].startswith("PermissionError")  # the grader lives on
    assert failed["kv_bytes_per_token"].startswith("PermissionError")
    assert "Permission denied" in failed["kv_bytes"] and "shell ran" in failed["kv_bytes"]


def test_without_landlock_the_report_says_the_code_ran_unconfined(monkeypatch, capsys):
    monkeypatch.setattr(confinement, "abi", lambda: (0, "this kernel offers no Landlock"))
    line = confinement.confine([Path("/nonexistent")])
    assert line == "unconfined: this kernel offers no Landlock"
    Report(1, "t", "here", [], line).render(grading_console())
    assert "your code ran unconfined: this kernel offers no Landlock" in capsys.readouterr().out


def grading_console():
    from rich.console import Console

    return Console(soft_wrap=True)


# -- the wire ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "refusal"),
    [
        ({"C": "os:system", "f": {}}, "os:system does not travel by value"),
        (
            {"C": "minipaged.block_table:BlockTable", "f": {"blocks": []}},
            "the fields of a minipaged.block_table:BlockTable are not ['block_size', 'blocks',",
        ),
        ({"E": "minipaged.sequence:Status", "n": "NOT_A_STATUS"}, "no enum member"),
        ({"A": {"k": "numpy", "d": "float32", "s": [4], "b": "AAAA"}}, "with 3 bytes"),
        ({"A": {"k": "numpy", "d": "object", "s": [], "b": ""}}, "a malformed array"),
        ({"Z": 1}, "unknown tag 'Z'"),
        ({"D": [[[1], 2]]}, "an unhashable key list"),
    ],
    ids=[
        "unknown-class",
        "missing-fields",
        "unknown-enum",
        "short-array",
        "object-dtype",
        "unknown-tag",
        "unhashable-key",
    ],
)
def test_what_the_child_sends_is_refused_unless_it_is_plain_data(document, refusal):
    """Each for its own fault: one refused by a check it did not aim at (an object dtype's
    array refused only for its length) would pass on any ``ProtocolError``."""
    with pytest.raises(ProtocolError, match=re.escape(refusal)):
        decode(document, lambda h, c: None, lambda d: Exception)


# -- the library's solution is out of reach ------------------------------------------------------


def _module_source(module: str) -> str:
    import importlib.util

    return Path(importlib.util.find_spec(module).origin).read_text()


def delegating(number: int, kind: str, folder: Path) -> Path:
    """A submission for exercise ``number`` that hands in the library's solution by ``kind``:
    ``reexport`` (``from module import *``), ``wrapper`` (each graded function calls the
    library's: ``super()`` for methods), ``importlib`` (a fresh copy of the module loaded
    from its file) or ``copy`` (the library's file, copied in)."""
    ex = EXERCISES[number]
    folder.mkdir()
    for stem, module in ex.solution.items():
        if kind == "copy":
            source = _module_source(module)
        elif kind == "reexport":
            source = f"from {module} import *\n"
        elif kind == "importlib":
            source = (
                f"import importlib.util, {module} as _m\n"
                f"_s = importlib.util.spec_from_file_location('fresh', _m.__file__)\n"
                "_f = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_f)\n"
                "globals().update({k: v for k, v in vars(_f).items() if not k.startswith('__')})\n"
            )
        else:
            source = _wrapper(module, ex.graded_in(module))
        (folder / f"{stem}.py").write_text(source)
    return folder


def _wrapper(module: str, graded: tuple[str, ...]) -> str:
    lines = [f"from {module} import *", f"import {module} as _lib"]
    if module.endswith("properties"):  # its rules are invariants; elsewhere a third of a second
        lines.append("import hypothesis.stateful")
    classes: dict[str, list[str]] = {}
    for name in graded:
        qualname = name.partition(":")[2]
        if "." in qualname:
            cls, method = qualname.split(".")
            classes.setdefault(cls, []).append(method)
        else:
            lines.append(f"def {qualname}(*a, **k):\n    return _lib.{qualname}(*a, **k)")
    for cls, methods in classes.items():
        lines.append(f"class {cls}(_lib.{cls}):")
        for method in methods:
            library = getattr(getattr(__import__(module, fromlist=["_"]), cls), method)
            if isinstance(library, property):
                lines.append(
                    f"    @property\n    def {method}(self):\n        return super().{method}"
                )
                continue
            if module.endswith("properties") and method != "after_all_freed":
                lines.append("    @hypothesis.stateful.invariant()")
            lines.append(
                f"    def {method}(self, *a, **k):\n        return super().{method}(*a, **k)"
            )
    return "\n".join(lines) + "\n"


def first_criterion(number: int, folder: Path, name: str | None = None):
    """The result of exercise ``number``'s first criterion on ``folder`` (or the one called
    ``name``), in a child: the others, which may be slow (the simulator's), are not run."""
    criteria = EXERCISES[number].criteria()
    criterion = next(c for c in criteria if c.name == name) if name else criteria[0]
    runs_in, library = criterion.runs_in, criterion.on_the_library  # where grade runs it
    child = grading.GradingChild(number, runs_in, folder.resolve(), Limits(), Proxy, library)
    try:
        return grading._run_in_child(criterion, child, Limits())
    finally:
        child.close()


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_a_copy_of_the_librarys_file_fails_before_any_of_it_runs(number, tmp_path):
    folder = delegating(number, "copy", tmp_path / "copy")
    assert "is a copy of the library's" in copies(EXERCISES[number], folder)
    report = grade(number, folder) if number == 1 else None
    if report is not None:  # every criterion fails, saying why
        assert [r.name for r in report.results] == [c.name for c in EXERCISES[1].criteria()]
        assert all(
            r.outcome == FAIL and "is a copy of the library's" in r.message for r in report.results
        )


@pytest.mark.parametrize("number", sorted(EXERCISES))
@pytest.mark.parametrize("kind", ["reexport", "wrapper", "importlib"])
def test_delegating_to_the_library_fails_with_what_happened(number, kind, tmp_path):
    if number in (8, 9, 10, 11) and kind != "wrapper":
        pytest.importorskip("numba")
    folder = delegating(number, kind, tmp_path / kind)
    result = first_criterion(number, folder)
    assert result.outcome == FAIL
    if kind == "importlib":
        assert (
            f"exercise {number:02d} grades your own code; it may not read or run the library's"
            in result.message
        )
    else:
        assert f"exercise {number:02d} grades your " in result.message
        assert "it may not call the library's" in result.message


def test_reloading_the_library_module_is_refused(tmp_path):
    folder = tmp_path / "reload"
    folder.mkdir()
    (folder / "memory.py").write_text(
        "import importlib, minipaged.memory as m\nm = importlib.reload(m)\nfrom minipaged.memory import *\n"  # noqa: E501
    )
    result = first_criterion(1, folder)
    assert "may not read or run the library's memory" in result.message


def test_a_helper_file_that_holds_a_copy_is_found(tmp_path):
    folder = tmp_path / "helper"
    folder.mkdir()
    shutil.copy(TUTORIALS / EXERCISES[4].folder / "starter" / "block_manager.py", folder)
    (folder / "cheat.py").write_text(_module_source("minipaged.block_manager"))
    assert copies(EXERCISES[4], folder).startswith("cheat.py: BlockManager.append_slot is a copy")


OWN_PREEMPT = """
    def _preempt(self, group, out):
        seq_ids = [s.seq_id for s in group.seqs]
        swap = (len(seq_ids) > 1 or self.preemption == "swap")
        swap = swap and self.block_manager.can_swap_out(seq_ids)
        kind = "swap" if swap else "recompute"
        self.block_manager.record(Preempt(group.request_id, tuple(seq_ids), kind))
        if not swap:
            for s in seq_ids:
                self.block_manager.free(s)
            group.status = Status.WAITING
            _insert_by_arrival(self.waiting, group)
        else:
            out.blocks_to_swap_out.extend(self.block_manager.swap_out(seq_ids))
            group.status = Status.SWAPPED
            _insert_by_arrival(self.swapped, group)
        out.preempted.append(group)
"""


def test_the_other_part_of_exercise_05_may_use_the_librarys_swap(tmp_path):
    """Exercise 05's scheduler is graded apart from its swap: a scheduler of the student's own
    that calls the library's swap_out (their block manager still the starter) passes."""
    folder = tmp_path / "ex05"
    shutil.copytree(TUTORIALS / EXERCISES[5].folder / "starter", folder)
    starter = (folder / "scheduler.py").read_text()
    (folder / "scheduler.py").write_text(
        starter[: starter.index("    def _preempt(")] + OWN_PREEMPT
    )
    results = {r.name: r for r in grade(5, folder).results}
    assert results["recompute_frees_the_blocks_and_requeues"].outcome == PASS
    assert results["swap_preemption_moves_the_blocks_to_host"].outcome == PASS
    assert results["swap_out_moves_the_table_to_host"].message.startswith("not written yet")


def test_no_time_is_lost_waiting_for_the_child(tmp_path):
    """Grading exercise 01's starter costs one child: well under the per-criterion limit."""
    start = time.monotonic()
    report = grade(1, submission(tmp_path / "plain"))
    assert time.monotonic() - start < 20
    assert {r.outcome for r in report.results} == {FAIL}


def test_closing_the_channel_fails_only_that_criterion(tmp_path):
    closer = "import os\n    os.closerange(3, 256)\n    return t // block_size"
    folder = submission(
        tmp_path / "closer", logical_block=closer, block_offset=RIGHT["block_offset"]
    )
    failed = messages(grade(1, folder))
    assert "closed its channel to the grader" in failed["logical_block"]
    assert "block_offset" not in failed


def test_a_link_to_an_endless_file_does_not_hold_the_copy_check(tmp_path):
    folder = submission(tmp_path / "zero")
    (folder / "endless.py").symlink_to("/dev/zero")
    assert copies(EXERCISES[1], folder) == ""


def test_a_question_cut_short_by_the_checks_own_time_limit_leaves_no_stale_answer(tmp_path):
    """A check's own time limit (hypothesis's shrinking budget) may fire between a question
    and its answer; the next criterion then gets a new child, not the old answer."""
    from minipaged.grader.proxies import RemoteStudent
    from minipaged.grader.time_limit import TimeLimitExceeded, time_limit

    folder = submission(
        tmp_path / "slow",
        logical_block="import time; time.sleep(1); return t // block_size",
        block_offset=RIGHT["block_offset"],
    )
    child = grading.GradingChild(1, "process", folder.resolve(), Limits(), Proxy)
    try:
        child.start()
        logical_block = RemoteStudent(child).memory.logical_block  # asked before the limit
        with pytest.raises(TimeLimitExceeded), time_limit(0.2):
            logical_block(3, 2)
        assert not child.alive
        offset = EXERCISES[1].criteria()[1]
        assert grading._run_in_child(offset, child, Limits()).outcome == PASS
    finally:
        child.close()


def test_an_honest_answer_leaves_nothing_running_and_keeps_its_child(tmp_path):
    """What a call left running is looked for after every answer (``left_running``); an
    honest answer, which leaves nothing, pays no grace and no restart."""
    from minipaged.grader.proxies import RemoteStudent

    folder = submission(tmp_path / "right", logical_block=RIGHT["logical_block"])
    child = grading.GradingChild(1, "process", folder.resolve(), Limits(), Proxy)
    try:
        child.start()
        pid = child.process.pid
        memory = RemoteStudent(child).memory
        start = time.monotonic()
        assert [memory.logical_block(t, 16) for t in range(20)] == [t // 16 for t in range(20)]
        assert time.monotonic() - start < 20 * 0.5  # never the grace's 0.5 s a call
        assert child.alive and child.process.pid == pid
    finally:
        child.close()


def test_an_answer_that_imports_numpy_and_torch_leaves_no_thread_behind(tmp_path):
    """Honest code may import numpy and torch in an exercise that needs neither, and compute
    with them: their thread pools start no thread in a grading child (``ONE_THREAD``), so the
    grader, which counts the worker's threads, finds none left (numpy's import and torch's
    first parallel operation each started one, which failed the call). Asking torch for more
    threads grows its pool, whose threads are the library's (``library_threads``), not the
    student's: that call failed as "left 2 threads" before. A thread pool the student's code
    shuts down (``with ThreadPoolExecutor``) and torch's inter-op pool (``torch.jit.fork``)
    leave nothing either."""
    folder = submission(
        tmp_path / "numeric",
        logical_block="import numpy, torch\n    torch.ones(1 << 20).add_(1)\n"
        "    numpy.ones((300, 300)) @ numpy.ones((300, 300))\n    return t // block_size",
        block_offset="import torch\n    torch.set_num_threads(3)\n"
        "    torch.ones(300, 300) @ torch.ones(300, 300)\n    return t % block_size",
        num_logical_blocks="from concurrent.futures import ThreadPoolExecutor\n"
        "    with ThreadPoolExecutor(2) as pool:\n"
        "        return pool.submit(lambda: -(-num_tokens // block_size)).result()",
        kv_bytes_per_token="import torch\n        torch.jit.wait(torch.jit.fork(torch.mm, "
        "torch.ones(4, 4), torch.ones(4, 4)))\n        return 2 * self.num_layers * "
        "self.num_kv_heads * self.head_dim * self.dtype_bytes",
    )
    failed = messages(grade(1, folder))
    graded = ("logical_block", "block_offset", "num_logical_blocks", "kv_bytes_per_token")
    assert not set(graded) & set(failed), failed
