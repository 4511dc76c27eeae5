"""The built site in a real browser: headless Chromium driven by Playwright, at a phone's width
(390 px) and a laptop's (1280 px), served over HTTP and opened from disk.

A browser sees what no HTML test does: an equation MathJax drew 1 px wide, TeX that a stray
escape left raw, a diagram mermaid never drew, a search box that finds nothing, a page that
fetches from another host, a page that scrolls sideways while its window is widened. Each page
is loaded once, in one tab, at one width, and then shown at the other by resizing the window in
place, as a reader turns a tablet or widens a window: loading a page (MathJax and mermaid
parsed again) is most of the run time, and a resize is what finds a layout that only a
change of width breaks. Pages are loaded at each width in turn, half at each. The checks below
read what the visits recorded. Search, the same index on every page, is tried on a few pages,
and only they build the index (the others get its response with no page in it).

This file visits every page of the site served over HTTP; ``test_site_from_disk.py`` runs the
same checks on the site opened from disk, on one page of each kind (what a page loads is what
can differ from disk), each loaded at the width it is not loaded at here.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it); Playwright only drives it
(``executable_path``), so nothing is downloaded. Without either, the tests skip with the reason.
``SITE_SCREENSHOTS=folder`` saves a full-page PNG of every visit there, to look at.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from dark_scheme import IN_SLATE, unreadable
from held_port import held_port
from stuck import STUCK_AFTER_S
from test_docs import DOCS, GENERATED, SUB_FOLDERS, SUB_PATH, shared_site

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (requirements-dev.txt pins it)"
)
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"no Chromium at {CHROMIUM} (apt-get install -y chromium, as .ci/run does)",
        allow_module_level=True,
    )

# A phone and a laptop, width by height; Material's narrow layout starts below 720 px.
VIEWPORTS = {390: 844, 1280: 800}
WIDTHS = tuple(VIEWPORTS)
# The 404 page links by absolute paths under site_url's path, so the site is served there.
PAGES = sorted(
    Path(page).with_suffix(".html").as_posix()
    for page in [*(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")), *GENERATED]
)
SEARCH_TERM = "refcount"
TOPIC_SEARCH = ("index.html", "copy-on-write")
"""A reader's search from the home page, for the topic the site is about: a hyphenated term,
which the search must find as the words it is written with."""
# Opened from disk and searched: the home page, and pages with tables, equations and diagrams.
SAMPLE = ["index.html", "reference/glossary.html", "explanation/copy-on-write.html"]
# TeX that survived as text: a dollar sign or backslash command outside math, or the tail of
# \text / \tau after Python or Markdown turned "\t" into a tab.
RAW_TEX = re.compile(r"\$|\\[A-Za-z]+|\\[()\[\]]|(?<!\\t)ext\{")
CONTROL = re.compile(r"[\t\r\x07\x08\x0b\x0c]")
# Mermaid draws text at 16 px and scales the drawing down to the column; at 390 px a wide
# left-to-right flowchart shrank its labels to 7 px. Draw diagrams top to bottom instead.
MIN_DIAGRAM_FONT_PX = 9.0

# Material draws mermaid diagrams into closed shadow roots; open them so a test can look inside.
OPEN_SHADOW_ROOTS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {
  return attach.call(this, {...init, mode: "open"});
};
"""
# What a page shows once MathJax and mermaid are done.
INSPECT = """async () => {
  const STUCK_MS = STUCK_AFTER_MS;
  // MathJax's typesetting, or STUCK_AFTER_S: math still raw then fails the page's checks,
  // where a promise that never settles would hold the test for good.
  if (window.MathJax && MathJax.startup) await Promise.race([
    MathJax.startup.promise, new Promise(done => setTimeout(done, STUCK_MS))]);
  const article = document.querySelector("article");
  const prose = article.cloneNode(true);
  prose.querySelectorAll("pre, code, mjx-container, script, style, .mermaid, .headerlink")
    .forEach(e => e.remove());
  const box = e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  const diagrams = [...article.querySelectorAll(".mermaid")].map(e => {
    const svg = e.shadowRoot && e.shadowRoot.querySelector("svg");
    if (!svg) return null;
    const scale = box(svg)[0] / (svg.viewBox.baseVal.width || box(svg)[0]);
    return {box: box(svg), font: 16 * scale};
  });
  const math = window.MathJax && MathJax.startup && MathJax.startup.document
    ? [...MathJax.startup.document.math].map(m => m.math) : [];
  const overflows = e => e.scrollWidth > e.clientWidth + 1;
  const cue = e => {
    const style = getComputedStyle(e);
    const scrolls = ["auto", "scroll"].includes(style.overflowX);
    return scrolls && style.backgroundImage.includes("gradient");
  };
  // Boxes that scroll sideways inside the column: display formulas, code blocks and tables.
  const scrollers = [...article.querySelectorAll(
    "div.arithmatex, pre > code, .md-typeset__scrollwrap")].filter(overflows)
    .map(e => ({text: e.textContent.trim().slice(0, 40), cue: cue(e)}));
  // decode(): settles once the file is fetched and decoded, and fails for one that is missing
  // or is no image the browser can draw (the load event alone does not say which).
  const images = await Promise.all([...article.querySelectorAll("img")].map(async img => ({
    src: img.currentSrc || img.src, width: img.getBoundingClientRect().width,
    alt: img.getAttribute("alt"), drawn: await img.decode().then(() => true, () => false),
  })));
  // A table's first column, the key its rows are read by: in view at either end of its scroll.
  const cutTables = [];
  for (const wrap of article.querySelectorAll(".md-typeset__scrollwrap")) {
    const cells = [...wrap.querySelectorAll("tr > :first-child")];
    const cut = () => {
      const box = wrap.getBoundingClientRect();
      return cells.some(c => {
        const r = c.getBoundingClientRect();
        const outside = r.left < box.left - 1 || r.right > box.right + 1;
        return outside || c.scrollWidth > c.clientWidth + 1;
      });
    };
    const atStart = cut();
    wrap.scrollLeft = wrap.scrollWidth;
    const atEnd = cut();
    wrap.scrollLeft = 0;
    if (atStart || atEnd) cutTables.push((cells[0] || wrap).textContent.trim().slice(0, 40));
  }
  // Inline code that wraps: where its lines break, a letter or digit on both sides is a name
  // cut in two ("minipaged.sc" / "heduler"). Read character by character, wrapped ones only.
  const cutCode = [];
  const range = document.createRange();
  for (const code of article.querySelectorAll(":not(pre) > code")) {
    if (code.getClientRects().length < 2) continue;
    // [the character before, the character, its top]; a space at a line's end has no box.
    const chars = [];
    let before = "";
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node; (node = walker.nextNode());) {
      for (let i = 0; i < node.length; i++) {
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const r = range.getClientRects()[0];
        if (r) chars.push([before, node.data[i], r.top]);
        before = node.data[i];
      }
    }
    const word = /[A-Za-z0-9]/;
    if (chars.some(([b, c, top], i) => i && top > chars[i - 1][2] + 1 && word.test(b)
                   && word.test(c))) cutCode.push(code.textContent.slice(0, 40));
  }
  return {
    prose: prose.textContent,
    cutCode,
    scrollers,
    images,
    cutTables,
    equations: [...article.querySelectorAll('mjx-container[display="true"] > svg')].map(box),
    inline: [...article.querySelectorAll('mjx-container:not([display="true"]) > svg')].map(box),
    tex: math,
    errors: article.querySelectorAll("mjx-merror").length,
    diagrams,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    links: [...document.querySelectorAll("a[href]")].map(a => a.href),
    ids: [...document.querySelectorAll("[id]")].map(e => e.id),
  };
}""".replace("STUCK_AFTER_MS", str(int(STUCK_AFTER_S * 1000)))


