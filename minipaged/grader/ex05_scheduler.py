"""Checks for exercise 05's second part: the scheduler's ``_preempt`` (source text §6).

The student's ``Scheduler`` in ``scheduler.py`` subclasses the library's and writes
``_preempt``; these checks run it on the library's block manager, so the two parts of the
exercise are graded apart (the first part's checks are in ``ex05_preemption``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import BlockManager
from minipaged.events import Preempt, Recompute
from minipaged.grader.report import CheckFailed, expect
from minipaged.sampling import SamplingParams
from minipaged.sequence import Sequence, SequenceGroup, Status

FULL = "the schedule() that found the pool full"
"""The step every scene's checks look at: the pool is full and someone must be preempted."""


def _request(request_id: str, arrival: int, seq_id: int, prompt_len: int) -> SequenceGroup:
    seq = Sequence(seq_id, list(range(1, prompt_len + 1)), prompt_len)
    return SequenceGroup(
        request_id, arrival, SamplingParams(max_tokens=32), [seq], torch.Generator()
    )


def _step(student, scheduler):
    """One engine step: schedule, then give every scheduled sequence its sampled token. Runs
    next to the student's code (``student.run``), since it changes their objects."""
    out = scheduler.schedule()
    for scheduled in out.scheduled:
        scheduled.seq.token_ids.append(7)
    return out


@dataclass
class Scene:
    """Requests a (arrival 0, seq 0) and b (arrival 1, seq 1) under the student's scheduler,
    and ``out``, the output of the step that had to preempt. Built next to the student's code
    (``student.run``); a check reads it through the stand-ins the grader gets."""

    bm: BlockManager
    scheduler: object
    a: SequenceGroup
    b: SequenceGroup
    out: object


def _two_requests_then_full(student, preemption: str, host: int) -> Scene:
    """7-token prompts a and b on 4 device blocks of B = 4: both prefill, both decode once,
    then a needs a fifth block and b, the latest arrival, must make room."""
    bm, scheduler, a, b = _two_decoding(student, preemption, host, b_arrival=1)
    bm.pop_events()
    return Scene(bm, scheduler, a, b, _step(student, scheduler))


def _two_decoding(student, preemption: str, host: int, b_arrival: int):
    """``(bm, scheduler, a, b)``: 7-token prompts a (arrival 0) and b on 4 device blocks of
    B = 4, both prefilled and decoded once, so the pool is full: the next step must preempt."""
    bm = BlockManager(4, host, block_size=4, watermark=0.0)
    scheduler = student.scheduler.Scheduler(bm, preemption)
    a, b = _request("a", 0, 0, 7), _request("b", b_arrival, 1, 7)
    scheduler.add(a)
    scheduler.add(b)
    _step(student, scheduler)
    _step(student, scheduler)
    return bm, scheduler, a, b


def _three_requests_then_full(student, preemption: str, host: int) -> Scene:
    """7-token prompts a (arrival 0) and b (1) and a 3-token prompt c (2) fill 5 device blocks
    of B = 4; after one decode every one of them needs a fresh block. In the step that finds
    the pool full, a takes c's one block, and b, with no later arrival left to preempt, is
    preempted itself: two victims in one step, c then b (c, seq 2, is read through
    ``out.preempted``)."""
    bm = BlockManager(5, host, block_size=4, watermark=0.0)
    scheduler = student.scheduler.Scheduler(bm, preemption)
    a, b, c = _request("a", 0, 0, 7), _request("b", 1, 1, 7), _request("c", 2, 2, 3)
    for group in (a, b, c):
        scheduler.add(group)
    _step(student, scheduler)
    _step(student, scheduler)
    bm.pop_events()
    return Scene(bm, scheduler, a, b, _step(student, scheduler))


TWO_VICTIMS = (
    "the schedule() that preempted two requests, c then b (a needed a block, then b did, with "
    "5 device blocks all held)"
)


