"""What a check found, for one criterion and for a whole exercise, printed and saved as JSON.

A criterion is a function that takes the student's work and returns normally when the work meets
it. It fails by raising ``CheckFailed`` (or ``AssertionError``) with a message that says what was
expected and what was found, in the source text's terms. Any other exception is the student's
code failing; the report then names the exception and the line of the student's file it came
from. A criterion that needs hardware this machine lacks is *blocked*: neither pass nor fail.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from minipaged import atomic_write

PASS, FAIL, BLOCKED = "pass", "fail", "blocked"


class CheckFailed(AssertionError):
    """The student's work does not meet a criterion; the message says how."""


def expect(got: Any, expected: Any, what: str) -> None:
    """Fail with ``"{what}: expected {expected!r}, got {got!r}"`` unless ``got == expected``.
    Of two dataclasses (a ``BlockState``, say) or dicts, only the parts that differ are shown."""
    if got != expected:
        raise CheckFailed(f"{what}: {difference(got, expected)}")


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
        expect(state(), before, f"the block state after the refused {what}")
        return
    except NotImplementedError:
        raise
    except Exception as other:
        raise CheckFailed(
            f"{what}: expected {error.__name__}, got {other!r}{where(other)}"
        ) from None
    raise CheckFailed(f"{what}: expected {error.__name__}, but it returned without raising{hint}")


class _Absent:
    def __repr__(self) -> str:
        return "nothing"


ABSENT = _Absent()


def difference(got: Any, expected: Any, where: str = "") -> str:
    """What differs between ``got`` and ``expected``, field by field for dataclasses of one
    type and key by key for dicts, so a message shows three numbers, not two pages of state."""
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
    return f"{at}expected {expected!r}, got {got!r}".removeprefix(".")


@dataclass(frozen=True, slots=True)
class Criterion:
    """One thing the student's work must do. ``check(student)`` raises when it does not.

    ``runs_in`` says where the check can run: ``"process"`` (the grader's own process),
    ``"simulator"`` (a process with ``NUMBA_ENABLE_CUDASIM=1``, set before numba loads) or
    ``"gpu"`` (a process on a CUDA GPU; blocked elsewhere)."""

    check: Callable[[Any], None]
    runs_in: str = "process"

    @property
    def name(self) -> str:
        return self.check.__name__.removeprefix("check_")

    @property
    def statement(self) -> str:
        """The first line of the check's docstring: the rule, in the source text's terms."""
        return (self.check.__doc__ or self.name).strip().splitlines()[0]


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    statement: str
    outcome: str  # PASS, FAIL or BLOCKED
    message: str = ""
    seconds: float = 0.0


@dataclass(slots=True)
class Report:
    exercise: int
    title: str
    graded: str  # the folder graded, or "solution: <library modules>"
    results: list[Result] = field(default_factory=list)
    confinement: str = ""  # how the code ran: "confined by Landlock ..." or "unconfined: ..."

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def passed(self) -> bool:
        """True when no criterion failed (blocked ones do not count against the work)."""
        return self.count(FAIL) == 0

    def to_dict(self) -> dict:
        return {
            "exercise": self.exercise,
            "title": self.title,
            "graded": self.graded,
            "passed": self.passed,
            "confinement": self.confinement,
            "counts": {o: self.count(o) for o in (PASS, FAIL, BLOCKED)},
            "criteria": [asdict(r) for r in self.results],
        }

    def save(self, path: Path) -> str:
        """Write the report to ``path`` whole, replacing (never following) a symbolic link
        there; returns what became of such a link, or ``""``."""
        return atomic_write.write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def render(self, console) -> None:
        """Print one line per criterion, and the message under each one that did not pass."""
        style = {PASS: "green", FAIL: "bold red", BLOCKED: "yellow"}
        console.print(f"[bold]exercise {self.exercise:02d}: {self.title}[/bold]")
        console.print(f"[dim]graded: {escape(self.graded)}[/dim]", highlight=False)
        if self.confinement:
            console.print(f"[dim]your code ran {escape(self.confinement)}[/dim]", highlight=False)
        for r in self.results:
            label = f"[{style[r.outcome]}]{r.outcome.upper():8}[/{style[r.outcome]}]"
            console.print(f"  {label} {escape(r.statement)}", highlight=False)
            for line in r.message.splitlines():
                console.print(f"           {line}", markup=False, highlight=False)
        summary = ", ".join(f"{self.count(o)} {o}" for o in (PASS, FAIL, BLOCKED))
        verdict = "[green]all criteria met[/green]" if self.passed else "[red]not yet[/red]"
        console.print(f"{summary}: {verdict}")
