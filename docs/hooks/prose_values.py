"""MkDocs hook: the numbers in a page's prose are computed by the page's own examples when the
site is built, so the text cannot disagree with the code.

In prose, ``{{ expression }}`` is replaced by the value of the Python expression in the
namespace of the page's examples, formatted as an f-string field: ``{{ fits["static"] }}``,
``{{ share:.1% }}``, ``{{ blocks:, }}``. Write the number a run produces this way, never by
hand; numbers the page chooses (inputs such as $B = 4$) and quotations of the source text stay
literal. A placeholder is evaluated where it stands: after the examples above it, before the
ones below, so prose describes the state the example above it left; one that names a value
only a later example defines is evaluated after that example. Code, fenced or inline, is left
alone; a mermaid diagram's labels are filled like prose.

Running a page's examples can take seconds (some run the embedded model), so each page's run
(what its examples printed and the values) is cached in ``.cache/prose-values/`` under the
project root, or in ``$PROSE_VALUES_CACHE``, keyed by the page's examples, its placeholders,
this hook's own code, the contents of every file of the project's packages and the versions of
Python, torch and numpy: any change to what could change a value runs the page again. Two
processes at once (the build and the test suite's workers) wait for each other instead of
running a page twice. ``tests/test_docs.py`` reads the same runs, from a cache of its own test
run: it checks each example's Output block and that the built site shows what it computes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from markdown_fences import Fence, PageRun, fence_spans, in_empty_folder, read_fences
from mkdocs.exceptions import PluginError

try:
    import fcntl
except ImportError:  # Windows: builds at once may run a page twice, which is only slower
    fcntl = None

log = logging.getLogger("mkdocs.hooks.prose_values")

PLACEHOLDER = re.compile(r"\{\{\s*(?P<expr>.+?)\s*\}\}")
# Inline code, which shows its text as written, or a placeholder.
CODE_OR_PLACEHOLDER = re.compile(r"(?P<code>`+)[^`]*?(?P=code)|" + PLACEHOLDER.pattern)
PACKAGES = ("minipaged", "cuda_kernels", "tui")
CACHE = Path(".cache") / "prose-values"
CACHE_VARIABLE = "PROSE_VALUES_CACHE"
# The hooks' own code: a change to how pages are run or values rendered runs every page again.
HOOK_SOURCES = [Path(__file__).resolve(), Path(__file__).resolve().with_name("markdown_fences.py")]
FILLED_FENCES = {"mermaid"}  # fences whose text is a picture's labels, not code


def placeholders(markdown: str, page: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every placeholder outside code fences, 1-based lines."""
    lines = markdown.splitlines()
    inside = fenced_lines(lines, page)
    return [
        (n + 1, match["expr"])
        for n, line in enumerate(lines)
        if n not in inside
        for match in CODE_OR_PLACEHOLDER.finditer(line)
        if match["expr"] is not None
    ]


def fenced_lines(lines: list[str], page: str) -> set[int]:
    """0-based indices of the lines inside code fences, the fence lines included. A mermaid
    diagram is not code: its labels may hold placeholders too."""
    return {
        n
        for f in fence_spans(lines, page)
        if f.language not in FILLED_FENCES
        for n in range(f.line - 2, f.end + 1)
    }


def render(expression: str, namespace: dict[str, object]) -> str:
    """The expression's value as an f-string field ``{expression}`` would show it."""
    code = compile('f"""{' + expression + '}"""', "<placeholder>", "eval")
    return eval(code, namespace)


class ProseValues:
    """The values of a page's placeholders, each taken where it stands: after the examples
    above it have run, so that prose after an example describes the state that example left.
    A placeholder whose names are defined only further down (prose that announces what the
    next example computes) waits for the first example after which it can be evaluated.
    Feed it each example as it runs (``after``), then call ``finish``."""

    def __init__(self, markdown: str, page: str) -> None:
        self.page = page
        # (n, line, expression): the placeholder's place among the page's, and where it is
        self.pending = [(n, *where) for n, where in enumerate(placeholders(markdown, page))]
        self.values: dict[int, str] = {}
        # The first line of each example that runs: prose above one sees the state before it.
        self.starts = [f.line - 1 for f in read_fences(markdown, page) if f.runs]

    def after(self, fence: Fence, namespace: dict[str, object]) -> None:
        """``fence`` has just run: evaluate the placeholders above the next example that can
        be evaluated now."""
        later = [start for start in self.starts if start > fence.line]
        self._settle(namespace, below=later[0] if later else None, final=False)

    def finish(self, namespace: dict[str, object]) -> list[str]:
        """Evaluate what is left; the values in the order the placeholders stand."""
        self._settle(namespace, below=None, final=True)
        return [self.values[key] for key in sorted(self.values)]

    def _settle(self, namespace: dict[str, object], below: int | None, final: bool) -> None:
        waiting = []
        for n, line, expression in self.pending:
            if below is not None and line > below:
                waiting.append((n, line, expression))
                continue
            try:
                self.values[n] = render(expression, namespace)
            except NameError as error:
                if final:
                    raise self._error(line, expression, error) from error
                waiting.append((n, line, expression))
            except Exception as error:
                raise self._error(line, expression, error) from error
        self.pending = waiting

    def _error(self, line: int, expression: str, error: Exception) -> ValueError:
        return ValueError(
            f"docs/{self.page}:{line}: the placeholder {{{{ {expression} }}}} cannot be "
            f"evaluated: {type(error).__name__}: {error}; name a value the examples define"
        )


