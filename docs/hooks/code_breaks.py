"""MkDocs hook: a name in inline code wraps at its dots, underscores and slashes, never inside
a word.

The theme lets inline code break anywhere (``word-break: break-word``), and a table sizes its
columns by the narrowest each could be drawn, so on a phone a module name in a table came out
as ``minipaged.sc`` / ``heduler``. This hook puts a ``<wbr>`` (a place a line may break, which
shows nothing and copies as nothing) after each ``.``, ``_`` and ``/`` that joins two parts of
a name in inline code, and ``extra.css`` lets inline code break inside a word only where one
part is wider than the whole column. Code blocks (``<pre>``) scroll instead, and are left
alone. ``tests/test_site_browser.py`` checks that no inline code wraps inside a word.
"""

from __future__ import annotations

import re

# A code block (``<pre>``, whose lines must not wrap: it is skipped whole), or inline code,
# whose text may hold tags (a highlighted signature's spans).
CODE = re.compile(
    r"(?P<block><pre\b.*?</pre>)|(?P<open><code(?: [^>]*)?>)(?P<body>.*?)</code>", re.S
)
TAG = re.compile(r"(<[^>]*>)")
# A dot or slash between two names (not a number's decimal point), underscores inside a name,
# and an opening bracket or an equals sign before what follows it (``f(x=1)``).
JOIN = re.compile(
    r"(?<=[A-Za-z_)\]])([./])(?=[A-Za-z_])|(?<=[^\W_])(_+)(?=[^\W_])|([(=])(?=[\w&'\"])"
)


def with_breaks(html: str) -> str:
    """``html`` with a ``<wbr>`` after each joint of a name in its inline code."""

    def code(match: re.Match) -> str:
        if match["block"]:
            return match["block"]
        parts = TAG.split(match["body"])  # text, tag, text, ...: only the text changes
        parts[::2] = [JOIN.sub(r"\1\2\3<wbr>", text) for text in parts[::2]]
        return match["open"] + "".join(parts) + "</code>"

    return CODE.sub(code, html)


def on_page_content(html: str, page, config, files, **kwargs) -> str:
    return with_breaks(html)
