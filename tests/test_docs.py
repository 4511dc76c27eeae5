"""The docs site as a test subject: every Python example runs, the build is strict, the site is
offline.

Conventions for ``docs/**/*.md``:

- Every ```` ```python ```` fence runs. The fences of one page run in order in one namespace, so a
  page reads, and runs, as one script. Examples ``assert`` their claims, so a number that drifts
  from the code fails here.
- A ```` ```text title="Output" ```` fence right after a Python fence (blank lines between are
  allowed) is what that fence prints; the test compares it line by line, ignoring trailing spaces.
- ``<!-- skip-test -->`` on the line before a Python fence leaves it out. Use it rarely, and say
  on the page why the example cannot run.
- ``<!-- run-in-shell -->`` on the line before a ```` ```bash ```` fence runs that command with
  bash from the repository root (``.venv/bin/python`` becomes this interpreter), for what cannot
  run in this process, such as Numba's CUDA simulator. A ```` ```text title="Shell output" ````
  fence right after it is what it must print (``--update-output`` leaves these alone). Other
  bash fences are not run.
- Python lines fit in 80 columns, the width of a code block on the site.
- A number in prose that the examples produce is written ``{{ expression }}``: the build
  evaluates it after the page's examples (``docs/hooks/prose_values.py``), and a test checks the
  built page shows the same value; the build and the tests share one run of each page. Prose
  right after an Output block may not retype a number that block printed.

The fences are read by ``docs/hooks/markdown_fences.py``, which the build's hooks share; each
exercise's page is made at build time from ``tutorials/`` by ``docs/hooks/course.py``.

Screenshots of the terminal UI in ``docs/assets/screenshots`` are made by
``minipaged tui --screenshot``, and cut into crops a phone can read, by ``docs/screenshots.py``
(which lists them); ``.venv/bin/python docs/screenshots.py`` makes them again.

When the code changes what an example prints on purpose, run
``.venv/bin/python tests/test_docs.py --update-output`` to rewrite the Output fences from what the
examples print now, then read the diff before committing it.
"""

from __future__ import annotations

import ast
import code
import contextlib
import difflib
import io
import os
import re
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse
from xml.etree import ElementTree

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
VENDOR = DOCS / "assets" / "javascripts" / "vendor"
HOOKS = DOCS / "hooks"
sys.path.insert(0, str(HOOKS))  # the site's build hooks, which read pages as these tests do

from course import course_nav, exercise_folders, exercise_markdown, page_of  # noqa: E402

sys.path.insert(0, str(DOCS))  # docs/'s scripts: the figures and the TUI's screenshots
import screenshots  # noqa: E402
from markdown_fences import (  # noqa: E402
    OUTPUT_INFO,
    SHELL_MARKER,
    SHELL_OUTPUT_INFO,
    Fence,
    PageRun,
    fence_spans,
    read_fences,
)
from prose_values import (  # noqa: E402
    CACHE_VARIABLE,
    PageRecord,
    cached_record,
    fingerprint,
)

