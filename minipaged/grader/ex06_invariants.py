"""Checks for exercise 06: write the invariants.

The student's ``properties.py`` defines ``BlockManagerMachine``, a subclass of
``minipaged.grader.properties.BlockManagerProgram`` (which drives random programs and asserts
nothing) with the student's ``@invariant`` methods and ``after_all_freed``. Graded three
ways: no false alarm on the library's ``BlockManager``; each of the five rules on its own, on
hand-built states that break that rule alone (``minipaged.grader.broken_states``); and a
failed assertion against every member of the bug zoo (``minipaged.grader.bug_zoo``), each of
which breaks rules silently, the way real code does.

The programs are the same at every grading (derandomized), so that a borderline answer gets the
same grade each time; their states are then public, and properties that failed on any state
missing from a stored set of the library's (every zoo member's broken states are missing from
it) passed every criterion, checking nothing. So the student's properties see every state
``disguised`` (``minipaged.grader.disguise``), drawn anew at each grading.

A property that failed on every state failed on every broken one too; so a rule criterion also
asks that the properties hold on the sound state each broken one was made from
(``BrokenState.sound``), disguised the same way: failing there is a false alarm.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis.stateful import invariant

from minipaged import invariants
from minipaged.block_manager import BlockManager, BlockState
from minipaged.block_table import BlockTable
from minipaged.grader import bug_zoo
from minipaged.grader.broken_states import BROKEN_STATES, BrokenState, PresetAllocator
from minipaged.grader.disguise import disguise, disguised
from minipaged.grader.properties import BlockManagerProgram, SimulatedKV, run_programs
from minipaged.grader.report import CheckFailed, Criterion


@dataclass(frozen=True)
class Verdict:
    """What the student's properties said of one state: an assert failed (``message``), they
    crashed (``crash``: the error and the line), or they held (neither)."""

    failed: bool
    message: str = ""
    crash: str = ""


def judge(student, state: BlockState, kv_slots: dict, written: dict, last_write, end: bool):
    """In the student's process: run their properties on a state given only as data (a
    ``BlockState`` and the simulated KV contents), so that nothing tells them which manager,
    correct or broken, made it. ``end``: run ``after_all_freed`` (a program's end) instead of
    the ``@invariant`` methods."""
    machine = student.properties.BlockManagerMachine()
    kv = SimulatedKV(state.block_size)
    kv.slots = {pool: dict(kv_slots.get(pool, {})) for pool in ("device", "host")}
    kv.written = {seq: list(tokens) for seq, tokens in written.items()}
    machine.see(_manager_in(state), kv, last_write)
    machine.program, machine.next_seq = ["a state"], 10**6
    try:
        if end:
            machine.after_all_freed()
        else:
            for inv in machine.invariants:
                if all(holds(machine) for holds in inv.preconditions):
                    inv.function(machine)
    except AssertionError as error:
        return Verdict(True, str(error))
    except NotImplementedError:
        raise
    except Exception as error:
        return Verdict(False, crash=f"{type(error).__name__}: {error}{student.where(error)}")
    return Verdict(False)


def _manager_in(state: BlockState) -> BlockManager:
    """A ``BlockManager`` whose allocators and tables are exactly ``state``'s."""
    host = len(state.host_refcounts)
    manager = BlockManager(len(state.device_refcounts), host, state.block_size, 0.0)
    manager.device = PresetAllocator(
        list(state.device_refcounts), list(state.device_free), "device"
    )
    manager.host = (
        PresetAllocator(list(state.host_refcounts), list(state.host_free), "host") if host else None
    )
    for seq, table in state.tables.items():
        manager.tables[seq] = BlockTable(
            state.block_size, list(table.blocks), table.num_tokens, table.pool
        )
    return manager


_DRAWS = random.SystemRandom()
"""What hides each state the student's properties judge (``disguise.disguise``): the
system's random source, whose draws no seed or state in any process foretells."""


def _ask(student, manager, kv: SimulatedKV, last_write, end: bool) -> Verdict:
    return student.run(judge, manager.snapshot(), kv.slots, kv.written, last_write, end)


PROGRAMS = "run_programs(YourProperties, ...)"
"""How a failure names the call that ran the student's properties over random programs."""

INVARIANTS = (
    "block_state_invariants_hold(), writes_land_in_private_blocks(), "
    "every_sequence_reads_back_its_own_tokens()"
)
"""The ``@invariant`` methods the student writes, as a failure names them."""


SHOWN = (
    "Your properties saw each state disguised, drawn anew at each grading: its blocks "
    "renamed, its tokens renumbered, sound blocks and sequences of its own added; the program "
    "names the blocks as the manager did."
)
"""Why the ids a student's failed assert names are not the program's."""

SHOWN_HERE = (
    "Each state is shown as your properties saw it, disguised, drawn anew at each grading: "
    "sound blocks and sequences of its own added, its blocks renamed, its tokens renumbered."
)
"""Why a hand-built state a failure shows is not the one ``broken_states`` builds."""


class YourPropertiesFailed(AssertionError):
    """The student's properties failed an assert on a state a program reached."""


class FalseAlarm(Exception):
    """The student's properties failed on a state the reference properties find sound."""


class _AskTheStudent(BlockManagerProgram):
    """Random programs against a manager of this process, whose every state the student's
    properties judge (``judge``, in their process); an assert they fail ends the program."""

    graded: object = None  # the student, whose properties judge

    @classmethod
    def clock(cls, seconds: float):
        """The student's time is their properties' (``BlockManagerProgram.clock``)."""
        clock = getattr(cls.graded, "clock", None)
        return clock(seconds) if clock is not None else None

    def _verdict(self, end: bool) -> None:
        shown = disguise(self.manager, self.kv, self.last_write, _DRAWS, end=end)
        verdict = _ask(type(self).graded, *shown, end)
        if verdict.crash:
            raise RuntimeError(f"your properties crashed: {verdict.crash}")
        if verdict.failed:
            raise YourPropertiesFailed(verdict.message)

    @invariant()
    def your_properties_hold(self):
        self._verdict(end=False)

    def after_all_freed(self):
        self._verdict(end=True)


def _programs(student, manager_class: type, max_examples: int, shrink: bool = True) -> None:
    machine = type("YourProperties", (_AskTheStudent,), {"graded": student})
    run_programs(machine, manager_class, max_examples=max_examples, shrink=shrink)


def reference_problems(state: BlockState, kv: SimulatedKV, last_write, end: bool) -> list[str]:
    """What the reference properties (exercise 06's solution) find wrong with a state: at a
    program's ``end``, once every sequence is freed, rules 1 and 2 and no block in use (rule 5);
    elsewhere rules 1 to 4. A block whose R[p] went below 0 breaks rule 1 at the end too."""
    problems = [p for found in invariants.check(state).values() for p in found]
    if end:
        return problems + [
            f"{pool} block(s) still in use"
            for pool, free, refs in (
                ("device", state.device_free, state.device_refcounts),
                ("host", state.host_free, state.host_refcounts),
            )
            if len(free) != len(refs)
        ]
    if last_write is not None:
        problems += invariants.write_is_exclusive(state, last_write)
    problems += [
        f"seq {seq} reads back other tokens"
        for seq, table in state.tables.items()
        if kv.read(table) != kv.written.get(seq)
    ]
    return problems


def check_no_false_alarm(student):
    """your properties hold on every random program against the library's BlockManager

    Rule: a property fails only on a state that breaks one of the five rules, and the
    library's BlockManager breaks none."""
    try:
        _programs(student, BlockManager, max_examples=60)
    except YourPropertiesFailed as error:
        raise CheckFailed(
            f"{PROGRAMS} against the library's BlockManager: a property failed, though it "
            f"keeps every rule: {error}\n{SHOWN}"
        ) from None
    if all(missed(student, state) for state in BROKEN_STATES):  # properties that never fail
        raise CheckFailed(
            f"{PROGRAMS} against the library's BlockManager: your properties held, but they "
            f"also held on each of the {len(BROKEN_STATES)} hand-built states that break a "
            "rule: properties that never fail raise no false alarm, and check nothing. Write "
            "at least one rule's assert"
        )


RULES = {
    1: "R[p] equals the number of block tables holding p, in each pool",
    2: "p is on the free list iff R[p] = 0, and at most once, in each pool",
    3: "the block the last token was written into has R[p] = 1",
    4: "every sequence reads back exactly the tokens it wrote",
    5: "after_all_freed: once every sequence is freed, every block of both pools is free",
}
"""Exercise 06's rules, numbered as its README numbers them."""


def missed(student, state: BrokenState) -> str:
    """``""`` when the student's properties fail an assert on ``state``, else why not. Rules
    1 to 4 run every ``@invariant``; rule 5 runs ``after_all_freed``, as a program's end does."""
    manager, kv, last_write = disguised(state, _DRAWS)  # not found by lookup: drawn anew
    verdict = _ask(student, manager, kv, last_write, end=state.rule == 5)
    if verdict.failed:
        return ""
    if verdict.crash:
        crashed = f"your properties crashed with {verdict.crash} instead of failing an assert"
        return f"{state.fault}; {crashed}"
    return state.fault


def false_alarm(student, state: BrokenState) -> str:
    """``""`` when the student's properties hold on the sound state ``state`` was made from
    (``state.sound``), disguised as ``state`` is; else what they said of it, with the state as
    they were shown it."""
    manager, kv, last_write = disguised(state, _DRAWS, sound=True)
    verdict = _ask(student, manager, kv, last_write, end=state.rule == 5)
    if not (verdict.failed or verdict.crash):
        return ""
    said = f"failed: {verdict.message}" if verdict.failed else f"crashed: {verdict.crash}"
    return f"{state.name} repaired, {shown(manager, kv, last_write)}; your properties {said}"


def shown(manager: BlockManager, kv: SimulatedKV, last_write) -> str:
    """A state as a failure message shows it: every table, and each pool's R and free list."""
    state = manager.snapshot()
    tables = ", ".join(
        f"seq {seq}: T={list(t.blocks)} ({t.pool}, {t.num_tokens} tokens, wrote "
        f"{kv.written.get(seq)})"
        for seq, t in state.tables.items()
    )
    pools = [("device", state.device_refcounts, state.device_free)]
    if manager.host is not None:
        pools.append(("host", state.host_refcounts, state.host_free))
    counts = "; ".join(f"{pool} R={list(r)}, free list {list(f)}" for pool, r, f in pools)
    written = "" if last_write is None else f"; the last token written at slot {last_write}"
    return f"{tables or 'no table'}; {counts}{written}"


def grades_rule(rule: int):
    """A check that the student's properties catch every state that breaks only ``rule``, and
    hold on the sound state each was made from: properties that fail on every state catch every
    broken one, checking nothing."""

    def check(student):
        states = [s for s in BROKEN_STATES if s.rule == rule]
        if alarms := [m for s in states if (m := false_alarm(student, s))]:
            raise CheckFailed(
                f"a false alarm: on a sound state made like rule {rule}'s broken ones, which "
                "breaks no rule, your properties must hold, and these failed:\n- "
                + "\n- ".join(alarms)
                + f"\n{SHOWN_HERE}"
            )
        if problems := [m for s in states if (m := missed(student, s))]:
            where = "after_all_freed()" if rule == 5 else f"an @invariant ({INVARIANTS})"
            raise CheckFailed(
                f"not checked completely: on a state that breaks rule {rule} alone, {where} "
                "must fail an assert, and yours passed these:\n- " + "\n- ".join(problems)
            )

    check.__name__ = f"check_rule_{rule}_on_its_own"
    check.__doc__ = f"rule {rule} on its own: {RULES[rule]}"
    return check


def catches(member: type[BlockManager]):
    """A check that the student's properties fail an assertion against ``member``, on a state
    that really breaks a rule (the reference properties agree)."""

    class _Checked(_AskTheStudent):
        alarms: list[FalseAlarm]  # every false alarm of one check, whatever ends its programs
        judged = False  # this program ended at a failed assert: its teardown judges nothing

        def _verdict(self, end: bool) -> None:
            if self.judged:
                return
            try:
                super()._verdict(end)
                return
            except YourPropertiesFailed as error:
                failed, self.judged = error, True
            if not reference_problems(self.manager.snapshot(), self.kv, self.last_write, end):
                alarm = FalseAlarm(
                    f"a property failed on a state that breaks no rule ({failed}): that is a "
                    f"false alarm, not a catch. {SHOWN}"
                )
                type(self).alarms.append(alarm)
                raise alarm
            raise failed

    def check(student):
        machine = type("YourProperties", (_Checked,), {"graded": student, "alarms": []})
        ended = None
        try:
            run_programs(machine, member, max_examples=100, shrink=False)
        except NotImplementedError:
            raise
        except Exception as error:
            ended = error
        # A false alarm ends its program, but hypothesis still runs the program's teardown,
        # whose verdict (a real leak at the end, say) replaced it: so any alarm decides.
        if machine.alarms:
            raise CheckFailed(f"{PROGRAMS} against {member.__name__}: {machine.alarms[0]}")
        if isinstance(ended, YourPropertiesFailed):
            return
        if ended is not None:
            raise CheckFailed(
                f"{PROGRAMS} against {member.__name__}: a program crashed with "
                f"{type(ended).__name__} "
                f"before any property failed: {str(ended).splitlines()[0]}\nYour properties "
                "must fail an assert as soon as the state is wrong, before it crashes"
            )
        raise CheckFailed(
            f"{PROGRAMS} against {member.__name__}: 100 random programs broke none of your "
            "properties. "
            f"Its bug: {' '.join(member.__doc__.split())}"
        )

    check.__name__ = f"check_catches_{member.__name__}"
    check.__doc__ = (
        f"your properties catch {member.__name__}: {member.__doc__.split(':')[0]}\n\n"
        "Rule: a property fails an assert on the first state that breaks a rule, before the "
        "broken manager crashes the program"
    )
    return check


CRITERIA = (
    (Criterion(check_no_false_alarm),)
    + tuple(Criterion(grades_rule(rule)) for rule in RULES)
    + tuple(Criterion(catches(member)) for member in bug_zoo.BUG_ZOO)
)
