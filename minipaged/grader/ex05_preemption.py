"""Checks for exercise 05: preemption by swapping and by recomputation (source text §6).

The student writes ``BlockManager.swap_out`` / ``swap_in`` in ``block_manager.py`` and
``Scheduler._preempt`` in ``scheduler.py``, each a subclass of the library's class. The
scheduler checks run on the library's block manager, so the two parts are graded apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import BlockManager
from minipaged.events import Preempt, Recompute
from minipaged.grader.program_steps import students_manager
from minipaged.grader.properties import BlockManagerMachine, SimulatedKV, run_programs
from minipaged.grader.report import CheckFailed, Criterion, expect, expect_refused
from minipaged.sampling import SamplingParams
from minipaged.sequence import Sequence, SequenceGroup, Status


def block_manager_class(student) -> type[BlockManager]:
    return student.block_manager.BlockManager


def _manager(student, device: int = 8, host: int = 8):
    return student.block_manager.BlockManager(device, host, block_size=4, watermark=0.0)


def check_swap_out_moves_the_table_to_host(student):
    """swap_out gives each block a host block, frees the device blocks and returns the pairs"""
    bm = _manager(student)
    bm.allocate(0, 6)  # T_0 = [0, 1]
    bm.allocate(1, 5)  # T_1 = [2, 3]
    pairs = bm.swap_out([1])
    expect(pairs, [(2, 0), (3, 1)], "swap_out([1]): the (device, host) copies to run")
    table = bm.table(1)
    expect((table.pool, table.blocks), ("host", [0, 1]), "(pool, T_1) after swap_out([1])")
    expect(bm.device.num_free, 6, "free device blocks after swapping seq 1 out")
    expect(bm.host.refcounts()[:2], (1, 1), "host R of the two copies")


def check_a_block_shared_inside_the_group_is_copied_once(student):
    """a block two swapped sequences share gets one host block, with R = 2, and stays shared"""
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.fork(0, 1)  # T_0 = T_1 = [0, 1], R = 2
    expect(bm.swap_out([0, 1]), [(0, 0), (1, 1)], "swap_out([0, 1]): one copy per block")
    expect(bm.host.refcounts()[:2], (2, 2), "host R after swapping both sharers out")
    pairs = bm.swap_in([0, 1])
    expect(len(pairs), 2, "the number of copies swap_in([0, 1]) returns")
    t0, t1 = bm.table(0), bm.table(1)
    expect(t0.blocks, t1.blocks, "T_0 against T_1 back on the device: still shared")
    expect([bm.refcount(p) for p in t0.blocks], [2, 2], "device R back on the device")
    expect(bm.host.num_free, 8, "free host blocks after swap_in")


def check_swapping_one_sharer_out_frees_nothing(student):
    """swapping out one of two sharers frees no device block: R[p] drops from 2 to 1"""
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.fork(0, 1)
    bm.swap_out([1])
    expect(bm.device.num_free, 6, "free device blocks: seq 0 still holds both")
    expect([bm.refcount(p) for p in (0, 1)], [1, 1], "device [R[0], R[1]]")
    bm.swap_in([1])
    if set(bm.table(1).blocks) & set(bm.table(0).blocks):
        raise CheckFailed(
            f"after swap_in([1]), T_1={bm.table(1).blocks} shares blocks with "
            f"T_0={bm.table(0).blocks}. Seq 1's blocks were copied to the host alone, so they "
            "must come back into fresh device blocks of its own, each with R = 1"
        )


def check_swap_in_restores_the_contents(student):
    """after swap-out, reuse of its device blocks and swap-in, a sequence reads back its tokens"""
    bm = _manager(student, device=6)
    kv = SimulatedKV(4)
    for seq, length in ((0, 6), (1, 5)):
        table = bm.allocate(seq, length)
        for t in range(length):
            kv.write(seq, table.slot(t))
    for device_block, host_block in bm.swap_out([1]):
        kv.copy("device", device_block, "host", host_block)
    table = bm.allocate(2, 8)  # reuses seq 1's old device blocks and overwrites them
    for t in range(8):
        kv.write(2, table.slot(t))
    bm.free(0)
    for host_block, device_block in bm.swap_in([1]):
        kv.copy("host", host_block, "device", device_block)
    table = bm.table(1)
    expect(table.pool, "device", "seq 1's pool after swap_in")
    expect(kv.read(table), kv.written[1], f"seq 1's tokens read through T_1={table.blocks}")


def check_swaps_that_do_not_fit_are_refused(student):
    """a swap the other pool cannot hold raises OutOfBlocks and changes nothing"""
    for host, lengths, what in [
        (1, [6], "swap_out([0]) of 2 blocks to 1 host block"),
        (
            3,
            [6, 6],
            "swap_out([0, 1]) of 4 distinct blocks to 3 host blocks (count the whole group's "
            "blocks before moving any table)",
        ),
    ]:
        bm = _manager(student, device=8, host=host)
        for seq, length in enumerate(lengths):
            bm.allocate(seq, length)
        swap = partial(bm.swap_out, list(range(len(lengths))))
        expect_refused(swap, OutOfBlocks, what, bm.snapshot, where=student.where)


def check_swap_in_refuses_a_sequence_on_the_device(student):
    """swap_in of a sequence that is not in host memory raises ValueError and changes nothing"""
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.allocate(1, 5)
    bm.swap_out([1])
    for seqs, what in [
        ([0], "swap_in([0]) of seq 0, on the device"),
        (
            [1, 0],
            "swap_in([1, 0]) of seq 1, on the host, and seq 0, on the device (check every "
            "sequence before moving any)",
        ),
    ]:
        swap = partial(bm.swap_in, seqs)
        expect_refused(swap, ValueError, what, bm.snapshot, where=student.where)


def check_random_programs_keep_every_invariant(student):
    """random programs of allocate / fork / append / free / swap keep every invariant"""
    run_programs(BlockManagerMachine, student=student, make=students_manager)


# -- the scheduler ---------------------------------------------------------------------------


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
    bm = BlockManager(4, host, block_size=4, watermark=0.0)
    scheduler = student.scheduler.Scheduler(bm, preemption)
    a, b = _request("a", 0, 0, 7), _request("b", 1, 1, 7)
    scheduler.add(a)
    scheduler.add(b)
    _step(student, scheduler)
    _step(student, scheduler)
    bm.pop_events()
    return Scene(bm, scheduler, a, b, _step(student, scheduler))


def _ids(groups) -> list[str]:
    """The request ids of ``groups``, a queue or ``out.preempted``, which hold groups."""
    for g in groups:
        if not isinstance(g, SequenceGroup):
            raise CheckFailed(
                f"a queue or out.preempted holds {g!r} ({type(g).__name__}); they hold the "
                "SequenceGroup itself, not its request id or sequences"
            )
    return [g.request_id for g in groups]


def _preempt_event(bm) -> Preempt:
    events = [e for e in bm.pop_events() if isinstance(e, Preempt)]
    if len(events) != 1:
        raise CheckFailed(
            f"the step recorded {len(events)} Preempt events; _preempt records one "
            "(bm.record(Preempt(request_id, seq ids, mode))) so the TUI and traces show it"
        )
    return events[0]


def check_recompute_frees_the_blocks_and_requeues(student):
    """recompute: the latest arrival's blocks are freed, it waits again, keeping its token ids"""
    scene = student.run(_two_requests_then_full, "recompute", 0)
    b = scene.b
    expect(_ids(scene.out.preempted), ["b"], "the step's preempted requests, by id")
    waiting = (b.status, b in scene.scheduler.waiting)
    expect(waiting, (Status.WAITING, True), "(b.status, b in the waiting queue)")
    if 1 in scene.bm.tables:
        raise CheckFailed(f"seq 1 of b still holds T={scene.bm.table(1).blocks}: free it")
    expect(len(b.seqs[0].token_ids), 9, "b's token ids: 7 prompt + 2 generated, kept")
    event = _preempt_event(scene.bm)
    expect((event.request_id, event.mode), ("b", "recompute"), "(request, mode) of the Preempt")
    scene = student.run(_two_requests_then_full, "recompute", 8)
    expect(
        _preempt_event(scene.bm).mode,
        "recompute",
        "the mode under preemption='recompute' for b, one sequence, with host room to spare "
        "(only a request of several sequences is swapped whatever the policy)",
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
        "the step after a finishes: (seq, tokens prefilled)",
    )
    recomputes = [e for e in bm.pop_events() if isinstance(e, Recompute)]
    expect([(e.seq, e.num_tokens) for e in recomputes], [(1, 9)], "the Recompute events")


