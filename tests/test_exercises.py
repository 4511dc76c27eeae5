"""The classroom exercises and their grader (``minipaged.grader``, ``tutorials/``).

Every check must be able to fail and to pass: each exercise's criteria all pass on its
solution (the library's own modules) and all fail on its untouched starter files; a few
realistic bugs fail the criteria written for them; and the reference properties catch every
member of the bug zoo.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

from minipaged import cli, memory
from minipaged.attention import paged_attention_decode
from minipaged.block_manager import BlockManager
from minipaged.grader import bug_zoo, grading
from minipaged.grader.exercises import EXERCISES, TUTORIALS, block_manager_class
from minipaged.grader.grading import grade, run_criteria
from minipaged.grader.properties import BlockManagerMachine, BlockManagerProgram, run_programs
from minipaged.grader.report import BLOCKED, FAIL, PASS
from minipaged.grader.student import Student

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
    for section in ("**Goal.**", "## Background", "## Tasks", "## Hints"):
        assert section in readme, f"{ex.folder}/README.md lacks {section}"
    assert f"minipaged exercises check {number}" in readme
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


@pytest.mark.slow
def test_kernel_exercise_passes_in_the_simulator_and_its_starter_fails():
    """Exercise 07 runs its checks in a simulator process (and blocks the GPU one here)."""
    gpu = torch.cuda.is_available()
    solution = outcomes(grade(7, solution=True))
    starter = outcomes(grade(7))
    assert solution.pop("decode_on_a_gpu") == (PASS if gpu else BLOCKED)
    assert starter.pop("decode_on_a_gpu") == (FAIL if gpu else BLOCKED)
    assert set(solution.values()) == {PASS}
    assert set(starter.values()) == {FAIL}


@pytest.mark.parametrize("member", bug_zoo.BUG_ZOO, ids=lambda m: m.__name__)
def test_reference_properties_catch_each_bug_zoo_member(member):
    with pytest.raises(AssertionError):
        run_programs(BlockManagerMachine, member, max_examples=100, shrink=False)


def test_properties_that_check_nothing_raise_no_false_alarm_and_catch_no_bug():
    failed = failures(8, properties=SimpleNamespace(BlockManagerMachine=BlockManagerProgram))
    assert "no_false_alarm" not in failed
    assert sorted(failed) == sorted(f"catches_{m.__name__}" for m in bug_zoo.BUG_ZOO)
    assert "broke none of your properties" in failed["catches_MissingCow"]


@pytest.mark.parametrize(
    ("exercise", "member", "criterion", "words"),
    [
        (3, bug_zoo.MissingCow, "shared_partly_filled_block_is_copied", "no copy-on-write"),
        (3, bug_zoo.LostCowCopy, "shared_partly_filled_block_is_copied", "returned cow=None"),
        (4, bug_zoo.DoubleFree, "fork_raises_each_refcount_by_one", "expected [2, 2], got [1, 1]"),
        (4, bug_zoo.LeakOnFree, "free_releases_only_unshared_blocks", "got [1, 1, 1]"),
        (5, bug_zoo.StaleTableAfterSwap, "swap_in_restores_the_contents", "seq 1's tokens"),
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
    assert "random_programs_keep_every_invariant" in failed


def test_an_off_by_one_block_count_fails_with_expected_and_got():
    student = SimpleNamespace(**vars(memory))
    student.num_logical_blocks = lambda num_tokens, block_size: num_tokens // block_size + 1
    failed = failures(1, memory=student)
    assert failed == {"num_logical_blocks": "M for L=0 tokens, B=16: expected 0, got 1"}


def test_softmax_without_the_running_max_fails_only_the_stability_criterion():
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
    failed = failures(6, attention=student)
    assert list(failed) == ["loop_online_softmax_is_stable"]
    assert "subtract the running max m" in failed["loop_online_softmax_is_stable"]


def test_a_file_that_does_not_import_fails_every_criterion_with_the_line(tmp_path):
    (tmp_path / "memory.py").write_text("def logical_block(t, block_size)\n    return 0\n")
    report = grade(1, tmp_path)
    assert {r.outcome for r in report.results} == {FAIL}
    assert report.results[0].message.startswith("could not import memory.py, line 1: SyntaxError")


def test_a_check_that_runs_too_long_is_stopped(tmp_path, monkeypatch):
    source = (TUTORIALS / EXERCISES[1].folder / "starter" / "memory.py").read_text()
    hang = source.replace(
        'raise NotImplementedError("exercise 01: return j = floor(t / B)")', "while True: pass"
    )
    (tmp_path / "memory.py").write_text(hang)
    monkeypatch.setattr(grading, "CHECK_SECONDS", 0.5)
    result = grade(1, tmp_path).results[0]
    assert (result.outcome, result.message[:25]) == (FAIL, "still running after 0.5 s")


@pytest.mark.parametrize("number", [2, 3, 4, 5, 9])
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
    with pytest.raises(ValueError, match="exercises 2, 3, 4, 5 and 9"):
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
    assert cli.main(["exercises", "check", "3", "--json", str(target)]) == 1
    out = capsys.readouterr().out
    assert "FAIL     R[p] = 1 and o > 0: the token is written in place" in out
    assert "not written yet: exercise 03: reserve the slot" in out
    assert json.loads(target.read_text())["counts"] == {"pass": 0, "fail": 7, "blocked": 0}


def test_cli_check_of_a_folder_without_the_files_says_what_to_do(tmp_path, capsys):
    assert cli.main(["exercises", "check", "3", "--path", str(tmp_path)]) == 2
    assert "has no block_manager.py" in capsys.readouterr().err


def test_cli_check_of_an_unknown_exercise_is_refused(capsys):
    assert cli.main(["exercises", "check", "12"]) == 2
    assert "no exercise 12" in capsys.readouterr().err


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
