"""The classroom exercises and their grader (``minipaged.grader``, ``tutorials/``).

Every check must be able to fail and to pass: each exercise's criteria all pass on its
solution (the library's own modules) and all fail on its untouched starter files; a few
realistic bugs fail the criteria written for them; and the reference properties catch every
member of the bug zoo.
"""

from __future__ import annotations

import inspect
import json
import operator
import re
from collections import Counter
from importlib import import_module
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis.stateful import invariant
from test_grader_integrity import first_criterion

from minipaged import attention, cli, invariants, memory, radix_cache
from minipaged.attention import paged_attention_decode
from minipaged.block_manager import BlockManager
from minipaged.grader import bug_zoo, grading
from minipaged.grader.broken_states import BROKEN_STATES
from minipaged.grader.exercises import EXERCISES, TUTORIALS
from minipaged.grader.grading import grade, run_criteria
from minipaged.grader.properties import BlockManagerMachine, BlockManagerProgram, run_programs
from minipaged.grader.report import BLOCKED, FAIL, PASS, split_rule
from minipaged.grader.student import Student
from minipaged.grader.student_folder import block_manager_class
from minipaged.scheduler import _insert_by_arrival
from tui.scenarios import EXERCISE_SCENARIOS

IN_PROCESS = [
    n for n, ex in EXERCISES.items() if all(c.runs_in == "process" for c in ex.criteria())
]


def outcomes(report) -> dict[str, str]:
    return {r.name: r.outcome for r in report.results}


def failures(exercise: int, **modules) -> dict[str, str]:
    """The criteria of ``exercise`` that ``modules`` (stand-ins for the student's files) fail."""
    results = run_criteria(list(EXERCISES[exercise].criteria()), Student(modules))
    return {r.name: r.message for r in results if r.outcome == FAIL}


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_each_exercise_has_a_readme_starter_files_and_checks(number):
    ex = EXERCISES[number]
    folder = TUTORIALS / ex.folder
    readme = (folder / "README.md").read_text()
    sections = ("**Goal.**", "**Time.** About", "## Background", "## Tasks", "## Hints")
    for section in sections + ("## See it run", f"`minipaged exercises hint {number} --tier 2`"):
        assert section in readme, f"{ex.folder}/README.md lacks {section}"
    assert "<details>" not in readme, "a terminal shows a <details> block at once: hints.md"
    assert (folder / "hints.md").read_text().startswith(f"# {number:02d} · ")
    assert readme.startswith(f"# {number:02d} · ")
    assert f"minipaged exercises check {number}`" in readme
    if number in EXERCISE_SCENARIOS:  # the TUI can run this exercise's part of a block manager
        assert f"minipaged tui --exercise {number}`" in readme
    for target in re.findall(r"\]\(([^)#]+)", readme):
        assert (folder / target).exists(), f"{ex.folder}/README.md links to missing {target}"
    for name in ex.files:
        source = (folder / "starter" / name).read_text()
        assert "# --- your code here" in source and "NotImplementedError" in source, name
    assert ex.criteria(), f"exercise {number} has no criteria"


@pytest.mark.parametrize("number", IN_PROCESS)
def test_solution_passes_every_criterion(number):
    report = grade(number, solution=True)
    assert report.passed
    assert set(outcomes(report).values()) == {PASS}, report.to_dict()


@pytest.mark.parametrize("number", IN_PROCESS)
def test_untouched_starter_fails_every_criterion(number):
    report = grade(number)
    assert set(outcomes(report).values()) == {FAIL}, report.to_dict()
    assert all("not written yet" in r.message for r in report.results)


SIMULATED = [n for n, ex in EXERCISES.items() if n not in IN_PROCESS]


@pytest.mark.slow
@pytest.mark.parametrize("number", SIMULATED)
def test_kernel_exercise_passes_in_the_simulator_and_its_starter_fails(number):
    """The CUDA exercises run their checks in a simulator process (and block the GPU ones)."""
    gpu = torch.cuda.is_available()
    solution = outcomes(grade(number, solution=True))
    starter = outcomes(grade(number))
    for name in [n for n in solution if n.endswith("on_a_gpu")]:
        assert solution.pop(name) == (PASS if gpu else BLOCKED)
        assert starter.pop(name) == (FAIL if gpu else BLOCKED)
    assert set(solution.values()) == {PASS}
    assert set(starter.values()) == {FAIL}


# The property that catches each member, as its failure names it: any AssertionError at all
# also passed a reference machine with a property that fails on every manager.
CAUGHT_BY = {
    bug_zoo.LeakOnFree: "leak: every sequence is freed, yet",
    bug_zoo.DoubleFree: r"refcount conservation: device block \d+: R=1 but 2 table",
    bug_zoo.MissingCow: "copy-on-write broken",
    bug_zoo.LostCowCopy: "reads back tokens .* but wrote",
    bug_zoo.StaleTableAfterSwap: r"refcount conservation: device block \d+: R=0 but 1 table",
}


@pytest.mark.parametrize("member", bug_zoo.BUG_ZOO, ids=lambda m: m.__name__)
def test_reference_properties_catch_each_bug_zoo_member(member):
    with pytest.raises(AssertionError, match=CAUGHT_BY[member]):
        run_programs(BlockManagerMachine, member, max_examples=100, shrink=False)


def test_reference_properties_pass_the_library_manager_over_the_same_programs():
    """The programs above, run against the manager the members change: none fails."""
    run_programs(BlockManagerMachine, BlockManager, max_examples=100, shrink=False)


