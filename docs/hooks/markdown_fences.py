"""The fenced code blocks of a docs page, and running its Python examples as one script.

Shared by the site's build (``prose_values``, which fills the numbers in a page's prose from
what its examples compute) and by ``tests/test_docs.py`` (which runs every example and compares
what it prints with the page's Output blocks), so that both read a page the same way.

Conventions (``tests/test_docs.py`` states them in full): every ```` ```python ```` fence runs,
in order, in one namespace per page; ``<!-- skip-test -->`` on the line before a fence leaves
it out; a ```` ```text title="Output" ```` fence right after a Python fence is what it prints;
``<!-- run-in-shell -->`` marks a bash fence that runs in a shell of its own, followed by its
```` ```text title="Shell output" ````. Every other shell fence is commands a reader types, run
by ``tests/test_docs_commands.py`` as written, unless ``<!-- commands-not-run: REASON -->``
on the line before says why not, or ``<!-- commands-need-a-gpu -->`` keeps it to a machine
with one (that test states its conventions in full).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

SKIP_MARKER = "<!-- skip-test -->"
OUTPUT_INFO = 'text title="Output"'
SHELL_MARKER = "<!-- run-in-shell -->"
SHELL_OUTPUT_INFO = 'text title="Shell output"'

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Fence:
    page: str  # path relative to docs/
    number: int  # 1-based among the page's Python fences; 0 for other languages
    line: int  # 1-based line of the first line of code in the Markdown file
    end: int  # 0-based index of the closing fence line
    language: str
    info: str
    body: tuple[str, ...]
    skipped: bool
    runs_in_shell: bool = False  # a bash fence after SHELL_MARKER
    output: Fence | None = None  # the Output fence right after a Python fence (or shell command)

    @property
    def source(self) -> str:
        return "\n".join(self.body) + "\n"

    @property
    def runs(self) -> bool:
        """A Python example that runs (not marked to skip)."""
        return self.language == "python" and not self.skipped


def fence_spans(lines: list[str], page: str) -> list[Fence]:
    """Every fenced code block of a page, Output fences included, in order."""
    found: list[Fence] = []
    i = 0
    while i < len(lines):
        match = FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].strip()
        previous = next((s.strip() for s in reversed(lines[:i]) if s.strip()), "")
        close = re.compile(rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if j == len(lines):
            raise ValueError(f"docs/{page}:{i + 1}: code fence is never closed")
        body = tuple(s[len(indent) :] if s.startswith(indent) else s for s in lines[i + 1 : j])
        language = info.split()[0] if info else ""
        skipped, in_shell = previous == SKIP_MARKER, previous == SHELL_MARKER
        found.append(Fence(page, 0, i + 2, j, language, info, body, skipped, in_shell))
        i = j + 1
    return found


def read_fences(text: str, page: str) -> list[Fence]:
    """All fenced code blocks of one Markdown page except Output fences, which are attached to
    the Python fence (or shell command) they follow."""
    lines = text.splitlines()
    found = fence_spans(lines, page)
    fences: list[Fence] = []
    number = 0
    for k, fence in enumerate(found):
        if fence.info in (OUTPUT_INFO, SHELL_OUTPUT_INFO):
            continue  # attached to the fence before it, below
        after = found[k + 1] if k + 1 < len(found) else None
        adjacent = after is not None and not any(
            s.strip() for s in lines[fence.end + 1 : after.line - 2]
        )
        if fence.language == "python":
            number += 1
            output = after if adjacent and after.info == OUTPUT_INFO else None
            fence = replace(fence, number=number, output=output)
        elif fence.runs_in_shell:
            output = after if adjacent and after.info == SHELL_OUTPUT_INFO else None
            fence = replace(fence, output=output)
        fences.append(fence)
    return fences


@dataclass
class PageRun:
    """A page's Python examples run in order in one namespace, as a reader pasting them into
    one interpreter would. ``steps()`` runs them; afterwards ``namespace`` holds what they
    defined. ``path`` names the Markdown file in tracebacks, with its own line numbers."""

    fences: list[Fence]
    path: str
    namespace: dict[str, object] = field(default_factory=lambda: {"__name__": "__docs__"})

    def steps(self) -> Iterator[tuple[Fence, str, str | None]]:
        """Run each example; yield it with what it printed and the traceback it raised (None
        when it ran through). The caller decides whether to go on after a traceback."""
        for fence in self.fences:
            if not fence.runs:
                continue
            # Pad with blank lines so that tracebacks give the line number in the Markdown file.
            code = compile("\n" * (fence.line - 1) + fence.source, self.path, "exec")
            stdout = io.StringIO()
            error = None
            try:
                with contextlib.redirect_stdout(stdout):
                    exec(code, self.namespace)
            except Exception:
                error = traceback.format_exc()
            yield fence, stdout.getvalue(), error


@contextlib.contextmanager
def in_empty_folder() -> Iterator[str]:
    """Run examples from an empty temporary folder, so that one that writes a file cannot touch
    the repository; the working directory is restored afterwards."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="docs-examples-") as folder:
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(before)
