"""DESIGN.md's public surface and pipeline, read as a peer writing a test suite from it reads
them: every name the pipeline diagram and the surface list give exists under that name, with
the defaults and choices they state, and does the stage's work."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from minipaged import LLM, SamplingParams, events

DESIGN_SETTINGS = {
    # name: (the default DESIGN.md gives, the values it names)
    "block_size": (16, [16]),
    "num_gpu_blocks": (None, [None, 64]),
    "preemption": ("recompute", ["recompute", "swap"]),
    "prefix_caching": (None, [None, "hash", "radix"]),
    "seed": (0, [0]),
    "device": ("cpu", ["cpu"]),
    "backend": (None, ["torch", "numba"]),  # None: DESIGN.md names no default
}


@pytest.mark.parametrize("name", DESIGN_SETTINGS)
def test_llm_takes_every_setting_the_design_names_with_its_default(name):
    from minipaged.config import EngineConfig, settings_of

    default, values = DESIGN_SETTINGS[name]
    if default is not None or name in ("num_gpu_blocks", "prefix_caching"):
        assert getattr(EngineConfig(), name) == default
    rule = settings_of()[name]
    for value in values:
        assert value is None or not rule.choices or value in rule.choices


def test_llms_signature_shows_every_setting_with_the_designs_default():
    """``help(LLM)`` and ``inspect.signature(LLM)``, what a peer reads first, show DESIGN.md's
    ``LLM(model=..., block_size=16, num_gpu_blocks=None, ...)``, not ``**settings``; and every
    setting the signature shows is one ``LLM`` takes."""
    from minipaged.config import EngineConfig

    parameters = inspect.signature(LLM).parameters
    for name, (default, _) in DESIGN_SETTINGS.items():
        assert name in parameters and parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        if default is not None or name in ("num_gpu_blocks", "prefix_caching"):
            assert parameters[name].default == default, name
    assert next(iter(parameters)) == "model"
    shown = set(parameters) - {"model", "config"}
    assert shown == {f.name for f in dataclasses.fields(EngineConfig)} - {"model"}


def test_the_pipeline_has_its_sampler_stage_after_the_model():
    """The diagram's ``-> Sampler  greedy / temperature / top-p / n samples / beam search``:
    the engine's ``sampler``, which every step calls with the model's logits."""
    from minipaged.decoding import Sampler

    llm = LLM("tiny", backend="torch", block_size=4, num_gpu_blocks=64)
    assert isinstance(llm.engine.sampler, Sampler)
    calls = []
    sample = llm.engine.sampler.sample
    llm.engine.sampler.sample = lambda *args: calls.append(args[2].shape) or sample(*args)
    llm.generate("Emma", SamplingParams(max_tokens=3, temperature=0.0), show_progress=False)
    assert len(calls) == 3 and all(len(shape) == 2 for shape in calls)  # [rows, vocab]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=4, temperature=0.0),
        SamplingParams(max_tokens=4, temperature=0.8, seed=1),
        SamplingParams(max_tokens=4, temperature=0.8, top_p=0.5, seed=1),
        SamplingParams(max_tokens=4, n=3, temperature=0.8, seed=1),
        SamplingParams(max_tokens=4, use_beam_search=True, beam_width=3),
    ],
    ids=["greedy", "temperature", "top-p", "n samples", "beam search"],
)
def test_each_way_of_sampling_the_design_lists_runs_through_generate(params):
    llm = LLM("tiny", backend="torch", block_size=4, num_gpu_blocks=64)
    (out,) = llm.generate("Emma", params, show_progress=False)
    wanted = params.beam_width if params.use_beam_search else params.n
    assert len(out.outputs) == wanted
    assert all(0 < len(each.token_ids) <= 4 and isinstance(each.text, str) for each in out.outputs)


DESIGN_EVENTS = "alloc, free, incref, decref, fork, cow-copy, swap-out, swap-in, preempt, recompute"


def test_the_block_manager_has_every_event_the_design_names():
    """DESIGN.md: "emits events: alloc, free, incref/decref, fork, cow-copy, swap-out/in,
    preempt, recompute", each a class of ``minipaged.events`` with that ``kind``."""
    kinds = {
        cls.kind
        for cls in vars(events).values()
        if inspect.isclass(cls) and issubclass(cls, events.Event) and hasattr(cls, "kind")
    }
    assert set(DESIGN_EVENTS.split(", ")) <= kinds


def test_the_engine_offers_add_request_step_and_has_unfinished():
    llm = LLM("tiny", backend="torch", block_size=4, num_gpu_blocks=64)
    engine = llm.engine
    request_id = engine.add_request({"prompt_token_ids": [1, 2, 3]}, SamplingParams(max_tokens=2))
    finished = []
    while engine.has_unfinished():
        step = engine.step()
        assert step.snapshot is not None and isinstance(step.events, tuple)
        finished += step.finished
    assert [out.request_id for out in finished] == [request_id]
    assert len(finished[0].outputs[0].token_ids) == 2
