"""Speculative settings are checked where they are given, and speculation costs no more than
the pool can use: every bad field of ``SpeculativeConfig`` fails at construction in one line
(the command line exits 2, as for any bad flag or missing path), and a wide tree is capped by
the pool's room before anything is drafted, not drafted whole and cut afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minipaged import LLM, cli, invariants
from minipaged.engine import LLMEngine
from minipaged.sampling import SamplingParams
from minipaged.speculative import SpeculativeConfig
from minipaged.speculative.config import CAPS, MAX_TREE_NODES, speculative_config
from minipaged.speculative.drafters import NgramDrafter
from minipaged.speculative.tree import grow_tree
from tests.test_speculative import small_llama

COUNTS = ("num_speculative_tokens", "branching", "max_tree_nodes", "ngram_max", "ngram_min")
NOT_COUNTS = (0, -1, True, 2.0, "4", None, [4], float("nan"))


def one_line(error: BaseException) -> bool:
    return len(str(error).strip().splitlines()) == 1


@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("value", NOT_COUNTS, ids=repr)
def test_every_count_that_is_not_a_positive_integer_is_refused_naming_it(name, value):
    with pytest.raises(ValueError, match=name) as refused:
        SpeculativeConfig(**{name: value})
    assert one_line(refused.value) and repr(value) in str(refused.value)


def test_a_tree_larger_than_a_verify_pass_can_take_is_refused_at_construction():
    SpeculativeConfig(max_tree_nodes=MAX_TREE_NODES)
    with pytest.raises(ValueError, match=f"at most {MAX_TREE_NODES}"):
        SpeculativeConfig(max_tree_nodes=MAX_TREE_NODES + 1)


@pytest.mark.parametrize("name", ["num_speculative_tokens", "branching"])
@pytest.mark.parametrize("value", [MAX_TREE_NODES + 1, 10**6, 10**100])
def test_a_tree_deeper_or_wider_than_any_tree_is_refused_naming_the_cap(name, value):
    """No tree holds more than MAX_TREE_NODES guesses, so none is deeper or wider: a depth of
    10**6 drafted no more than one of 1,024, and was accepted as if it did."""
    assert getattr(SpeculativeConfig(**{name: MAX_TREE_NODES}), name) == MAX_TREE_NODES
    with pytest.raises(ValueError, match=f"{name} must be at most {MAX_TREE_NODES}, the most"):
        SpeculativeConfig(**{name: value})


@pytest.mark.parametrize("name", CAPS)
@pytest.mark.parametrize("how", ["SpeculativeConfig", "--speculative-config"])
def test_every_size_past_its_cap_is_refused_naming_the_cap_and_at_the_cap_is_taken(name, how):
    """One rule for every speculative size: at most its cap (``CAPS``), refused past it in
    one line naming the cap and the way out, through the API and the command line's JSON
    alike; ngram_max of 10**6 used to be taken and made every step's lookup crawl."""
    cap = CAPS[name][0]
    make = SpeculativeConfig if how == "SpeculativeConfig" else speculative_config_from_json
    at_cap = {name: cap} | ({"ngram_max": cap} if name == "ngram_min" else {})
    assert getattr(make(**at_cap), name) == cap
    for value in (cap + 1, 10**100):
        with pytest.raises(ValueError, match=f"{name} must be at most {cap}, .*lower it") as no:
            make(**at_cap | {name: value})
        assert one_line(no.value) and str(value) in str(no.value)


def test_every_size_of_the_config_has_a_cap():
    import dataclasses

    sizes = {f.name for f in dataclasses.fields(SpeculativeConfig) if f.type == "int"}
    assert sizes == set(CAPS) == set(COUNTS)


def speculative_config_from_json(**fields) -> SpeculativeConfig:
    import json

    return speculative_config(json.dumps({"method": "ngram", **fields}))


@pytest.mark.parametrize("method", [5, None, ["ngram"], "NGRAM", "medusa", ""], ids=repr)
def test_an_unknown_method_is_refused(method):
    with pytest.raises(ValueError, match="method must be one of") as refused:
        SpeculativeConfig(method=method)
    assert one_line(refused.value)


@pytest.mark.parametrize(
    ("draft_model", "message"),
    [
        (5, "draft_model must be a model name"),
        (5.0, "draft_model must be a model name"),
        (["tiny-draft"], "draft_model must be a model name"),
        (torch.zeros(2), "draft_model must be a model name"),
        ("", "got an empty string"),
        ("   ", "got an empty string"),
    ],
    ids=repr,
)
def test_a_draft_model_of_the_wrong_kind_is_refused_at_construction(draft_model, message):
    with pytest.raises(ValueError, match=message) as refused:
        SpeculativeConfig(method="draft", draft_model=draft_model)
    assert one_line(refused.value)