# How far past the window's right edge the page reaches at the start of the transitions a resize
# began (widened past 1220 px, the theme's search box grows from nothing, and its input's
# padding once stuck out of it for a quarter of a second); then every transition is finished,
# so INSPECT measures the page settled. Timing the measurement would make the check flaky.
RUNNING = "document.getAnimations().filter(a => isFinite(a.effect.getComputedTiming().endTime))"
RESIZED = f"""() => {{
  const running = {RUNNING};
  running.forEach(a => {{ a.pause(); a.currentTime = 0; }});
  const overflow = document.documentElement.scrollWidth - window.innerWidth;
  running.forEach(a => a.finish());
  return overflow;
}}"""


@dataclass
class Visit:
    url: str
    width: int
    resized_from: int | None = None  # the width the page was loaded at, where it was resized
    console: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    found: dict = field(default_factory=dict)
    search_hits: int | None = None  # None where not searched
    search_texts: list[str] = field(default_factory=list)  # the results a search listed

    def __str__(self) -> str:
        resized = f", resized from {self.resized_from} px" if self.resized_from else ""
        return f"{self.url} at {self.width} px{resized}"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return shared_site(tmp_path_factory)


@pytest.fixture(scope="module")
def base_url(site: Path):
    """The site over HTTP on 127.0.0.1, under site_url's path, for this module's tests."""
    with held_port() as port:  # what answers there is this server, no other test's
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=site.parents[len(SUB_FOLDERS) - 1] if SUB_FOLDERS else site,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}{SUB_PATH}"
        try:
            deadline = time.monotonic() + STUCK_AFTER_S
            while True:
                try:
                    urllib.request.urlopen(url + "index.html", timeout=STUCK_AFTER_S).close()
                    break
                except OSError:
                    assert server.poll() is None, f"python -m http.server ended on port {port}"
                    if time.monotonic() > deadline:
                        pytest.fail(f"python -m http.server did not answer at {url}")
                    time.sleep(0.1)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=STUCK_AFTER_S)