# Every fence must name one of these languages, so that a ```py or ```python3 example cannot slip
# past the runner unnoticed.
KNOWN_LANGUAGES = {"python", "text", "mermaid", "bash", "console", "yaml", "json"}
# Wider Python lines hide behind a horizontal scroll bar on the site.
MAX_CODE_COLUMNS = 80
# The vendored MathJax and mermaid builds take about 6 MB; a much larger folder means someone
# copied a whole npm package.
VENDOR_BUDGET_BYTES = 8_000_000
PAGES = sorted(DOCS.rglob("*.md"))
FENCES = {
    path.relative_to(DOCS).as_posix(): read_fences(
        path.read_text(encoding="utf-8"), path.relative_to(DOCS).as_posix()
    )
    for path in PAGES
}
SITE_URL = re.search(r"^site_url:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(), re.M)[1]
# Pages the build makes (docs/hooks/course.py): each exercise's statement, from tutorials/.
GENERATED = {page_of(folder): folder for folder in exercise_folders(ROOT)}


def page_text(page: str) -> str:
    """The Markdown of a page of the site, relative to docs/: a file, or one the build makes."""
    if page in GENERATED:
        return exercise_markdown(GENERATED[page], ROOT, SITE_URL)
    return (DOCS / page).read_text(encoding="utf-8")


PAGES_WITH_PYTHON = sorted(
    page for page, fences in FENCES.items() if any(f.language == "python" for f in fences)
)


def run_page(page: str) -> Iterator[tuple[Fence, str, str | None]]:
    """Run the page's Python fences in order in one namespace; yield each fence with what it
    printed and the traceback it raised (None when it ran through)."""
    return PageRun(FENCES[page], str(DOCS / page)).steps()


def _normalise(lines: str | tuple[str, ...]) -> list[str]:
    if isinstance(lines, str):
        lines = tuple(lines.splitlines())
    kept = [line.rstrip() for line in lines]
    while kept and not kept[-1]:
        kept.pop()
    return kept


@pytest.fixture(scope="module")
def page_run(tmp_path_factory):
    """``page_run(page)``: the run of a page's examples (``prose_values.PageRecord``). The build
    runs the pages with ``{{ ... }}`` values into the same folder (``page_runs_folder``), so each
    page runs once in a test run, here or in the build, whichever asks first."""
    folder = page_runs_folder(tmp_path_factory)
    project = fingerprint(ROOT)

    def run(page: str) -> PageRecord:
        markdown = (DOCS / page).read_text(encoding="utf-8")
        return cached_record(markdown, page, ROOT, project, folder)

    return run


# Longest last in mkdocs's order (alphabetical), so that while another worker builds the site,
# this one runs pages from the other end and the two meet halfway instead of taking turns.
@pytest.mark.parametrize("page", PAGES_WITH_PYTHON[::-1])
def test_every_python_example_on_the_page_runs(page: str, page_run) -> None:
    """Each example runs and prints its Output block, and every ``{{ expression }}`` in the
    page's prose can be evaluated where it stands."""
    result = page_run(page)
    ran = [fence for fence in FENCES[page] if fence.runs]
    # The run stops at an example that raised: zip pairs the examples that ran through.
    for fence, printed in zip(ran, result.printed, strict=False):
        if fence.output is not None:
            expected, actual = _normalise(fence.output.body), _normalise(printed)
            if actual != expected:
                where = f"docs/{page}, Python example {fence.number} (line {fence.line})"
                diff = difflib.unified_diff(expected, actual, "Output", "printed", lineterm="")
                pytest.fail(f"{where} printed something else:\n" + "\n".join(diff), pytrace=False)
    if result.failure is not None:
        pytest.fail(result.failure, pytrace=False)


def built_text(site: Path, page: str) -> str:
    """The text of a built page's article, tags removed, entities decoded."""
    html = (site / page).with_suffix(".html").read_text(encoding="utf-8")
    article = html[html.index("<article") : html.index("</article>")]
    return unescape(re.sub(r"<[^>]+>", "", article))


def test_python_examples_fit_the_page() -> None:
    wide = [
        f"docs/{f.page}:{f.line + n}: {len(text)} columns"
        for fences in FENCES.values()
        for f in fences
        if f.language == "python"
        for n, text in enumerate(f.body)
        if len(text) > MAX_CODE_COLUMNS
    ]
    assert not wide, f"Python lines wider than {MAX_CODE_COLUMNS} columns: {wide}"


def test_every_fence_names_a_known_language() -> None:
    unknown = [
        f"docs/{f.page}:{f.line - 1}: ```{f.info}"
        for fences in FENCES.values()
        for f in fences
        if f.language not in KNOWN_LANGUAGES
    ]
    assert not unknown, f"fences in no known language (use ```python to run one): {unknown}"


def test_every_tutorial_and_explanation_page_has_a_tested_example() -> None:
    pages = [p for p in FENCES if p.startswith(("tutorials/", "explanation/"))]
    assert pages, "no tutorial or explanation page found"
    untested = [p for p in pages if p not in PAGES_WITH_PYTHON]
    assert not untested, f"pages whose claims no example checks: {untested}"


def test_output_blocks_follow_a_python_example() -> None:
    """An Output fence that is not attached to a Python fence would never be checked."""
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        fences = FENCES[path.relative_to(DOCS).as_posix()]
        attached = sum(f.output is not None for f in fences)
        outputs = text.count(f"```{OUTPUT_INFO}") + text.count(f"```{SHELL_OUTPUT_INFO}")
        assert outputs == attached, (
            f"docs/{path.relative_to(DOCS)}: an Output block does not directly follow a "
            "Python example (or a Shell output block a command marked to run)"
        )


# A number in prose: digits with optional thousands commas and decimals, not part of a word,
# a version, a path, a section sign or an anchor.
PROSE_NUMBER = re.compile(r"(?<![\w.§/#-])\d[\d,]*(?:\.\d+)?(?!\w)")
# What is not prose on a line: inline code, inline math, a link's target, a placeholder, a
# list item's marker, and exercise numbers (names, not results: "exercises 08 to 11").
NOT_PROSE = re.compile(
    r"`[^`]*`|\$[^$]*\$|\]\([^)]*\)|\{\{.*?\}\}|^\s*(?:\d+\.|[-*])\s"
    r"|(?i:\bexercises?\s+\d+(?:\s*(?:,|and|to)\s*\d+)*)"
)


def numbers_in(text: str) -> set[str]:
    return {m[0].replace(",", "").rstrip(".") for m in PROSE_NUMBER.finditer(text)}


def retyped_numbers(text: str, page: str) -> list[str]:
    """Numbers typed into the prose that reads an Output block (the lines after it, up to the
    next fence or heading) which that output printed and no code on the page contains (a number
    in the code is the page's own input): numbers the run produced, copied by hand. Tables and
    display math are not prose."""
    lines = text.splitlines()
    spans = fence_spans(lines, page)
    outputs = (OUTPUT_INFO, SHELL_OUTPUT_INFO)
    in_code = {n for span in spans if span.info not in outputs for n in numbers_in(span.source)}
    found = []
    for k, span in enumerate(spans):
        if span.info not in outputs:
            continue
        produced = numbers_in("\n".join(span.body)) - in_code
        stop = spans[k + 1].line - 2 if k + 1 < len(spans) else len(lines)
        display_math = False
        for n in range(span.end + 1, stop):
            line = lines[n].strip()
            if line.startswith("$$"):
                display_math = (line == "$$") != display_math
                continue
            if line.startswith("#"):
                break  # a new section's prose reads its own examples, not this one
            if display_math or line.startswith("|"):
                continue
            copied = sorted(numbers_in(NOT_PROSE.sub(" ", lines[n])) & produced, key=float)
            found += [f"docs/{page}:{n + 1}: {number}" for number in copied]
    return found


def test_prose_does_not_retype_a_number_the_example_above_printed() -> None:
    """The class of the preemption page's stale "(10)": prose that repeats a number its
    example printed goes stale when the code changes. Write it as ``{{ expression }}``, which
    the build fills from the examples (docs/hooks/prose_values.py), or in words."""
    found = [
        problem
        for page, path in zip(FENCES, PAGES, strict=True)
        for problem in retyped_numbers(path.read_text(encoding="utf-8"), page)
    ]
    assert not found, (
        "numbers the examples printed, typed by hand into the prose after them; write each as "
        "{{ expression }} so the build computes it:\n" + "\n".join(found)
    )


SHELL_COMMANDS = [
    pytest.param(fence, id=f"{fence.page}:{fence.line}")
    for fences in FENCES.values()
    for fence in fences
    if fence.runs_in_shell
]


@pytest.mark.parametrize("fence", SHELL_COMMANDS)
def test_every_shell_command_marked_to_run_prints_what_the_page_shows(fence: Fence) -> None:
    """Such commands set up a process the runner cannot (Numba's CUDA simulator, say), so they
    run in bash from the repository root and must print the "Shell output" block after them."""
    where = f"docs/{fence.page}:{fence.line}"
    assert fence.language == "bash", f"{where}: {SHELL_MARKER} marks a bash fence"
    assert fence.output is not None, f"{where}: a Shell output block must follow the command"
    if "NUMBA_ENABLE_CUDASIM" in fence.source:
        pytest.importorskip("numba", reason="the command runs Numba's CUDA simulator")
    # Pages tell readers to use the repository's .venv; run with this interpreter instead.
    script = fence.source.replace(".venv/bin/python", sys.executable)
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{where}: the command failed:\n{result.stderr}"
    expected, actual = _normalise(fence.output.body), _normalise(result.stdout)
    if actual != expected:
        diff = difflib.unified_diff(expected, actual, "Shell output", "printed", lineterm="")
        pytest.fail(f"{where} printed something else:\n" + "\n".join(diff), pytrace=False)


def test_vendored_javascript_stays_small() -> None:
    total = sum(f.stat().st_size for f in VENDOR.rglob("*") if f.is_file())
    assert 0 < total <= VENDOR_BUDGET_BYTES, f"docs vendor folder holds {total:,} bytes"


# -- examples pasted into the interactive interpreter -------------------------------------------


class PastingConsole(code.InteractiveConsole):
    """The REPL a reader pastes an example into, line by line: what it cannot compile is
    recorded instead of printed. Pasting fails at compile time (where a block ends), so each
    complete statement is compiled, not run: running every example is the test above's work."""

    def __init__(self, namespace: dict[str, object]) -> None:
        super().__init__(namespace, filename="<stdin>")
        self.errors: list[str] = []

    def showsyntaxerror(self, filename=None, **kwargs) -> None:
        self.errors.append("".join(traceback.format_exception_only(*sys.exc_info()[:2])))

    def runcode(self, code) -> None:
        pass


def pasting_errors(source: str) -> list[str]:
    """What the REPL says when ``source`` is pasted into it line by line, ended, as a pasted
    block is, by an empty line."""
    console = PastingConsole({"__name__": "__console__"})
    for line in [*source.splitlines(), ""]:
        console.push(line)
    return console.errors


def test_pasting_fails_where_a_block_ends_without_a_blank_line_and_nothing_runs() -> None:
    dedent_after_block = "for i in range(2):\n    x = i\nprint(x)\n"
    blank_in_body = "def f():\n    a = 1\n\n    return a\n"
    assert "SyntaxError" in pasting_errors(dedent_after_block)[0]
    assert "IndentationError" in pasting_errors(blank_in_body)[0]
    assert pasting_errors("for i in range(2):\n    x = i\n\nraise SystemExit(1)\n") == []


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON)
def test_every_python_example_pastes_into_the_interactive_interpreter(page: str) -> None:
    """The 3.10 to 3.12 REPL ends an indented block only at a blank line, so a dedented line
    straight after one is a SyntaxError when pasted, though the file runs; and a blank line
    inside a function body ends it early. Each fence is pasted line by line as a reader would."""
    for fence in FENCES[page]:
        if fence.language != "python" or fence.skipped:
            continue
        if errors := pasting_errors("\n".join(fence.body)):
            where = f"docs/{page}, Python example {fence.number} (line {fence.line})"
            pytest.fail(f"{where} fails pasted into the REPL:\n{errors[0]}", pytrace=False)