@pytest.mark.parametrize("kind", [str, Path])
def test_a_draft_model_directory_that_is_not_there_is_refused_at_construction(tmp_path, kind):
    missing = kind(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError, match="no such directory") as refused:
        SpeculativeConfig(method="draft", draft_model=missing)
    assert one_line(refused.value) and "no-such-model" in str(refused.value)


def test_a_loaded_llama_and_an_embedded_name_are_draft_models():
    assert SpeculativeConfig(method="draft", draft_model="tiny-draft").draft_model == "tiny-draft"
    draft = small_llama(16, seed=0)
    assert SpeculativeConfig(method="draft", draft_model=draft).draft_model is draft


def test_unknown_keys_of_any_type_are_named_not_a_type_error():
    with pytest.raises(ValueError, match="unknown speculative setting"):
        speculative_config({1: 2, "depth": 3})


@pytest.mark.parametrize(
    "value",
    [
        '{"method": "draft", "draft_model": 5}',
        '{"method": "draft", "draft_model": ""}',
        '{"method": "draft", "draft_model": ["tiny-draft"]}',
        '{"method": "draft", "draft_model": "no/such/model/dir"}',
        '{"method": 5}',
        '{"method": "ngram", "branching": "wide"}',
        '{"method": "ngram", "max_tree_nodes": 100000}',
        '{"method": "ngram", "num_speculative_tokens": 1000000}',
        '{"method": "ngram", "branching": 1025}',
        '{"method": "ngram", "num_speculative_tokens": 1.5}',
        "[1, 2]",
        "{",
    ],
)
def test_the_cli_refuses_each_bad_setting_in_one_line_with_status_2(capsys, value):
    args = ["generate", "--prompt", "Hi", "--max-tokens", "2", "--num-gpu-blocks", "64"]
    assert cli.main([*args, "--speculative-config", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minipaged generate: ") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and "bug" not in err


class Counting:
    """A drafter that guesses ``k`` distinct tokens for every context, recording what it was
    asked: how many contexts, and how many guesses each."""

    def __init__(self, room: callable = lambda: None) -> None:
        self.asked: list[tuple[int, int, int | None]] = []
        self.room = room

    def propose(self, contexts, k, params, generator):
        self.asked.append((len(contexts), k, self.room()))
        return [[(r % 16, None) for r in range(k)] for _ in contexts]


def test_grow_tree_asks_the_drafter_only_for_what_the_cap_can_keep():
    drafter = Counting()
    greedy = SamplingParams(temperature=0)
    tree = grow_tree(drafter, [1, 2, 3], 4, 32, 6, greedy, torch.Generator())
    assert len(tree) - 1 == 6
    assert drafter.asked == [(1, 6, None)], "one context, six guesses: not 32, then 32 x 32"


def test_grow_tree_extends_no_more_frontier_nodes_than_the_room_left():
    drafter = Counting()
    greedy = SamplingParams(temperature=0)
    tree = grow_tree(drafter, [1, 2, 3], 4, 4, 10, greedy, torch.Generator())
    assert len(tree) - 1 == 10
    # depth 1: 4 guesses (room 6 left); depth 2: 4 frontier nodes, at most 4 guesses each
    assert drafter.asked == [(1, 4, None), (4, 4, None)]


@pytest.mark.parametrize("num_gpu_blocks", [12, 16, 40])
def test_a_wide_speculative_tree_is_capped_by_the_pools_room_before_drafting(num_gpu_blocks):
    """Branching 32 and depth 4 would be 1,082,400 guesses; each guess holds one block while
    the step runs, so the drafter is never asked for more contexts or guesses than the pool
    has free blocks at that moment, and the run ends with every block back."""
    model = small_llama(16, seed=3)
    config = SpeculativeConfig(num_speculative_tokens=4, branching=32, max_tree_nodes=1024)
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=num_gpu_blocks, speculative=config)
    bm = engine.block_manager
    drafter = Counting(lambda: bm.device.num_free - bm.watermark_blocks)
    engine.speculator.drafter = drafter
    engine.add_request({"prompt_token_ids": [1, 2, 3, 4, 5]}, SamplingParams(max_tokens=8))
    sizes = []
    while engine.has_unfinished():
        step = engine.step()
        invariants.assert_holds(step.state)
        sizes += [e.num_nodes for e in step.events if e.kind == "spec-propose"]
    assert drafter.asked, "nothing was drafted"
    for contexts, k, room in drafter.asked:
        assert contexts <= room and k <= room, (contexts, k, room)
    assert max(sizes) <= num_gpu_blocks
    assert bm.device.num_free == bm.device.num_blocks


def test_ngram_drafting_of_a_wide_tree_is_bounded_by_the_cap():
    drafter = NgramDrafter(3, 1)
    context = list(range(50)) * 4
    greedy = SamplingParams(temperature=0)
    tree = grow_tree(drafter, context, 4, 32, 5, greedy, torch.Generator())
    assert len(tree) - 1 <= 5


@pytest.mark.parametrize(("max_tokens", "context"), [(1_000_000, 24), (3, 2048), (5, 2048)])
def test_no_tree_drafts_past_max_tokens_or_the_models_context(max_tokens, context):
    """A depth of 1,024 (the deepest any tree reaches), or of the context less one, is capped
    by what the request may still
    write: the tokens left to max_tokens and to the context's end (one of them kept for the
    bonus token), so no guess is drafted that could never be kept; the output stops where a
    plain run would."""
    from dataclasses import replace

    model = small_llama(16, seed=5)
    model.config = replace(model.config, max_position_embeddings=context)
    depth = min(1024, context - 1)  # the deepest the context allows (check_speculation_fits)
    config = SpeculativeConfig(num_speculative_tokens=depth, branching=2, max_tree_nodes=64)
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=256, speculative=config)
    prompt = list(range(1, 12))
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    engine.add_request({"prompt_token_ids": prompt}, params)
    written, depths = 0, []
    while engine.has_unfinished():
        step = engine.step()
        for event in step.events:
            if event.kind == "spec-propose":
                room = min(max_tokens - written, context - len(prompt) - written)
                depths.append((event.depth, room))
        lengths = [len(v.token_ids) - len(prompt) for v in step.sequences.values()]
        lengths += [len(out.outputs[0].token_ids) for out in step.finished]
        written = max([written, *lengths])
    assert depths and all(depth <= room - 1 for depth, room in depths), depths
    assert written == min(max_tokens, context - len(prompt))


