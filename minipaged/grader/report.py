"""What a check found, for one criterion and for a whole exercise, printed and saved as JSON.

A criterion is a function that takes the student's work and returns normally when the work meets
it. It fails by raising ``CheckFailed`` (or ``AssertionError``) with a message that says what was
expected and what was found, in the source text's terms. Any other exception is the student's
code failing; the report then names the exception and the line of the student's file it came
from. A criterion that needs hardware this machine lacks is *blocked*: neither pass nor fail.
"""

from __future__ import annotations

import inspect
import json
import re
import reprlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.markup import escape

from minipaged import __version__, atomic_write
from minipaged.grader.report_files import REPORT

PASS, FAIL, BLOCKED = "pass", "fail", "blocked"

RULE = "Rule: "
"""Starts the last line of a failure's message: the rule the work broke (``Criterion.rule``)."""


def now() -> str:
    """The time, in UTC, to the second: ``2025-01-31T14:05:09Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class CheckFailed(AssertionError):
    """The student's work does not meet a criterion; the message says how."""


CALLED = "the check's call "
"""Starts a note (``BaseException.add_note``) that names the call a student's error came from."""


def note_call(error: BaseException, call: str) -> None:
    """Name, on ``error`` (raised by the student's code), the call of theirs the check was
    making: the failure's message names it (``grading.failure_message``)."""
    error.add_note(CALLED + call)


def expect(got: Any, expected: Any, what: str) -> None:
    """Fail with ``"{what}: expected {expected!r}, got {got!r}"`` unless ``got == expected``
    and every integer (or boolean) expected, at any depth of lists, tuples and dicts, is one
    in ``got`` too: ``2.0 == 2`` and ``True == 1``, but a count that comes back a float is
    float division, and a boolean is not a count. Of two dataclasses (a ``BlockState``, say)
    or dicts, only the parts that differ are shown."""
    if got != expected:
        raise CheckFailed(f"{what}: {difference(got, expected)}")
    wrong = other_kind(got, expected)
    if wrong:
        raise CheckFailed(f"{what}: {wrong}")


def other_kind(got: Any, expected: Any, where: str = "") -> str:
    """Where ``got`` (equal to ``expected``) holds a float or a boolean for an integer, or an
    integer for a boolean: ``"[2]: expected the int 3, got the float 3.0"``; else ``""``."""
    at = f"{where}: " if where else ""
    if type(expected) in (int, bool) and type(got) is not type(expected):
        fix = " (// divides integers; / gives a float)" if type(got) is float else ""
        return (
            f"{at}expected the {type(expected).__name__} {expected!r}, got the "
            f"{type(got).__name__} {safe_repr(got)}{fix}"
        )
    if type(expected) in (list, tuple) and type(got) is type(expected):
        pairs = enumerate(zip(got, expected, strict=False))
        found = (other_kind(g, e, f"{where}[{i}]") for i, (g, e) in pairs)
        return next((f for f in found if f), "")
    if type(expected) is dict and type(got) is dict:
        found = (other_kind(got[k], e, f"{where}[{k!r}]") for k, e in expected.items() if k in got)
        return next((f for f in found if f), "")
    return ""


def expect_refused(
    action: Callable[[], Any],
    error: type[Exception],
    what: str,
    state: Callable[[], Any],
    hint: str = "",
    where: Callable[[BaseException], str] = lambda _: "",
) -> None:
    """Fail unless ``action()`` raises ``error`` and leaves ``state()`` (a block manager's
    ``snapshot``) as it was: a refusal must come before any change. ``hint`` ends the message
    when it returned; ``where`` names the student's line of another exception."""
    before = state()
    try:
        action()
    except error:
        expect_unchanged(state(), before, what, error.__name__)
        return
    except NotImplementedError as unwritten:
        note_call(unwritten, what)
        raise
    except Exception as other:
        raise CheckFailed(
            f"{what}: expected {error.__name__}, got {other!r}{where(other)}"
        ) from None
    raise CheckFailed(f"{what}: expected {error.__name__}, but it returned without raising{hint}")


