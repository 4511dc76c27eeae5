"""The events a student's block manager records are checked against what it did
(``minipaged.grader.recorded_events``): every way of recording a call's events wrong fails, with
the recorded and the expected events shown, and the two honest answers (the library's events,
and none at all) pass. The wrong records are generated from the library's own, event by event
and field by field (a wrong sequence, block, index, refcount or pool; a pair reversed; an event
recorded twice, or left out among others of its kind; one recorded for a change the call did
not make), for each method a student writes that records events."""

from __future__ import annotations

import dataclasses

import pytest

from minipaged import events
from minipaged.block_manager import BlockManager
from minipaged.grader.recorded_events import KINDS, Checked
from minipaged.grader.report import CheckFailed
from minipaged.grader.witness import DERIVED


def _allocate(bm):
    return "allocate", (0, 9)  # T_0 = [0, 1, 2], the last partly filled


def _fork(bm):
    bm.allocate(0, 6)  # T_0 = [0, 1]
    return "fork", (0, 1)


def _free_a_sharer(bm):
    bm.allocate(0, 6)
    bm.fork(0, 1)
    bm.append_slot(1)  # copy-on-write: T_1 = [0, 2], R[0] = 2
    return "free", (1,)


def _append_a_fresh_block(bm):
    bm.allocate(0, 4)  # the last block is full
    return "append_slot", (0,)


def _append_with_copy_on_write(bm):
    bm.allocate(0, 6)
    bm.fork(0, 1)
    return "append_slot", (1,)


def _swap_out(bm):
    bm.allocate(0, 6)
    bm.allocate(1, 5)  # T_1 = [2, 3]
    return "swap_out", ([1],)


def _swap_in_a_group(bm):
    bm.allocate(0, 6)
    bm.fork(0, 1)
    bm.swap_out([0, 1])
    bm.allocate(2, 6)  # the swap-in lands on other device blocks than it left
    return "swap_in", ([0, 1],)


SCENES = (_allocate, _fork, _free_a_sharer, _append_a_fresh_block, _append_with_copy_on_write)
SCENES += (_swap_out, _swap_in_a_group)


def _method(scene) -> str:
    """The method ``scene`` calls."""
    return scene(BlockManager(8, 8, block_size=4))[0]


SWAPPED = (("parent", "child"), ("src", "dst"))


def _manager(cls):
    return Checked(cls(8, 8, block_size=4, watermark=0.0))


def _recording(method: str, rewrite) -> type:
    """The library's manager, with ``method`` recording ``rewrite(what the library records)``."""

    def call(self, *args):
        result = getattr(BlockManager, method)(self, *args)
        for event in rewrite(self.pop_events()):
            self.record(event)
        return result

    return type("BlockManager", (BlockManager,), {method: call})