def no_weights_load(monkeypatch):
    """Make loading any weights fail the test: the refusals below come from config.json."""

    def loaded(*args, **kwargs):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr("minipaged.llm.load_model", loaded)
    monkeypatch.setattr("minipaged.speculative.speculator.load_model", loaded)


@pytest.mark.parametrize("depth", [512, 513, 1024])
def test_a_draft_as_deep_as_the_context_is_refused_before_any_weights_load(monkeypatch, depth):
    """The tiny model's context is 512 tokens: a depth of 512 or more could never be drafted
    (one prompt token leaves 511 to write), and was cut every step without a word."""
    no_weights_load(monkeypatch)
    speculative = {"method": "ngram", "num_speculative_tokens": depth}
    with pytest.raises(
        ValueError,
        match=f"={depth:,} drafts as deep as the model's context of 512 tokens.*lower it below 512",
    ) as refused:
        LLM("tiny", speculative=speculative)
    assert one_line(refused.value)


def test_a_draft_one_shorter_than_the_context_is_taken():
    assert LLM("tiny", speculative={"method": "ngram", "num_speculative_tokens": 511}).engine


def test_an_engine_built_on_a_model_of_a_shorter_context_refuses_the_depth():
    from dataclasses import replace

    model = small_llama(16, seed=5)
    model.config = replace(model.config, max_position_embeddings=8)
    with pytest.raises(ValueError, match="=8 drafts as deep as the model's context of 8"):
        LLMEngine(model, speculative=SpeculativeConfig(num_speculative_tokens=8))


def test_a_draft_model_of_another_vocabulary_is_refused_from_its_config(tmp_path, monkeypatch):
    """Its config.json says so: neither the target's weights nor the draft's load first."""
    import json
    import shutil

    from minipaged.models import model_directory

    draft = tmp_path / "draft"
    shutil.copytree(model_directory("tiny-draft"), draft)
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(config | {"vocab_size": 4096}))
    no_weights_load(monkeypatch)
    speculative = {"method": "draft", "draft_model": str(draft)}
    with pytest.raises(
        ValueError, match="draft model's vocabulary has 4,096 tokens but the target's has 2,048"
    ):
        LLM("tiny", speculative=speculative)


def test_a_loaded_draft_model_of_another_vocabulary_is_refused_by_the_engine():
    target, draft = small_llama(16, seed=5), small_llama(32, seed=6)
    speculative = SpeculativeConfig("draft", draft_model=draft)
    with pytest.raises(ValueError, match="has 32 tokens but the target's has 16"):
        LLMEngine(target, speculative=speculative)


def test_the_command_line_refuses_a_draft_past_the_context_in_one_line(capsys):
    flag = '{"method": "ngram", "num_speculative_tokens": 600}'
    status = cli.main(["generate", "--prompt", "Emma", "--speculative-config", flag])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "context of 512" in err