def check_swap_preemption_moves_the_blocks_to_host(student):
    """swap: the latest arrival's blocks move to the host pool and it joins the swapped queue"""
    scene = student.run(_two_requests_then_full, "swap", 4)
    b, out = scene.b, scene.out
    expect(_ids(out.preempted), ["b"], "the step's preempted requests, by id")
    swapped = (b.status, b in scene.scheduler.swapped)
    expect(swapped, (Status.SWAPPED, True), "(b.status, b in the swapped queue)")
    expect(scene.bm.table(1).pool, "host", "seq 1's pool")
    expect(len(out.blocks_to_swap_out), 2, "the step's (device, host) copies for b's 2 blocks")
    event = _preempt_event(scene.bm)
    expect((event.request_id, event.mode), ("b", "swap"), "(request, mode) of the Preempt")


def check_swap_falls_back_to_recompute_without_host_room(student):
    """swap with no room in the host pool falls back to recompute"""
    scene = student.run(_two_requests_then_full, "swap", 0)
    waiting = (scene.b.status, scene.b in scene.scheduler.waiting)
    expect(waiting, (Status.WAITING, True), "(b.status, b in the waiting queue)")
    expect(_preempt_event(scene.bm).mode, "recompute", "the Preempt's mode with no host pool")


def _requeue_scene(student, preemption: str, host: int) -> tuple[Scene, list[str]]:
    """The full-pool scene with arrivals a=0 and b=2, and two more requests in the queue b
    will join: z (arrival 1, earlier than b) and c (arrival 3, later). Returns the scene and
    that queue's request ids after b was preempted."""
    bm = BlockManager(4, host, block_size=4, watermark=0.0)
    scheduler = student.scheduler.Scheduler(bm, preemption)
    a, b = _request("a", 0, 0, 7), _request("b", 2, 1, 7)
    scheduler.add(a)
    scheduler.add(b)
    _step(student, scheduler)
    _step(student, scheduler)
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
        expect(_ids(scene.out.preempted), ["b"], f"{preemption}: the preempted requests, by id")
        if queue != ["z", "b", "c"]:
            raise CheckFailed(
                f"{preemption}: the {name} queue held z (arrival 1) and c (arrival 3) when b "
                f"(arrival 2) was preempted; it is now {queue}, expected ['z', 'b', 'c']. "
                "A victim goes back in arrival order: behind every earlier request, ahead of "
                "every later one (appending it lets c jump ahead; inserting it at the front "
                "jumps ahead of z)"
            )