@contextlib.contextmanager
def launched_chromium():
    """Debian's Chromium, headless, driven by Playwright."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def browser():
    with launched_chromium() as chromium:
        yield chromium


def other_width(width: int) -> int:
    (other,) = set(WIDTHS) - {width}
    return other


def alternating(pages: list[str], first: int) -> list[tuple[str, int]]:
    """``pages`` each with the width to load it at: the first at ``first``, each next one at
    the width the one before was resized to (so the window is never resized in between)."""
    return [(page, first if n % 2 == 0 else other_width(first)) for n, page in enumerate(pages)]


HTTP_LOADS = alternating(PAGES, WIDTHS[0])
"""Each page with the width it is loaded at over HTTP, before it is resized to the other."""


def visit_all(browser, base: str, loads: list[tuple[str, int]]) -> list[Visit]:
    """Load each ``(page, width)`` in one tab at that width; record what it logged, fetched and
    shows, then resize the window to the other width and record what it shows there (and, on
    SAMPLE pages, how many results a search for SEARCH_TERM lists at each width). Two visits a
    page: loaded, resized."""
    first = loads[0][1]
    context = browser.new_context(viewport={"width": first, "height": VIEWPORTS[first]})
    context.add_init_script(OPEN_SHADOW_ROOTS)
    tab = context.new_page()
    own = urlparse(base)
    visits: list[Visit] = []

    def on_request(request) -> None:
        url = urlparse(request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.netloc != own.netloc:
            visits[-1].foreign.append(request.url)

    def on_response(response) -> None:
        if response.status >= 400:
            visits[-1].failed.append(f"{response.status} {response.url}")

    def on_failed(request) -> None:
        # ERR_ABORTED is the browser cancelling a request itself, as when the next goto
        # leaves a page whose favicon is still loading; a missing file fails otherwise.
        if "ERR_ABORTED" not in (request.failure or ""):
            visits[-1].failed.append(f"{request.failure} {request.url}")

    def index_unless_searched(route) -> None:
        # Material's search worker fetches the index on every page and builds it (0.9 MB of
        # text: 0.5 s of CPU a page, a quarter of a visit). Only SAMPLE pages search, so the
        # others get the index's own response, status and all (a wrong address still fails),
        # with no page in it; the index itself is read where it is searched, and by
        # test_docs.py.
        if visits[-1].url.removeprefix(base) in SAMPLE:
            route.fallback()
            return
        response = route.fetch()
        if not response.ok:
            route.fulfill(response=response)  # recorded as the page's failed request
            return
        route.fulfill(response=response, json=response.json() | {"docs": []})

    tab.route("**/search/search_index.json", index_unless_searched)
    tab.on("request", on_request)
    tab.on("requestfailed", on_failed)
    tab.on("response", on_response)
    tab.on("console", lambda m: m.type == "error" and visits[-1].console.append(m.text))
    tab.on("pageerror", lambda e: visits[-1].console.append(str(e)))
    width = first
    for page, load_width in loads:
        if width != load_width:
            width = load_width
            tab.set_viewport_size({"width": width, "height": VIEWPORTS[width]})
        visits.append(Visit(base + page, width))
        tab.goto(base + page, wait_until="load")
        # A diagram still without an SVG after this is recorded below as undrawn.
        with contextlib.suppress(sync_api.TimeoutError):
            tab.wait_for_function(
                "[...document.querySelectorAll('article .mermaid')].every("
                "e => e.shadowRoot && e.shadowRoot.querySelector('svg'))",
                timeout=STUCK_AFTER_S * 1000,
            )
        record(tab, visits[-1], page)
        loaded, width = width, other_width(width)
        visits.append(Visit(base + page, width, resized_from=loaded))
        tab.set_viewport_size({"width": width, "height": VIEWPORTS[width]})
        resizing = tab.evaluate(RESIZED)
        record(tab, visits[-1], page)
        visits[-1].found["resizing"] = resizing
        visits[-1].found["slate"] = tab.evaluate(IN_SLATE)  # once a page: the figures in dark
        # Let late requests finish on this page, so that what fails is charged to it.
        with contextlib.suppress(sync_api.TimeoutError):
            tab.wait_for_load_state("networkidle", timeout=5_000)
    context.close()
    return visits


def record(tab, visit: Visit, page: str) -> None:
    """What ``tab`` shows now, into ``visit``: INSPECT's findings, a screenshot where
    SITE_SCREENSHOTS asks for one, and a search's results on SAMPLE pages."""
    visit.found = tab.evaluate(INSPECT)
    if shots := os.environ.get("SITE_SCREENSHOTS"):
        how = "file" if visit.url.startswith("file:") else "http"
        name = f"{how}-{visit.width}-{'resized-' if visit.resized_from else ''}{page}"
        tab.screenshot(path=str(Path(shots) / name.replace("/", "_")) + ".png", full_page=True)
    if page in SAMPLE:
        visit.search_hits, visit.search_texts = search(tab)
    if page == TOPIC_SEARCH[0]:
        visit.found["topic_search"] = search(tab, TOPIC_SEARCH[1])[1]


SEARCH_STATE = """() => ({
  open: document.getElementById('__search')?.checked,
  focus: document.activeElement?.className,
  value: document.querySelector('.md-search__input')?.value,
  status: document.querySelector('.md-search-result__meta')?.textContent,
  items: document.querySelectorAll('.md-search-result__item').length,
  shown: [...document.querySelectorAll('.md-search-result__item')].filter(
    e => e.checkVisibility()).length,
})"""
"""What a search that lists nothing showed: whether the box is open and has the focus, what it
holds, Material's status line, how many results are in the page and how many are visible."""