# -- what the pages say about the project ------------------------------------------------------

CONTROL_CHARACTERS = re.compile(r"[\t\r\x07\x08\x0b\x0c]")
# Python's "\t", "\r", "\b", "\f", "\a" and "\v" escapes turn TeX's \tau, \text, \rceil, \beta,
# \frac, \alpha and \vec into control characters; Markdown shows them as "$ au$" or "ext{".
SOURCE_PACKAGES = ("minipaged", "cuda_kernels", "tui")


def docstrings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                yield node.body[0].lineno, text


def test_no_page_or_docstring_holds_a_control_character() -> None:
    """Reads bytes, so a lone carriage return counts, as it splits a table row."""
    found = [
        f"docs/{path.relative_to(DOCS)}:{n}: {CONTROL_CHARACTERS.search(line)[0]!r}"
        for path in PAGES
        for n, line in enumerate(path.read_bytes().decode("utf-8").split("\n"), 1)
        if CONTROL_CHARACTERS.search(line)
    ]
    found += [
        f'{path.relative_to(ROOT)}:{line}: docstring holds {match[0]!r} (write \\\\tau or r""")'
        for package in SOURCE_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, text in docstrings(path)
        if (match := CONTROL_CHARACTERS.search(text))
    ]
    assert not found, "control characters, probably a TeX command eaten by an escape:\n" + (
        "\n".join(found)
    )