def check_the_preempt_event_comes_first(student):
    """the Preempt event is recorded before the Free or SwapOut events it causes"""
    for preemption, host, caused in (("recompute", 0, "free"), ("swap", 4, "swap-out")):
        scene = student.run(_two_requests_then_full, preemption, host)
        kinds = [e.kind for e in scene.bm.pop_events()]
        if "preempt" not in kinds or caused not in kinds:
            raise CheckFailed(
                f"{preemption}: the step recorded the events {kinds}; expected a preempt "
                f"event followed by b's {caused} events"
            )
        if kinds.index("preempt") > kinds.index(caused):
            raise CheckFailed(
                f"{preemption}: the step recorded the events {kinds}: the {caused} events "
                "come before the preempt that caused them, so the TUI and traces tell the "
                "story backwards. Record Preempt first, then free or swap out"
            )


def _two_samples_then_full(student) -> Scene:
    """b samples n = 2 after its prefill, so its prompt's blocks are shared; then both of b's
    sequences must copy shared block 1 and only one block is free."""
    bm = BlockManager(5, 4, block_size=4, watermark=0.0)
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
    expect(_ids(out.preempted), ["b"], "the step's preempted requests, by id")
    event = _preempt_event(bm)
    expect(event.mode, "swap", "the mode for a request of 2 sequences")
    expect(tuple(event.seqs), (1, 2), "the Preempt's seqs: every sequence of b, by id")
    expect(bm.table(1).blocks, bm.table(2).blocks, "T_1 against T_2 in the host pool")


CRITERIA = tuple(
    Criterion(check)
    for check in (
        check_swap_out_moves_the_table_to_host,
        check_a_block_shared_inside_the_group_is_copied_once,
        check_swapping_one_sharer_out_frees_nothing,
        check_swap_in_restores_the_contents,
        check_swaps_that_do_not_fit_are_refused,
        check_swap_in_refuses_a_sequence_on_the_device,
        check_random_programs_keep_every_invariant,
        check_recompute_frees_the_blocks_and_requeues,
        check_recomputed_request_prefills_prompt_and_generated,
        check_swap_preemption_moves_the_blocks_to_host,
        check_swap_falls_back_to_recompute_without_host_room,
        check_a_request_with_several_sequences_is_swapped,
        check_a_victim_keeps_its_arrival_order,
        check_the_preempt_event_comes_first,
    )
)
