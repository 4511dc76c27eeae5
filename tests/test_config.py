"""``EngineConfig``: one object for every engine setting, checked once, where it is given.

The class of defect these tests hold down is "a setting accepted at construction that fails
later": a value of the wrong type, out of range, or a pair that cannot run together, taken
by ``LLM(...)`` or a flag and failing at the first step (or never). So:

- every field of ``EngineConfig`` is swept with values of the wrong kind and out of range, and
  each is refused in one line that names the setting and the value, by the config, by ``LLM``
  (before any model loads), by ``LLMEngine`` and by both command lines (exit status 2);
- random valid configs, incompatible pairs included, either refuse at construction or run a
  request to its end: nothing accepted fails later;
- the defaults agree everywhere, and the flags are generated from the fields, so a new field
  is a new flag without touching either command line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged import cli
from minipaged.arguments import Parser, add_config_flags, config_from_flags, in_flags
from minipaged.checkpoint import load_model, model_directory
from minipaged.config import EngineConfig, Setting, check_setting, settings_of
from minipaged.engine import LLMEngine, RequestRejected
from minipaged.llm import LLM
from minipaged.sampling import SamplingParams
from minipaged.tokenizer import Tokenizer
from tui.engine_config import TUI_CONFIG

SETTINGS = settings_of()


def bad_values(name: str, rule: Setting) -> list[object]:
    """Values ``rule`` refuses: of the wrong kind, unhashable, just out of range, absurd."""
    wrong_kind: list[object] = [[1], {"a": 1}, object()]
    if rule.none is None and rule.kind is not object:
        wrong_kind.append(None)
    if rule.kind is bool:
        return [*wrong_kind, 1, "yes"]
    if rule.kind is int:
        values = [*wrong_kind, "8", 1.5, True, math.nan]
        values += [int(rule.low) - 1] if rule.low is not None else []
        return values + ([int(rule.high) + 1] if rule.high is not None else [])
    if rule.kind is float:
        values = [*wrong_kind, "x", True, math.nan, math.inf, -math.inf, rule.low - 1e-9]
        return values + [rule.high + (0 if rule.below else 1e-9)]
    if rule.kind is str:
        return [*wrong_kind, 5, "", "no-such-" + name, [rule.choices[0]] if rule.choices else 5]
    return {  # the object fields, each judged by its own normalizer
        "model": [5, "", "   ", [], None],
        "speculative": [5, "not json", "[1, 2]", {"method": "tree"}, {"depth": 3}],
        "block_manager_class": [5, "BlockManager", BlockManagerLike()],
    }[name]


class BlockManagerLike:
    """An instance where a class is wanted."""


SWEEP = [(name, value) for name, rule in SETTINGS.items() for value in bad_values(name, rule)]


def one_line_naming(error: BaseException, name: str) -> None:
    message = str(error)
    assert "\n" not in message, message
    assert name in message or name.replace("_", " ") in message, message


@pytest.mark.parametrize(("name", "value"), SWEEP, ids=[f"{n}={v!r:.20}" for n, v in SWEEP])
def test_every_bad_value_of_every_setting_is_refused_in_one_line_naming_it(name, value):
    with pytest.raises((TypeError, ValueError)) as error:
        EngineConfig(**{name: value})
    one_line_naming(error.value, "speculative" if name == "speculative" else name)


@pytest.mark.parametrize(
    ("name", "value"), SWEEP[::3], ids=[f"{n}={v!r:.20}" for n, v in SWEEP[::3]]
)
def test_llm_refuses_a_bad_setting_before_it_loads_a_model(name, value, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr("minipaged.llm.load_model", no_loading)
    with pytest.raises((TypeError, ValueError)) as error:
        LLM("tiny", **{name: value})
    one_line_naming(error.value, name)


def test_an_unhashable_kv_cache_dtype_is_refused_naming_the_accepted_values():
    with pytest.raises(TypeError) as error:
        LLM("tiny", kv_cache_dtype=["fp8_e4m3"])
    assert str(error.value).startswith(
        "kv_cache_dtype must be one of 'auto', 'fp8_e4m3', 'fp8_e5m2', got ['fp8_e4m3']"
    )


def test_a_torch_dtype_stands_for_its_name():
    assert EngineConfig(dtype=torch.bfloat16).dtype == "bfloat16"
    assert EngineConfig(kv_cache_dtype=torch.float8_e5m2).kv_cache_dtype == "fp8_e5m2"
    with pytest.raises(TypeError, match="a 16-bit cache follows the model"):
        EngineConfig(kv_cache_dtype=torch.float16)


def test_an_unknown_setting_names_the_closest_one():
    with pytest.raises(TypeError, match="did you mean 'block_size'"):
        LLM("tiny", blok_size=8)


INCOMPATIBLE = [
    ({"kv_cache_dtype": "fp8_e4m3", "dtype": "bfloat16"}, "the model must be float32 too"),
    ({"kv_cache_dtype": "fp8_e5m2", "dtype": "float16", "backend": "torch"}, "float32 too"),
    ({"preemption": "swap", "num_cpu_blocks": 0}, "needs a host pool"),
    ({"max_num_batched_tokens": 8, "max_num_seqs": 16}, "below max_num_seqs"),
]


@pytest.mark.parametrize(("pair", "message"), INCOMPATIBLE)
def test_settings_that_cannot_run_together_are_refused_when_the_llm_is_built(pair, message):
    with pytest.raises(ValueError, match=message) as error:
        LLM("tiny", **pair)
    assert "\n" not in str(error.value)


def test_an_fp8_cache_under_a_16_bit_model_given_to_the_engine_is_refused_too(tiny_models):
    model = tiny_models["bfloat16"]
    with pytest.raises(ValueError, match=r"with a bfloat16 model: .* must be float32 too"):
        LLMEngine(model, None, kv_cache_dtype="fp8_e4m3", num_gpu_blocks=8)


def test_the_parts_check_their_arguments_by_the_configs_rules():
    """``BlockManager`` and ``Scheduler`` take the same settings and refuse them with the same
    rule, written once on the field."""
    from minipaged.block_manager import BlockManager
    from minipaged.scheduler import Scheduler

    for name, value in [("block_size", 0), ("watermark", 1.0), ("prefix_caching", "lru")]:
        with pytest.raises(ValueError) as error:
            BlockManager(8, **{name: value})
        with pytest.raises(ValueError) as expected:
            check_setting(name, value)
        assert str(error.value) == str(expected.value)
    with pytest.raises(TypeError, match="max_num_batched_tokens must be an integer from 1 to"):
        Scheduler(BlockManager(8), max_num_batched_tokens=None)  # the scheduler needs a number


# -- nothing accepted fails later ------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_models():
    directory = model_directory("tiny")
    return {
        name: load_model(directory, dtype=getattr(torch, name))
        for name in ("float32", "bfloat16", "float16")
    }


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(model_directory("tiny"))


CONFIGS = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["float32", "bfloat16", "float16"]),
        "block_size": st.sampled_from([1, 2, 4, 16, 64]),
        "num_gpu_blocks": st.integers(1, 96),
        "num_cpu_blocks": st.one_of(st.none(), st.integers(0, 24)),
        "kv_cache_dtype": st.sampled_from(["auto", "fp8_e4m3", "fp8_e5m2"]),
        "watermark": st.sampled_from([0.0, 0.01, 0.3, 0.9]),
        "prefix_caching": st.sampled_from([None, "hash", "radix"]),
        "preemption": st.sampled_from(["recompute", "swap"]),
        "max_num_seqs": st.integers(1, 6),
        "max_num_batched_tokens": st.one_of(st.none(), st.integers(1, 64)),
        "backend": st.sampled_from(["auto", "torch"]),
        "seed": st.sampled_from([0, 7, 2**63 - 1]),
        "speculative": st.sampled_from([None, {"method": "ngram", "num_speculative_tokens": 2}]),
    }
)


@settings(max_examples=30, deadline=None)
@given(fields=CONFIGS, n=st.sampled_from([1, 2]), max_tokens=st.integers(1, 6))
def test_a_config_either_refuses_at_construction_or_runs_its_requests(
    tiny_models, tokenizer, fields, n, max_tokens
):
    """Random settings, clashing pairs included: construction may refuse (one line), and a
    request may be refused when it is added (it can never fit); everything accepted runs to
    the end, with no error at any step."""
    try:
        config = EngineConfig(**fields)
        engine = LLMEngine(tiny_models[fields["dtype"]], tokenizer, config)
    except ValueError as refused:
        assert "\n" not in str(refused)
        return
    params = SamplingParams(max_tokens=max_tokens, n=n, temperature=0.8, seed=None)
    added = 0
    for prompt in ("Emma", "It is a truth universally acknowledged"):
        with contextlib.suppress(RequestRejected, ValueError):
            engine.add_request(prompt, params)
            added += 1
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
        assert steps < 500
    assert added == 0 or steps > 0


def test_the_largest_seed_runs():
    """A seed the config accepts must seed every request: the per-request seed derived from it
    stays in the generator's range."""
    llm = LLM("tiny", seed=2**63 - 1, num_gpu_blocks=16, backend="torch")
    (output,) = llm.generate("Emma", SamplingParams(max_tokens=2))
    assert len(output.outputs[0].token_ids) == 2


