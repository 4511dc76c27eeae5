"""Every bad call on an engine with a request in flight is refused before anything changes, and
the request in flight finishes with exactly the tokens it gets on an engine nobody disturbed:
bad request ids (add or abort), bad prompts, bad sampling parameters, a request larger than the
whole block pool, an abort of an unknown or finished request, a bad ``step`` argument."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from minipaged import LLM, SamplingParams
from minipaged.engine import RequestRejected

POOL = {"num_gpu_blocks": 24, "block_size": 4, "backend": "torch"}
IN_FLIGHT = ("It is a truth", SamplingParams(max_tokens=10, seed=5, ignore_eos=True), "a")


def run_to_the_end(engine) -> dict[str, list[int]]:
    tokens = {}
    while engine.has_unfinished():
        for output in engine.step().finished:
            tokens[output.request_id] = output.outputs[0].token_ids
    return tokens


@pytest.fixture(scope="module")
def undisturbed() -> list[int]:
    engine = LLM("tiny", **POOL).engine
    engine.add_request(*IN_FLIGHT)
    return run_to_the_end(engine)["a"]


@pytest.fixture
def llm():
    return LLM("tiny", **POOL)


def too_long(engine):
    return [1] * engine.max_model_len


BAD_CALLS = {
    # name: (the call on the engine, the exception, words of its message)
    "a duplicate id": (lambda e: e.add_request("x", None, "a"), ValueError, "already in use"),
    "a duplicate id of a request too large to run": (
        lambda e: e.add_request("x", SamplingParams(max_tokens=400), "a"),
        ValueError,
        "already in use by a request in flight",
    ),
    "an int id": (lambda e: e.add_request("x", None, 5), TypeError, "request_id must be a str"),
    "a blank id": (lambda e: e.add_request("x", None, "  "), ValueError, "must name the request"),
    "an id of a megabyte": (
        lambda e: e.add_request("x", None, "r" * 2**20),
        ValueError,
        "request_id must be at most 256 characters",
    ),
    "an id one past the cap": (
        lambda e: e.add_request("x", None, "r" * 257),
        ValueError,
        "got 257 starting",
    ),
    "an abort of a megabyte id": (
        lambda e: e.abort_request("r" * 2**20),
        ValueError,
        "at most 256 characters",
    ),
    "no prompt": (lambda e: e.add_request(None), TypeError, "a prompt is a string"),
    "an empty prompt": (lambda e: e.add_request(""), ValueError, "the prompt is empty"),
    "no token ids": (lambda e: e.add_request([]), ValueError, "the prompt is empty"),
    "a negative id": (lambda e: e.add_request([1, -2]), ValueError, "in [0, 2048)"),
    "an id past the vocabulary": (lambda e: e.add_request([1, 2048]), ValueError, "[0, 2048)"),
    "a float id": (lambda e: e.add_request([1, 2.5]), ValueError, "prompt token ids"),
    "a NaN id": (lambda e: e.add_request([1, math.nan]), ValueError, "prompt token ids"),
    "a bool id": (lambda e: e.add_request([True, 3]), ValueError, "prompt token ids"),
    "a tensor": (lambda e: e.add_request(torch.tensor([1, 2])), TypeError, "ids.tolist()"),
    "an array": (lambda e: e.add_request(np.array([1, 2])), TypeError, "ids.tolist()"),
    "bytes": (lambda e: e.add_request(b"It is"), TypeError, "a prompt is a string"),
    "a dict without ids": (lambda e: e.add_request({"prompt": "x"}), ValueError, "needs the key"),
    "a dict with a key nothing reads": (
        lambda e: e.add_request({"prompt_token_ids": [1, 2], "max_tokens": 3}),
        ValueError,
        "holds only 'prompt_token_ids', got also ['max_tokens']",
    ),
    "a dict with text beside its ids": (
        lambda e: e.add_request({"prompt_token_ids": [1], "prompt": "x"}),
        ValueError,
        "pass the string itself",
    ),
    "a dict of a tensor": (
        lambda e: e.add_request({"prompt_token_ids": torch.tensor([1, 2])}),
        TypeError,
        "ids.tolist()",
    ),
    "a list of prompts": (
        lambda e: e.add_request(["x", {"prompt_token_ids": [1]}]),
        ValueError,
        "prompt token ids must be integers",
    ),
    "a prompt as long as the context": (
        lambda e: e.add_request(too_long(e)),
        ValueError,
        "shorten the prompt",
    ),
    "params as a dict": (
        lambda e: e.add_request("x", {"max_tokens": 3}),
        TypeError,
        "must be a SamplingParams",
    ),
    "stop ids past the vocabulary": (
        lambda e: e.add_request("x", SamplingParams(stop_token_ids=[10**6])),
        ValueError,
        "outside the model's vocabulary",
    ),
    "more than the whole pool": (
        lambda e: e.add_request("x", SamplingParams(max_tokens=400)),
        RequestRejected,
        "96 token slots (num_gpu_blocks=24 x B=4",
    ),
    "more samples than the pool": (
        lambda e: e.add_request("x", SamplingParams(n=8, max_tokens=40)),
        RequestRejected,
        "num_gpu_blocks=24 x B=4",
    ),
    "more samples than max_num_seqs": (
        lambda e: e.add_request("x", SamplingParams(n=40, max_tokens=1)),
        ValueError,
        "max_num_seqs",
    ),
    "an abort of an unknown id": (lambda e: e.abort_request("zzz"), KeyError, "no unfinished"),
    "an abort of an int": (lambda e: e.abort_request(5), TypeError, "request_id must be a str"),
    "an abort of a list": (lambda e: e.abort_request(["a"]), TypeError, "must be a string"),
    "an abort of None": (lambda e: e.abort_request(None), TypeError, "must be a string"),
    "a step with a text snapshot": (lambda e: e.step(snapshot="no"), TypeError, "snapshot"),
}


def state(engine):
    """What a refusal must leave as it was: the requests, the queues and the block state."""
    queues = [[g.request_id for g in getattr(engine.scheduler, q)] for q in ("waiting", "running")]
    return sorted(engine.requests), queues, engine.block_manager.snapshot(), engine.step_count


@pytest.mark.parametrize("case", BAD_CALLS)
def test_a_bad_call_changes_nothing_and_the_request_in_flight_runs_on(llm, undisturbed, case):
    engine = llm.engine
    engine.add_request(*IN_FLIGHT)
    engine.step()
    engine.step()
    call, error, words = BAD_CALLS[case]
    before = state(engine)
    with pytest.raises(error) as refused:
        call(engine)
    assert words in str(refused.value)
    assert state(engine) == before
    assert run_to_the_end(engine) == {"a": undisturbed}


BAD_GENERATES = {
    # name: (the prompts and params LLM.generate is given, the exception, words of its message)
    "a list mixing a bad prompt in": (["It is", "", "x"], None, ValueError, "prompt 1 of 3"),
    "ids past the vocabulary": ([{"prompt_token_ids": [2048]}], None, ValueError, "[0, 2048)"),
    "negative ids": ([[[1, -1]]], None, ValueError, "[0, 2048)"),
    "a dict with a key nothing reads": (
        ["x", {"prompt_token_ids": [1], "n": 2}],
        None,
        ValueError,
        "prompt 1 of 2: a dict prompt holds only",
    ),
    "a list of ints as the prompts": ([[1, 2, 3]][0], None, TypeError, "[[...]]"),
    "a generator of prompts": ((p for p in ["x"]), None, TypeError, "prompts must be"),
    "a number as a prompt": (["x", 5], None, TypeError, "prompt 1 of 2"),
    "params for other prompts": (["x", "y"], [SamplingParams()], ValueError, "1 SamplingParams"),
    "params as a dict": (["x"], {"max_tokens": 2}, TypeError, "must be a SamplingParams"),
    "a step callback that is no function": (["x"], "on_step", TypeError, "on_step"),
    "good prompts while the engine serves its own": (
        ["It is"],
        SamplingParams(max_tokens=2),
        RuntimeError,
        "1 request(s) in flight ('a')",
    ),
}


@pytest.mark.parametrize("case", BAD_GENERATES)
def test_a_bad_generate_changes_nothing_and_the_request_in_flight_runs_on(llm, undisturbed, case):
    engine = llm.engine
    engine.add_request(*IN_FLIGHT)
    engine.step()
    prompts, params, error, words = BAD_GENERATES[case]
    before = state(engine)
    with pytest.raises(error) as refused:
        if params == "on_step":
            llm.generate(prompts, on_step=5)
        else:
            llm.generate(prompts, params)
    assert words in str(refused.value)
    assert state(engine) == before
    assert run_to_the_end(engine) == {"a": undisturbed}


def test_a_generate_that_raised_inside_leaves_the_engine_as_it_found_it(llm):
    """An exception from ``on_step`` ends that call: its requests are aborted and their blocks
    freed, and the next call runs as on a fresh engine."""
    engine = llm.engine
    num_free = engine.block_manager.device.num_free

    def interrupt(output):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        llm.generate(["It is", "Emma"], SamplingParams(max_tokens=4), on_step=interrupt)
    assert not engine.requests and engine.block_manager.device.num_free == num_free
    params = SamplingParams(max_tokens=3, seed=1, ignore_eos=True)
    fresh = LLM("tiny", **POOL).generate(["It is"], params)
    assert llm.generate(["It is"], params)[0].outputs[0].token_ids == fresh[0].outputs[0].token_ids


def test_a_step_on_an_empty_engine_changes_no_block(llm):
    engine = llm.engine
    before = engine.block_manager.snapshot()
    output = engine.step()
    assert output.new_tokens == {} and output.events == ()
    assert engine.block_manager.snapshot() == before and not engine.has_unfinished()


def test_an_id_of_the_longest_length_is_taken_and_runs(llm):
    from minipaged.request_limits import MAX_REQUEST_ID_LENGTH

    longest = "r" * MAX_REQUEST_ID_LENGTH
    engine = llm.engine
    assert engine.add_request("It is", SamplingParams(max_tokens=2), longest) == longest
    assert longest in run_to_the_end(engine)


def finished(engine, request_id):
    engine.add_request("It is", SamplingParams(max_tokens=2), request_id)
    run_to_the_end(engine)


def aborted(engine, request_id):
    engine.add_request("It is", SamplingParams(max_tokens=2), request_id)
    engine.step()
    engine.abort_request(request_id)
    run_to_the_end(engine)


GONE = {"finished": finished, "aborted": aborted, "never added": lambda engine, request_id: None}
"""The ways an id can name no request in flight: one rule for each of add and abort."""


@pytest.mark.parametrize("how", GONE)
def test_an_abort_of_an_id_no_request_in_flight_holds_is_one_refusal(llm, undisturbed, how):
    engine = llm.engine
    GONE[how](engine, "gone")
    engine.add_request(*IN_FLIGHT)
    engine.step()
    before = state(engine)
    with pytest.raises(KeyError, match="'gone': it finished, was aborted or never existed"):
        engine.abort_request("gone")
    assert state(engine) == before
    assert run_to_the_end(engine) == {"a": undisturbed}


@pytest.mark.parametrize("how", GONE)
def test_an_id_no_request_in_flight_holds_may_name_a_new_request(llm, how):
    """vLLM's rule: ids are unique among requests in flight only."""
    engine = llm.engine
    GONE[how](engine, "again")
    params = SamplingParams(max_tokens=3, seed=1, ignore_eos=True)
    assert engine.add_request("It is", params, "again") == "again"
    assert list(run_to_the_end(engine)) == ["again"]