def _expect_both_reported(scene: Scene, preemption: str) -> None:
    """``out.preempted`` of the two-victim step lists c then b: each ``_preempt`` adds its
    group to what the step's earlier calls left there."""
    preempted = _ids(scene.out.preempted)
    if preempted == ["b"]:
        raise CheckFailed(
            f"{preemption}: out.preempted of {TWO_VICTIMS} is ['b'], expected ['c', 'b']: "
            "each _preempt adds its group to out.preempted (append, +=), since one step may "
            "preempt several; assigning a new list drops the victims before it"
        )
    expect(preempted, ["c", "b"], f"{preemption}: out.preempted of {TWO_VICTIMS}")


def _ids(groups) -> list[str]:
    """The request ids of ``groups``, a queue or ``out.preempted``, which hold groups."""
    for g in groups:
        if not isinstance(g, SequenceGroup):
            raise CheckFailed(
                f"after {FULL}, a queue or out.preempted holds {g!r} ({type(g).__name__}); "
                "they hold the SequenceGroup itself, not its request id or sequences"
            )
    return [g.request_id for g in groups]


def _preempt_event(bm) -> Preempt:
    events = [e for e in bm.pop_events() if isinstance(e, Preempt)]
    if len(events) != 1:
        raise CheckFailed(
            f"the schedule() that preempted recorded {len(events)} Preempt events; _preempt "
            "records one (bm.record(Preempt(request_id, seq ids, mode))) so the TUI and traces "
            "show it"
        )
    return events[0]


def check_recompute_frees_the_blocks_and_requeues(student):
    """recompute: the latest arrival's blocks are freed, it waits again, keeping its token ids"""
    scene = student.run(_two_requests_then_full, "recompute", 0)
    b = scene.b
    expect(
        _ids(scene.out.preempted),
        ["b"],
        f"out.preempted of {FULL}, by request id",
    )
    waiting = (b.status, b in scene.scheduler.waiting)
    expect(
        waiting,
        (Status.WAITING, True),
        f"(b.status, b in waiting) after {FULL}",
    )
    if 1 in scene.bm.tables:
        raise CheckFailed(f"seq 1 of b still holds T={scene.bm.table(1).blocks}: free it")
    expect(
        len(b.seqs[0].token_ids),
        9,
        f"len(b's token ids) after {FULL}: 7 prompt + 2 generated, kept",
    )
    event = _preempt_event(scene.bm)
    expect(
        (event.request_id, tuple(event.seqs), event.mode),
        ("b", (1,), "recompute"),
        f"(request_id, seqs, mode) of the Preempt event {FULL} recorded (b holds seq 1)",
    )
    scene = student.run(_two_requests_then_full, "recompute", 8)
    expect(
        _preempt_event(scene.bm).mode,
        "recompute",
        "the Preempt's mode of schedule() under preemption='recompute' for b, one sequence, "
        "with host room to spare (only a request of several sequences is swapped whatever the "
        "policy)",
    )
    scene = student.run(_three_requests_then_full, "recompute", 0)
    _expect_both_reported(scene, "recompute")
    held = {seq: scene.bm.table(seq).blocks for seq in (1, 2) if seq in scene.bm.tables}
    if held:
        raise CheckFailed(
            f"after {TWO_VICTIMS}, sequences of the victims still hold tables {held}: free them"
        )


def check_recomputed_request_prefills_prompt_and_generated(student):
    """a recomputed request comes back as one prefill of [Prompt, Generated]"""
    scene = student.run(_two_requests_then_full, "recompute", 0)
    bm = scene.bm
    bm.free(0)
    scene.scheduler.finish(scene.a)
    out = student.run(_step, scene.scheduler)
    expect(
        [(s.seq.seq_id, s.num_query_tokens) for s in out.scheduled],
        [(1, 9)],
        "(seq, tokens prefilled) of the schedule() after finish(a)",
    )
    recomputes = [e for e in bm.pop_events() if isinstance(e, Recompute)]
    expect(
        [(e.seq, e.num_tokens) for e in recomputes],
        [(1, 9)],
        "(seq, num_tokens) of the Recompute events of the schedule() after finish(a)",
    )