# -- one object, one set of defaults, flags generated from the fields ------------------------


def test_llm_and_engine_build_from_one_config_with_the_same_defaults(tiny_models):
    llm = LLM("tiny", backend="torch")
    engine = LLMEngine(tiny_models["float32"], None, EngineConfig(backend="torch"))
    assert llm.config == EngineConfig(backend="torch") == engine.config
    # num_cpu_blocks: None means "as large as the device pool", for both.
    for built in (llm.engine, engine):
        assert built.kv_cache.num_cpu_blocks == built.block_manager.device.num_blocks
        assert built.block_manager.device.num_blocks == llm.engine.block_manager.device.num_blocks


def test_the_tui_changes_only_what_it_says_it_changes():
    changed = {
        each.name
        for each in dataclasses.fields(EngineConfig)
        if getattr(TUI_CONFIG, each.name) != getattr(EngineConfig(), each.name)
    }
    assert changed == {"block_size", "num_gpu_blocks", "num_cpu_blocks", "backend"}


def flag_options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def subcommand(name: str, *more: str):
    parser = cli.build_parser()
    for word in (name, *more):
        choices = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = choices.choices[word]
    return parser


FLAGGED = {name: rule for name, rule in SETTINGS.items() if rule.flag}


@pytest.mark.parametrize("command", [("generate",), ("trace", "record"), ("tui",)])
def test_every_flagged_setting_is_a_flag_of_every_command_that_runs_the_engine(command):
    options = flag_options(subcommand(*command))
    for name, rule in FLAGGED.items():
        assert (rule.flag_name or f"--{name.replace('_', '-')}") in options


