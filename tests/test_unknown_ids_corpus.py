"""An id the engine, the block manager or the allocator does not hold is a bad argument: a
``ValueError`` naming the id and the way out, with nothing changed. ``abort_request`` of an
unknown request raised a bare ``KeyError``, a block id past the pool an ``IndexError`` and an
unknown sequence a ``KeyError``, which a caller that catches the API's ``ValueError`` let
through. Each is still the class it was (``KeyError``, ``IndexError``), which exercises 02 and
03 ask a student's code to raise, and older code caught."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_api_corpus import manager_with_one_sequence
from test_engine_refusals import IN_FLIGHT, POOL, run_to_the_end, state

from minipaged import LLM
from minipaged.paging_arguments import UnknownSequence
from minipaged.request_limits import UnknownRequest
from minipaged.unknown_key import UnknownKey

PAGING_CALLS = {
    # name: (the call on a manager holding sequence 0, its old class, the id its message names)
    "refcount past the pool": (lambda m: m.device.refcount(8), IndexError, "device block id 8"),
    "refcount of -1": (lambda m: m.host.refcount(-1), IndexError, "host block id -1"),
    "take past the pool": (lambda m: m.device.take(99), IndexError, "device block id 99"),
    "incref past the pool": (lambda m: m.device.incref(8), IndexError, "device block id 8"),
    "decref past the pool": (lambda m: m.device.decref(99), IndexError, "device block id 99"),
    "manager refcount": (lambda m: m.refcount(2, "host"), IndexError, "host block id 2"),
    "the table of no sequence": (lambda m: m.table(7), KeyError, "unknown sequence 7"),
    "a fork of no sequence": (lambda m: m.fork(7, 8), KeyError, "unknown sequence 7"),
    "a free of no sequence": (lambda m: m.free(7), KeyError, "unknown sequence 7"),
    "an append to no sequence": (lambda m: m.append_slot(7), KeyError, "unknown sequence 7"),
    "a swap of no sequence": (lambda m: m.swap_out([7]), KeyError, "unknown sequence 7"),
}


@pytest.mark.parametrize("case", PAGING_CALLS)
def test_an_unknown_id_on_the_paging_api_is_a_value_error_that_changes_nothing(case):
    call, old_class, named = PAGING_CALLS[case]
    manager = manager_with_one_sequence()
    before = (manager.snapshot(), manager.prefix_cache.contents())
    with pytest.raises(ValueError) as refused:
        call(manager)
    message = str(refused.value)
    assert isinstance(refused.value, old_class)
    assert message.startswith(named) and "; pass " in message, message
    assert (manager.snapshot(), manager.prefix_cache.contents()) == before


def test_an_abort_of_an_unknown_request_is_a_value_error_and_the_others_run_on():
    engine = LLM("tiny", **POOL).engine
    engine.add_request(*IN_FLIGHT)
    engine.step()
    before = state(engine)
    with pytest.raises(ValueError) as refused:
        engine.abort_request("zzz")
    message = str(refused.value)
    assert isinstance(refused.value, KeyError)
    assert message.startswith("no unfinished request 'zzz'") and "; pass the id" in message
    assert state(engine) == before
    tokens = run_to_the_end(engine)
    assert list(tokens) == ["a"] and len(tokens["a"]) == IN_FLIGHT[1].max_tokens


def test_the_refusal_lists_at_most_ten_of_the_ids_in_flight():
    """An engine may hold thousands of requests: the message names ten and counts the rest."""
    engine = LLM("tiny", **POOL).engine
    for number in range(25):
        engine.add_request("Emma", None, f"r{number:02}")
    with pytest.raises(ValueError) as refused:
        engine.abort_request("zzz")
    assert str(refused.value).endswith("'r08', 'r09'] and 15 more")
    assert len(engine.requests) == 25


SOURCES = [
    Path(__file__).resolve().parents[1] / name for name in ("minipaged", "tui", "cuda_kernels")
]


def test_one_class_states_what_a_value_error_that_is_a_key_error_is():
    """``UnknownSequence`` and ``UnknownRequest`` each derived from ``ValueError`` and
    ``KeyError`` and each mended ``KeyError``'s quoting of the message: now both derive from
    ``unknown_key.UnknownKey``, and no other class of the project derives from ``KeyError``
    itself (one that did would show its message quoted, as a key)."""
    direct = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and "KeyError" in map(ast.unparse, node.bases):
                    direct.append(f"{path.relative_to(source.parent)}:{node.name}")
    assert direct == ["minipaged/unknown_key.py:UnknownKey"]
    for kind in (UnknownSequence, UnknownRequest):
        assert issubclass(kind, UnknownKey)
        assert str(kind("unknown sequence 7: pass one")) == "unknown sequence 7: pass one"