def site_nav() -> list:
    """mkdocs.yml's nav as the build makes it: with each exercise's page in "Course"."""
    from mkdocs.config import load_config

    with contextlib.redirect_stderr(io.StringIO()):
        return course_nav(load_config(str(ROOT / "mkdocs.yml"))["nav"], ROOT)


def nav_pages() -> list[str]:
    """The site's nav, flattened in reading order: the order of Material's footer links."""
    nav = site_nav()

    def flatten(items) -> Iterator[str]:
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                yield from flatten(value)
            elif not EXTERNAL.match(value):
                yield value

    return list(flatten(nav))


def test_every_page_is_in_the_nav_once() -> None:
    nav = nav_pages()
    on_disk = {path.relative_to(DOCS).as_posix() for path in PAGES} | set(GENERATED)
    assert not (missing := sorted(on_disk - set(nav))), (
        f"pages missing from mkdocs.yml nav: {missing}"
    )
    assert not (absent := sorted(set(nav) - on_disk)), (
        f"nav names pages that do not exist: {absent}"
    )
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


MARKDOWN_LINK = re.compile(r"\]\(([^)\s#]+\.md)(#[^)]*)?\)")
NEXT_PARAGRAPH = re.compile(r"^Next:(.*?)(?:\n\s*\n|\Z)", re.M | re.S)


def linked_pages(page: str, text: str) -> list[str]:
    """Pages ``text`` (on ``page``) links to, in order, relative to docs/."""
    base = (DOCS / page).parent
    return [
        (base / target).resolve().relative_to(DOCS.resolve()).as_posix()
        for target, _ in MARKDOWN_LINK.findall(text)
    ]


def test_next_links_follow_the_nav() -> None:
    """A page's "Next:" paragraph first names the page after it in the nav, the page
    Material's footer offers; the last page has no "Next:"."""
    nav = nav_pages()
    wrong = []
    for k, page in enumerate(nav):
        paragraph = NEXT_PARAGRAPH.search(page_text(page))
        if paragraph is None:
            continue
        links = linked_pages(page, paragraph[1])
        expected = nav[k + 1] if k + 1 < len(nav) else None
        if not links or links[0] != expected:
            wrong.append(f"docs/{page}: Next names {links[:1]}, the nav's next page is {expected}")
    assert not wrong, "\n".join(wrong)


def test_the_home_page_maps_every_section_of_the_site() -> None:
    """Every page in the nav is linked from the home page, or from a page the home page
    links that sits in the same nav section (a section's own index page, say)."""
    nav = site_nav()
    home = set(linked_pages("index.md", page_text("index.md")))
    unmapped = []
    for section in nav:
        pages = nav_pages_in(section)
        reached = set(home)
        for page in pages:
            if page in home:
                reached |= set(linked_pages(page, page_text(page)))
        unmapped += [p for p in pages if p not in reached and p != "index.md"]
    assert not unmapped, f"pages the home page's site map does not reach: {unmapped}"


EXERCISE_LINK = re.compile(r"\[(?:[^\]]*?\b)?[Ee]xercises? (\d+)[^\]]*\]\(([^)\s#]+)")