def search(tab, term: str = SEARCH_TERM) -> tuple[int, list[str]]:
    """Type ``term`` into Material's search box; return how many results it lists, and
    their text as the reader sees it (title and snippet). Where nothing is listed, the text is
    what the page showed instead (the box, its focus, the search's status line)."""
    shown = {}
    for _ in range(2):
        type_into_search(tab, term)
        try:
            tab.wait_for_selector(".md-search-result__item", timeout=STUCK_AFTER_S * 500)
        except sync_api.TimeoutError:
            # Seen only in CI on a loaded machine, at a page's second search: the box held the
            # term and nothing was listed for minutes. Close the box and search again, as a
            # reader would; what the page showed goes into the failure if that fails too.
            shown = tab.evaluate(SEARCH_STATE)
            close_search(tab)
            continue
        # The first results shown may be a prefix's ("cop"): the search runs in a worker, a
        # query per key. Read them until two reads a moment apart agree.
        items = tab.locator(".md-search-result__item")
        texts, deadline = None, time.monotonic() + STUCK_AFTER_S
        while (now := items.all_inner_texts()) != texts and time.monotonic() < deadline:
            texts = now
            tab.wait_for_timeout(300)
        close_search(tab)
        return len(texts), texts
    return 0, [f"(nothing listed, twice; the page showed {shown})"]


def type_into_search(tab, term: str) -> None:
    """Open the search box with Material's shortcut, empty it, and type ``term`` key by key."""
    box = tab.locator(".md-search__input")
    for _ in range(5):
        tab.keyboard.press("/")  # Material's shortcut to the search box, at any width
        # The shortcut puts the focus in the box, and Material opens the search when it hears
        # of it (close_search says when it does not): until the box is open and has the focus,
        # close it and press again, or the results are listed hidden.
        try:
            tab.wait_for_function(
                "document.activeElement?.matches('.md-search__input')"
                " && document.getElementById('__search').checked",
                timeout=2_000,
            )
        except sync_api.TimeoutError:
            close_search(tab)
        else:
            # The box keeps what an earlier search on this page typed (Escape only closes
            # it): empty it first, or the new term is typed after the old one.
            tab.keyboard.press("Control+A")
            tab.keyboard.press("Backspace")
            # Typed key by key: Material searches on key events, and filling the box skips them.
            tab.keyboard.type(term, delay=20)
            if box.input_value() == term:
                return
    raise AssertionError(f"{tab.url}: the search box never took the term {term!r}")


def close_search(tab) -> None:
    tab.keyboard.press("Escape")
    # Material hears the box lose its focus 1 ms after the fact (a debounce, on a timer): a
    # shortcut pressed before that timer runs gives the focus back before it is heard, so the
    # focus never changed as far as Material knows and the search stays closed. On a loaded
    # machine the timer runs late. A timer set now for later runs after it.
    tab.evaluate("() => new Promise(done => setTimeout(done, 20))")
    # The search box closes at once, as if a while had passed: a resize then starts from a page
    # at rest, as it would for a reader.
    tab.evaluate(f"{RUNNING}.forEach(a => a.finish())")


@pytest.fixture(scope="module")
def visits(browser, base_url) -> list[Visit]:
    """Every page served over HTTP, at both widths: loaded at one, the first at a phone's width
    and then a laptop's and a phone's in turn, and resized to the other
    (``test_site_from_disk.py`` loads the pages it opens at the width they are not loaded at
    here)."""
    return visit_all(browser, base_url, HTTP_LOADS)


def failures(visits: list[Visit], check) -> list[str]:
    return [f"{v}: {problem}" for v in visits if (problem := check(v))]


def test_every_page_was_visited_at_both_widths(visits):
    """Each page loaded at one width and resized to the other, and pages loaded at each width."""
    assert len(visits) == len(WIDTHS) * len(PAGES) > 20
    for width in WIDTHS:
        shown = sorted(v.url for v in visits if v.width == width)
        assert len(shown) == len(set(shown)) == len(PAGES), f"pages at {width} px: {shown}"
    resized = [v for v in visits if v.resized_from]
    assert len(resized) == len(PAGES) and {v.resized_from for v in resized} == set(WIDTHS)


def test_no_page_logs_an_error_or_fails_to_load_something(visits) -> None:
    bad = failures(visits, lambda v: v.console + v.failed)
    assert not bad, "console errors or failed requests:\n" + "\n".join(bad)


def test_no_page_fetches_from_another_host(visits) -> None:
    bad = failures(visits, lambda v: v.foreign)
    assert not bad, "the site must work offline:\n" + "\n".join(bad)


def test_every_equation_is_drawn_with_a_real_size(visits) -> None:
    """Below 720 px Material and MathJax's default styles once drew every display equation
    as a 1x1 px SVG; docs/assets/stylesheets/extra.css fixes it."""
    assert any(v.found["equations"] for v in visits), "no display equation on any page"

    def tiny(v: Visit):
        kinds = [("display", v.found["equations"]), ("inline", v.found["inline"])]
        return [f"{kind} {w:.0f}x{h:.0f} px" for kind, boxes in kinds for w, h in boxes if w < 4]

    bad = failures(visits, tiny)
    assert not bad, "equations drawn too small to read:\n" + "\n".join(bad)


