"""The steps of a random program against a block manager (``minipaged.grader.properties``), each
one function that acts and then observes.

A step runs where the manager is: in this process, or next to a student's code in a grading
child (``student.run(step, manager, ...)``), so that a step costs one request. Each asks the
``can_*`` question first, as the engine does, and returns ``None`` when the answer is no;
otherwise what the action returned and ``observe``'s view of the manager afterwards.
"""

from __future__ import annotations


def observe(student, manager) -> dict:
    """What a property may read of ``manager`` after a step: its ``BlockState`` and the sizes of
    both pools' free lists, as data."""
    host = manager.host
    return {
        "name": type(manager).__name__,
        "state": manager.snapshot(),
        "device": (manager.device.num_free, manager.device.num_blocks),
        "host": None if host is None else (host.num_free, host.num_blocks),
    }


def allocate(student, manager, seq: int, num_tokens: int) -> dict | None:
    if manager.blocks_needed(num_tokens) > manager.device.num_blocks:
        return None
    if not manager.can_allocate(num_tokens):
        return None
    return {"blocks": list(manager.allocate(seq, num_tokens).blocks), **observe(student, manager)}


def append(student, manager, seq: int) -> dict | None:
    if not manager.can_append(seq):
        return None
    result = manager.append_slot(seq)
    return {"slot": result.slot, "cow": result.cow, **observe(student, manager)}


def fork(student, manager, parent: int, child: int) -> dict:
    manager.fork(parent, child)
    return observe(student, manager)


def free(student, manager, seqs: list[int]) -> dict:
    for seq in seqs:
        manager.free(seq)
    return observe(student, manager)


def swap(student, manager, direction: str, group: list[int]) -> dict | None:
    can, swap = (
        (manager.can_swap_out, manager.swap_out)
        if direction == "out"
        else (manager.can_swap_in, manager.swap_in)
    )
    if not can(group):
        return None
    return {"mapping": [tuple(pair) for pair in swap(group)], **observe(student, manager)}


def students_manager(student, num_device: int, num_host: int, block_size: int):
    """The student's ``BlockManager`` (exercises 03 to 05) on fresh pools."""
    return student.block_manager.BlockManager(num_device, num_host, block_size, watermark=0.0)


class Here:
    """Runs a step's helper on a manager in this process (``Student.run``'s contract)."""

    def __init__(self, manager_class: type) -> None:
        self.manager_class = manager_class

    def run(self, helper, *args):
        return helper(self, *args)


def construct(here: Here, num_device: int, num_host: int, block_size: int):
    return here.manager_class(num_device, num_host, block_size, watermark=0.0)