def test_a_new_field_becomes_a_flag_without_touching_a_command_line(monkeypatch):
    """Add a field to a copy of EngineConfig: the flag generator offers it, with its help and
    bounds, and lays it over a config; nothing else changes."""
    import minipaged.arguments as arguments
    import minipaged.config as config_module

    extended = dataclasses.make_dataclass(
        "ExtendedConfig",
        [
            (
                "max_long_partial_prefills",
                int,
                dataclasses.field(
                    default=0,
                    metadata={
                        "setting": Setting("most long prompts prefilled at once", int, low=0)
                    },
                ),
            )
        ],
        bases=(EngineConfig,),
        frozen=True,
    )
    monkeypatch.setattr(config_module, "settings_of", lambda cls=extended: settings_of(cls))
    monkeypatch.setattr(arguments, "settings_of", lambda cls=extended: settings_of(cls))
    parser = Parser(prog="minipaged generate")
    add_config_flags(parser, extended())
    assert "--max-long-partial-prefills" in flag_options(parser)
    args = parser.parse_args(["--max-long-partial-prefills", "64", "--block-size", "8"])
    built = config_from_flags(args, extended())
    assert (built.max_long_partial_prefills, built.block_size) == (64, 8)
    assert built.as_json()["max_long_partial_prefills"] == 64  # a trace header records it
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-long-partial-prefills", "-1"])


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(list(argv))
    return status, err.getvalue()


