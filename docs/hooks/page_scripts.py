"""MkDocs hook: each large vendored script only on the pages that use it.

mkdocs.yml lists the vendored MathJax (``tex-svg-full.js``, 2.2 MB, with its settings in
``mathjax-config.js``) and ``mermaid.min.js`` (3.6 MB) under ``extra_javascript``, so the theme
finds ``window.mermaid`` and never fetches it from a CDN, and nothing is fetched at view time;
but that list goes on every page, and a browser downloads and runs each script on each of them.
After a page (404.html too) is rendered, this hook drops a script's tags where the page holds
nothing for it to draw: MathJax typesets only what arithmatex marked ``class="arithmatex"``
(mathjax-config.js says so), and mermaid draws only ``class="mermaid"`` blocks. A page with
such an element keeps the script (``tests/test_docs.py`` checks both ways on the built site).
"""

from __future__ import annotations

import re

USED_BY = {
    # The settings go with the script that reads them: they must load before it.
    r"mathjax-config\.js|tex-svg-full\.js": 'class="arithmatex"',
    r"mermaid\.min\.js": 'class="mermaid"',
}
"""A vendored script's file names (a pattern) -> what a page holds when the script has work."""


def script_tag(names: str) -> re.Pattern[str]:
    return re.compile(rf'<script src="[^"]*/(?:{names})"></script>\n?')


TAGS = {script_tag(names): mark for names, mark in USED_BY.items()}


def without_unused_scripts(html: str) -> str:
    """``html`` without the tags that load a script it gives nothing to draw."""
    for script, mark in TAGS.items():
        if mark not in html:
            html = script.sub("", html)
    return html


def on_post_page(output: str, page, config, **kwargs) -> str:
    return without_unused_scripts(output)


def on_post_template(output_content: str, template_name: str, config, **kwargs) -> str:
    return without_unused_scripts(output_content)  # 404.html, a page no Markdown makes
