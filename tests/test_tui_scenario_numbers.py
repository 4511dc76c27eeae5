"""Every number a TUI scenario's title and story state comes from the scenario itself: its
settings, its requests (how many, their samples, beams and lengths, their prompts in tokens)
or, for chunked prefill, the budget's arithmetic. The story is what a student reads beside the
run (the picker, the lecture mode, the docs' screenshots): "a long one (80 tokens)" typed by
hand stays 80 after the prompt changes, and the run then contradicts its own caption.

Step numbers ("step 2: copy-on-write") and the source text's sections (§5) are positions, not
quantities, and are left to the tests that replay the runs (test_tui_story.py)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from minipaged.models import EMBEDDED_MODELS
from minipaged.tokenizer import Tokenizer
from tui.scenarios import SCENARIOS, Scenario

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
# A quantity in digits or in words; not a step's number, a section (§5) or part of a name.
STATED = re.compile(
    rf"(?<![§\w.])(?<!step )(?<!Step )(\d+)(?![\w.]\d)|\b({'|'.join(WORDS[2:])})\b", re.I
)


def stated(text: str) -> set[int]:
    return {
        int(digits) if digits else WORDS.index(word.lower())
        for digits, word in STATED.findall(text)
    }


def settings(value) -> set[int]:
    """Every whole number among a config's fields, those of the configs it holds included."""
    fields = dataclasses.asdict(value).values() if dataclasses.is_dataclass(value) else [value]
    found = set()
    for field in fields:
        if isinstance(field, dict):
            found |= {v for v in field.values() if type(v) is int}
        elif type(field) is int:
            found.add(field)
    return found


def made_by(scenario: Scenario, tokenizer: Tokenizer) -> set[int]:
    """The numbers ``scenario`` makes: its settings, its requests' (and how many share their
    first block, an opening a prefix cache can share) and, with a token budget,
    what the budget leaves: the first chunk of the prompt that arrives with the short ones,
    the chunk each later step gives it beside the running sequences, and how many such steps
    the rest takes."""
    prompts = [tokenizer.encode(request.prompt) for request in scenario.requests]
    lengths = [len(prompt) for prompt in prompts]
    made = settings(scenario.config) | settings(scenario.config.speculative) | set(lengths)
    openings = [tuple(prompt[: scenario.config.block_size]) for prompt in prompts]
    made |= {len(lengths), sum(lengths), max(map(openings.count, openings))}
    for request in scenario.requests:
        made |= {request.params.n, request.params.max_tokens, request.params.beam_width}
    budget = scenario.config.max_num_batched_tokens
    if scenario.config.enable_chunked_prefill and budget:
        *short, long = lengths
        first, chunk = budget - sum(short), budget - len(short)
        made |= {first, chunk, len(short), math.ceil((long - first) / chunk)}
    return made


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(EMBEDDED_MODELS["tiny"])


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_number_a_scenario_states_comes_from_the_scenario(name, tokenizer):
    scenario = SCENARIOS[name]
    typed = stated(f"{scenario.title}. {scenario.story}") - made_by(scenario, tokenizer)
    assert not typed, (
        f"the {name} scenario's title or story states {sorted(typed)}, which neither its "
        "settings nor its requests make: fix the story, or compute the number from them"
    )


def test_a_story_that_no_longer_matches_its_budget_is_found(tokenizer):
    """The chunked scenario with a budget of 24 tokens while its story still says 20, a chunk
    of 18 and five steps."""
    scenario = SCENARIOS["chunked"]
    changed = dataclasses.replace(
        scenario, config=scenario.config.replace(max_num_batched_tokens=24)
    )
    assert stated(changed.story) - made_by(changed, tokenizer) >= {18, 20}
    assert stated("step 2 of §5, five steps, 3 tokens") == {5, 3}