FLAG_SWEEP = [
    ("--block-size", "0"),
    ("--block-size", "x"),
    ("--num-gpu-blocks", "0"),
    ("--num-cpu-blocks", "-1"),
    ("--watermark", "1"),
    ("--watermark", "nan"),
    ("--max-num-seqs", "0"),
    ("--max-num-batched-tokens", "0"),
    ("--seed", "-1"),
    ("--kv-cache-dtype", "fp8"),
    ("--dtype", "float64"),
    ("--backend", "triton"),
    ("--preemption", "drop"),
    ("--prefix-caching", "lru"),
    ("--speculative-config", "{"),
    ("--model", ""),
]


@pytest.mark.parametrize("command", [("generate",), ("tui",)])
@pytest.mark.parametrize(("flag", "value"), FLAG_SWEEP)
def test_a_bad_engine_flag_is_a_usage_error_in_one_line(command, flag, value):
    extra = ["--prompt", "Emma"] if command == ("generate",) else ["--screenshot", "x.svg"]
    status, err = run_cli(*command, *extra, flag, value)
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith(f"minipaged {command[0]}"), err


@pytest.mark.parametrize(
    "flags",
    [
        ["--preemption", "swap", "--num-cpu-blocks", "0"],
        ["--kv-cache-dtype", "fp8_e4m3", "--dtype", "bfloat16"],
        ["--max-num-batched-tokens", "4"],
    ],
)
def test_flags_that_cannot_run_together_are_a_usage_error_in_one_line(flags):
    status, err = run_cli("generate", "--prompt", "Emma", *flags)
    assert status == 2 and err.count("\n") == 1, err


def test_generate_whose_only_request_is_refused_fails_with_one_line():
    status, err = run_cli("generate", "--prompt", "Emma", "--num-gpu-blocks", "2")
    assert status == 1
    assert err.count("\n") == 1 and "1 of 1 request(s) did not run" in err, err


def test_trace_record_whose_only_request_is_refused_fails_with_one_line(tmp_path):
    trace = tmp_path / "run.jsonl"
    status, err = run_cli(
        "trace", "record", str(trace), "--prompt", "Emma", "--num-gpu-blocks", "2"
    )
    assert status == 1 and err.count("\n") == 1 and "did not run" in err, err


def test_tui_engine_flags_change_a_named_scenario(monkeypatch):
    from tui import command

    built = {}
    monkeypatch.setattr(
        "tui.app.PagedApp", lambda scenario, **kwargs: built.setdefault("s", scenario)
    )
    args = subcommand("tui").parse_args(["--scenario", "swap", "--block-size", "8"])
    command.build_app(args)
    assert built["s"].config.block_size == 8
    assert built["s"].config.preemption == "swap"  # the scenario's own setting stays


def test_every_config_field_typed_as_a_flag_is_said_as_that_flag():
    """The library's errors name ``EngineConfig`` fields (``max_model_len=100000``), where the
    user of a command line typed flags: ``cli.main`` says each field they typed as the flag the
    parser gives it, and leaves every other ``word=value`` as it is."""
    parser = Parser(prog="minipaged generate")
    add_config_flags(parser, EngineConfig())
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.dest in settings_of()}
    assert "max_model_len" in flags and "block_size" in flags
    typed = argparse.Namespace(**{name: 7 for name in flags})  # every flag typed
    for name, flag in flags.items():
        message = f"{name}=7 is past a limit (x={name}); lower it"
        if settings_of()[name].kind is bool:  # a switch has no value to say
            assert in_flags(message, typed) == message
        else:
            assert in_flags(message, typed) == f"{flag} 7 is past a limit (x={name}); lower it"
        assert in_flags(message, argparse.Namespace()) == message  # not typed: as it was
        assert in_flags(message, None) == message  # before the command line is read
    assert in_flags("n=3 and top_k=2", typed) == "n=3 and top_k=2"  # no config fields


def test_a_max_model_len_past_the_models_context_is_refused_by_its_flag():
    status, err = run_cli("generate", "--prompt", "Hi", "--max-model-len", "100000")
    assert status == cli.USAGE_ERROR
    assert "--max-model-len 100,000 is past the model's context of" in err
    assert "max_model_len=" not in err