@pytest.mark.parametrize("taken", [["0"], ["1"], ["1", "2"], ["0", "1", "2", "3"]])
def test_an_automatic_id_never_takes_an_id_in_flight(llm, taken):
    """The caller named theirs as the engine numbers its own: the numbers skip them."""
    engine = llm.engine
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    named = [engine.add_request("It is", params, request_id) for request_id in taken]
    automatic = [engine.add_request("It is", params) for _ in range(3)]
    assert len(set(named + automatic)) == len(taken) + 3
    assert sorted(run_to_the_end(engine)) == sorted(named + automatic)


def test_max_tokens_zero_is_refused_before_any_request_exists():
    with pytest.raises(ValueError, match="max_tokens must be an integer from 1 to"):
        SamplingParams(max_tokens=0)


def test_a_stop_token_ends_the_sequence_it_was_sampled_in(llm):
    free = llm.generate(["It is"], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
    tokens = free[0].outputs[0].token_ids
    stop = tokens[3]
    params = SamplingParams(max_tokens=8, temperature=0, stop_token_ids=[stop])
    stopped = llm.generate(["It is"], params)[0].outputs[0]
    assert stopped.token_ids == tokens[: tokens.index(stop) + 1]
    assert stopped.finish_reason == "stop"


IN_CALLBACK = {
    "add_request": lambda llm: llm.engine.add_request("Jane", SamplingParams(max_tokens=2)),
    "abort_request": lambda llm: llm.engine.abort_request(next(iter(llm.engine.requests))),
    "step": lambda llm: llm.engine.step(),
    "LLM.generate": lambda llm: llm.generate("Jane", SamplingParams(max_tokens=2)),
}
"""What an ``on_step`` callback must not do while ``generate`` owns the engine's requests: a
request added there ran with its output lost, and one aborted there made ``generate`` fail
with a bare ``KeyError`` looking for its output."""


@pytest.mark.parametrize("action", IN_CALLBACK)
def test_a_callback_that_would_change_the_engine_is_refused_and_the_engine_is_left_clean(
    llm, action
):
    engine = llm.engine
    num_free = engine.block_manager.device.num_free
    params = SamplingParams(max_tokens=3, seed=1, ignore_eos=True)

    def meddle(output):
        assert engine.has_unfinished() and engine.block_manager.snapshot()  # reading is fine
        IN_CALLBACK[action](llm)

    with pytest.raises(RuntimeError, match=rf"^{action} from inside LLM.generate's on_step"):
        llm.generate(["It is", "Emma"], params, on_step=meddle)
    assert not engine.requests and engine.block_manager.device.num_free == num_free
    assert engine.in_callback is None
    fresh = LLM("tiny", **POOL).generate(["It is"], params)
    assert llm.generate(["It is"], params)[0].outputs[0].token_ids == fresh[0].outputs[0].token_ids


def test_a_callback_that_only_reads_the_engine_sees_every_step():
    llm = LLM("tiny", **POOL)
    seen = []
    llm.generate(["It is"], SamplingParams(max_tokens=3), on_step=lambda o: seen.append(o.step))
    assert seen == sorted(seen) and len(seen) >= 3
    llm.engine.add_request("Emma", SamplingParams(max_tokens=2))  # after generate: allowed
    assert run_to_the_end(llm.engine)


@pytest.mark.parametrize(
    "prompt, hint",
    [(torch.tensor([1, 2]), True), (np.array([1, 2]), True), (None, False), (object(), False)],
    ids=["tensor", "array", "None", "object"],
)
def test_the_tolist_hint_is_given_only_for_a_prompt_that_has_tolist(llm, prompt, hint):
    with pytest.raises(TypeError, match="a prompt is a string") as refused:
        llm.generate(["x", prompt])
    assert ("ids.tolist()" in str(refused.value)) is hint
    assert str(refused.value).startswith("prompt 1 of 2: ")


PARTS = {
    "schedule": lambda e: (e.scheduler, "schedule"),
    "run the model": lambda e: (e.runner, "execute"),
    "sample": lambda e: (e.sampler, "sample"),
    "free": lambda e: (e, "_release_finished"),
}
"""Where a step can be interrupted: each part after the one before changed the engine."""


@pytest.mark.parametrize("part", PARTS)
def test_a_step_interrupted_partway_refuses_to_step_until_its_requests_are_aborted(
    llm, undisturbed, part
):
    """Before, the next step failed deep inside ("token_ids has 7 ids; sequence 0 will hold
    8 tokens") or ran on over slots no token was computed for."""
    engine = llm.engine
    num_free = engine.block_manager.device.num_free
    engine.add_request("Emma", SamplingParams(max_tokens=6), "b")
    engine.step()
    owner, name = PARTS[part](engine)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    setattr(owner, name, interrupt)
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    delattr(owner, name)  # the class's own method again
    engine.add_request(*IN_FLIGHT)  # adding is allowed: it was not in flight then
    with pytest.raises(RuntimeError, match=r"interrupted partway \(KeyboardInterrupt\).*\['b'\]"):
        engine.step()
    engine.abort_request("b")
    assert run_to_the_end(engine) == {"a": undisturbed}
    assert engine.block_manager.device.num_free == num_free


def test_generate_after_a_step_it_ran_was_interrupted_runs_as_on_a_fresh_engine(llm):
    params = SamplingParams(max_tokens=4, seed=1, ignore_eos=True)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    llm.engine.runner.execute = interrupt
    with pytest.raises(KeyboardInterrupt):
        llm.generate(["It is", "Emma"], params)
    del llm.engine.runner.execute
    fresh = LLM("tiny", **POOL).generate(["It is"], params)
    assert llm.generate(["It is"], params)[0].outputs[0].token_ids == fresh[0].outputs[0].token_ids
