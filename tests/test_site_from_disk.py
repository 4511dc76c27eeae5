"""The built site opened from disk (``file://``), as a reader who downloaded it would: every
page at a phone's width and a laptop's (each loaded at one, resized to the other), with the
checks ``test_site_browser.py`` runs on the site served over HTTP (imported from it, so each
runs here on these visits), and one of its own: no link may end at a folder. A file of its own
so that pytest-xdist's workers visit the site both ways at once."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from test_docs import shared_site
from test_site_browser import (  # noqa: F401 (its checks, collected here too)
    PAGES,
    WIDTHS,
    Visit,
    failures,
    launched_chromium,
    test_a_formula_wider_than_its_box_scrolls_and_shows_that_more_follows,
    test_every_equation_is_drawn_with_a_real_size,
    test_every_figure_is_readable_in_the_dark_scheme,
    test_every_image_says_in_words_what_it_shows,
    test_every_link_to_a_place_in_a_page_finds_it,
    test_every_mermaid_diagram_is_drawn_and_legible,
    test_every_page_was_visited_at_both_widths,
    test_no_image_draws_text_smaller_than_6_px_on_a_phone,
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
EXTERNAL = re.compile(r"^[a-z]+:", re.IGNORECASE)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return shared_site(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    with launched_chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def visits(browser, site) -> list[Visit]:
    """Every page opened from disk at both widths, the first loaded at a laptop's width
    (``test_site_browser.py`` loads its first at a phone's)."""
    return visit_all(browser, site.as_uri() + "/", WIDTHS[1], PAGES)


def test_opened_from_disk_every_link_names_a_file(visits, site) -> None:
    """file:// shows a folder as a directory listing, so no link may end at a folder. The
    browser's links on the SAMPLE pages, and every relative href in every built page."""
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
        for href in HREF.findall(page.read_text(encoding="utf-8")):
            if not EXTERNAL.match(href) and not href.startswith(("#", "mailto:")):
                target = page.parent / unquote(href.split("#")[0])
                if not target.is_file():
                    bad.append(f"{page.relative_to(site)}: {href}")
    assert not bad, "links to folders or missing files:\n" + "\n".join(bad)
