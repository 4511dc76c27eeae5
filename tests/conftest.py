"""Shared test configuration.

Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE``:

- ``dev`` (default): quick feedback while editing.
- ``ci``: derandomized (the same examples every run); ``make test`` selects it.
- ``thorough``: many examples, for a long run before a release: 2,000 programs of up to 40
  steps for each block-manager state machine (80,000 random steps, with and without prefix
  caching; at least 10,000 is the goal) and 500 random engine workloads.

No profile has a deadline: no test here is about speed (benchmarks measure it), and hypothesis's
200 ms per example failed correct code whenever the machine was busy (``test_model_runner``
under load, its first example paying torch's warm-up). ``tests/test_suite_under_load.py`` keeps
it so.
"""

import gc
import math
import os
import re

# One torch thread in every process the tests start too (the site's build, grading children,
# the command line): their models are tiny, and on two cores shared by two workers a second
# thread mostly waits for a core; the site's build ran its pages' examples three times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from hypothesis import HealthCheck, settings

# One thread: the models in tests are tiny, and two cores are shared with other work.
torch.set_num_threads(1)

UNTIMED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Every profile's parent: no deadline, and no failure when drawing examples is slow, which
on a busy machine it is (the module's docstring says why)."""
settings.register_profile("dev", UNTIMED, max_examples=50)
settings.register_profile(
    "ci",
    UNTIMED,
    max_examples=100,
    derandomize=True,
    print_blob=True,
)
settings.register_profile("thorough", UNTIMED, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# `make test` runs whole files on pytest-xdist workers (--dist loadfile), handing the next file
# in collection order to whichever worker is free. The longest files go first, so that no
# worker is left alone with a long one at the end (longest-processing-time-first); the files
# not named here take under 10 s each and fill the gaps. A stale list only costs balance.
# Measured with the Makefile's command on two idle cores (each file's seconds summed from
# pytest's --junitxml: 1,408 s in all, 735 s of wall time), then less the browser visits' cut
# (the search index built only where a page searches). test_docs.py comes right after
# test_site_browser.py, which builds the site (its pages' examples run once,
# docs/hooks/prose_values.py): test_docs.py reads the same runs, and by the time a worker
# reaches test_site_from_disk.py the site is built and it never waits for it.
LONGEST_FIRST = (
    "test_exercises.py",  # 156 s
    "test_site_browser.py",  # 154 s before the cut; its fixture builds the site
    "test_docs.py",  # 41 s
    "test_grader_hostile.py",  # 99 s
    "test_grader_integrity.py",  # 94 s
    "test_tui_exercise.py",  # 54 s
    "test_grader_mutants.py",  # 52 s
    "test_cpu_kernels.py",  # 46 s
    "test_student_run.py",  # 38 s
    "test_trace_corpus.py",  # 38 s
    "test_grader_student_answers.py",  # 34 s
    "test_tui_serve.py",  # 32 s
    "test_tui_projection.py",  # 24 s
    "test_tui.py",  # 24 s
    "test_tui_story.py",  # 23 s
    "test_grader_gpu_path.py",  # 22 s
    "test_tui_attention.py",  # 21 s
    "test_ptx.py",  # 20 s
    "test_criterion_clock.py",  # 20 s
    "test_grader_student_bugs_attention.py",  # 18 s
    "test_site_from_disk.py",  # 18 s
    "test_grader_similarity.py",  # 18 s
    "test_handout.py",  # 18 s
    "test_gradebook.py",  # 17 s
    "test_bench_kernels.py",  # 16 s
    "test_tui_snapshots.py",  # 15 s
    "test_grader_child_imports.py",  # 14 s
    "test_peer_tui_keys.py",  # 14 s
    "test_tui_layout.py",  # 12 s
    "test_compile_cache.py",  # 12 s
    "test_tui_cli.py",  # 12 s
    "test_bench.py",  # 12 s
    "test_grader_dropped.py",  # 11 s
    "test_grader_escape.py",  # 11 s
    "test_block_manager_stateful.py",  # 11 s
    "test_output_failure_corpus.py",  # 10 s
    # The CUDA simulator's run (a process of its own, Makefile), whose files skip at once in the
    # run above: its tests go out one by one (--dist load), so the peer file's long cases (an
    # engine run, v2's refusals: 6 s each) go first, and test_cuda_kernels.py's short tests, at
    # its end, fill the gap while the other worker finishes its last long one.
    "test_peer_cuda_simulator.py",
    "test_cuda_kernels.py",
)


EMPTY_SET = "got empty parameter set"
"""The reason pytest gives the skip it puts on a parametrize given no cases."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # xdist's workers must collect the same ids: a parameter shown by an address (the repr of
    # an object()) differs between them, and the whole run then stops before any test runs.
    moving = [item.nodeid for item in items if re.search(r" at 0x[0-9a-f]+", item.nodeid)]
    if moving:
        raise pytest.UsageError(
            f"{len(moving)} test ids hold a memory address, e.g. {moving[0]}: give the "
            "parameter a stable repr or an id (parametrize's ids=)"
        )
    # A parametrize over nothing (a glob of a folder that moved, a filter that keeps nothing)
    # is one test that pytest skips, and a run that checks nothing there passes.
    empty = [
        item.nodeid
        for item in items
        if (skip := item.get_closest_marker("skip"))
        and skip.kwargs.get("reason", "").startswith(EMPTY_SET)
    ]
    if empty:
        raise pytest.UsageError(
            f"{len(empty)} parametrized tests have no cases, e.g. {empty[0]}: the list they "
            "are given is empty; give it its cases, or remove the test"
        )
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


def pytest_sessionfinish() -> None:
    """Collect the session's garbage while the worker still counts as running, then freeze
    what is left. After a worker reports its session finished, xdist's controller ends it and
    execnet waits 5 s for it before interrupting it with SIGINT; in those seconds pytest's own
    cleanup runs gc.collect() five times (to report exceptions raised in finalizers), and over
    a worker's heap (torch, Numba, Textual, hypothesis: 0.7 million objects, 2 s a collection
    under load) that took longer: the run ended with a KeyboardInterrupt in hypothesis's gc
    callback. Collected here until a pass finds nothing (at most pytest's five passes), with
    the same unraisable-exception hook in place, so nothing is reported less; pytest's passes
    then only walk what was made since the freeze."""
    for _ in range(5):
        if not gc.collect():
            break
    gc.freeze()


@pytest.fixture(scope="session")
def transformers():
    """transformers, offline (its import costs seconds: import it once per session)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    return pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def llama_config(transformers):
    """A factory of small random-model configs for transformers' Llama: 2 layers, hidden 64,
    4 query heads over 2 KV heads (grouped-query attention); keywords override any field."""

    def make(**overrides):
        fields = dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            rms_norm_eps=1e-5,
            rope_theta=10000.0,
        )
        return transformers.LlamaConfig(**(fields | overrides))

    return make


@pytest.fixture(scope="session")
def hf_llama(transformers, llama_config, tmp_path_factory):
    """A random transformers Llama saved as a Hugging Face directory: ``(hf_model, path)``.
    lm_head is scaled up so logits are peaky and float reordering between two correct
    implementations cannot flip an argmax."""
    torch.manual_seed(0)
    config = llama_config(
        vocab_size=128,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        hf.lm_head.weight.mul_(20.0)
    path = tmp_path_factory.mktemp("hf_llama")
    hf.save_pretrained(path)
    return hf, path


@pytest.fixture
def library_code_allowed(monkeypatch):
    """For a test that hands in the library's own code as a student's
    (``test_exercises.as_written_by_a_student``) to try the checks on it: the grader's shape
    comparison, which refuses that code as the library's solution in disguise, is off."""
    from minipaged.grader import similarity

    monkeypatch.setattr(similarity, "THRESHOLD", math.inf)