def test_a_link_named_for_an_exercise_lands_on_that_exercises_page() -> None:
    """ "Your turn: Exercise 5" once led to the course's table; each exercise has a page."""
    pages = {int(Path(page).name[:2]): page for page in GENERATED}
    wrong, seen = [], 0
    for path in PAGES:
        page = path.relative_to(DOCS).as_posix()
        for number, target in EXERCISE_LINK.findall(path.read_text(encoding="utf-8")):
            seen += 1
            landed = (DOCS / page).parent.joinpath(target).resolve().relative_to(DOCS.resolve())
            if landed.as_posix() != pages.get(int(number)):
                wrong.append(f"docs/{page}: exercise {number} links to {landed.as_posix()}")
    assert seen, "no link is named for an exercise: EXERCISE_LINK no longer reads the pages"
    assert not wrong, "\n".join(wrong)


TEACHING_PAGES = sorted(
    path.relative_to(DOCS).as_posix()
    for folder in ("explanation", "tutorials")
    for path in (DOCS / folder).glob("*.md")
)


@pytest.mark.parametrize("page", TEACHING_PAGES)
def test_every_explanation_and_tutorial_ends_with_its_exercises(page: str) -> None:
    """A page that teaches a part of the source text says, under "Your turn", which exercise
    has the reader build it, and links to that exercise's page."""
    text = page_text(page)
    turn = re.search(r"^## Your turn\b.*?(?=^## |\Z)", text, re.M | re.S)
    assert turn, f"docs/{page} has no '## Your turn' section naming its exercises"
    exercises = [p for p in linked_pages(page, turn[0]) if p in GENERATED]
    assert exercises, f"docs/{page}'s 'Your turn' links to no exercise's page"


@pytest.mark.parametrize("exercise", sorted(GENERATED))
def test_an_exercise_and_the_pages_that_teach_it_link_each_other(exercise: str) -> None:
    """Each exercise's page links to the pages it builds on (its README's background and the
    course table's "read first"), and each of those pages links back to the exercise."""
    taught_by = {p for p in linked_pages(exercise, page_text(exercise)) if p not in GENERATED}
    taught_by.discard("course/index.md")
    assert taught_by, f"{exercise} links to no page of the site"
    silent = sorted(p for p in taught_by if exercise not in linked_pages(p, page_text(p)))
    assert not silent, f"pages {exercise} builds on that do not link back to it: {silent}"


def nav_pages_in(item) -> list[str]:
    value = next(iter(item.values())) if isinstance(item, dict) else item
    if isinstance(value, list):
        return [page for sub in value for page in nav_pages_in(sub)]
    return [] if EXTERNAL.match(value) else [value]


# Modules documented elsewhere than an API page, and where.
NOT_ON_AN_API_PAGE = {
    "minipaged.cli": "reference/cli.md documents the command line",
    "minipaged.arguments": "the command line's value types; reference/cli.md documents them",
    "minipaged.transcript": "how the command line prints runs; reference/cli.md shows it",
    "minipaged.__main__": "python -m minipaged is the command line",
    "minipaged.grader": "the exercises' own pages and README document the grader",
    "minipaged.study.bench.": "each benchmark is a row of minipaged.study.bench's table",
    "cuda_kernels.__main__": "not a library module",
}