@dataclass
class PageRecord:
    """What running a page's examples gave: what each example that ran through printed, in
    order; the placeholders' values, in the order they stand (None where they could not be
    computed); and ``failure``, the message naming the example that raised (the run stops
    there) or the placeholder that could not be evaluated, or None."""

    printed: list[str]
    values: list[str] | None = None
    failure: str | None = None


def record(markdown: str, page: str, path: str) -> PageRecord:
    """Run the page's examples and render each placeholder where it stands. Shared by the build
    (which shows the values) and ``tests/test_docs.py`` (which compares what each example printed
    with its Output block), so that one run of a page serves both."""
    run = PageRun(read_fences(markdown, page), path)
    prose = ProseValues(markdown, page)
    printed: list[str] = []
    with in_empty_folder():
        try:
            for fence, output, error in run.steps():
                if error is not None:
                    where = f"docs/{page}, Python example {fence.number} (line {fence.line})"
                    return PageRecord(printed, failure=f"{where} raised:\n{error}")
                printed.append(output)
                prose.after(fence, run.namespace)
            return PageRecord(printed, prose.finish(run.namespace))
        except ValueError as error:  # a placeholder that cannot be evaluated
            return PageRecord(printed, failure=str(error))


def fingerprint(root: Path) -> str:
    """What the project's code and environment are: every file of its packages, and the
    versions of Python, torch and numpy."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(path.read_bytes())
    versions = [platform.python_version()]
    for name in ("torch", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{name} {metadata.version(name)}")
    digest.update(repr(versions).encode())
    return digest.hexdigest()


def cache_key(markdown: str, page: str, project: str) -> str:
    """Changes whenever the page's examples change, or its placeholders or their order or the
    examples they stand after, or the hooks, or the project."""
    fences = [f for f in read_fences(markdown, page) if f.runs]
    starts = [f.line - 1 for f in fences]
    where = [
        (sum(start < line for start in starts), expression)
        for line, expression in placeholders(markdown, page)
    ]
    hooks = [path.read_text(encoding="utf-8") for path in HOOK_SOURCES]
    payload = json.dumps([hooks, page, [f.source for f in fences], where, project])
    return hashlib.sha256(payload.encode()).hexdigest()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) where the system has them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def cache_folder(root: Path) -> Path:
    """Where page runs are cached: ``$PROSE_VALUES_CACHE`` where it is set (the test suite
    names a folder of its own run, shared by the build and the tests), else ``.cache/``."""
    return Path(os.environ.get(CACHE_VARIABLE) or root / CACHE)


def cached_record(markdown: str, page: str, root: Path, project: str, folder: Path) -> PageRecord:
    """The page's run, from the cache in ``folder`` or by running the page. A failed run is not
    stored: the next build runs the page again."""
    key = cache_key(markdown, page, project)
    entry = folder / (re.sub(r"[^A-Za-z0-9]+", "-", page) + ".json")
    with locked(folder / (entry.name + ".lock")):
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):  # unreadable: run
            stored = json.loads(entry.read_text(encoding="utf-8"))
            if stored.pop("key") == key:
                return PageRecord(**stored)
        started = time.perf_counter()
        result = record(markdown, page, str(root / "docs" / page))
        log.info(f"prose values: ran docs/{page} in {time.perf_counter() - started:.1f} s")
        if result.failure is None:
            partial = entry.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps({"key": key, **asdict(result)}), encoding="utf-8")
            partial.replace(entry)  # atomic: a reader sees the old entry or the new one
        return result


def fill(markdown: str, page: str, values: list[str]) -> str:
    """``markdown`` with its placeholders outside code fences replaced by ``values``, in
    order."""
    lines = markdown.split("\n")
    inside = fenced_lines(lines, page)
    given = iter(values)

    def value(match: re.Match) -> str:
        return match[0] if match["expr"] is None else next(given)

    return "\n".join(
        line if n in inside else CODE_OR_PLACEHOLDER.sub(value, line)
        for n, line in enumerate(lines)
    )


_project: dict[str, str] = {}


def on_pre_build(config, **kwargs) -> None:
    _project.clear()  # `mkdocs serve` rebuilds after edits: fingerprint the code again


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    src = page.file.src_uri
    if not page.file.abs_src_path or not placeholders(markdown, src):
        return markdown
    root = Path(config.config_file_path).resolve().parent
    if "key" not in _project:
        _project["key"] = fingerprint(root)
    result = cached_record(markdown, src, root, _project["key"], cache_folder(root))
    if result.failure is not None:
        raise PluginError(result.failure)
    return fill(markdown, src, result.values)
