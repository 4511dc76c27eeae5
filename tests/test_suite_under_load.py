"""The suite passes on a machine slower and busier than ours: no test's outcome depends on how
fast the machine is, only on what the code does.

Two kinds of allowance failed working code on CI (a machine about twice as slow, shared):
hypothesis's deadline of 200 ms an example, and a wait on the suite's own work (an app, a
server, a browser, a thread) shorter than a busy machine needs. The first is off in every
profile (tests/conftest.py); every wait of the second kind lasts ``STUCK_AFTER_S``
(tests/stuck.py), and these tests read the suite's sources for any that is shorter.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from stuck import STUCK_AFTER_S

TESTS = Path(__file__).parent
PROFILES = ("dev", "ci", "thorough")


@pytest.mark.parametrize("name", PROFILES)
def test_no_hypothesis_profile_times_an_example(name):
    profile = settings.get_profile(name)
    assert profile.deadline is None, f"profile {name!r} fails examples slower than a deadline"
    assert HealthCheck.too_slow in profile.suppress_health_check, (
        f"profile {name!r} fails a test whose examples are slow to draw on a busy machine"
    )


def deadlines_in(source: str) -> list[int]:
    """Lines of ``source`` that give hypothesis a deadline other than None."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.keyword)
        and node.arg == "deadline"
        and not (isinstance(node.value, ast.Constant) and node.value.value is None)
    ]


# A wait with a number of seconds in it: a deadline computed from the clock, a timeout given to
# a wait (subprocess, socket, thread, event, websocket), a Textual test's `until(..., timeout)`.
# Playwright counts its timeouts in milliseconds.
WAIT = re.compile(
    r"monotonic\(\) \+ (?P<plus>[\d_.]+)"
    r"|(?P<browser>wait_for_\w+\([^)]*?)?\btimeout(?:: float)? ?= ?(?P<timeout>[\d_.]+)"
    r"|\.wait\((?P<wait>[\d_.]+)\)"
)


def short_waits_in(source: str) -> list[tuple[int, float]]:
    """``(line, seconds)`` for each wait in ``source`` shorter than ``STUCK_AFTER_S``, but
    one whose timeout is suppressed on the line before: it fails nothing when it runs out (the
    site's browser waits a moment for a page's late requests, and goes on either way)."""
    short = []
    lines = source.splitlines()
    for n, line in enumerate(lines, 1):
        if n > 1 and re.search(r"suppress\(.*TimeoutError", lines[n - 2]):
            continue
        for match in WAIT.finditer(line):
            number = match["plus"] or match["timeout"] or match["wait"]
            seconds = float(number.replace("_", "")) / (1000 if match["browser"] else 1)
            if seconds < STUCK_AFTER_S:
                short.append((n, seconds))
    return short


def sources() -> list[Path]:
    """The suite's Python files, less this one (whose planted waits are the scans' test)."""
    return sorted(path for path in TESTS.glob("*.py") if path.name != Path(__file__).name)


def found_in_sources(scan) -> list[str]:
    """``file:line`` for each line of the suite's sources that ``scan`` (source -> lines)
    names."""
    return [f"{path.name}:{line}" for path in sources() for line in scan(path.read_text("utf-8"))]


def test_no_test_gives_hypothesis_a_deadline():
    found = found_in_sources(deadlines_in)
    assert not found, f"a deadline fails correct code on a busy machine: {found}"


def test_no_test_waits_less_than_a_busy_machine_needs():
    found = [
        f"{path.name}:{line}: {seconds:g} s"
        for path in sources()
        for line, seconds in short_waits_in(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        f"waits shorter than STUCK_AFTER_S ({STUCK_AFTER_S:g} s, tests/stuck.py), which a "
        f"slower, busier machine runs out; wait STUCK_AFTER_S: {found}"
    )


def test_the_scans_find_each_kind_of_allowance():
    planted = """
@settings(deadline=200)
@settings(deadline=timedelta(seconds=1))
@settings(deadline=None)
def f():
    deadline = time.monotonic() + 10
    feed.stopped.wait(2)
    process.communicate(timeout=30)
    socket.create_connection(address, timeout=5)
    tab.wait_for_selector(".hit", timeout=10_000)
    tab.wait_for_selector(".hit", timeout=200_000)
    deadline = time.monotonic() + STUCK_AFTER_S
    process.communicate(timeout=600)
    with contextlib.suppress(sync_api.TimeoutError):
        tab.wait_for_load_state("networkidle", timeout=5_000)
async def until(pilot, condition, timeout: float = 20.0): ...
"""
    assert deadlines_in(planted) == [2, 3]
    assert short_waits_in(planted) == [(6, 10), (7, 2), (8, 30), (9, 5), (10, 10), (16, 20)]


def unbounded_page_awaits_in(source: str) -> list[int]:
    """Lines of ``source`` (page-side JavaScript in a test's strings) that await an animation
    frame or a library's promise with no timer raced against it: Playwright's ``evaluate`` has
    no timeout, and a headless tab may draw no frame at all, so such an await holds the test
    and its worker for good (the site's browser fixture sat 22 minutes on one)."""
    lines = source.splitlines()
    return [
        n
        for n, line in enumerate(lines, 1)
        if ("requestAnimationFrame(" in line or re.search(r"await .*\.promise\b", line))
        and "setTimeout(" not in "\n".join(lines[max(n - 3, 0) : n + 3])
    ]


def test_no_page_side_await_can_wait_for_ever():
    found = found_in_sources(unbounded_page_awaits_in)
    assert not found, f"race a setTimeout against each: {found}"


def test_the_page_scan_finds_an_await_with_no_timer_beside_it():
    planted = """
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  if (window.MathJax) await MathJax.startup.promise;
  const x = 1;
  const y = 2;
  const z = 3;
  await new Promise(done => {
    requestAnimationFrame(done);
    setTimeout(done, 500);
  });
"""
    assert unbounded_page_awaits_in(planted) == [2, 3]


def test_every_file_longest_first_names_is_in_the_suite():
    """``conftest.LONGEST_FIRST`` places files by name: a file renamed or removed would lose
    its place without a word, and a long one left to run last keeps one worker busy alone."""
    from conftest import LONGEST_FIRST

    here = Path(__file__).parent
    missing = [name for name in LONGEST_FIRST if not (here / name).is_file()]
    assert not missing, f"conftest.LONGEST_FIRST names files the suite lacks: {missing}"