def test_no_page_is_wider_than_the_screen(visits) -> None:
    """A wide equation, table or diagram scrolls inside its own box, not the whole page; and
    nothing sticks out while the layout changes with the window's width (extra.css)."""
    bad = failures(visits, lambda v: sideways(v.found))
    assert not bad, "pages that scroll sideways:\n" + "\n".join(bad)


def test_no_raw_tex_is_left_on_a_page(visits) -> None:
    def raw(v: Visit):
        prose = sorted({m[0] for m in RAW_TEX.finditer(v.found["prose"])})
        tex = [t for t in v.found["tex"] if CONTROL.search(t) or re.search(r"(?<!\\t)ext\{", t)]
        errors = v.found["errors"]
        return (
            (prose and f"raw TeX in the text: {prose}")
            or (tex and f"math with a control character or lost backslash: {tex!r}")
            or (errors and f"{errors} MathJax errors")
        )

    bad = failures(visits, raw)
    assert not bad, "\n".join(bad)


def test_every_mermaid_diagram_is_drawn_and_legible(visits) -> None:
    assert any(v.found["diagrams"] for v in visits), "no mermaid diagram on any page"

    def undrawn(v: Visit):
        for diagram in v.found["diagrams"]:
            if diagram is None:
                return "a mermaid diagram was not rendered to SVG"
            if min(diagram["box"]) < 20 or diagram["font"] < MIN_DIAGRAM_FONT_PX:
                return f"a diagram {diagram['box']} px with {diagram['font']:.1f} px text"
        return None

    bad = failures(visits, undrawn)
    assert not bad, "\n".join(bad)


def test_every_page_reads_in_the_light_and_the_dark_scheme(visits) -> None:
    """Each page once in Material's slate scheme: images on a light backdrop, each mermaid
    diagram's text and lines in contrast with what lies behind them; and in both schemes the
    article's text and the shadow that says a box scrolls sideways, each against its ground
    (tests/dark_scheme.py). A black shadow on slate's near-black code and page read 1.2 and
    1.1: a cue nobody sees."""
    bad = failures(
        [v for v in visits if "slate" in v.found],
        lambda v: "; ".join(unreadable(v.found["slate"])) or None,
    )
    assert not bad, "\n".join(bad)


def test_search_finds_results(visits) -> None:
    chosen = [v for v in visits if v.search_hits is not None]
    assert len(chosen) >= len(SAMPLE), "search was not tried"
    bad = failures(
        chosen, lambda v: v.search_hits == 0 and f"no result for {SEARCH_TERM!r}: {v.search_texts}"
    )
    assert not bad, "\n".join(bad)


def test_a_search_for_copy_on_write_finds_its_pages(visits) -> None:
    """At each width, the home page's search lists the pages on copy-on-write first."""
    searched = [v for v in visits if "topic_search" in v.found]
    assert len(searched) == len(WIDTHS), "the topic search was not tried at each width"
    for visit in searched:
        texts = visit.found["topic_search"]
        assert texts and "copy-on-write" in texts[0].lower(), f"{visit}: {texts[:3]}"


def test_the_404_page_works_at_any_depth_under_the_sub_path(browser, base_url, site) -> None:
    """A host answers a missing page with 404.html at whatever path was asked for; its styles,
    scripts and links must still resolve."""
    deep = base_url + "no/such/folder/page.html"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.route(deep, lambda route: route.fulfill(status=404, path=str(site / "404.html")))
    failed: list[str] = []
    tab.on("response", lambda r: r.status >= 400 and r.url != deep and failed.append(r.url))
    tab.on("requestfailed", lambda r: failed.append(r.url))
    tab.goto(deep, wait_until="load")
    styled = tab.evaluate("getComputedStyle(document.querySelector('.md-header')).position")
    links = tab.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)")
    context.close()
    assert not failed, f"404 page failed to load: {failed}"
    assert styled in ("sticky", "fixed"), "the 404 page lost its stylesheet"
    own = [link.split("#")[0] for link in links if link.startswith(base_url)]
    assert own, "the 404 page links to no page of the site"
    broken = []
    for link in sorted(set(own)):
        try:
            urllib.request.urlopen(link, timeout=STUCK_AFTER_S).close()
        except OSError as error:
            broken.append(f"{link}: {error}")
    assert not broken, "the 404 page's links are broken:\n" + "\n".join(broken)


# -- what a reader on a phone or a laptop cannot read -----------------------------------------

RAW_TABLE_ROW = re.compile(r"^\s*\|.*\|.*\|\s*$")
MIN_IMAGE_TEXT_PX = 6.0
PHONE = 390


def raw_table_rows(found: dict) -> list[str]:
    """Lines of the page's text that are a Markdown table row nobody rendered."""
    return [line.strip()[:60] for line in found["prose"].splitlines() if RAW_TABLE_ROW.match(line)]


def uncued_scrollers(found: dict) -> list[str]:
    """Display formulas, code blocks and tables wider than their box that give no sign that
    more follows."""
    return [box["text"] for box in found["scrollers"] if not box["cue"]]


def sideways(found: dict) -> str | None:
    """How far a page reaches past the window's right edge, settled or while resizing."""
    if found["overflow"] > 0:
        return f"{found['overflow']} px"
    if found.get("resizing", 0) > 0:
        return f"{found['resizing']} px while the window's width changed"
    return None


