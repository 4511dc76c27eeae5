"""A speculative setting that asks for nothing. ``--speculative-config {}`` (and
``LLM(speculative={})``) was taken, and drafted by prompt lookup with every default: a setting
that names no method is a typo or a half-written config, not a choice. Every dict or JSON form
now names its ``method``, as vLLM's ``speculative_config`` does; one without it, or with a key
the config does not have, is refused naming the key it needs, in one line, before any model
loads and before anything is written (``speculative.config.speculative_config``)."""

from __future__ import annotations

import pytest

from minipaged import LLM, cli
from minipaged.config import EngineConfig
from minipaged.speculative.config import speculative_config

ASKING_NOTHING = ["{}", '{"branching": 2}', '{"num_speculative_tokens": 3, "max_tree_nodes": 8}']
UNKNOWN = ['{"depth": 3}', '{"method": "ngram", "tokens": 3}']


@pytest.mark.parametrize("value", ASKING_NOTHING + UNKNOWN)
@pytest.mark.parametrize(
    "how",
    [
        "speculative_config",
        "EngineConfig",
        "LLM",
        "LLM with a dict",
    ],
)
def test_a_setting_without_its_method_or_with_an_unknown_key_names_method(value, how):
    import json

    make = {
        "speculative_config": speculative_config,
        "EngineConfig": lambda v: EngineConfig(speculative=v),
        "LLM": lambda v: LLM("tiny", speculative=v),
        "LLM with a dict": lambda v: LLM("tiny", speculative=json.loads(v)),
    }[how]
    with pytest.raises(ValueError) as refused:
        make(value)
    message = str(refused.value)
    assert '"method": "ngram" or "draft"' in message and "\n" not in message


@pytest.mark.parametrize("value", ASKING_NOTHING + UNKNOWN)
@pytest.mark.parametrize(
    "command",
    [["generate"], ["trace", "record", "RUN"], ["tui", "--screenshot", "RUN", "--prompt", "It"]],
    ids=["generate", "trace record", "tui"],
)
def test_every_command_refuses_it_in_one_line_and_writes_nothing(value, command, tmp_path, capsys):
    argv = [str(tmp_path / "run.jsonl") if word == "RUN" else word for word in command]
    if command[0] != "tui":
        argv += ["--prompt", "It is"]
    status = cli.main([*argv, "--max-tokens", "2", "--speculative-config", value])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("minipaged ") and err.count("\n") == 1 and "Traceback" not in err
    assert '"method"' in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ['{"method": "ngram"}', {"method": "ngram", "branching": 3}])
def test_a_setting_that_names_its_method_is_taken(value):
    assert speculative_config(value).method == "ngram"
