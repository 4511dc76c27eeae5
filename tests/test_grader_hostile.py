"""A hostile student's corpus (``hostile_corpus``) against the grader: every attack fails the
criteria it attacks, with a message that says what happened, within the time limits; the
honest answers beside it still pass; and the report stays short and readable whatever the
student's values print as."""

from __future__ import annotations

import io
import json
import time

import pytest
from exercise01_answers import answered
from hostile_corpus import HAND_INS, SECRET, SECRET_NAME, HandIn
from rich.console import Console

from minipaged.grader import disk_quota
from minipaged.grader.gradebook import PASSED, grade_batch, write_gradebook
from minipaged.grader.grading import Limits, grade
from minipaged.grader.report import FAIL, PASS
from tests.stuck import eventually
from tests.test_grader_integrity import _alive

LIMITS = Limits(check_seconds=4.0, memory_gib=2.0, wall_seconds=120.0, disk_gib=0.1)
"""Short limits, so the attacks that hang cost little; the grader's own defaults are longer."""


def _needs(hand_in: HandIn) -> None:
    if hand_in.number in (8, 9, 10, 11):
        pytest.importorskip("numba")


@pytest.mark.parametrize("hand_in", HAND_INS, ids=lambda h: f"{h.number:02d}-{h.name}")
def test_every_attack_fails_its_criteria_and_the_honest_answers_pass(
    hand_in, tmp_path, monkeypatch
):
    _needs(hand_in)
    monkeypatch.setattr(disk_quota, "MAX_ENTRIES", 2000)  # reached within the short limits
    monkeypatch.setenv(SECRET_NAME, SECRET)  # the grader's, never the student's code's
    folder = hand_in.write(tmp_path)
    for _ in range(hand_in.gradings):  # what one grading leaves, the next finds
        start = time.monotonic()
        report = grade(hand_in.number, folder, limits=LIMITS)
        assert time.monotonic() - start < LIMITS.wall_seconds
        results = {r.name: r for r in report.results}
        for attack in hand_in.attacks:
            for name in attack.fails:
                assert results[name].outcome == FAIL, (attack.name, name)
            said = [results[name].message for name in attack.fails]
            assert not said or any(attack.said in m for m in said), (attack.name, said)
            if marker := attack.leaves:
                eventually(lambda m=marker: _alive(m) == [], f"{attack.name} left its process")
    # Every process of the grading ends with it: a grading child's command line names the
    # folder, and so does its fork's (the corpus's forks sleep past this wait)
    graded = f"--path\0{folder.resolve()}\0"
    eventually(lambda: _alive(graded) == [], f"a process of {hand_in.name}'s grading was running")
    for name in hand_in.passes:
        assert results[name].outcome == PASS, (name, results[name].message)
    printed = io.StringIO()
    report.render(Console(file=printed, width=100, color_system=None))
    assert len(printed.getvalue()) < 40_000
    assert "x" * 3000 not in printed.getvalue()  # a huge repr is cut, not printed
    assert "\x1b" not in printed.getvalue() and "\r" not in printed.getvalue()  # no forged rows
    assert SECRET not in printed.getvalue()


def test_the_corpus_has_thirty_attacks_across_the_course():
    attacks = [a.name for h in HAND_INS for a in h.attacks]
    assert len(attacks) >= 30 and len(set(attacks)) == len(attacks)
    assert {h.number for h in HAND_INS} >= {1, 3, 5, 6, 7, 10, 13}


MALLORY = (
    "import os\n"
    "    here = os.path.dirname(os.path.abspath(__file__))\n"
    "    for path in ('../alice/memory.py', '../alice/report.json', '../../gradebook.csv'):\n"
    "        try:\n"
    "            open(os.path.join(here, path), 'w').write('owned')\n"
    "        except OSError:\n"
    "            pass\n"
    "    return t // block_size"
)
"""Exercise 01's logical_block, right, after trying to write a classmate's files and the
gradebook."""


def test_a_hostile_classmate_changes_no_other_grade_and_stops_no_batch(tmp_path):
    """Mallory's code tries to write Alice's files and a ``gradebook.csv`` where the class's
    goes. Alice's grade stands and the batch ends everywhere. Where Landlock confines the
    grading (the report says so), the writes fail: Alice's files are as they were and the
    gradebook is written. Where it cannot (a kernel without Landlock), nothing stops them: the
    gradebook, refusing to replace a file it did not write, names Mallory's, and the check of
    Alice's files is skipped, saying why."""
    root = tmp_path / "class"
    alice = answered(root / "alice")
    before = (alice / "memory.py").read_text()
    mallory = answered(root / "mallory", {"return j = floor(t / B)": MALLORY})
    (mallory / "report.json").mkdir()  # the grader's report cannot be written there
    rows = {r.student: r for r in grade_batch(1, root, LIMITS, jobs=1)}
    assert rows["alice"].status == PASSED and rows["alice"].total == 100
    assert "report.json not written into the folder" in rows["mallory"].cause
    how = rows["alice"].report["confinement"]
    if how.startswith("unconfined"):  # Mallory, graded after Alice, wrote what it tried to
        with pytest.raises(ValueError, match="is there and is no gradebook minipaged wrote"):
            write_gradebook(1, root, list(rows.values()))
        assert (tmp_path / "gradebook.csv").read_text() == "owned", "replaced, not refused"
        pytest.skip(
            f"the grading ran {how}: only Landlock stops a student's code writing a "
            "classmate's files, so that Alice's are unchanged is not checked here"
        )
    assert how.startswith("confined by Landlock"), how
    csv_path, _ = write_gradebook(1, root, list(rows.values()))
    assert csv_path.read_text().count("\n") == 3
    assert (alice / "memory.py").read_text() == before
    assert json.loads((alice / "report.json").read_text())["score"] == 100