def test_properties_that_check_nothing_catch_no_bug_and_score_nothing():
    """They raise no false alarm, but only as they raise nothing: that criterion, which once
    gave them 10 points, asks that they fail on at least one hand-built broken state."""
    failed = failures(6, properties=SimpleNamespace(BlockManagerMachine=BlockManagerProgram))
    rules = [f"rule_{n}_on_its_own" for n in range(1, 6)]
    zoo = [f"catches_{m.__name__}" for m in bug_zoo.BUG_ZOO]
    assert sorted(failed) == sorted(["no_false_alarm", *rules, *zoo])
    assert "properties that never fail raise no false alarm" in failed["no_false_alarm"]
    assert "broke none of your properties" in failed["catches_MissingCow"]


# Three members keep the library's record calls but do less, so the events they record also
# disagree with what they did; the criterion's own check speaks first (``events_checked_last``),
# so each message names the bug, not an event list.
COW_NAMED = "but returned cow=None"
FREE_NAMED = "[R[0], R[1], R[2]] after free(1): expected [1, 1, 0], got [1, 1, 1]"
SWAP_NAMED = "swap_in([1]): expected [7, 8, 9, 10, 11], got [1, 2, 3, 4, 5]"


@pytest.mark.parametrize(
    ("exercise", "member", "criterion", "words"),
    [
        (4, bug_zoo.MissingCow, "shared_partly_filled_block_is_copied", "no copy-on-write"),
        (4, bug_zoo.LostCowCopy, "shared_partly_filled_block_is_copied", COW_NAMED),
        (3, bug_zoo.DoubleFree, "fork_raises_each_refcount_by_one", "expected [2, 2], got [1, 1]"),
        (3, bug_zoo.LeakOnFree, "free_releases_only_unshared_blocks", FREE_NAMED),
        (5, bug_zoo.StaleTableAfterSwap, "swap_in_restores_the_contents", SWAP_NAMED),
    ],
)
def test_a_bug_zoo_manager_fails_the_exercise_criterion_for_its_bug(
    exercise, member, criterion, words
):
    modules = {"block_manager": SimpleNamespace(BlockManager=member)}
    if exercise == 5:
        modules["scheduler"] = pytest.importorskip("minipaged.scheduler")
    failed = failures(exercise, **modules)
    assert words in failed[criterion]
    assert "recorded the" not in failed[criterion]  # the state's error, not the events'
    assert "random_programs_keep_every_invariant" in failed


def test_an_off_by_one_block_count_fails_with_expected_and_got():
    student = SimpleNamespace(**vars(memory))
    student.num_logical_blocks = lambda num_tokens, block_size: num_tokens // block_size + 1
    failed = failures(1, memory=student)
    assert failed == {
        "num_logical_blocks": "num_logical_blocks(0, 16), M for L=0 tokens, B=16: expected 0, "
        "got 1\nRule: num_logical_blocks(L, B) is M = ceil(L / B): a partly filled last block "
        "counts"
    }