def _wrong(value):
    """A value of the same type that says something else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value + 7
    if isinstance(value, str):
        return "host" if value == "device" else "device"
    if value and all(isinstance(pair, tuple) for pair in value):
        return tuple((b, a) for a, b in value)  # each pair reversed
    return tuple(v + 7 for v in value) if value else (7,)


def wrong_records(recorded: list, kinds: tuple[str, ...]):
    """(what is wrong, the events recorded instead) for each way to get one event wrong."""
    for i, event in enumerate(recorded):
        if event.kind not in kinds:
            continue
        before, after = recorded[:i], recorded[i + 1 :]
        yield f"{event!r} recorded twice", [*before, event, event, *after]
        if sum(e.kind == event.kind for e in recorded) > 1:
            yield f"{event!r} left out", [*before, *after]
        for field in dataclasses.fields(event):
            value = _wrong(getattr(event, field.name))
            if value is not None:
                wrong = dataclasses.replace(event, **{field.name: value})
                yield f"{event!r} with a wrong {field.name}", [*before, wrong, *after]
        for a, b in SWAPPED:
            if hasattr(event, a):
                swap = {a: getattr(event, b), b: getattr(event, a)}
                swapped = dataclasses.replace(event, **swap)
                yield f"{event!r} with {a} and {b} swapped", [*before, swapped, *after]


@pytest.mark.parametrize("scene", SCENES, ids=lambda scene: scene.__name__.strip("_"))
def test_each_wrong_record_of_a_call_fails_showing_both(scene):
    probe = BlockManager(8, 8, block_size=4, watermark=0.0)
    method, args = scene(probe)
    probe.pop_events()
    getattr(probe, method)(*args)
    library = probe.pop_events()
    wrongs = list(wrong_records(library, KINDS[method]))
    assert len(wrongs) >= 3, wrongs
    passed = []
    for what, instead in wrongs:
        bm = _manager(_recording(method, lambda _, instead=instead: list(instead)))
        scene(bm)
        try:
            getattr(bm, method)(*args)
        except CheckFailed as failure:
            message = str(failure)
            shown = [e for e in instead if e.kind in KINDS[method] and repr(e) in message]
            assert shown, f"{what}: the recorded events are not shown: {message}"
            assert "records [" in message, f"{what}: the expected events are not shown: {message}"
        else:
            passed.append(what)
    assert not passed, f"{method}{args}: wrong records graded right: {passed}"


@pytest.mark.parametrize("scene", SCENES, ids=lambda scene: scene.__name__.strip("_"))
@pytest.mark.parametrize("records", ["the library's events", "no event"])
def test_honest_records_pass(scene, records):
    keep = records == "the library's events"
    bm = _manager(_recording(_method(scene), lambda recorded: recorded * keep))
    method, args = scene(bm)
    getattr(bm, method)(*args)  # raises CheckFailed if graded wrong


def test_an_event_of_a_change_the_call_did_not_make_fails():
    """An append that writes in place allocates and copies nothing: an ``Alloc`` or a
    ``CowCopy`` it records was not done."""
    made = [events.Alloc(0, 1, 1), events.CowCopy(0, 5, 1, 1, 2, 1, 2)]
    for event in made:
        bm = _manager(_recording("append_slot", lambda recorded, event=event: [*recorded, event]))
        bm.allocate(0, 5)  # T_0 = [0, 1], block 1 has room
        with pytest.raises(
            CheckFailed, match=r"recorded the .* events \[.*\], but .* records none"
        ):
            bm.append_slot(0)


def test_every_method_the_witness_derives_is_checked():
    assert set(KINDS) == set(DERIVED)
    assert {_method(scene) for scene in SCENES} == set(DERIVED)


@pytest.mark.parametrize("prefix_caching", ["hash", "radix"])
def test_an_allocate_that_shares_cached_blocks_is_graded_by_its_increfs(prefix_caching):
    """A prefix hit shares blocks another table holds (an ``Incref``, R[p] > 1) and takes the
    rest fresh (an ``Alloc``): the library's events for it pass, and the witness derives the
    same ones for an ``allocate`` that records none."""
    from minipaged.grader.witness import witnessed

    prompt = list(range(1, 10))
    plain, checked = (
        make(BlockManager(8, 0, block_size=4, watermark=0.0, prefix_caching=prefix_caching))
        for make in (lambda bm: bm, Checked)
    )
    for bm in (plain, checked):
        bm.allocate(0, 9, prompt)
        bm.pop_events()
        bm.allocate(1, 9, prompt)  # raises CheckFailed where graded wrong
    library = [e for e in plain.pop_events() if e.kind in KINDS["allocate"]]
    assert [e.kind for e in library] == ["incref", "incref", "alloc"]

    class Silent(BlockManager):
        def allocate(self, *args):
            table = super().allocate(*args)
            self.pop_events()
            return table

    silent = witnessed(Silent)(8, 0, block_size=4, watermark=0.0, prefix_caching=prefix_caching)
    silent.allocate(0, 9, prompt)
    silent.pop_events()
    silent.allocate(1, 9, prompt)
    assert sorted(map(repr, silent.pop_events())) == sorted(map(repr, library))


def _cow_without_its_record_or_copy(bm, seq):
    """LostCowCopy's bug, with a wrong record too: the pair it returns and the events it
    records disagree with what it did."""
    result = BlockManager.append_slot(bm, seq)
    bm.pop_events()
    bm.record(events.CowCopy(1, 6, 1, 0, 9, 2, 1))
    return type(result)(result.slot)


@pytest.mark.parametrize("own_check_fails", [True, False])
def test_a_criterion_s_own_error_is_shown_before_an_event_mismatch(own_check_fails):
    """Under ``events_checked_last`` (how the grader runs every criterion) an event mismatch
    waits: the check's own error about the state is what the student reads, and the mismatch
    only where the checks found nothing else. Outside it, the mismatch is raised at once."""
    from minipaged.grader.recorded_events import events_checked_last

    cls = type("BlockManager", (BlockManager,), {"append_slot": _cow_without_its_record_or_copy})

    def check():
        bm = _manager(cls)
        bm.allocate(0, 6)
        bm.fork(0, 1)
        result = bm.append_slot(1)
        if own_check_fails and result.cow is None:
            raise CheckFailed("append_slot(1) returned cow=None")

    with pytest.raises(CheckFailed) as failure, events_checked_last():
        check()
    expected = "returned cow=None" if own_check_fails else "recorded the cow-copy events"
    assert expected in str(failure.value)
    with pytest.raises(CheckFailed, match="recorded the cow-copy events"):
        check()