def check_swap_preemption_moves_the_blocks_to_host(student):
    """swap: the latest arrival's blocks move to the host pool and it joins the swapped queue"""
    scene = student.run(_two_requests_then_full, "swap", 4)
    b, out = scene.b, scene.out
    expect(
        _ids(out.preempted),
        ["b"],
        f"out.preempted of {FULL}, by request id",
    )
    swapped = (b.status, b in scene.scheduler.swapped)
    expect(
        swapped,
        (Status.SWAPPED, True),
        f"(b.status, b in swapped) after {FULL}",
    )
    expect(scene.bm.table(1).pool, "host", f"T_1.pool after {FULL}")
    expect(
        len(out.blocks_to_swap_out),
        2,
        f"len(out.blocks_to_swap_out) of {FULL}: b's 2 blocks",
    )
    event = _preempt_event(scene.bm)
    expect(
        (event.request_id, tuple(event.seqs), event.mode),
        ("b", (1,), "swap"),
        f"(request_id, seqs, mode) of the Preempt event {FULL} recorded (b holds seq 1)",
    )
    scene = student.run(_three_requests_then_full, "swap", 4)
    _expect_both_reported(scene, "swap")
    copies = len(scene.out.blocks_to_swap_out)
    if copies == 2:
        raise CheckFailed(
            f"out.blocks_to_swap_out of {TWO_VICTIMS} holds 2 copies, b's alone, expected 3: "
            "c's 1 block and b's 2. Add each victim's copies to it (+=): assigning the list "
            "swap_out returns drops the copies of the victims before, whose blocks the device "
            "then reuses with their keys and values never copied"
        )
    expect(copies, 3, f"len(out.blocks_to_swap_out) of {TWO_VICTIMS}: c's 1 block and b's 2")


def check_swap_falls_back_to_recompute_without_host_room(student):
    """swap with no room in the host pool falls back to recompute"""
    scene = student.run(_two_requests_then_full, "swap", 0)
    waiting = (scene.b.status, scene.b in scene.scheduler.waiting)
    expect(
        waiting,
        (Status.WAITING, True),
        f"(b.status, b in waiting) after {FULL}",
    )
    expect(
        _preempt_event(scene.bm).mode,
        "recompute",
        f"the mode of the Preempt {FULL} recorded, with no host pool",
    )
    try:
        scene = student.run(_two_requests_then_full, "swap", 1)
    except OutOfBlocks as error:
        raise CheckFailed(
            f"{FULL}, with a host pool of 1 block and b holding 2, raised OutOfBlocks "
            f"({error}): _preempt swapped b out though the host cannot hold it. A host with "
            "some room is not room for the group: ask bm.can_swap_out(ids), which counts the "
            "group's distinct blocks, and recompute when it says no"
        ) from None
    expect(
        (_preempt_event(scene.bm).mode, scene.b.status),
        ("recompute", Status.WAITING),
        f"(mode of the Preempt, b.status) {FULL} recorded, with a host pool of 1 block and b "
        "holding 2: a host with some room is not room for the group (ask "
        "bm.can_swap_out(ids), which counts the group's distinct blocks)",
    )


def _requeue_scene(student, preemption: str, host: int) -> tuple[Scene, list[str]]:
    """The full-pool scene with arrivals a=0 and b=2, and two more requests in the queue b
    will join: z (arrival 1, earlier than b) and c (arrival 3, later). Returns the scene and
    that queue's request ids after b was preempted."""
    bm, scheduler, a, b = _two_decoding(student, preemption, host, b_arrival=2)
    queue = scheduler.swapped if preemption == "swap" else scheduler.waiting
    status = Status.SWAPPED if preemption == "swap" else Status.WAITING
    for request_id, arrival, seq_id in (("z", 1, 8), ("c", 3, 9)):
        group = _request(request_id, arrival, seq_id, 3)
        group.status = status
        queue.append(group)
    bm.pop_events()
    scene = Scene(bm, scheduler, a, b, _step(student, scheduler))
    return scene, [g.request_id for g in queue]


