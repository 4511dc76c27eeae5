"""The built site opened from disk (``file://``), as a reader who downloaded it would, with the
checks ``test_site_browser.py`` runs on the site served over HTTP (imported from it, so each
runs here on these visits), and two of its own: no link or resource of any page may name a
folder or a missing file, and the pages opened hold one of every kind.

Opened from disk, a page differs from the same page served only in how the browser treats
what it loads: a URL that must name a file (file:// lists a folder instead of serving its
index.html), scripts that run under file://'s rules (the search index inlined for the worker
shim, MathJax, mermaid) and the folder depth its relative URLs start from. The first is read
from every built page's HTML below; for the rest, a page's kind is its depth, the scripts it
loads, the kinds of images it shows and whether it has math or a diagram to draw, and the
browser opens one page of each kind, the pages search is tried on (``SAMPLE``) and every page
with a diagram (mermaid draws it once, at the width the page is loaded at), rather than all
of them: the layout checks (equations, tables, widths, the dark scheme) read the same HTML and
CSS either way, and ``test_site_browser.py`` runs them on every page. Each page is loaded here
at the width it is not loaded at over HTTP, so those pages are loaded at both widths."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from test_docs import shared_site
from test_site_browser import (  # noqa: F401 (its checks, collected here too)
    HTTP_LOADS,
    PAGES,
    SAMPLE,
    WIDTHS,
    Visit,
    failures,
    launched_chromium,
    other_width,
    test_a_formula_code_block_or_table_wider_than_its_box_scrolls_and_shows_that_more_follows,
    test_every_equation_is_drawn_with_a_real_size,
    test_every_image_and_figure_is_drawn,
    test_every_image_says_in_words_what_it_shows,
    test_every_link_to_a_file_of_the_site_finds_it,
    test_every_link_to_a_place_in_a_page_finds_it,
    test_every_mermaid_diagram_is_drawn_and_legible,
    test_every_page_reads_in_the_light_and_the_dark_scheme,
    test_no_image_draws_text_smaller_than_6_px_on_a_phone,
    test_no_name_in_inline_code_is_cut_inside_a_word,
    test_no_page_fetches_from_another_host,
    test_no_page_is_wider_than_the_screen,
    test_no_page_logs_an_error_or_fails_to_load_something,
    test_no_page_shows_a_table_as_raw_text,
    test_no_raw_tex_is_left_on_a_page,
    test_no_table_cuts_its_first_column,
    test_search_finds_results,
    test_search_results_show_no_raw_tex,
    visit_all,
)

HREF = re.compile(r'<a\s[^>]*?href="([^"]*)"')
# What a page loads: scripts, images, stylesheets, frames and media, by their URL.
RESOURCE = re.compile(
    r'<(script|img|link|iframe|object|embed|video|audio|source)\b[^>]*?\b(?:src|href|data)="([^"]*)"'
)
EXTERNAL = re.compile(r"^[a-z]+:", re.IGNORECASE)
UP = re.compile(r"^(\.\./)+")
# What MathJax and mermaid find to draw on a page.
MARKS = {"math": 'class="arithmatex"', "diagram": 'class="mermaid"'}


def kind(page: str, html: str) -> tuple:
    """What of a built page can behave differently opened from disk: its folder depth, the
    scripts it loads (their paths from the site's root), the file types of its images and
    frames, and whether MathJax and mermaid have something to draw on it."""
    loads = set()
    for tag, url in RESOURCE.findall(html):
        if tag == "link" or EXTERNAL.match(url):
            continue  # stylesheets: the same on every page; external: the HTTP file fails them
        path = UP.sub("", url.split("#")[0].split("?")[0])
        loads.add((tag, path) if tag == "script" else (tag, Path(path).suffix))
    draws = {name for name, mark in MARKS.items() if mark in html}
    return page.count("/"), frozenset(loads), frozenset(draws)


def pages_to_open(site: Path) -> list[str]:
    """One page of each kind (the first in PAGES' order), SAMPLE and every page with a
    diagram, in PAGES' order."""
    chosen, kinds = set(SAMPLE), set()
    for page in PAGES:
        html = (site / page).read_text(encoding="utf-8")
        if (k := kind(page, html)) not in kinds or MARKS["diagram"] in html:
            kinds.add(k)
            chosen.add(page)
    return [page for page in PAGES if page in chosen]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return shared_site(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    with launched_chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def opened(site) -> list[str]:
    return pages_to_open(site)


@pytest.fixture(scope="module")
def visits(browser, site, opened) -> list[Visit]:
    """The pages to open, from disk, each loaded at the width it is not loaded at over HTTP
    and resized to the other."""
    over_http = dict(HTTP_LOADS)
    loads = [(page, other_width(over_http[page])) for page in opened]
    return visit_all(browser, site.as_uri() + "/", loads)


def test_the_pages_opened_hold_every_kind_each_loaded_at_both_widths(visits, opened, site):
    """Every kind of page among the built ones is opened, with SAMPLE and the diagrams; each
    is loaded here at the width it is not loaded at over HTTP and resized to the other."""
    kinds = {kind(p, (site / p).read_text(encoding="utf-8")) for p in PAGES}
    opened_kinds = {kind(p, (site / p).read_text(encoding="utf-8")) for p in opened}
    assert kinds == opened_kinds and set(SAMPLE) <= set(opened)
    assert len(kinds) >= 4, kinds  # depths, scripts, images, diagrams: the site has them all
    over_http = dict(HTTP_LOADS)
    loaded = [v for v in visits if not v.resized_from]
    assert [v.url.rsplit("/", 1)[-1] for v in loaded] == [p.rsplit("/", 1)[-1] for p in opened]
    for v, page in zip(loaded, opened, strict=True):
        assert v.width == other_width(over_http[page]), v
    assert {v.width for v in visits if v.resized_from} == set(WIDTHS)


def test_a_page_of_another_depth_script_image_type_or_drawing_is_a_kind_of_its_own():
    page = '<script src="../assets/a.js"></script><img src="../f.svg"><p>text</p>'
    plain = kind("explanation/a.html", page)
    assert kind("explanation/b.html", page.replace("text", "other")) == plain
    assert kind("a.html", page.replace("../", "")) != plain
    assert kind("explanation/a.html", page + '<script src="../b.js"></script>') != plain
    assert kind("explanation/a.html", page.replace(".svg", ".png")) != plain
    assert kind("explanation/a.html", page + '<div class="arithmatex">x</div>') != plain
    assert kind("explanation/a.html", page + '<iframe src="../w.html"></iframe>') != plain


def test_opened_from_disk_every_link_and_resource_names_a_file(visits, site) -> None:
    """file:// shows a folder as a directory listing, so no link may end at a folder, and
    nothing a page loads may be missing: the browser's links on the pages opened, and every
    relative link, script, image and stylesheet of every built page."""
    assert visits and all(v.found["links"] for v in visits)
    bad = failures(
        visits,
        lambda v: sorted(
            path
            for link in v.found["links"]
            if link.startswith("file:") and not Path(path := unquote(urlparse(link).path)).is_file()
        ),
    )
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue  # absolute links under site_url: test_site_browser.py checks them
        html = page.read_text(encoding="utf-8")
        urls = HREF.findall(html) + [url for _, url in RESOURCE.findall(html)]
        for href in urls:
            if not EXTERNAL.match(href) and not href.startswith(("#", "mailto:")):
                target = page.parent / unquote(href.split("#")[0].split("?")[0])
                if not target.is_file():
                    bad.append(f"{page.relative_to(site)}: {href}")
    assert not bad, "links or resources naming folders or missing files:\n" + "\n".join(bad)