def test_every_module_has_an_api_page() -> None:
    documented = {
        line.removeprefix(":::").strip()
        for path in PAGES
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith(":::")
    }
    modules = []
    for package in ("minipaged", "cuda_kernels"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    missing = [
        m
        for m in modules
        if m not in documented and not any(m.startswith(p) for p in NOT_ON_AN_API_PAGE)
    ]
    assert not missing, f"modules on no API page (add `::: name` to a reference page): {missing}"


def test_what_the_pages_say_make_demo_runs_is_what_it_runs() -> None:
    recipe = re.search(r"^demo:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "the Makefile has no demo target"
    runs = recipe[1].strip().removeprefix(".venv/bin/")
    claims = [
        (path, claim)
        for path in [*PAGES, ROOT / "README.md"]
        for claim in re.findall(r"`make demo` runs `([^`]+)`", path.read_text(encoding="utf-8"))
    ]
    assert claims, "no page says what `make demo` runs"
    wrong = [f"{path.name}: says {claim!r}" for path, claim in claims if claim != runs]
    assert not wrong, f"`make demo` runs {runs!r}, but:\n" + "\n".join(wrong)


# -- figures drawn from the code ------------------------------------------------------------


def load_figures():
    """docs/figures.py, imported from its path (docs/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_figures", DOCS / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_figure_is_current_and_shown_on_a_page() -> None:
    """docs/figures.py draws them from the code; a figure that differs from a fresh drawing
    is stale: run `.venv/bin/python docs/figures.py` and review the pictures."""
    figures = load_figures()
    committed = {path.name for path in figures.FIGURES.glob("*.svg")}
    assert committed == set(figures.FIGURES_SVG), "docs/assets/figures must hold exactly these"
    pages = "".join(path.read_text(encoding="utf-8") for path in PAGES)
    stale = [
        name
        for name in figures.FIGURES_SVG
        if figures.render(name) != (figures.FIGURES / name).read_bytes()
    ]
    unused = [name for name in figures.FIGURES_SVG if f"figures/{name}" not in pages]
    assert not stale, f"stale figures (run .venv/bin/python docs/figures.py): {stale}"
    assert not unused, f"figures no page shows: {unused}"
    block = figures.radix_block(figures.RADIX_PAGE.read_text(encoding="utf-8"))
    assert block is not None and block[1] == figures.radix_tree_mermaid(), (
        "the radix tree on the comparison page is stale: run .venv/bin/python docs/figures.py"
    )


def test_no_line_of_the_kv_per_layer_figure_hides_another() -> None:
    """Llama-3-8B and Llama-3-70B store the same bytes per layer: drawn alike, the first line
    vanished under the second. Lines that coincide must differ in style, and a dot marks
    where each model's line ends."""
    from itertools import combinations

    import matplotlib.pyplot as plt

    figures = load_figures()
    fig = figures.kv_per_layer()
    lines = fig.axes[0].get_lines()
    steps = [line for line in lines if len(line.get_xdata()) > 1]
    dots = [line for line in lines if len(line.get_xdata()) == 1]
    plt.close(fig)
    assert len(steps) == len(dots) == len(figures.memory.PRESETS)
    for a, b in combinations(steps, 2):
        n = min(len(a.get_ydata()), len(b.get_ydata()))
        if list(a.get_ydata()[:n]) == list(b.get_ydata()[:n]):
            assert a.get_linestyle() != b.get_linestyle(), (a.get_label(), b.get_label())


def test_the_kernel_threads_figure_labels_every_block_it_draws() -> None:
    """Each block of the table, not every other one, shows which physical block it is."""
    import matplotlib.pyplot as plt

    fig = load_figures().kernel_threads()
    axis = fig.axes[0]
    blocks = [p for p in axis.patches if p.get_y() == 0 and not p.get_fill()]
    labels = [t for t in axis.texts if t.get_position()[1] == 0.4]
    plt.close(fig)
    assert len(labels) == len(blocks) > 1


# -- the built site ---------------------------------------------------------------------------


SUB_PATH = urlparse(
    re.search(r"^site_url:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(), re.M)[1]
).path
"""The path the site is served under (``site_url``'s), which the browser test serves it at."""
SUB_FOLDERS = [part for part in SUB_PATH.split("/") if part]
BUILD_TIMEOUT_S = 1200
"""The build runs the examples of the pages with ``{{ ... }}`` values that this test run has not
run yet (``docs/hooks/prose_values.py``): a minute or more on two loaded cores."""


def build_site(site_dir: Path, page_runs: Path) -> None:
    """``mkdocs build --strict`` into ``site_dir``, its pages' runs cached in ``page_runs``;
    fails the test on any warning."""
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
    command += ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site_dir)]
    # It runs on one torch thread, as conftest.py sets for every process the tests start.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", CACHE_VARIABLE: str(page_runs)}
    result = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=BUILD_TIMEOUT_S,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"


def run_folder(tmp_path_factory) -> Path:
    """The temporary folder of this test run, shared by pytest-xdist's workers."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def page_runs_folder(tmp_path_factory) -> Path:
    """Where this test run caches the runs of the pages' examples (``prose_values``), for the
    build and the tests alike: each page runs once per test run, never from an older run's
    cache."""
    return run_folder(tmp_path_factory) / "page-runs"


def shared_site(tmp_path_factory) -> Path:
    """The site, built once per test run under ``site_url``'s sub-folders: with pytest-xdist
    the first worker that asks builds it, under a lock in the run's shared temporary folder,
    and the others wait and read the same files (a second build would cost minutes)."""
    import fcntl

    root = run_folder(tmp_path_factory)
    site_dir = root.joinpath("built-site", *SUB_FOLDERS)
    failed = root / "built-site.failed"
    with open(root / "built-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if failed.is_file():
            pytest.fail(failed.read_text())
        if not (site_dir / "index.html").is_file():
            try:
                build_site(site_dir, page_runs_folder(tmp_path_factory))
            except (AssertionError, subprocess.TimeoutExpired) as error:
                failed.write_text(f"{error}")
                raise
    return site_dir


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return shared_site(tmp_path_factory)


def test_mkdocs_build_strict_succeeds(site: Path) -> None:
    assert (site / "index.html").is_file()
    scripts = sorted(str(path.relative_to(site)) for path in site.rglob("*.py"))
    assert not scripts, f"docs/'s scripts and hooks are published as pages or files: {scripts}"
    for page in PAGES:
        # The offline plugin builds page.md as page.html, so links work opened from disk.
        html = site / page.relative_to(DOCS).with_suffix(".html")
        assert html.is_file(), f"docs/{page.relative_to(DOCS)} was not built"


EXTERNAL = re.compile(r"^(https?:)?//", re.IGNORECASE)
CSS_EXTERNAL = re.compile(
    r"""(url\(\s*['"]?|@import\s+['"])(https?:)?//""",
    re.IGNORECASE,
)
# <link> relations that name a page instead of loading a resource.
LINK_RELS_NOT_LOADED = {"canonical", "alternate", "prev", "next", "author", "license"}
LOADING_ATTRIBUTES = {
    "script": ["src"],
    "img": ["src", "srcset"],
    "iframe": ["src"],
    "source": ["src", "srcset"],
    "video": ["src", "poster"],
    "audio": ["src"],
    "embed": ["src"],
    "object": ["data"],
}


class _ResourceFinder(HTMLParser):
    """Collects every URL an HTML page loads when viewed (not the links a reader may follow)."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "script" and "src" in values:
            self.scripts.append(values["src"])
        if tag == "link":
            rels = set(values.get("rel", "").lower().split())
            if "href" in values and not rels <= LINK_RELS_NOT_LOADED:
                self.loaded.append(values["href"])
        for name in LOADING_ATTRIBUTES.get(tag, []):
            if name in values:
                self.loaded.extend(part.split()[0] for part in values[name].split(",") if part)


def _parse(page: Path) -> _ResourceFinder:
    finder = _ResourceFinder()
    finder.feed(page.read_text(encoding="utf-8"))
    return finder


def test_site_loads_no_external_script_stylesheet_or_font(site: Path) -> None:
    problems = []
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        external = [url for url in _parse(page).loaded if EXTERNAL.match(url.strip())]
        problems += [f"{page.relative_to(site)} loads {url}" for url in external]
        if CSS_EXTERNAL.search(text):
            problems.append(f"{page.relative_to(site)} has an inline style that loads a URL")
    for sheet in sorted([*site.rglob("*.css"), *site.rglob("*.svg")]):
        if CSS_EXTERNAL.search(sheet.read_text(encoding="utf-8")):
            problems.append(f"{sheet.relative_to(site)} imports a font or file from a URL")
    assert not problems, "the site must work offline:\n" + "\n".join(problems)


def test_math_and_diagram_pages_load_the_vendored_scripts(site: Path) -> None:
    """mkdocs-material fetches mermaid from a CDN unless window.mermaid already exists when the
    page is ready, so every page with a diagram must load the vendored copy; likewise MathJax.
    A page with nothing for one of them to draw does not load its megabytes
    (docs/hooks/page_scripts.py)."""
    needs = {
        "mermaid": ["/mermaid.min.js"],
        "arithmatex": ["/mathjax-config.js", "/tex-svg-full.js"],  # the settings first
    }
    seen = dict.fromkeys(needs, 0)
    idle = []
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        scripts = [s for s in _parse(page).scripts if not EXTERNAL.match(s)]
        for css_class, files in needs.items():
            local = [s for name in files for s in scripts if s.endswith(name)]
            if f'class="{css_class}"' in text:
                seen[css_class] += 1
                assert len(local) == len(files) and local == sorted(local, key=scripts.index), (
                    f"{page.relative_to(site)} uses {css_class} but loads {local}, not {files}"
                )
                assert all((page.parent / s).resolve().is_file() for s in local), local
            elif local:
                idle.append(f"{page.relative_to(site)} loads {local}")
    assert all(seen.values()), f"expected math and diagrams somewhere in the site: {seen}"
    assert not idle, "pages that load a script with nothing to draw:\n" + "\n".join(idle)


# -- screenshots of the terminal UI ----------------------------------------------------------

SVG_ROOT = "{http://www.w3.org/2000/svg}svg"
SCREENSHOTS = screenshots.SCREENSHOTS
# An image that links to a file: ``[![alt](crop.svg)](full.svg)``.
LINKED_IMAGE = re.compile(r"\[!\[[^\]]*\]\(([^)\s]+)\)\]\(([^)\s]+)\)")


def screen_text(svg: Path) -> list[str]:
    """The characters on the screen, line by line, without the SVG's styling."""
    root = ElementTree.parse(svg).getroot()
    assert root.tag == SVG_ROOT, f"{svg} is not an SVG image"
    return _normalise("".join(root.itertext()).replace("\xa0", " "))


def test_every_screenshot_and_crop_is_listed_and_a_page_shows_each_crop_linked_to_its_whole():
    """On a phone a whole screenshot's text is 3 px high: pages show a crop, the pane they
    discuss, linked to the whole screenshot (docs/screenshots.py)."""
    on_disk = {path.name for path in SCREENSHOTS.glob("*.svg")}
    assert on_disk == set(screenshots.SCREENSHOT_ARGS) | set(screenshots.CROPS), (
        "docs/assets/screenshots must hold exactly the screenshots and crops docs/screenshots.py "
        "lists"
    )
    shown = {
        (Path(image).name, Path(target).name)
        for path in PAGES
        for image, target in LINKED_IMAGE.findall(path.read_text(encoding="utf-8"))
        if "screenshots/" in image
    }
    expected = {(name, part.screenshot) for name, part in screenshots.CROPS.items()}
    assert not (missing := sorted(expected - shown)), (
        f"crops no page shows as a link to their whole screenshot: {missing}"
    )
    whole = [
        f"docs/{path.relative_to(DOCS)}: {name}"
        for path in PAGES
        for name in screenshots.SCREENSHOT_ARGS
        if re.search(rf"!\[[^\]]*\]\([^)]*screenshots/{re.escape(name)}\)", path.read_text())
    ]
    assert not whole, f"pages that show a whole screenshot inline (show a crop): {whole}"


@pytest.mark.parametrize("name", sorted(screenshots.CROPS))
def test_every_crop_is_cut_from_the_current_screenshot_and_shows_what_its_page_says(name):
    part = screenshots.CROPS[name]
    whole = (SCREENSHOTS / part.screenshot).read_text(encoding="utf-8")
    assert (SCREENSHOTS / name).read_text(encoding="utf-8") == screenshots.crop(whole, part), (
        f"docs/assets/screenshots/{name} is stale: run .venv/bin/python docs/screenshots.py"
    )
    rows = screenshots.screen_rows((SCREENSHOTS / name).read_text(encoding="utf-8"))
    missing = [claim for claim in part.shows if not any(claim in row for row in rows)]
    assert not missing, f"{name} does not show {missing}:\n" + "\n".join(rows)
    assert len(rows) <= part.rows, f"{name} shows more than its {part.rows} rows"


def test_a_screenshot_regenerated_from_the_tui_is_an_svg_showing_the_same_screen(tmp_path):
    """The screenshots cannot go stale unnoticed: one is made again and must show what the
    committed one shows."""
    name = "parallel-step-2.svg"
    screenshots.take_screenshot(name, tmp_path / name)
    fresh = screen_text(tmp_path / name)
    assert any("parallel sampling" in line for line in fresh), fresh[:3]
    assert fresh == screen_text(SCREENSHOTS / name), (
        f"docs/assets/screenshots/{name} is stale: run "
        "`.venv/bin/python docs/screenshots.py` and review the pictures"
    )


# -- what the built pages show (last: the site's build, on another worker, runs the pages too) --


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON)
def test_the_built_page_shows_the_values_its_examples_compute(page: str, page_run, site) -> None:
    """Every ``{{ expression }}`` value the page's examples compute is on the built page."""
    result = page_run(page)
    if result.values is None:
        pytest.fail(result.failure, pytrace=False)
    shown = built_text(site, page)
    missing = [value for value in result.values if value not in shown]
    assert not missing, (
        f"docs/{page}: the examples compute {missing}, but the built page does not show them"
    )


def update_output() -> int:
    """Rewrite every Output fence with what its example prints now. Returns 1 if an example
    raised (its page is left as it was), else 0."""
    status = 0
    for page in PAGES_WITH_PYTHON:
        path = DOCS / page
        lines = path.read_text(encoding="utf-8").splitlines()
        replacements = []
        for fence, printed, error in run_page(page):
            if error is not None:
                print(f"docs/{page}, Python example {fence.number} raised:\n{error}")
                status = 1
                break
            if fence.output is not None and _normalise(printed) != _normalise(fence.output.body):
                replacements.append((fence.output, _normalise(printed)))
        else:
            for output, new_body in reversed(replacements):
                lines[output.line - 1 : output.end] = new_body
            if replacements:
                path.write_text("\n".join(lines) + "\n", encoding="utf-8")
                print(f"docs/{page}: rewrote {len(replacements)} Output block(s)")
    return status


if __name__ == "__main__":
    if sys.argv[1:] == ["--update-screenshots"]:
        sys.exit(screenshots.write_all())
    if sys.argv[1:] != ["--update-output"]:
        sys.exit(f"usage: {sys.argv[0]} --update-output | --update-screenshots")
    # Examples run from an empty folder, as under pytest.
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        sys.exit(update_output())


def test_the_course_nav_is_the_graders_exercises_in_order() -> None:
    """mkdocs.yml lists no exercise: the build adds each one's page, and the pages are the
    grader's registry's exercises, in its order, so a new exercise is one declaration and
    its folder."""
    from minipaged.grader.exercises import EXERCISES

    course = [page for page in nav_pages() if page in GENERATED]
    assert course == [f"course/{ex.folder}.md" for ex in EXERCISES.values()]
    assert "course/01-" not in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_every_exercise_has_a_row_in_the_course_tables() -> None:
    """The course's table (what to read first, how to see it run) and tutorials/README.md's
    (the files to complete) are written by hand: each of the grader's exercises has its row."""
    from minipaged.grader.exercises import EXERCISES

    course = (DOCS / "course" / "index.md").read_text(encoding="utf-8")
    tutorials = (ROOT / "tutorials" / "README.md").read_text(encoding="utf-8")
    missing = [
        ex.folder
        for ex in EXERCISES.values()
        if f"| {ex.number:02d} | [" not in course
        or f"]({ex.folder}.md)" not in course
        or f"]({ex.folder}/README.md)" not in tutorials
    ]
    assert not missing, (
        f"exercises with no row in docs/course/index.md or tutorials/README.md: {missing}"
    )