def check_a_victim_keeps_its_arrival_order(student):
    """a preempted request rejoins the waiting or swapped queue in arrival order"""
    for preemption, host, name in (("recompute", 0, "waiting"), ("swap", 4, "swapped")):
        scene, queue = student.run(_requeue_scene, preemption, host)
        expect(
            _ids(scene.out.preempted),
            ["b"],
            f"{preemption}: out.preempted of {FULL}, by request id",
        )
        if queue != ["z", "b", "c"]:
            raise CheckFailed(
                f"{preemption}: before {FULL}, the {name} queue held z (arrival 1) and c "
                f"(arrival 3); when b (arrival 2) was preempted it is now {queue}, expected "
                "['z', 'b', 'c']. A victim goes back in arrival order: behind every earlier "
                "request, ahead of every later one (appending it lets c jump ahead; inserting it "
                "at the front jumps ahead of z)"
            )


def check_the_preempt_event_comes_first(student):
    """the Preempt event is recorded before the Free or SwapOut events it causes"""
    for preemption, host, caused in (("recompute", 0, "free"), ("swap", 4, "swap-out")):
        scene = student.run(_two_requests_then_full, preemption, host)
        kinds = [e.kind for e in scene.bm.pop_events()]
        if "preempt" not in kinds or caused not in kinds:
            raise CheckFailed(
                f"{preemption}: {FULL} recorded the events {kinds}; expected a preempt "
                f"event followed by b's {caused} events"
            )
        if kinds.index("preempt") > kinds.index(caused):
            raise CheckFailed(
                f"{preemption}: {FULL} recorded the events {kinds}: the {caused} events "
                "come before the preempt that caused them, so the TUI and traces tell the "
                "story backwards. Record Preempt first, then free or swap out"
            )


def _two_samples_then_full(student, host: int = 4) -> Scene:
    """b samples n = 2 after its prefill, so its prompt's blocks are shared; then both of b's
    sequences must copy shared block 1 and only one block is free. ``host``: the host pool's
    blocks."""
    bm = BlockManager(5, host, block_size=4, watermark=0.0)
    scheduler = student.scheduler.Scheduler(bm, "recompute")
    a, b = _request("a", 0, 0, 7), _request("b", 1, 1, 7)
    scheduler.add(a)
    scheduler.add(b)
    _step(student, scheduler)
    bm.fork(1, 2)
    b.seqs.append(Sequence(2, list(b.seqs[0].token_ids), 7))
    bm.pop_events()
    return Scene(bm, scheduler, a, b, _step(student, scheduler))


def check_a_request_with_several_sequences_is_swapped(student):
    """a request whose sequences share blocks is swapped whatever the policy, to keep sharing"""
    scene = student.run(_two_samples_then_full)
    bm, out = scene.bm, scene.out
    expect(
        _ids(out.preempted),
        ["b"],
        f"out.preempted of {FULL}, by request id",
    )
    event = _preempt_event(bm)
    expect(
        event.mode,
        "swap",
        f"the mode of the Preempt {FULL} recorded, for a request of 2 sequences",
    )
    expect(
        tuple(event.seqs),
        (1, 2),
        f"the seqs of the Preempt {FULL} recorded: every sequence of b",
    )
    expect(
        bm.table(1).blocks,
        bm.table(2).blocks,
        f"T_1 against T_2 in the host pool after {FULL}",
    )


def check_a_request_of_several_sequences_without_host_room_is_recomputed(student):
    """a request of several sequences that the host cannot hold is recomputed: every one of its
    sequences is freed"""
    scene = student.run(_two_samples_then_full, 0)
    bm, b = scene.bm, scene.b
    expect(
        _ids(scene.out.preempted),
        ["b"],
        f"out.preempted of {FULL}, by request id",
    )
    event = _preempt_event(bm)
    expect(
        (event.mode, tuple(event.seqs)),
        ("recompute", (1, 2)),
        f"(mode, seqs) of the Preempt {FULL} recorded for b, 2 sequences, with no host pool",
    )
    held = {seq: bm.table(seq).blocks for seq in (1, 2) if seq in bm.tables}
    if held:
        raise CheckFailed(
            f"after {FULL}, b was preempted by recomputation, yet its sequences still hold "
            f"tables {held}: free every sequence of the request (for seq in group.seqs), not "
            "only the first"
        )
    waiting = (b.status, b in scene.scheduler.waiting)
    expect(
        waiting,
        (Status.WAITING, True),
        f"(b.status, b in waiting) after {FULL}",
    )