LEAVES_A_NOTE = (
    "import os, tempfile\n"
    "    for folder in (tempfile.gettempdir(), os.path.dirname(os.path.abspath(__file__))):\n"
    "        try:\n"
    "            with open(os.path.join(folder, 'left-for-the-next-child.txt'), 'w') as f:\n"
    "                f.write(str(t))\n"
    "        except OSError as error:\n"
    "            if folder == tempfile.gettempdir():\n"
    "                raise\n"
    "            assert error.errno == 13, error\n"
    "    return t // block_size"
)
"""Exercise 01's logical_block, right, after leaving a file in its temporary folder (which must
work) and in the student's folder (which must be refused, as Landlock refuses: EACCES)."""


def test_a_grading_child_writes_its_temporary_folder_and_not_the_students(tmp_path):
    """Where Landlock confines the grading, the student's folder is read-only to their code, so
    nothing one grading child writes there reaches a later one (``hostile_corpus.CARRIED``);
    the child's temporary folder is writable, and is gone with the grading. Where Landlock is
    missing, the write is not refused, and the test skips, saying so."""
    folder = answered(tmp_path / "student", {"return j = floor(t / B)": LEAVES_A_NOTE})
    report = grade(1, folder, limits=LIMITS)
    if report.confinement.startswith("unconfined"):
        pytest.skip(f"the grading ran {report.confinement}: only Landlock makes it read-only")
    results = {r.name: r for r in report.results}
    assert results["logical_block"].outcome == PASS, results["logical_block"].message
    assert report.score == 100
    assert sorted(p.name for p in folder.iterdir()) == ["memory.py"]


def test_every_library_function_named_like_a_graded_one_is_out_of_reach():
    """A function of the library named like one an exercise grades (a kernel's CPU twin, the
    reference the kernels mirror), or a subclass's own version of a graded method, computes
    its answer: it is graded or an answer of the exercise (``Exercise.answers``), stubbed in
    the grading child. Exercise 07 once passed nine of its ten criteria through
    ``cuda_kernels.cpu.paged_attention.paged_attention_decode``, exercise 03 all eight through
    the simulator's ``FastBlockManager.free``."""
    import ast
    import importlib.util
    from pathlib import Path

    from minipaged.grader.exercises import EXERCISES

    numba = importlib.util.find_spec("numba") is not None
    defined: dict[str, set[str]] = {}
    for package in ("minipaged", "cuda_kernels"):
        root = Path(importlib.util.find_spec(package).origin).parent
        for path in root.rglob("*.py"):
            if "grader" in path.relative_to(root).parts or (
                package == "cuda_kernels" and not numba
            ):
                continue
            module = ".".join((package, *path.relative_to(root).with_suffix("").parts))
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.FunctionDef):
                    defined.setdefault(node.name, set()).add(module)
                for base in node.bases if isinstance(node, ast.ClassDef) else ():
                    # A subclass's own version of its base's method: "BlockManager.free"
                    # written again in FastBlockManager, the simulator's manager.
                    base_name = getattr(base, "id", getattr(base, "attr", ""))
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef):
                            mine = f"{base_name}.{item.name}"
                            defined.setdefault(mine, set()).add(f"{module}:{node.name}")
    reachable = []
    for ex in EXERCISES.values():
        covered = set(ex.graded) | set(ex.answers)
        for name in ex.graded:
            function = name.partition(":")[2]
            twins = {f"{m}:{function}" for m in defined.get(function, ()) if ":" not in m}
            method = function.rpartition(".")[2]
            twins |= {f"{c}.{method}" for c in defined.get(function, ()) if ":" in c}
            reachable += [(ex.number, twin) for twin in sorted(twins - covered)]
    assert not reachable