def raw_tex(texts: list[str]) -> list[str]:
    return sorted({m[0] for text in texts for m in RAW_TEX.finditer(text)})


def test_no_page_shows_a_table_as_raw_text(visits) -> None:
    """A header cell holding an unescaped ``|`` once turned two results tables into lines of
    ``| … |`` text; a test that no page shows a literal table row would have caught it."""
    bad = failures(visits, lambda v: raw_table_rows(v.found)[:2])
    assert not bad, "raw Markdown table rows on the page:\n" + "\n".join(bad)


def test_a_formula_code_block_or_table_wider_than_its_box_scrolls_and_shows_that_more_follows(
    visits,
) -> None:
    """On a phone (and a few on a laptop) display equations, code blocks and tables are wider
    than the column: they scroll inside their box, and a shadow at the edge shows there is more
    (extra.css). A phone hides the scrollbar until one scrolls: on 44 of the 55 pages (42 at
    390 px, 22 at 1280 px) code blocks cut at the edge with no shadow looked like whole lines.
    A table cut so reads as a short one: the course's table of exercises, at 390 px, cuts its
    last column mid-word."""
    bad = failures(visits, lambda v: uncued_scrollers(v.found))
    assert not bad, "formulas, code or tables cut with no sign that more follows:\n" + "\n".join(
        bad
    )


def test_no_table_cuts_its_first_column(visits) -> None:
    """A table's first column names its rows: it stays in view while the rest scrolls."""
    bad = failures(visits, lambda v: v.found["cutTables"])
    assert not bad, "tables whose first column is cut:\n" + "\n".join(bad)


def svg_text_size(svg: str) -> tuple[float, float] | None:
    """``(smallest text size, view box width)`` of an SVG, both in its user units: from
    ``font-size`` rules (Rich's terminal screenshots) and from the scale of matplotlib's
    text drawn as glyph paths (``scale(s -s)`` is a font of ``100 s`` units). None when it
    holds no text."""
    box = re.search(r'viewBox="\s*[-\d.]+[\s,]+[-\d.]+[\s,]+([\d.]+)', svg)
    sizes = [float(x) for x in re.findall(r"font-size:\s*([\d.]+)px", svg)]
    sizes += [100 * float(x) for x in re.findall(r"scale\(([\d.]+) -\1\)", svg)]
    if box is None or not sizes:
        return None
    return min(sizes), float(box[1])


def local_file(url: str, site: Path) -> Path:
    """The built site's file that a page loaded from ``url``, served or opened from disk."""
    path = unquote(urlparse(url).path)
    return Path(path) if url.startswith("file:") else site / path.removeprefix(SUB_PATH)


def test_no_name_in_inline_code_is_cut_inside_a_word(visits) -> None:
    """On a phone a table squeezed its module names to a few letters a line ("minipaged.sc",
    "heduler"): inline code wraps at a name's dots and underscores (docs/hooks/code_breaks.py,
    extra.css), never between two letters."""
    bad = failures(visits, lambda v: v.found["cutCode"])
    assert not bad, "inline code wrapped inside a word:\n" + "\n".join(bad)


def test_no_image_draws_text_smaller_than_6_px_on_a_phone(visits, site):
    """A whole 120-column screenshot drew its text 3 px high at 390 px: a page shows the pane
    it discusses instead (docs/screenshots.py), and figures are drawn for the column."""
    images = {
        (image["src"], round(image["width"]))
        for v in visits
        if v.width == PHONE
        for image in v.found["images"]
        if image["src"].endswith(".svg")
    }
    assert images, "no SVG image on any page"
    small = []
    for src, width in sorted(images):
        drawn = image_text_px(local_file(src, site).read_text(encoding="utf-8"), width)
        if drawn is not None and drawn < MIN_IMAGE_TEXT_PX:
            small.append(f"{src}: {drawn:.1f} px text at {width} px wide")
    assert not small, "images whose text a phone draws too small to read:\n" + "\n".join(small)


def image_text_px(svg: str, width: float) -> float | None:
    """How high the smallest text of ``svg`` is drawn when the image is ``width`` px wide."""
    size = svg_text_size(svg)
    return None if size is None or not width else size[0] * width / size[1]


def test_search_results_show_no_raw_tex(visits) -> None:
    """The search index holds the pages' text, math included: its snippets once read
    ``\\(\\mathcal{R}[p]\\)`` (docs/hooks/search_text.py writes math as text)."""
    searched = [v for v in visits if v.search_hits]
    assert searched, "no search listed a result"
    bad = failures(searched, lambda v: raw_tex(v.search_texts))
    assert not bad, "raw TeX in search results:\n" + "\n".join(bad)


def unnamed_images(found: dict) -> list[str]:
    """The images a reader who cannot see them learns nothing of: no alt text, or only the
    file's name."""
    return [
        image["src"].rsplit("/", 1)[-1]
        for image in found["images"]
        if not (alt := (image["alt"] or "").strip())
        or alt == unquote(urlparse(image["src"]).path).rsplit("/", 1)[-1]
    ]


def test_every_image_says_in_words_what_it_shows(visits) -> None:
    """Every figure and screenshot has alt text (what a screen reader reads, and what shows
    where the image fails to load), and not just its file's name."""
    assert any(v.found["images"] for v in visits), "no image on any page"
    bad = failures(visits, lambda v: unnamed_images(v.found))
    assert not bad, "images without alt text:\n" + "\n".join(bad)


