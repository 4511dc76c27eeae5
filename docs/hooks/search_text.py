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
SYMBOLS = {
    "cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠",
    "neq": "≠", "approx": "≈", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
    "sum": "Σ", "prod": "∏", "int": "∫", "infty": "∞", "leftarrow": "←", "rightarrow": "→",
    "to": "→", "gets": "←", "in": "∈", "notin": "∉", "dots": "…", "ldots": "…", "cdots": "…",
    "sqrt": "√", "bmod": " mod ", "mod": " mod ", "pm": "±", "mid": "|", "lvert": "|",
    "rvert": "|", "langle": "⟨", "rangle": "⟩", "quad": " ", "qquad": " ", "div": "÷",
    "partial": "∂", "nabla": "∇", "forall": "∀", "exists": "∃", "emptyset": "∅", "cup": "∪",
    "cap": "∩", "subseteq": "⊆", "land": "∧", "lor": "∨", "neg": "¬", "circ": "∘",
    "left": "", "right": "", "big": "", "Big": "", "bigl": "", "bigr": "", "displaystyle": "",
    "begin": "", "end": "", "hline": "", "frac": "", "dfrac": "", "tfrac": "",
}
SPACING = {",": " ", ";": " ", ":": " ", "!": "", " ": " ", "\\": "; "}
FRACTION = re.compile(r"\\[dt]?frac\s*\{(?P<top>[^{}]*)\}\s*\{(?P<bottom>[^{}]*)\}")


def greek(name: str) -> str | None:
    case = "CAPITAL" if name[0].isupper() else "SMALL"
    try:
        return unicodedata.lookup(f"GREEK {case} LETTER {name.upper()}")
    except KeyError:
        return None


def tex_to_text(tex: str) -> str:
    """One math span's TeX as the plain text a reader would type for it."""
    for _ in range(4):  # innermost fractions first
        tex = FRACTION.sub(lambda m: f"{m['top']}/{m['bottom']}", tex)

    def command(match: re.Match) -> str:
        if match["symbol"] is not None:
            return SPACING.get(match["symbol"], match["symbol"])
        name = match["name"]
        if name in SYMBOLS:
            return SYMBOLS[name]
        return greek(name) or ("" if name.startswith(("math", "text", "operatorname")) else name)

    text = COMMAND.sub(command, tex).replace("{", "").replace("}", "").replace("&", "")
    return re.sub(r"\s+", " ", text).strip()


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
