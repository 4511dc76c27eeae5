"""MkDocs hook: the search index holds math as readable text, not TeX.

The pages keep their math as TeX for MathJax to draw (``\\(\\mathcal{R}[p]\\)``), and the
search plugin indexes the page's text as it is, so a result's snippet would show the TeX
source. After the search plugin writes ``search/search_index.json`` (and before the offline
plugin inlines it into a script) this hook rewrites every math span in it as plain text:
``\\(\\mathcal{R}[p]\\)`` becomes ``R[p]``, ``\\(\\lceil L/B \\rceil\\)`` becomes ``⌈L/B⌉``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

MATH = re.compile(r"\\\((?P<inline>.+?)\\\)|\\\[(?P<display>.+?)\\\]", re.S)
COMMAND = re.compile(r"\\(?P<name>[A-Za-z]+)\s*|\\(?P<symbol>[^A-Za-z])")
# Relations and operators get spaces around them, as MathJax draws them; brackets none.
SYMBOLS = {
    "cdot": " · ", "times": " × ", "le": " ≤ ", "leq": " ≤ ", "ge": " ≥ ", "geq": " ≥ ",
    "ne": " ≠ ", "neq": " ≠ ", "approx": " ≈ ", "leftarrow": " ← ", "gets": " ← ",
    "rightarrow": " → ", "to": " → ", "in": " ∈ ", "bmod": " mod ", "mod": " mod ",
    "pm": " ± ", "div": " ÷ ", "quad": " ", "qquad": " ",
    "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉", "langle": "⟨", "rangle": "⟩",
    "mid": "|", "lvert": "|", "rvert": "|", "sum": "Σ", "prod": "∏", "int": "∫",
    "infty": "∞", "sqrt": "√", "dots": "…", "ldots": "…", "cdots": "…", "partial": "∂",
    "forall": "∀", "exists": "∃", "emptyset": "∅", "cup": "∪", "cap": "∩",
    "left": "", "right": "", "big": "", "Big": "", "bigl": "", "bigr": "",
    "displaystyle": "", "begin": "", "end": "", "hline": "",
}  # fmt: skip
SPACING = {",": " ", ";": " ", ":": " ", "!": "", " ": " ", "\\": "; "}
FRACTION = re.compile(r"\\[dt]?frac\s*\{(?P<top>[^{}]*)\}\s*\{(?P<bottom>[^{}]*)\}")
OPENING, CLOSING = re.compile(r"([⌊⌈⟨(\[])\s+"), re.compile(r"\s+([⌋⌉⟩)\]])")


def greek(name: str) -> str | None:
    case = "CAPITAL" if name[0].isupper() else "SMALL"
    try:
        return unicodedata.lookup(f"GREEK {case} LETTER {name.upper()}")
    except KeyError:
        return None


def tex_to_text(tex: str) -> str:
    """One math span's TeX as the plain text a reader would type for it."""
    for _ in range(4):  # innermost fractions first
        tex = FRACTION.sub(lambda m: f"{_grouped(m['top'])}/{_grouped(m['bottom'])}", tex)

    def command(match: re.Match) -> str:
        if match["symbol"] is not None:
            return SPACING.get(match["symbol"], match["symbol"])
        name = match["name"]
        if name in SYMBOLS:
            return SYMBOLS[name]
        return greek(name) or ("" if name.startswith(("math", "text", "operatorname")) else name)

    text = COMMAND.sub(command, tex).replace("{", "").replace("}", "").replace("&", "")
    text = CLOSING.sub(r"\1", OPENING.sub(r"\1", re.sub(r"\s+", " ", text)))
    return text.strip()


def _grouped(part: str) -> str:
    """A fraction's numerator or denominator, in parentheses when it is more than one term."""
    part = part.strip()
    return f"({part})" if re.search(r"[\s+\-]", part) else part


def plain(text: str) -> str:
    """``text`` with every ``\\(...\\)`` and ``\\[...\\]`` span written as plain text."""
    return MATH.sub(lambda m: tex_to_text(m["inline"] or m["display"]), text)


def on_post_build(config, **kwargs) -> None:
    index = Path(config.site_dir) / "search" / "search_index.json"
    if not index.is_file():
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    for doc in data.get("docs", []):
        doc["title"], doc["text"] = plain(doc["title"]), plain(doc["text"])
    index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), "utf-8")