def broken_anchors(visits: list[Visit]) -> list[str]:
    """Links from a page to a place (``#id``) in a page of the site that has no element of
    that id, as the browser found them after the theme and MathJax had run (the build's
    anchor check reads the Markdown; the theme and the hooks add links and ids of their
    own)."""
    ids = {v.url: set(v.found["ids"]) for v in visits}
    broken = set()
    for v in visits:
        for link in v.found["links"]:
            page, _, anchor = link.partition("#")
            target = page or v.url
            if target.endswith("/"):
                target += "index.html"
            if anchor and target in ids and unquote(anchor) not in ids[target]:
                broken.add(f"{v.url.rsplit('/', 1)[-1]} links to {link}")
    return sorted(broken)


def undrawn_images(found: dict) -> list[str]:
    """The images of a page that the browser could not fetch or draw."""
    return [image["src"].rsplit("/", 1)[-1] for image in found["images"] if not image["drawn"]]


def test_every_image_and_figure_is_drawn(visits) -> None:
    assert any(v.found["images"] for v in visits), "no image on any page"
    bad = failures(visits, lambda v: undrawn_images(v.found))
    assert not bad, "images the browser could not draw:\n" + "\n".join(bad)


def broken_links(visits: list[Visit], site: Path) -> list[str]:
    """Links from a page to a file of the site (a page, a figure, a download) that is not in
    the built site: each link as the browser resolved it, served or opened from disk (the
    build's own check reads only the Markdown's links, not the theme's or the hooks')."""
    broken = set()
    for v in visits:
        page = urlparse(v.url)
        for link in v.found["links"]:
            target = urlparse(link)
            if (target.scheme, target.netloc) != (page.scheme, page.netloc):
                continue  # another site: not this check's
            path = target._replace(query="", fragment="").geturl()
            if path.endswith("/"):
                path += "index.html"
            if not local_file(path, site).exists():
                broken.add(f"{v.url.rsplit('/', 1)[-1]} links to {link}")
    return sorted(broken)


def test_every_link_to_a_file_of_the_site_finds_it(visits, site) -> None:
    assert any(urlparse(link).path.endswith(".html") for v in visits for link in v.found["links"])
    bad = broken_links(visits, site)
    assert not bad, "links to a file the site does not have:\n" + "\n".join(bad)


def test_every_link_to_a_place_in_a_page_finds_it(visits) -> None:
    assert any("#" in link for v in visits for link in v.found["links"]), "no anchor is linked"
    bad = broken_anchors(visits)
    assert not bad, "links to an id their page does not have:\n" + "\n".join(bad)


# -- each check fails where it should: one page with one defect of each class ------------------

PLANTED = """<!doctype html><html><head><meta charset="utf-8"><style>
  /* Material's search box: nothing on a phone; from 800 px, a box that grows to 200 px and
     holds an input whose padding alone is 150 px: while it grows, the input sticks out. */
  .search { float: right; width: 0; overflow: hidden }
  @media (min-width: 800px) { .search { width: 200px; overflow: visible; transition: width 1s } }
  .search input { box-sizing: border-box; width: 100%; padding-left: 150px }
</style></head><body><div class="search"><input></div><article>
<p>A page with one defect of each class the checks above look for.</p>
<p>| N | exercise |</p>
<div class="arithmatex" style="width: 120px; overflow-x: hidden"><span
  style="display: inline-block; width: 600px">a formula wider than its box</span></div>
<pre style="width: 120px"><code style="display: block; overflow-x: auto"
  >a code line wider than its box</code></pre>
<div class="md-typeset__scrollwrap" style="width: 120px; overflow-x: auto"><table><tr>
  <th style="white-space: nowrap">a key column wider than the box</th><th>b</th></tr></table></div>
<img src="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E">
<img src="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E" alt="a blank figure">
<img src="not-there.svg" alt="a figure whose file is missing">
<p id="here"><a href="#here">a place that is there</a>, <a href="#nowhere">one that is not</a>,
  <a href="planted.html">this page</a>, <a href="gone/">a page that is not there</a></p>
<table style="width: 100px"><tr><td>a</td><td><code style="word-break: break-word"
  >minipaged.scheduler</code></td><td><code>minipaged.<wbr>chunked_<wbr>prefill</code></td></tr>
</table>
</article></body></html>"""


