"""Events as values: the registry a trace reads them back by is an explicit list, and the four
one-block events share one shape."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import minipaged
from minipaged import events
from minipaged.events import Alloc, BlockChange, Decref, Event, Free, Incref
from minipaged.trace import EVENT_TYPES, event_from_dict


def every_event_class() -> set[type[Event]]:
    """Every concrete ``Event`` subclass of the project, after importing every module of it."""
    for module in pkgutil.walk_packages(minipaged.__path__, "minipaged."):
        if not module.name.startswith(("minipaged.grader", "minipaged.study.bench")):
            importlib.import_module(module.name)
    found, todo = set(), [Event]
    while todo:
        for cls in todo.pop().__subclasses__():
            todo.append(cls)
            # slots=True makes a new class; the one it replaced lingers among the subclasses
            defined = getattr(sys.modules[cls.__module__], cls.__name__, None) is cls
            if "kind" in vars(cls) and defined:
                found.add(cls)
    return found


def test_every_event_kind_is_listed_once_where_traces_read_it():
    kinds = [cls.kind for cls in every_event_class()]
    assert len(kinds) == len(set(kinds)), "two event classes share a kind"
    assert set(EVENT_TYPES) == set(kinds)
    assert all(EVENT_TYPES[cls.kind] is cls for cls in every_event_class())


def test_loading_a_trace_needs_no_import_to_have_filled_a_registry_first():
    """A fresh interpreter that imports only ``minipaged.trace`` reads speculative events:
    nothing depends on which modules happened to be imported before."""
    code = (
        "from minipaged.trace import event_from_dict\n"
        "event = event_from_dict({'kind': 'spec-verify', 'seqs': [1], 'num_nodes': 3, "
        "'note': ''})\n"
        "print(type(event).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "Verify", done.stderr
    assert "minipaged.speculative.events" not in vars(events).get("__all__", ())


ONE_BLOCK = [Alloc(3, 1, 7), Free(3, 7), Incref(3, 1, 7, 2), Decref(3, 7, 1, "host")]


@pytest.mark.parametrize("event", ONE_BLOCK, ids=lambda e: e.kind)
def test_the_one_block_events_share_one_shape(event):
    assert isinstance(event, BlockChange)
    assert event.seq_ids() == frozenset({3})
    assert event.blocks_in(event.pool) == frozenset({7})
    other = "device" if event.pool == "host" else "host"
    assert event.blocks_in(other) == frozenset()
    assert event_from_dict(event.to_dict()) == event
    for method in ("blocks_in", "seq_ids"):
        assert method not in vars(type(event)), f"{type(event).__name__} repeats {method}"