def test_a_grading_child_gets_only_the_environment_python_and_its_libraries_need():
    from pathlib import Path

    from minipaged.grader.child_environment import child_environment

    grader = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "NUMBA_OPT": "0",
        "NUMBA_ENABLE_CUDASIM": "1",
        SECRET_NAME: SECRET,
        "AWS_SECRET_ACCESS_KEY": "key",
        "DATABASE_URL": "postgres://teacher:password@db/grades",
    }
    env = child_environment(grader, Path("/grading"), simulator=False)
    assert {k: env[k] for k in ("PATH", "LC_ALL", "NUMBA_OPT")} == {
        k: grader[k] for k in ("PATH", "LC_ALL", "NUMBA_OPT")
    }
    assert not {SECRET_NAME, "AWS_SECRET_ACCESS_KEY", "DATABASE_URL"} & set(env)
    assert "NUMBA_ENABLE_CUDASIM" not in env  # a GPU child's Numba is the real one
    assert env["TMPDIR"] == "/grading" and env["OMP_NUM_THREADS"] == "1"
    assert child_environment(grader, Path("/grading"), True)["NUMBA_ENABLE_CUDASIM"] == "1"


RECORDS_ONLY = {"minipaged.block_manager:BlockManager._record_cow"}
"""Private methods of a graded class that only record events, which the exercises do not ask
for: the TUI's witness records a student's missing copy-on-write events with it."""


def test_every_private_method_only_graded_methods_call_is_out_of_reach():
    """A graded method may be a call of a private one that does its work: the library's
    ``swap_out`` is ``self._move(seqs, "device", "host")``, and exercise 05's swap passed all
    its criteria as that one line. A private method of a graded class that only graded methods
    call (itself, or through other such methods) is an answer of the exercise, stubbed."""
    import ast
    import importlib
    import inspect

    from minipaged.grader.exercises import EXERCISES

    unguarded = []
    for ex in EXERCISES.values():
        graded = {}
        for name in ex.graded:
            module, _, qualname = name.partition(":")
            if "." in qualname:
                graded.setdefault((module, qualname.rpartition(".")[0]), set()).add(
                    qualname.rpartition(".")[2]
                )
        for (module, cls), methods in graded.items():
            source = inspect.getsource(getattr(importlib.import_module(module), cls))
            body = [f for f in ast.parse(source).body[0].body if isinstance(f, ast.FunctionDef)]
            private = {f.name for f in body if f.name.startswith("_") and f.name[1] != "_"}
            callers: dict[str, set[str]] = {}
            for function in body:
                for node in ast.walk(function):
                    if isinstance(node, ast.Attribute) and node.attr in private:
                        callers.setdefault(node.attr, set()).add(function.name)
            inside = set(methods)
            while grown := {m for m, c in callers.items() if c <= inside} - inside:
                inside |= grown
            for method in sorted(inside - methods):
                name = f"{module}:{cls}.{method}"
                if name not in ex.answers and name not in RECORDS_ONLY:
                    unguarded.append((ex.number, name))
    assert not unguarded


OTHER_JOBS = {
    "minipaged.kv_cache:KVCache": (
        "its swap_out and swap_in copy keys and values for the block pairs they are given; "
        "the tables and refcounts exercise 05 asks for are not its"
    ),
    "minipaged.study.simulator:Simulation": (
        "its _preempt evicts the newest request in the model-free simulator's allocators, "
        "given a group and a stall count; exercise 05's moves tables and refcounts"
    ),
}
"""Library classes with every graded method of a graded class, by name, that compute
something else, and what."""


def test_another_library_class_with_a_graded_classs_methods_is_out_of_reach():
    """A library class that offers every method an exercise grades of a class (the hash prefix
    cache's ``match``, ``insert`` and ``forget`` beside exercise 12's radix tree) is another
    implementation of the same answer: exercise 12's ``match`` passed all seven criteria as a
    ``HashPrefixCache`` filled from the student's tree. Its versions are answers of the
    exercise, stubbed; a class of the same names that computes something else is named in
    ``OTHER_JOBS`` with what. A ``Protocol``'s ``...`` bodies compute nothing."""
    import ast
    import importlib.util
    from pathlib import Path

    from minipaged.grader.exercises import EXERCISES

    classes: dict[str, set[str]] = {}
    root = Path(importlib.util.find_spec("minipaged").origin).parent
    for path in root.rglob("*.py"):
        if "grader" in path.relative_to(root).parts:
            continue
        module = ".".join(("minipaged", *path.relative_to(root).with_suffix("").parts))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                classes[f"{module}:{node.name}"] = {
                    f.name
                    for f in node.body
                    if isinstance(f, ast.FunctionDef)
                    and not (len(f.body) == 1 and isinstance(f.body[0], ast.Expr))
                }
    unguarded = []
    for ex in EXERCISES.values():
        graded: dict[str, set[str]] = {}
        for name in ex.graded:
            owner, _, method = name.rpartition(".")
            if ":" in owner:
                graded.setdefault(owner, set()).add(method)
        for owner, methods in graded.items():
            for other, offered in classes.items():
                if other == owner or other in OTHER_JOBS or not methods <= offered:
                    continue
                unguarded += [
                    (ex.number, f"{other}.{m}")
                    for m in sorted(methods)
                    if f"{other}.{m}" not in ex.answers
                ]
    assert not unguarded