def test_the_page_checks_find_each_defect_planted_on_a_page(browser, tmp_path) -> None:
    """A raw table row, a formula, a code block and a table cut with no cue and a table whose
    key column is cut, in a phone's column, a box that sticks out while the window widens to a
    laptop's, an image without alt text, a link to an id the page lacks and a module name
    broken inside a word in a narrow table (the theme's break-anywhere; with <wbr> at its
    joints it is not): the checks that pass on every real page must fail on this one."""
    (tmp_path / "planted.html").write_text(PLANTED, encoding="utf-8")
    loaded, widened = visit_all(browser, tmp_path.as_uri() + "/", [("planted.html", PHONE)])
    assert (loaded.width, widened.width, widened.resized_from) == (PHONE, WIDTHS[1], PHONE)
    found = loaded.found
    assert raw_table_rows(found) == ["| N | exercise |"]
    assert uncued_scrollers(found) == [
        "a formula wider than its box",
        "a code line wider than its box",
        "a key column wider than the boxb",  # the table's text: its two header cells
    ]
    assert found["cutTables"] == ["a key column wider than the box"]
    assert len(unnamed_images(found)) == 1
    assert broken_anchors([loaded]) == [f"planted.html links to {loaded.url}#nowhere"]
    assert undrawn_images(found) == ["not-there.svg"]
    gone = loaded.url.removesuffix("planted.html") + "gone/"
    assert broken_links([loaded], tmp_path) == [f"planted.html links to {gone}"]
    assert found["cutCode"] == ["minipaged.scheduler"]
    assert sideways(found) is None
    # Settled, the widened page fits: only its state as the transition begins sticks out.
    assert widened.found["overflow"] <= 0 and widened.found["resizing"] > 100
    assert sideways(widened.found).endswith(" px while the window's width changed")


def test_the_image_and_search_checks_flag_what_they_are_for() -> None:
    """A 1,200-unit-wide screenshot with 14 px text draws it 4.6 px high in a phone's 390 px;
    matplotlib's glyphs (``scale(0.05 -0.05)``: 5 units) in a 360-unit figure, 5.4 px; and a
    search snippet with TeX left in it."""
    screenshot = '<svg viewBox="0 0 1200 600"><style>.r { font-size: 14px }</style></svg>'
    assert image_text_px(screenshot, PHONE) < MIN_IMAGE_TEXT_PX <= image_text_px(screenshot, 1200)
    figure = '<svg viewBox="0 0 360 200"><g transform="scale(0.05 -0.05)"/></svg>'
    assert image_text_px(figure, PHONE) < MIN_IMAGE_TEXT_PX
    assert image_text_px('<svg viewBox="0 0 10 10"/>', PHONE) is None  # no text, nothing to read
    assert raw_tex([r"the refcount \(\mathcal{R}[p]\) of block p"]) == [r"\(", r"\)", r"\mathcal"]
    assert not raw_tex(["the refcount R[p] of block p"])


DARK_PLANTED = """<!doctype html><html><head><meta charset="utf-8"><style>
  body[data-md-color-scheme="slate"] { background-color: #1e2129; color: #e2e4e9 }
  body[data-md-color-scheme="slate"] img.carded { background-color: #fff }
  /* Scroll cues: a shadow at the left edge over the box's ground, black in both schemes on
     the code block (lost on slate's dark code), the scheme's light ink on the formula. */
  pre > code, div.arithmatex { display: block; overflow-x: auto; --ink: rgba(0, 0, 0, 0.35);
    background: radial-gradient(farthest-side at 0 50%, var(--ink), transparent)
      left center / 1em 100% no-repeat, #f5f5f5 }
  body[data-md-color-scheme="slate"] pre > code { background-color: #272a35 }
  body[data-md-color-scheme="slate"] div.arithmatex {
    background-color: #272a35; --ink: rgba(226, 228, 233, 0.32) }
</style></head><body><article>
<p style="color: #ccc">pale ink on the light page</p>
<p style="color: #333">dark ink on the dark page</p>
<pre><code>a code block</code></pre>
<div class="arithmatex">a formula</div>
<img alt="a chart in black ink" src="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E">
<img alt="the same on a card" class="carded"
  src="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E">
<div class="mermaid"></div>
<script>
  document.querySelector(".mermaid").attachShadow({mode: "open"}).innerHTML =
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 200 100">' +
    '<text x="10" y="20" fill="#000">black label</text>' +
    '<text x="10" y="40" fill="#eee">light label</text>' +
    '<g><rect width="90" height="30" y="50" fill="#fff"/><text x="5" y="70" fill="#000">' +
    'on a white node</text></g>' +
    '<path d="M0 90 L200 90" fill="none" stroke="#000"/></svg>';
</script>
</article></body></html>"""


def test_the_dark_scheme_check_finds_black_ink_on_the_dark_page(browser, tmp_path) -> None:
    """An image without a light card, a diagram label and a line in black on the dark page,
    a code block's black scroll cue on dark code, and text in one scheme's ink that the other
    shows: flagged; a light label, black text on a white node, an image on a card, a light cue
    on a formula and text in the scheme's own colour: not. Both cues are seen in the light
    scheme."""
    (tmp_path / "dark.html").write_text(DARK_PLANTED, encoding="utf-8")
    _, widened = visit_all(browser, tmp_path.as_uri() + "/", [("dark.html", PHONE)])
    problems = unreadable(widened.found["slate"])
    assert len(problems) == 5, problems
    assert "on a dark backdrop" in problems[0]
    assert '"black label"' in problems[1] and "a path (line)" in problems[1]
    assert "light label" not in problems[1] and "white node" not in problems[1]
    assert re.fullmatch(r"the scroll cue of a code block at 1\.\d\d in slate", problems[2])
    assert re.fullmatch(r'text "pale ink on the light page" at 1\.\d\d in light', problems[3])
    assert re.fullmatch(r'text "dark ink on the dark page" at 1\.\d\d in slate', problems[4])
