"""Random programs against a block manager, and the properties they must keep.

``BlockManagerProgram`` is a hypothesis state machine that only *drives*: it builds a block
manager of class ``manager_class`` on small pools and runs random programs of allocate / append /
fork / free / swap-out / swap-in, asking the ``can_*`` question before each action, and asserts
nothing. Beside the manager it keeps simulated KV contents: every token written is a unique
number stored at its slot, and copy-on-write copies and swaps move those numbers, so a sequence
can be read back through its block table $\\mathcal{T}_r$.

``BlockManagerMachine`` adds the properties: the shared invariants of
``minipaged.invariants``, exclusive writes (§5), read-back, and no leak once every sequence is
freed. It is the solution of exercise 06, whose students write their own
``BlockManagerMachine`` on the same driver, and the grader runs it against the block managers
of exercises 02 to 05.
"""

from __future__ import annotations

import functools
import itertools
from typing import ClassVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from minipaged import invariants
from minipaged.block_manager import BlockManager
from minipaged.grader import shrinking
from minipaged.grader.program_steps import (
    Here,
    allocate,
    append,
    construct,
    fork,
    free,
    observe,
    swap,
)
from minipaged.grader.report import note_call
from minipaged.grader.shrinking import ShrinkBudget, first_assertion


class SimulatedKV:
    """The contents of both pools as ``{pool: {slot: token}}``, and what each sequence wrote.

    Invariant of a correct block manager: reading sequence $r$ through $\\mathcal{T}_r$ gives
    exactly the tokens $r$ wrote (its parent's, up to a fork, then its own)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.slots: dict[str, dict[int, int]] = {"device": {}, "host": {}}
        self.written: dict[int, list[int]] = {}
        self._tokens = itertools.count(1)

    def write(self, seq: int, slot: int, pool: str = "device") -> None:
        token = next(self._tokens)
        self.slots[pool][slot] = token
        self.written.setdefault(seq, []).append(token)

    def copy(self, src_pool: str, src: int, dst_pool: str, dst: int) -> None:
        """Copy block ``src`` onto block ``dst``, all $B$ slots (copy-on-write, swap)."""
        b = self.block_size
        for o in range(b):
            value = self.slots[src_pool].get(src * b + o)
            if value is None:
                self.slots[dst_pool].pop(dst * b + o, None)
            else:
                self.slots[dst_pool][dst * b + o] = value

    def read(self, table) -> list[int | None]:
        """The tokens found through ``table`` (a ``BlockTable`` or ``TableState``), position by
        position."""
        pool = self.slots[table.pool]
        b = self.block_size
        return [pool.get(table.blocks[t // b] * b + t % b) for t in range(table.num_tokens)]


class BlockManagerProgram(RuleBasedStateMachine):
    """Drives a block manager through random programs; asserts nothing.

    What a property can read: ``self.manager`` (``snapshot()`` gives a ``BlockState``),
    ``self.kv`` (``SimulatedKV``: ``kv.read(table)`` against ``kv.written[seq]``) and
    ``self.last_write``: the slot the last step wrote into, if it was an append, else None;
    ``self.last_swap``: (the pool it moved them to, the sequences) if the last step swapped.
    ``self._state`` is the manager's ``BlockState`` after the last step, and ``self._pools``
    the (free, total) blocks of each pool. ``after_all_freed`` runs at the end of every
    program, once every sequence is freed. ``program`` lists the steps taken, in the block
    manager's terms; the last program run is left in the class attribute ``last_program``,
    for the grader's messages.

    Each step runs as one function of ``minipaged.grader.program_steps`` through
    ``student.run``: here, on a manager of this process, or in a grading child, on a
    student's manager there, one request a step.
    ``make(student, num_device, num_host, block_size)`` builds the manager."""

    student: object = Here(BlockManager)
    make = staticmethod(construct)
    last_program: ClassVar[list[str]] = []
    budget: ClassVar[ShrinkBudget | None] = None  # while shrinking: what it may still spend
    last_swap: tuple[str, list[int]] | None = None  # set by a swap, until its step is checked

    def __init__(self) -> None:
        if type(self).budget is not None:
            type(self).budget.spend()
        super().__init__()

    @classmethod
    def clock(cls, seconds: float):
        """A clock of ``seconds`` of the student's time where their code runs in a grading
        child (``RemoteStudent.clock``); None where it runs in this process."""
        clock = getattr(cls.student, "clock", None)
        return clock(seconds) if clock is not None else None

    def check_invariants(self, *args, **kwargs):
        try:
            super().check_invariants(*args, **kwargs)
        except AssertionError as error:
            self._failed(error)
            raise
        self.last_swap = None  # its step is checked

    def _failed(self, error: AssertionError) -> None:
        """Keep the program that broke a property, for when shrinking stops early."""
        if type(self).budget is not None:
            type(self).budget.failures.append((list(getattr(self, "program", [])), error))

    def see(self, manager, kv: SimulatedKV, last_write: int | None) -> None:
        """Look at ``manager``, a manager of this process, as if a step had just left it so."""
        self.manager, self.kv, self.last_write = manager, kv, last_write
        seen = observe(None, manager)
        self._state, self._pools = seen["state"], {"device": seen["device"], "host": seen["host"]}

    def _step(self, helper, *args) -> dict | None:
        """Run one step's ``helper`` on the manager; keep what it observed. An error of the
        student's code is noted with the step (``self.program[-1]``), the call it names."""
        try:
            seen = self.student.run(helper, self.manager, *args)
        except Exception as error:
            note_call(error, self.program[-1])
            raise
        if seen is not None:
            self._state, self._pools = (
                seen["state"],
                {"device": seen["device"], "host": seen["host"]},
            )
        return seen

    @initialize(
        block_size=st.sampled_from([2, 3, 4]),
        num_device=st.integers(2, 16),
        num_host=st.integers(0, 8),
    )
    def setup(self, block_size, num_device, num_host):
        self.manager = self.student.run(type(self).make, num_device, num_host, block_size)
        self.kv = SimulatedKV(block_size)
        self.last_write: int | None = None
        self.next_seq = 0
        name = self._step(observe)["name"]
        self.program = [f"{name}({num_device}, {num_host}, B={block_size})"]
        type(self).last_program = self.program

    def seqs_in(self, pool: str) -> list[int]:
        return sorted(s for s, t in self._state.tables.items() if t.pool == pool)

    def _pick(self, pool: str, index: int) -> int:
        seqs = self.seqs_in(pool)
        return seqs[index % len(seqs)]

    @precondition(lambda self: len(self._state.tables) < 3)  # few sequences, room to grow
    @rule(num_tokens=st.integers(1, 10))
    def allocate(self, num_tokens):
        self.last_write = None
        seq = self.next_seq
        self.program.append(f"allocate({seq}, {num_tokens})")
        seen = self._step(allocate, seq, num_tokens)
        if seen is None:
            self.program.pop()
            return
        self.next_seq += 1
        self.program[-1] += f" -> T={seen['blocks']}"
        self.kv.written[seq] = []
        table = self._state.tables[seq]
        for t in range(num_tokens):  # the prefill writes every prompt token
            self.kv.write(
                seq,
                table.blocks[t // self._state.block_size] * self._state.block_size
                + t % self._state.block_size,
            )

    @precondition(lambda self: bool(self.seqs_in("device")))
    @rule(index=st.integers(0, 7))
    def append(self, index):
        self.last_write = None
        seq = self._pick("device", index)
        self.program.append(f"append_slot({seq})")
        seen = self._step(append, seq)
        if seen is None:
            self.program.pop()
            return
        cow = f", copy-on-write {seen['cow']}" if seen["cow"] else ""
        self.program[-1] += f" -> slot {seen['slot']}{cow}"
        if seen["cow"] is not None:
            self.kv.copy("device", seen["cow"][0], "device", seen["cow"][1])
        self.kv.write(seq, seen["slot"])
        self.last_write = seen["slot"]

    @precondition(lambda self: bool(self.seqs_in("device")) and len(self._state.tables) < 5)
    @rule(index=st.integers(0, 7))
    def fork(self, index):
        self.last_write = None
        parent = self._pick("device", index)
        child, self.next_seq = self.next_seq, self.next_seq + 1
        self.program.append(f"fork({parent}, {child})")
        self._step(fork, parent, child)
        self.kv.written[child] = list(self.kv.written[parent])

    @precondition(lambda self: bool(self._state.tables))
    @rule(index=st.integers(0, 7))
    def free(self, index):
        self.last_write = None
        seqs = sorted(self._state.tables)
        seq = seqs[index % len(seqs)]
        self.program.append(f"free({seq})")
        self._step(free, [seq])
        del self.kv.written[seq]

    @precondition(lambda self: bool(self.seqs_in("device")))
    @rule(indices=st.lists(st.integers(0, 7), min_size=1, max_size=3))
    def swap_out(self, indices):
        self._swap("out", "device", "host", indices)

    @precondition(lambda self: bool(self.seqs_in("host")))
    @rule(indices=st.lists(st.integers(0, 7), min_size=1, max_size=3))
    def swap_in(self, indices):
        self._swap("in", "host", "device", indices)

    def _swap(self, direction: str, source: str, target: str, indices: list[int]) -> None:
        self.last_write = None
        group = sorted({self._pick(source, i) for i in indices})
        self.program.append(f"swap_{direction}({group})")
        seen = self._step(swap, direction, group)
        if seen is None:
            self.program.pop()
            return
        self.program[-1] += f" -> {seen['mapping']}"
        for src, dst in seen["mapping"]:
            self.kv.copy(source, src, target, dst)
        self.last_swap = (target, group)

    def teardown(self):
        if not hasattr(self, "manager"):
            return
        left = sorted(self._state.tables)
        self.program.append(f"free every sequence left: {left}")
        self._step(free, left)
        try:
            self.after_all_freed()
        except AssertionError as error:
            self._failed(error)
            raise

    def after_all_freed(self) -> None:
        """Every sequence has been freed: check what must hold now."""


class BlockManagerMachine(BlockManagerProgram):
    """The reference properties (exercise 06's solution). They read only what each step
    observed (``self._state``, ``self._pools``), so that a manager in a grading child costs one
    request a step."""

    @invariant()
    def block_state_invariants_hold(self):
        invariants.assert_holds(self._state)

    @invariant()
    def writes_land_in_private_blocks(self):
        if self.last_write is not None:
            problems = invariants.write_is_exclusive(self._state, self.last_write)
            assert not problems, f"copy-on-write broken (§5): {problems[0]}"

    @invariant()
    def swaps_move_their_tables(self):
        if self.last_swap is not None:
            pool, group = self.last_swap
            stayed = [seq for seq in group if self._state.tables[seq].pool != pool]
            assert not stayed, (
                f"the swap returned, but the tables of {stayed} are not in the {pool} pool (§6)"
            )

    @invariant()
    def every_sequence_reads_back_its_own_tokens(self):
        for seq, table in self._state.tables.items():
            read = self.kv.read(table)
            assert read == self.kv.written[seq], (
                f"seq {seq} reads back tokens {read} through T={list(table.blocks)} "
                f"({table.pool}), but wrote {self.kv.written[seq]}"
            )

    def after_all_freed(self):
        for pool, sizes in self._pools.items():
            if sizes is not None:
                free, total = sizes
                assert free == total, (
                    f"leak: every sequence is freed, yet {total - free} {pool} block(s) are in use"
                )


def run_programs(
    machine: type[BlockManagerProgram],
    manager_class: type | None = None,
    max_examples: int = 60,
    shrink: bool = True,
    student=None,
    make=None,
) -> None:
    """Run ``machine``'s properties over random programs (derandomized: the same programs
    every time) against ``manager_class``, here, or against the manager ``make(student, ...)``
    builds through ``student.run`` (a student's, in a grading child). Re-raises the first
    failure with the (shrunk, unless ``shrink`` is False) program that caused it appended to
    its message."""
    name = manager_class.__name__ if manager_class is not None else "YourBlockManager"
    cls = type(f"{machine.__name__}On{name}", (machine,), {})
    if manager_class is not None:
        cls.student, cls.make = Here(manager_class), staticmethod(construct)
    else:
        cls.student, cls.make = student, staticmethod(make)
    try:
        _run(cls, max_examples, shrink=False)
        return
    except NotImplementedError:
        raise
    except Exception as error:
        failure, program = first_assertion(error) or error, cls.last_program
    if shrink:
        again = functools.partial(_run, cls, max_examples, shrink=True)
        failure, program = shrinking.shrink(cls, again, failure, program)
    steps = "\n".join(f"  {line}" for line in program)
    failure.args = (f"{failure}\nafter this program:\n{steps}",) + failure.args[1:]
    raise failure


def _run(cls: type[BlockManagerProgram], max_examples: int, shrink: bool) -> None:
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    config = settings(
        max_examples=max_examples,
        stateful_step_count=30,
        deadline=None,
        derandomize=True,
        database=None,
        phases=phases,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    run_state_machine_as_test(cls, settings=config)