def test_softmax_without_the_running_max_fails_only_the_stability_criteria():
    def loop_without_max(query, key_pool, value_pool, block_tables, seq_lens, scale, block_size):
        group = query.shape[1] // key_pool.shape[1]
        output = torch.zeros_like(query)
        for b, length in enumerate(seq_lens.tolist()):
            total, acc = 0.0, 0.0
            for j in range(-(-length // block_size)):
                p, n = int(block_tables[b, j]), min(block_size, length - j * block_size)
                k = key_pool[p, :, :n].repeat_interleave(group, dim=0)
                v = value_pool[p, :, :n].repeat_interleave(group, dim=0)
                e = torch.exp(torch.einsum("hd,htd->ht", query[b], k) * scale)  # no max taken
                total = total + e.sum(dim=-1, keepdim=True)
                acc = acc + torch.einsum("ht,htd->hd", e, v)
            output[b] = acc / total
        return output

    student = SimpleNamespace(
        paged_attention_decode_loop=loop_without_max, paged_attention_decode=paged_attention_decode
    )
    failed = failures(7, attention=student)
    assert list(failed) == [
        "loop_online_softmax_is_stable",
        "loop_online_softmax_starts_at_minus_infinity",  # exp(s) of every score underflows
    ]
    assert "subtract the running max m" in failed["loop_online_softmax_is_stable"]


def test_a_file_that_does_not_import_fails_every_criterion_with_the_line(tmp_path):
    (tmp_path / "memory.py").write_text("def logical_block(t, block_size)\n    return 0\n")
    report = grade(1, tmp_path)
    assert {r.outcome for r in report.results} == {FAIL}
    assert report.results[0].message.startswith("could not import memory.py, line 1: SyntaxError")


def as_written_by_a_student(library_source: str) -> str:
    """A library file as a student who wrote the same code would hand it in: with docstrings
    of their own. The library's own docstrings mark a copy (``minipaged.grader.library_copies``),
    which the grader refuses before running it."""
    return re.sub(r'"""(?=\S)', '"""Mine: ', library_source)


def starter_with(tmp_path, todo: str, code: str, tail: str = "") -> Path:
    """Exercise 01's starter in ``tmp_path`` with the line raising ``todo`` replaced by
    ``code``, and ``tail`` run at the end of the import."""
    source = (TUTORIALS / EXERCISES[1].folder / "starter" / "memory.py").read_text()
    line = f'raise NotImplementedError("exercise 01: {todo}")'
    assert line in source
    (tmp_path / "memory.py").write_text(source.replace(line, code) + tail)
    return tmp_path


def test_a_check_that_runs_too_long_is_stopped(tmp_path):
    folder = starter_with(tmp_path, "return j = floor(t / B)", "while True: pass")
    result = grade(1, folder, limits=grading.Limits(check_seconds=0.5)).results[0]
    assert result.outcome == FAIL
    assert result.message.startswith(f"your code ran past 0.5 s in {result.name}:"), result.message


def test_student_code_runs_in_a_child_process_under_limits(tmp_path):
    """Runaway memory fails one criterion with the cause; printing does not confuse the grader;
    the child's death fails only the criteria it had not finished."""
    folder = starter_with(
        tmp_path,
        "return o = t mod B",
        "return bytearray(8 * 2**30)",
        tail="print('hello from the student')\n",
    )
    source = (folder / "memory.py").read_text()
    (folder / "memory.py").write_text(
        source.replace(
            'raise NotImplementedError("exercise 01: return M = ceil(L / B)")',
            "import os; os._exit(3)",
        )
    )
    results = grade(1, folder, limits=grading.Limits(memory_gib=3.0)).results
    messages = {r.name: r.message for r in results}
    assert messages["block_offset"].startswith("ran out of memory (MemoryError) (memory.py")
    assert messages["logical_block"].startswith("not written yet")  # finished before the exit
    assert messages["num_logical_blocks"].startswith(
        "your code ended the grading process (exit status 3)"
    )
    assert messages["block_bytes"].startswith("not written yet")  # a new child took it


def test_a_child_that_never_finishes_is_stopped_by_the_clock_and_cpu_limits(tmp_path):
    sleeper = tmp_path / "a"
    sleeper.mkdir()
    (sleeper / "memory.py").write_text("import time\ntime.sleep(60)\n")
    limits = grading.Limits(wall_seconds=3.0)
    results = grade(1, sleeper, limits=limits).results
    assert {r.message for r in results} == {
        "importing your files was still running when the grading of this submission reached "
        "its 3 s limit in all: is there a loop that never ends at import time (outside any "
        "function)?"
    }
    spinner = tmp_path / "b"
    spinner.mkdir()
    (spinner / "memory.py").write_text("while True:\n    pass\n")
    results = grade(1, spinner, limits=grading.Limits(cpu_seconds=2)).results
    assert "the grading process used its 2 s of CPU time" in results[0].message


def test_the_tui_maps_exactly_the_exercises_that_build_a_block_manager():
    builds = {
        n for n, ex in EXERCISES.items() if hasattr(import_module(ex.checks), "block_manager_class")
    }
    assert set(EXERCISE_SCENARIOS) == builds


@pytest.mark.parametrize("number", sorted(EXERCISE_SCENARIOS))
def test_block_manager_class_is_a_drop_in_block_manager(number):
    cls = block_manager_class(number, solution=True)
    assert issubclass(cls, BlockManager)
    manager = cls(8, 4, 2, 0.0, "radix")  # the engine's positional arguments
    manager.allocate(0, 5, [1, 2, 3, 4, 5])
    manager.fork(0, 1)
    manager.append_slot(1)
    manager.swap_out([0, 1])
    manager.swap_in([0, 1])
    assert manager.prefix_cache.match([1, 2, 3, 4]) != []


def test_block_manager_class_refuses_an_exercise_without_one():
    with pytest.raises(ValueError, match="exercises 2, 3, 4, 5 or 12 do"):
        block_manager_class(6, solution=True)


def test_cli_lists_the_nine_exercises(capsys):
    assert cli.main(["exercises", "list"]) == 0
    out = capsys.readouterr().out
    for ex in EXERCISES.values():
        assert f"tutorials/{ex.folder}/starter/" in out


def test_cli_check_exits_0_on_the_solution_and_writes_the_report(tmp_path, capsys):
    target = tmp_path / "report.json"
    assert cli.main(["exercises", "check", "1", "--solution", "--json", str(target)]) == 0
    assert "8 pass, 0 fail, 0 blocked" in capsys.readouterr().out
    report = json.loads(target.read_text())
    assert (report["exercise"], report["passed"]) == (1, True)
    assert report["criteria"][0]["statement"].startswith("logical_block(t, B) is j")


def test_cli_check_exits_1_on_the_starter_and_prints_the_notation_intact(tmp_path, capsys):
    target = tmp_path / "report.json"
    assert cli.main(["exercises", "check", "4", "--json", str(target)]) == 1
    out = capsys.readouterr().out
    assert "FAIL     R[p] = 1 and o > 0: the token is written in place" in out
    assert "not written yet: exercise 04: reserve the slot" in out
    every = len(EXERCISES[4].criteria())
    assert json.loads(target.read_text())["counts"] == {"pass": 0, "fail": every, "blocked": 0}


def test_cli_check_first_failure_stops_there_and_names_the_rest_not_run(tmp_path, capsys):
    target = tmp_path / "report.json"
    assert cli.main(["exercises", "check", "4", "--first-failure", "--json", str(target)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL ") == 1 and "not written yet: exercise 04: reserve the slot" in out
    assert "not run: grading stopped at the first criterion that failed" in out
    every = len(EXERCISES[4].criteria())
    counts = json.loads(target.read_text())["counts"]
    assert counts == {"pass": 0, "fail": 1, "blocked": every - 1}
    batch = ["exercises", "check", "4", "--batch", str(tmp_path), "--first-failure"]
    assert cli.main(batch) == 2
    assert "--first-failure is for checking your own work" in capsys.readouterr().err


def test_cli_check_of_a_folder_without_the_files_says_what_to_do(tmp_path, capsys):
    assert cli.main(["exercises", "check", "4", "--path", str(tmp_path)]) == 2
    assert "has no block_manager.py" in capsys.readouterr().err


def test_cli_check_takes_the_folder_as_init_takes_it(tmp_path, capsys):
    """`init N DIR` then `check N DIR`: the folder after the number is the one graded, and it
    cannot be given twice."""
    folder = tmp_path / "ex01"
    assert cli.main(["exercises", "init", "1", str(folder)]) == 0
    report = folder / "report.json"
    assert cli.main(["exercises", "check", "1", str(folder), "--first-failure"]) == 1
    assert "not written yet" in capsys.readouterr().out
    assert json.loads(report.read_text())["exercise"] == 1
    for other in (["--path", str(folder)], ["--solution"], ["--batch", str(tmp_path)]):
        assert cli.main(["exercises", "check", "1", str(folder), *other]) == 2
        assert f"{other[0]} both say what to grade" in capsys.readouterr().err
    assert cli.main(["exercises", "check", "1", str(tmp_path / "missing")]) == 2


def test_cli_check_of_an_unknown_exercise_is_refused(capsys):
    unknown = max(EXERCISES) + 1
    assert cli.main(["exercises", "check", str(unknown)]) == 2
    assert f"no exercise {unknown}" in capsys.readouterr().err


def test_a_plugged_in_block_manager_runs_the_engine_like_the_library():
    """How the TUI can run a student's work: swap the engine's block manager for
    ``block_manager_class(N)`` before the first step. With the solution plugged in, a run that
    forks samples and preempts by swapping gives the same tokens as the library's."""
    from minipaged.checkpoint import load_model, model_directory
    from minipaged.engine import LLMEngine
    from minipaged.sampling import SamplingParams

    model = load_model(model_directory("tiny"))
    params = SamplingParams(max_tokens=10, n=2, temperature=0.8, seed=1, ignore_eos=True)
    prompts = [list(range(3, 13)), list(range(20, 27))]

    def run(plug_in):
        engine = LLMEngine(
            model, block_size=4, num_gpu_blocks=12, num_cpu_blocks=16, preemption="swap"
        )
        if plug_in is not None:
            bm = engine.block_manager
            engine.block_manager = engine.scheduler.block_manager = plug_in(
                bm.device.num_blocks, bm.host.num_blocks, bm.block_size, 0.01, None
            )
        for prompt in prompts:
            engine.add_request({"prompt_token_ids": prompt}, params)
        outputs, kinds = {}, set()
        while engine.has_unfinished():
            step = engine.step()
            kinds |= {event.kind for event in step.events}
            outputs |= {o.request_id: [c.token_ids for c in o.outputs] for o in step.finished}
        return outputs, kinds

    library, kinds = run(None)
    assert {"cow-copy", "swap-out"} <= kinds  # the run forks, copies on write and swaps
    for number in (2, 3, 4, 5):
        assert run(block_manager_class(number, solution=True))[0] == library


# -- §1 of the grader's contract: each realistic student bug is caught, with its fault named --


def failures_of(exercise: int, names: list[str], **modules) -> dict[str, str]:
    """Like ``failures``, running only the criteria ``names`` (the random ones are slow)."""
    criteria = [c for c in EXERCISES[exercise].criteria() if c.name in names]
    assert len(criteria) == len(names), f"no criteria {names} in exercise {exercise}"
    results = run_criteria(criteria, Student(modules))
    return {r.name: r.message for r in results if r.outcome == FAIL}


def student_properties(
    refcount_test=operator.eq,
    pools=("device", "host"),
    duplicates=True,
    exclusive=lambda r: r == 1,
    rules=(1, 2, 3, 4, 5),
    every_block=True,
    read_pools=("device", "host"),
    read_by_token=False,
):
    """An exercise-06 answer written the way a student would, with one knob per realistic
    mistake: ``refcount_test`` (R against its holders), the ``pools`` checked,
    ``duplicates`` (whether the free list is checked for them), ``exclusive`` (the test of a
    written block's R), which ``rules`` are written at all, ``every_block`` (whether R is
    checked for blocks no table holds), the ``read_pools`` whose tables are read back, and
    ``read_by_token`` (comparing read and written token by token over the shorter list)."""

    class Machine(BlockManagerProgram):
        def pools(self):
            s = self.manager.snapshot()
            both = {
                "device": (s.device_refcounts, s.device_free),
                "host": (s.host_refcounts, s.host_free),
            }
            return s, [(name, *both[name]) for name in pools]

        @invariant()
        def refcounts(self):
            if 1 in rules:
                s, checked = self.pools()
                for pool, refcounts, _ in checked:
                    held = Counter(p for t in s.tables.values() if t.pool == pool for p in t.blocks)
                    for p, r in enumerate(refcounts):
                        if every_block or held[p]:
                            assert refcount_test(r, held[p]), f"{pool} block {p}: R={r}"

        @invariant()
        def free_list(self):
            if 2 in rules:
                _, checked = self.pools()
                for pool, refcounts, free in checked:
                    assert {p for p, r in enumerate(refcounts) if r == 0} == set(free), pool
                    if duplicates:
                        assert len(set(free)) == len(free), f"{pool} free list has duplicates"

        @invariant()
        def exclusive_write(self):
            if 3 in rules and self.last_write is not None:
                s = self.manager.snapshot()
                assert exclusive(s.device_refcounts[self.last_write // s.block_size])

        @invariant()
        def read_back(self):
            if 4 in rules:
                for seq, table in self.manager.tables.items():
                    read, written = self.kv.read(table), self.kv.written[seq]
                    if table.pool in read_pools and read_by_token:
                        assert all(a == b for a, b in zip(read, written, strict=False))
                    elif table.pool in read_pools:
                        assert read == written

        def after_all_freed(self):
            if 5 in rules:
                m = self.manager
                assert m.device.num_free == m.device.num_blocks
                if "host" in pools and m.host is not None:
                    assert m.host.num_free == m.host.num_blocks

    return SimpleNamespace(BlockManagerMachine=Machine)


RULE_CRITERIA = [f"rule_{n}_on_its_own" for n in range(1, 6)]


def test_a_complete_student_answer_meets_every_rule_and_raises_no_false_alarm():
    answer = student_properties()
    assert failures_of(6, RULE_CRITERIA + ["no_false_alarm"], properties=answer) == {}


@pytest.mark.parametrize(
    ("mistake", "rules", "words"),
    [
        ({"refcount_test": operator.ge}, [1], "not merely be at least"),
        ({"refcount_test": operator.le}, [1], "both hold it"),
        ({"pools": ("device",)}, [1, 2, 5], "host block 0 has R=2"),
        ({"duplicates": False}, [2], "on the free list twice"),
        ({"exclusive": lambda r: r >= 1}, [3], "not merely at least 1"),
        ({"exclusive": lambda r: r != 2}, [3], "which seqs 0, 1 and 2 share (R=3)"),
        ({"rules": (1, 2, 3, 5)}, [4], "reading slot 1"),
        ({"rules": (1, 2, 3, 4)}, [5], "device block 1 is not free"),
        ({"every_block": False}, [1], "device block 2 has R=1 but no table holds it"),
        ({"read_pools": ("device",)}, [4], "seq 0, swapped out to the host"),
        ({"read_by_token": True}, [4], "gives back only 3: a token is lost"),
    ],
    ids=[
        "R>=holders",
        "R<=holders",
        "host-pool-skipped",
        "duplicates-skipped",
        "vacuous-exclusive-write",
        "exclusive-write-for-two-sharers",  # passed while no state had R=3
        "no-read-back",
        "no-leak-check",
        "held-blocks-only",
        "device-tables-read-back-only",
        "read-back-token-by-token",
    ],
)
def test_an_incomplete_property_fails_exactly_its_rules(mistake, rules, words):
    failed = failures_of(6, RULE_CRITERIA, properties=student_properties(**mistake))
    assert list(failed) == [f"rule_{rule}_on_its_own" for rule in rules]
    assert words in failed[f"rule_{rules[0]}_on_its_own"]


def test_a_suite_of_only_two_rules_fails_the_other_three():
    failed = failures_of(6, RULE_CRITERIA, properties=student_properties(rules=(1, 4)))
    assert sorted(failed) == ["rule_2_on_its_own", "rule_3_on_its_own", "rule_5_on_its_own"]


@pytest.mark.parametrize("state", BROKEN_STATES, ids=lambda s: s.name)
def test_each_broken_state_breaks_only_its_rule_of_the_reference(state):
    """The reference properties fail on each hand-built state through its rule alone (rules 1
    and 2 are ``minipaged.invariants``' refcount and free-list invariants)."""
    manager, kv, last_write = state.build()
    machine = BlockManagerMachine()
    machine.see(manager, kv, last_write)
    by_rule = {
        1: lambda: invariants.refcounts_match_tables(manager.snapshot()),
        2: lambda: invariants.free_iff_unreferenced(manager.snapshot()),
        3: lambda: _assertion(machine.writes_land_in_private_blocks),
        4: lambda: _assertion(machine.every_sequence_reads_back_its_own_tokens),
        5: lambda: _assertion(machine.after_all_freed),
    }
    broken = {rule for rule, problems in by_rule.items() if problems()}
    if state.rule == 5:  # a leak once all is freed is also a free-list or refcount fault
        assert 5 in broken and not manager.tables
    else:  # rule 5 runs only once every sequence is freed
        assert broken - {5} == {state.rule}
    for name in ("one pool per table", "M = ceil(L / B)"):
        assert invariants.check(manager)[name] == []


def _assertion(method) -> list[str]:
    try:
        method()
    except AssertionError as error:
        return [str(error)]
    return []


def _scheduler_with(preempt):
    from minipaged import scheduler

    class Student(scheduler.Scheduler):
        _preempt = preempt

    return SimpleNamespace(Scheduler=Student)


def _preempt_by_recompute(queue_insert, record_first=True):
    def _preempt(self, group, out):
        from minipaged.events import Preempt
        from minipaged.sequence import Status

        ids = [s.seq_id for s in group.seqs]
        mode = (
            "swap"
            if self.preemption == "swap" and self.block_manager.can_swap_out(ids)
            else ("recompute")
        )
        event = Preempt(group.request_id, tuple(ids), mode)
        if record_first:
            self.block_manager.record(event)
        if mode == "swap":
            out.blocks_to_swap_out += self.block_manager.swap_out(ids)
            group.status, queue = Status.SWAPPED, self.swapped
        else:
            for seq_id in ids:
                self.block_manager.free(seq_id)
            group.status, queue = Status.WAITING, self.waiting
        if not record_first:
            self.block_manager.record(event)
        queue_insert(queue, group)
        out.preempted.append(group)

    return _preempt


@pytest.mark.parametrize(
    ("insert", "words"),
    [
        (lambda queue, group: queue.append(group), "it is now ['z', 'c', 'b']"),
        (lambda queue, group: queue.insert(0, group), "it is now ['b', 'z', 'c']"),
    ],
    ids=["appended-behind-later-arrivals", "put-in-front-of-earlier-arrivals"],
)
def test_a_victim_out_of_arrival_order_is_caught(insert, words):
    scheduler = _scheduler_with(_preempt_by_recompute(insert))
    failed = failures_of(5, ["a_victim_keeps_its_arrival_order"], scheduler=scheduler)
    assert words in failed["a_victim_keeps_its_arrival_order"]


def test_a_preempt_event_recorded_after_its_frees_is_caught():
    scheduler = _scheduler_with(_preempt_by_recompute(_insert_by_arrival, record_first=False))
    names = ["the_preempt_event_comes_first", "a_victim_keeps_its_arrival_order"]
    failed = failures_of(5, names, scheduler=scheduler)
    assert list(failed) == ["the_preempt_event_comes_first"]
    assert "come before the preempt that caused them" in failed["the_preempt_event_comes_first"]


def test_a_running_max_started_at_zero_fails_with_the_cause_named():
    """m = 0 instead of -inf passes every case whose scores reach 0; when all are below -88,
    exp(s - 0) underflows to 0 and the output is 0 / 0."""
    source = inspect.getsource(attention.paged_attention_decode_loop)
    wrong = source.replace('-float("inf")', "0.0")
    assert wrong != source
    namespace = dict(vars(attention))
    exec(compile(wrong, "attention.py", "exec"), namespace)
    student = SimpleNamespace(
        paged_attention_decode_loop=namespace["paged_attention_decode_loop"],
        paged_attention_decode=paged_attention_decode,
    )
    failed = failures(7, attention=student)
    assert list(failed) == ["loop_online_softmax_starts_at_minus_infinity"]
    assert (
        "does the running max m start at 0?"
        in failed["loop_online_softmax_starts_at_minus_infinity"]
    )


def test_reading_past_the_sequence_end_is_named_as_the_cause_of_nan():
    def reads_whole_blocks(query, key_pool, value_pool, block_tables, seq_lens, scale, B):
        full = (seq_lens + B - 1) // B * B  # every slot of the last block, used or not
        return paged_attention_decode(query, key_pool, value_pool, block_tables, full, scale, B)

    student = SimpleNamespace(
        paged_attention_decode_loop=reads_whole_blocks, paged_attention_decode=reads_whole_blocks
    )
    failed = failures(7, attention=student)
    assert "loop_one_block" in failed
    for message in failed.values():
        assert "reads slots past the sequence's end" in message, message
        assert "overflows" not in message


def test_kv_bytes_rounded_up_to_whole_blocks_fails():
    student = SimpleNamespace(**vars(memory))

    class RoundsUp(memory.ModelShape):
        def kv_bytes(self, num_tokens):
            return self.kv_bytes_per_token * memory.num_logical_blocks(num_tokens, 16) * 16

    student.ModelShape = RoundsUp
    failed = failures(1, memory=student)
    assert list(failed) == ["kv_bytes"]
    assert ".kv_bytes(1) gave 2097152, the bytes of ceil(L/16) whole blocks" in failed["kv_bytes"]


class _KeepsEmptyEdges(radix_cache.RadixCache):
    """forget empties an edge but leaves its node in the tree."""

    def forget(self, block):
        node = self._node_of.get(block)
        if node is None:
            return False
        i = node.blocks.index(block)
        for child in list(node.children.values()):
            self._drop(child)
        node.children.clear()
        for gone in node.blocks[i:]:
            del self._node_of[gone]
        del node.blocks[i:], node.chunks[i:]
        return True


class _StaleParents(radix_cache.RadixCache):
    """A split moves the grandchildren under the new tail but leaves their parent pointers."""

    def _split(self, node, k):
        tail = radix_cache.RadixNode(node.chunks[k:], node.blocks[k:], node, node.children)
        for block in tail.blocks:
            self._node_of[block] = tail
        node.chunks, node.blocks = node.chunks[:k], node.blocks[:k]
        node.children = {tail.chunks[0]: tail}


class _ForgetsTheWrongBlock(radix_cache.RadixCache):
    """forget looks up an off-by-one block: list.index raises ValueError."""

    def forget(self, block):
        node = self._node_of.get(block)
        return node is not None and node.blocks.index(block + 1) >= 0


@pytest.mark.parametrize(
    ("cls", "words"),
    [
        (_KeepsEmptyEdges, "is empty: remove an emptied node"),
        (_StaleParents, "has a parent other than the node whose children hold it"),
        (_ForgetsTheWrongBlock, "raised ValueError"),
    ],
    ids=lambda x: getattr(x, "__name__", "")[:20],
)
def test_a_radix_tree_bug_is_shown_as_a_short_program(cls, words):
    module = SimpleNamespace(RadixCache=cls, RadixNode=radix_cache.RadixNode)
    failed = failures_of(12, ["random_operations_match_the_contract"], radix_cache=module)
    message = failed["random_operations_match_the_contract"]
    again = failures_of(12, ["random_operations_match_the_contract"], radix_cache=module)
    assert again["random_operations_match_the_contract"] == message  # shrinking is by count
    assert words in message
    program = split_rule(message)[0].split("RadixCache(block_size=2):\n")[1].splitlines()
    assert 1 <= len(program) <= 6, message
    assert all(line.strip().startswith("cache.") for line in program)


@pytest.mark.slow
@pytest.mark.usefixtures("library_code_allowed")
def test_a_kernel_missing_a_barrier_fails_the_race_check(tmp_path):
    """Without the barrier that ends a round, a fast thread overwrites probs[t] while others
    still read the last round's: the race check names the two lines."""
    import cuda_kernels

    library = Path(cuda_kernels.__file__).parent
    source = (library / "paged_attention.py").read_text()
    barrier = "            cuda.syncthreads()  # all reads of probs and blocks are done"
    assert barrier in source
    (tmp_path / "paged_attention.py").write_text(
        as_written_by_a_student(source.replace(barrier, "            # gone"))
    )
    (tmp_path / "cache_ops.py").write_text(
        as_written_by_a_student((library / "cache_ops.py").read_text())
    )
    result = first_criterion(11, tmp_path, "decode_has_no_shared_memory_race")
    assert result.outcome == FAIL
    assert "no cuda.syncthreads() between them" in result.message
    assert "paged_attention.py, line" in result.message


# -- §2: messages a student can act on ----------------------------------------------------------


def test_a_changed_block_state_is_shown_as_the_fields_that_differ():
    class CountsFirst(BlockManager):
        """Counts the token before finding out there is no block for it."""

        def append_slot(self, seq, token_ids=None):
            self.table(seq).num_tokens += 1
            self.table(seq).num_tokens -= 1 if self.device.num_free else 0
            return super().append_slot(seq, token_ids)

    module = SimpleNamespace(BlockManager=CountsFirst)
    failed = failures_of(4, ["out_of_blocks_changes_nothing"], block_manager=module)
    message = failed["out_of_blocks_changes_nothing"]
    assert message.startswith(
        "append_slot(1) into shared block 1 with no free block for its copy raised "
        "OutOfBlocks as it should, but had already changed the block state "
        "(tables[1].num_tokens: expected 6, got 7). A refusal must come before any change"
    )


def test_preempted_requests_are_named_by_request_id():
    def preempt_twice(self, group, out):  # reports the victim twice
        _preempt_by_recompute(_insert_by_arrival)(self, group, out)
        out.preempted.append(group)

    failed = failures_of(
        5, ["recompute_frees_the_blocks_and_requeues"], scheduler=_scheduler_with(preempt_twice)
    )
    assert split_rule(failed["recompute_frees_the_blocks_and_requeues"])[0] == (
        "out.preempted of the schedule() that found the pool full, by request id: expected "
        "['b'], got ['b', 'b']"
    )


def test_a_fork_that_accepts_an_unknown_parent_says_what_it_did():
    class Lenient(BlockManager):
        def fork(self, parent, child):
            if parent in self.tables:
                return super().fork(parent, child)
            return None

    module = SimpleNamespace(BlockManager=Lenient)
    failed = failures_of(3, ["fork_refuses_bad_sequences"], block_manager=module)
    assert failed["fork_refuses_bad_sequences"].startswith(
        "fork(7, 8) when seq 7 does not exist: expected KeyError, but it returned without raising"
    )


def test_hypothesis_failing_while_shrinking_reports_the_original_failure(monkeypatch):
    """A student's manager that behaves differently on a rerun makes hypothesis end its
    shrinking in FlakyStrategyDefinition; the student sees their own bug, not that."""
    from hypothesis.errors import FlakyStrategyDefinition

    from minipaged.grader import properties

    real_run = properties._run

    def flaky_when_shrinking(cls, max_examples, shrink):
        if shrink:
            raise FlakyStrategyDefinition("Inconsistent data generation!")
        real_run(cls, max_examples, shrink)

    monkeypatch.setattr(properties, "_run", flaky_when_shrinking)
    with pytest.raises(AssertionError, match="leak: every sequence is freed") as caught:
        run_programs(BlockManagerMachine, bug_zoo.LeakOnFree)
    assert "after this program:" in str(caught.value)
    assert "Flaky" not in str(caught.value)


MISSING_COW = (
    r"^copy-on-write broken \(§5\): slot \d+ is in device block \d+ with R=\d+, not 1\n"
    r"after this program:\n  MissingCow\(\d+, \d+, B=\d\)\n"
)
"""How the reference properties report MissingCow: the rule it breaks, then the program."""


def test_shrinking_is_bounded_by_a_count_so_reports_do_not_depend_on_load(monkeypatch):
    """Two runs give the same shrunk program, shorter than the first failing one; a budget of
    one program still reports MissingCow's failure with a program (the first failing one:
    shrinking ran nothing shorter), not an error of the budget's."""
    from minipaged.grader import shrinking

    def report(shrink: bool = True) -> list[str]:
        with pytest.raises(AssertionError, match=MISSING_COW) as caught:
            run_programs(BlockManagerMachine, bug_zoo.MissingCow, shrink=shrink)
        assert type(caught.value) is AssertionError  # a property's assert, not the grader's
        return str(caught.value).splitlines()

    shrunk, unshrunk = report(), report(shrink=False)
    assert report() == shrunk and len(shrunk) < len(unshrunk)
    assert shrunk[-1].startswith("  append_slot(")  # the write into a shared block
    monkeypatch.setattr(shrinking, "SHRINK_RUNS", 1)
    assert report() == unshrunk


class _Shrunk:
    """A stand-in state machine for ``shrinking.shrink``: its ``clock`` counts only what the
    student's time counts (``CriterionClock``, here without a worker: the checks' own CPU time
    is credited, their sleep is not), and ``last_program`` is the last one run."""

    budget = None
    last_program = ("the program that broke it",)

    @staticmethod
    def clock(seconds):
        from minipaged.grader.criterion_clock import CriterionClock

        return CriterionClock(seconds)


def test_shrinking_time_is_the_students_not_the_graders_nor_the_machines(monkeypatch):
    """Hypothesis shrinking on the grader's own CPU for 1.5 times the shrinking's seconds is not
    cut short (on a loaded machine a wall-clock budget was); programs that sleep past it are,
    and the failure first seen is reported."""
    import time

    from minipaged.grader import shrinking

    monkeypatch.setattr(shrinking, "SHRINK_SECONDS", 0.2)
    first = AssertionError("first")

    def grader_works():
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            _Shrunk.budget.spend()  # a program starts
            busy = time.thread_time() + 0.01
            while time.thread_time() < busy:
                pass
        raise AssertionError("shrunk")

    found, _ = shrinking.shrink(_Shrunk, grader_works, first, ["long"])
    assert str(found) == "shrunk", "the grader's own work was charged to the shrinking's time"

    def sleeps():
        for _ in range(100):
            _Shrunk.budget.spend()
            time.sleep(0.01)
        raise AssertionError("never reached")

    assert shrinking.shrink(_Shrunk, sleeps, first, ["long"]) == (first, ["long"])


@pytest.mark.slow
@pytest.mark.usefixtures("library_code_allowed")
def test_kernel_mutants_fail_the_criterion_for_their_bug(tmp_path):
    """Two CUDA bugs graded in one simulator process each: a block copy with one element per
    thread (no loop), and a tree reduction that drops its last barrier, which the simulator's
    sums do not show but the race check does."""
    import cuda_kernels

    library = Path(cuda_kernels.__file__).parent
    copy = tmp_path / "copy"
    copy.mkdir()
    source = (library / "cache_ops.py").read_text()
    loop = (
        "    for e in range(cuda.threadIdx.x, num_kv_heads * block_size * head_dim, "
        "cuda.blockDim.x):"
    )
    assert loop in source
    one = "    for e in range(cuda.threadIdx.x, min(cuda.threadIdx.x + 1, key_pool[0].size)):"
    (copy / "cache_ops.py").write_text(as_written_by_a_student(source.replace(loop, one)))
    failed = {r.name: r.message for r in grade(8, copy).results if r.outcome == FAIL}
    assert list(failed) == ["blocks_larger_than_the_threads"]
    assert "element 32 of the block's 256" in failed["blocks_larger_than_the_threads"]

    tree = tmp_path / "tree"
    tree.mkdir()
    source = (library / "block_reduce.py").read_text()
    barrier = "        cuda.syncthreads()  # every thread has read scratch[0] before the next"
    assert barrier in source
    (tree / "block_reduce.py").write_text(
        as_written_by_a_student(source.replace(barrier, "        # gone:"))
    )
    failed = {r.name: r.message for r in grade(10, tree).results if r.outcome == FAIL}
    assert "dot_product" not in failed  # one reduction alone is right; the race is the next one
    assert "no cuda.syncthreads() between them" in failed["no_shared_memory_race"]


def test_the_course_climbs_fork_before_copy_on_write_and_invariants_after_preemption():
    order = [ex.folder.split("-", 1)[1] for ex in EXERCISES.values()]
    assert order.index("fork") < order.index("copy-on-write")
    assert order.index("invariants") == order.index("preemption") + 1
    kernel_steps = ["copy-blocks", "reshape-and-cache", "block-reduce", "decode-kernel"]
    start = order.index(kernel_steps[0])
    assert order[start : start + 4] == kernel_steps
    assert list(EXERCISES) == list(range(1, len(EXERCISES) + 1))


def test_init_copies_a_starter_out_of_the_package_and_it_grades(tmp_path, capsys):
    target = tmp_path / "ex03"
    assert cli.main(["exercises", "init", "3", str(target)]) == 0
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "block_manager.py"]
    assert f"inside {target} run `minipaged exercises check 3`" in capsys.readouterr().out
    assert cli.main(["exercises", "check", "3", "--path", str(target)]) == 1
    assert cli.main(["exercises", "init", "3", str(target)]) == 2  # never overwrites work
    assert "already holds README.md, block_manager.py" in capsys.readouterr().err


def test_the_packaged_starters_are_every_exercises_files():
    """pyproject's package data ships every README and starter file, through the package's
    link to tutorials/, so init works from an installed package."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from fnmatch import fnmatch

    import minipaged

    project = tomllib.loads((Path(minipaged.__file__).parents[1] / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["minipaged"]
    grader = Path(minipaged.__file__).parent / "grader"
    assert (grader / "tutorials").resolve() == TUTORIALS
    for ex in EXERCISES.values():
        for name in ("README.md",) + tuple(f"starter/{f}" for f in ex.files):
            packaged = f"grader/tutorials/{ex.folder}/{name}"
            assert any(fnmatch(packaged, p) for p in patterns), packaged


def test_a_report_that_cannot_be_written_is_refused_before_grading(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "report.json"  # its folder is a file: cannot be written
    assert cli.main(["exercises", "check", "1", "--solution", "--json", str(target)]) == 2
    out, err = capsys.readouterr()
    assert "PASS" not in out and f"its folder {target.parent} is a file" in err


@pytest.mark.parametrize("word", ["inf", "nan", "-inf", "0", "-1", "x", "", "2.5", "1e400"])
def test_a_limit_is_real_s_number_or_inf_for_no_limit(word):
    """``exercises check``'s ``limit`` type is ``arguments.real`` with ``inf`` taken: the same
    number as ``real`` reads (or refuses) for every word but ``inf`` (and what overflows to
    it), which it takes, and every refusal says ``inf`` may be given."""
    import argparse
    import math

    from minipaged.arguments import real
    from minipaged.grader.command import limit

    def read(parse):
        try:
            return parse(word)
        except argparse.ArgumentTypeError as refused:
            return str(refused)

    plain, either = read(real(0, above=True)), read(limit)
    if either == math.inf:
        assert isinstance(plain, str) and "finite" in plain, plain
    elif isinstance(plain, float):
        assert either == plain
    else:
        assert either.endswith(plain.partition(", got")[2]) and "or inf for no limit" in either