def expect_unchanged(after: Any, before: Any, what: str, error: str) -> None:
    """Fail unless a refused operation left the state as it was: name the operation, what it
    changed, and the rule (check first, change after)."""
    if after != before:
        raise CheckFailed(
            f"{what} raised {error} as it should, but had already changed the block state "
            f"({difference(after, before)}). A refusal must come before any change: check "
            "everything (a free block, the sequences) first, then decref, allocate or rewrite "
            "a table"
        )


_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxfrozenset = _SHORT.maxdict = 24
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 4, 200, 200, 60

MAX_MESSAGE = 4000
"""The longest failure message a report keeps (``shortened``): a student's value can be huge."""


def safe_repr(value: Any) -> str:
    """``repr(value)``, short (a few dozen entries, 200 characters of a string), and never an
    error: a student's value is shown, whatever it is."""
    try:
        return _SHORT.repr(value)
    except Exception as error:  # a __repr__ of theirs that raises
        return f"<a {type(value).__name__} that cannot be shown: {type(error).__name__}>"


def printable(text: str) -> str:
    """``text`` with every control character but the newline shown as its escape (``\\x1b``):
    a student's text (what their code printed or raised, their value's ``repr``, their folder's
    name) must not move the terminal's cursor, clear a line or colour one, to forge a row of
    the report."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def shortened(message: str) -> str:
    """``message`` cut to ``MAX_MESSAGE`` characters, saying how much was left out."""
    if len(message) <= MAX_MESSAGE:
        return message
    return f"{message[:MAX_MESSAGE]}... ({len(message) - MAX_MESSAGE} more characters left out)"


class _Absent:
    def __repr__(self) -> str:
        return "nothing"


ABSENT = _Absent()


def difference(got: Any, expected: Any, where: str = "") -> str:
    """What differs between ``got`` and ``expected``, field by field for dataclasses of one
    type, key by key for dicts and, inside them, entry by entry for sequences of one length
    where one or two entries differ (``device_refcounts[1]: expected 2, got 1``), so a message
    shows three numbers, not two pages of state."""
    at = f"{where}: " if where else ""
    if is_dataclass(got) and type(got) is type(expected):
        parts = [
            difference(getattr(got, f.name), getattr(expected, f.name), where + "." + f.name)
            for f in fields(got)
            if getattr(got, f.name) != getattr(expected, f.name)
        ]
        return "; ".join(p.removeprefix(".") for p in parts)
    if isinstance(got, dict) and isinstance(expected, dict):
        parts = [
            difference(got.get(k, ABSENT), expected.get(k, ABSENT), f"{where}[{k!r}]")
            for k in sorted(set(got) | set(expected), key=repr)
            if got.get(k, ABSENT) != expected.get(k, ABSENT)
        ]
        return "; ".join(p.removeprefix(".") for p in parts)
    same_length = isinstance(got, tuple | list) and type(got) is type(expected)
    if where and same_length and len(got) == len(expected):  # a field of a state: which entries
        wrong = [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
        if len(wrong) <= 2:  # more is a reordering, read best whole
            field_ = where.removeprefix(".")
            return "; ".join(
                f"{field_}[{i}]: expected {safe_repr(expected[i])}, got {safe_repr(got[i])}"
                for i in wrong
            )
    return f"{at}expected {safe_repr(expected)}, got {safe_repr(got)}".removeprefix(".")


@dataclass(frozen=True, slots=True)
class Criterion:
    """One thing the student's work must do. ``check(student)`` raises when it does not.

    ``runs_in`` says where the check can run: ``"process"`` (the grader's own process),
    ``"simulator"`` (a process with ``NUMBA_ENABLE_CUDASIM=1``, set before numba loads) or
    ``"gpu"`` (a process on a CUDA GPU; blocked elsewhere). ``on_the_library``: the check
    grades the student's work on the library's own (their scheduler on its block manager), so
    its child keeps ``Exercise.handed_over``; every other criterion's child keeps none."""

    check: Callable[[Any], None]
    runs_in: str = "process"
    points: int | None = None  # None: a share of what the exercise's declared points leave
    on_the_library: bool = False

    @property
    def name(self) -> str:
        return self.check.__name__.removeprefix("check_")

    @property
    def statement(self) -> str:
        """The first paragraph of the check's docstring: what it checks, in the source text's
        terms."""
        doc = inspect.cleandoc(self.check.__doc__ or "") or self.name
        return " ".join(doc.split("\n\n")[0].split())

    @property
    def rule(self) -> str:
        """The contract the check holds the work to, declared once, in the check's docstring:
        the paragraph that starts ``Rule:``, or else the statement, which then is the rule."""
        doc = inspect.cleandoc(self.check.__doc__ or "")
        for paragraph in doc.split("\n\n"):
            if paragraph.startswith(RULE):
                return " ".join(paragraph.removeprefix(RULE).split()).removesuffix(".")
        return self.statement

    def broken(self, finding: str) -> str:
        """What a failure of this criterion tells the student: ``finding``, the check's words
        for the operation it ran and what came back, then the rule that broke, on a line of
        its own (``Rule: ...``). Every failure message of every exercise is made here."""
        return f"{shortened(finding)}\n{RULE}{self.rule}"


TOTAL_POINTS = 100


def points(criteria: tuple[Criterion, ...]) -> list[int]:
    """Each criterion's points: its own where it declares them, and an equal share of what the
    declared ones leave of ``TOTAL_POINTS`` for the others (largest remainders first, earlier
    criteria first among equals), so an exercise is always worth ``TOTAL_POINTS`` in all.
    Raises ``ValueError`` when the declared points leave no share to give or exceed it."""
    declared = sum(c.points for c in criteria if c.points is not None)
    shares = [i for i, c in enumerate(criteria) if c.points is None]
    left = TOTAL_POINTS - declared
    if left < 0 or (left and not shares) or len(shares) > left:
        raise ValueError(
            f"criteria declaring {declared} points leave {left} for {len(shares)} others, "
            f"not at least one each: declare points that sum to {TOTAL_POINTS} or less"
        )
    each, extra = divmod(left, len(shares)) if shares else (0, 0)
    given = [c.points if c.points is not None else each for c in criteria]
    for i in shares[:extra]:
        given[i] += 1
    return given


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    statement: str
    outcome: str  # PASS, FAIL or BLOCKED
    message: str = ""
    seconds: float = 0.0
    points: int = 0  # what passing earns; a blocked criterion counts toward neither score

    @property
    def score(self) -> int:
        return self.points if self.outcome == PASS else 0


SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
CAUSE_LENGTH = 60
"""A sentence at least this long, after a message's first, explains a cause: said again under
a later criterion, it is replaced by a pointer to the first."""


def say_each_cause_once(results: list[Result]) -> list[Result]:
    """One root cause under several criteria is explained once: a failure's message keeps its
    first sentence (what broke, in which case), and a later sentence that an earlier failure
    already said becomes "same cause as <that criterion>"."""
    first_said: dict[str, str] = {}
    said = []
    for result in results:
        if result.outcome != FAIL:
            said.append(result)
            continue
        finding, rule = split_rule(result.message)
        head, *rest = SENTENCE_END.split(finding)
        kept, same = [head], []
        for sentence in rest:
            if len(sentence) >= CAUSE_LENGTH and sentence in first_said:
                same.append(first_said[sentence])
                continue
            kept.append(sentence)
            if len(sentence) >= CAUSE_LENGTH:
                first_said[sentence] = result.name
        if not same:  # nothing said before: the message as it was, line breaks and all
            said.append(result)
            continue
        kept.append(f"Same cause as {', '.join(dict.fromkeys(same))}: see there.")
        said.append(replace(result, message=" ".join(kept) + (f"\n{RULE}{rule}" if rule else "")))
    return said


def split_rule(message: str) -> tuple[str, str]:
    """``(finding, rule)`` of a failure's message made by ``Criterion.broken``; ``rule`` is
    ``""`` for a message that names none (a file that could not be graded at all)."""
    finding, separator, rule = message.rpartition(f"\n{RULE}")
    return (finding, rule) if separator else (message, "")


@dataclass(slots=True)
class Report:
    """One grading of one exercise: what was graded (``graded``: the student's folder, or
    ``"solution: <library modules>"``), when (``graded_at``, UTC, ISO 8601), by which minipaged
    (``version``), and each criterion's result."""

    exercise: int
    title: str
    graded: str
    results: list[Result] = field(default_factory=list)
    confinement: str = ""  # how the code ran: "confined by Landlock ..." or "unconfined: ..."
    graded_at: str = field(default_factory=now)
    version: str = __version__
    seconds: float = 0.0  # the whole grading, wall clock
    notes: tuple[str, ...] = ()  # what the student should know of their folder, one line each

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def passed(self) -> bool:
        """True when no criterion failed (blocked ones do not count against the work)."""
        return self.count(FAIL) == 0

    @property
    def score(self) -> int:
        return sum(r.score for r in self.results)

    @property
    def max_score(self) -> int:
        """The points at stake here: every criterion's but the blocked ones'."""
        return sum(r.points for r in self.results if r.outcome != BLOCKED)

    def to_dict(self) -> dict:
        return {
            "exercise": self.exercise,
            "title": self.title,
            "graded": self.graded,
            "graded_at": self.graded_at,
            "minipaged_version": self.version,
            "seconds": self.seconds,
            "passed": self.passed,
            "score": self.score,
            "max_score": self.max_score,
            "confinement": self.confinement,
            "notes": list(self.notes),
            "counts": {o: self.count(o) for o in (PASS, FAIL, BLOCKED)},
            "criteria": [asdict(r) | {"score": r.score} for r in self.results],
        }

    def save(self, path: Path, force: bool = False) -> str:
        """Write the report to ``path`` whole, replacing (never following) a symbolic link
        there, and a file that is no report only with ``force`` (``minipaged.replaceable``);
        returns what became of such a link, or ``""``."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        return atomic_write.write_text(path, text, replaces=REPORT, force=force)

    def render(self, console) -> None:
        """Print one line per criterion, and the message under each one that did not pass."""
        style = {PASS: "green", FAIL: "bold red", BLOCKED: "yellow"}
        console.print(f"[bold]exercise {self.exercise:02d}: {self.title}[/bold]")
        console.print(f"[dim]graded: {escape(printable(self.graded))}[/dim]", highlight=False)
        if self.confinement:
            console.print(f"[dim]your code ran {escape(self.confinement)}[/dim]", highlight=False)
        for note in self.notes:
            console.print(f"[yellow]note:[/yellow] {escape(printable(note))}", highlight=False)
        for r in self.results:
            label = f"[{style[r.outcome]}]{r.outcome.upper():8}[/{style[r.outcome]}]"
            console.print(f"  {label} {escape(r.statement)}", highlight=False)
            finding, rule = split_rule(r.message)
            shown = finding if rule == r.statement else r.message  # the line above is the rule
            for line in printable(shown).split("\n") if shown else ():  # a pass says nothing
                console.print(f"           {line}", markup=False, highlight=False)
        summary = ", ".join(f"{self.count(o)} {o}" for o in (PASS, FAIL, BLOCKED))
        summary += f", {self.score}/{self.max_score} points"
        verdict = "[green]all criteria met[/green]" if self.passed else "[red]not yet[/red]"
        console.print(f"{summary}: {verdict}")
