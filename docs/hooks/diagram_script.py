"""MkDocs hook: mermaid's script only on the pages that draw a diagram.

mkdocs.yml lists the vendored ``mermaid.min.js`` under ``extra_javascript``, so the theme finds
``window.mermaid`` and never fetches it from a CDN; but that list goes on every page, and a
browser parses its 3 MB on each of them, though only a few pages have a diagram. After a page
(404.html too) is rendered, this hook drops the script's tag where the page holds no
``class="mermaid"`` block; a page with one keeps it (``tests/test_docs.py`` checks both).
"""

from __future__ import annotations

import re

SCRIPT = re.compile(r'<script src="[^"]*/mermaid\.min\.js"></script>\n?')
DIAGRAM = 'class="mermaid"'


def without_unused_mermaid(html: str) -> str:
    """``html`` without the tag that loads mermaid, unless it draws a diagram."""
    return html if DIAGRAM in html else SCRIPT.sub("", html)


def on_post_page(output: str, page, config, **kwargs) -> str:
    return without_unused_mermaid(output)


def on_post_template(output_content: str, template_name: str, config, **kwargs) -> str:
    return without_unused_mermaid(output_content)  # 404.html, a page no Markdown makes
