"""The terminal UI's pictures on the site: screenshots made by ``minipaged tui --screenshot``,
never by hand, and crops of them that a phone can read.

A whole screenshot is a 120-column terminal: in a 390 px phone's column its text is about
3 px high. So a page shows a *crop*, the pane its text discusses, and links the crop to the
whole screenshot, a tap away. A crop is the screenshot's SVG with its view box narrowed to the
pane and the characters outside it dropped; ``tests/test_docs.py`` checks every crop is cut
from the current screenshot and shows what its page says it shows.

    .venv/bin/python docs/screenshots.py      # make every screenshot again, then its crops
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
SCREENSHOTS = DOCS / "assets" / "screenshots"
SCREENSHOT_ARGS = {
    "parallel-step-2.svg": ["--scenario", "parallel", "--steps", "2"],
    "beam-step-3.svg": ["--scenario", "beam", "--steps", "3"],
    "swap-step-8.svg": ["--scenario", "swap", "--steps", "8"],
    "recompute-step-29.svg": ["--scenario", "recompute", "--steps", "29"],
    "tour-attention-step-12.svg": [
        *("--scenario", "tour", "--steps", "12", "--keys", "a,full_stop,full_stop")
    ],
}
# Rich's SVG names a web font on a CDN after the local one; the site must not load it.
WEB_FONT = re.compile(r',\s*url\("https?://[^"]*"\)\s*format\("[^"]*"\)')

# Rich draws the terminal's cells at these sizes, from this corner of the SVG.
CELL_WIDTH, CELL_HEIGHT = 12.2, 24.4
ORIGIN_X, ORIGIN_Y = 9, 41
MARGIN = 6  # user units around a crop, so a pane's border is not cut


@dataclass(frozen=True)
class Crop:
    """Rows ``top`` to ``top + rows - 1`` and columns ``left`` to ``left + cols - 1`` of
    ``screenshot``'s terminal; ``shows`` are texts the page says the crop shows."""

    screenshot: str
    top: int
    left: int
    rows: int
    cols: int
    shows: tuple[str, ...]


# Panes of the 120 x 40 screen: the block tables are rows 1-6 at columns 53-119, the memory
# gauges rows 8-16 at columns 0-52.
CROPS = {
    "parallel-step-2-tables.svg": Crop(
        "parallel-step-2.svg", 1, 53, 6, 67, ("0→0×4", "1→1›2", "1→1›3", "1→1›4")
    ),
    "parallel-step-2-memory.svg": Crop(
        "parallel-step-2.svg", 8, 0, 9, 54, ("waste  4/20 slots empty (20%)",)
    ),
    "beam-step-3-tables.svg": Crop("beam-step-3.svg", 1, 53, 6, 67, ("0→0×4", "1→1›5")),
    "swap-step-8-tables.svg": Crop(
        "swap-step-8.svg", 1, 53, 6, 67, ("s3  host L=16  0→0 1→1 2→2 3→3",)
    ),
    # The attention view of the 120 x 40 screen: rows 10-36 at columns 53-119.
    "tour-attention-step-12-view.svg": Crop(
        "tour-attention-step-12.svg",
        10,
        53,
        27,
        67,
        ("▶ 2   2    8–11", "1.32    4.27  0.733", "max|Δ|<1e-6 ✓", "query heads 0, 1 (GQA)"),
    ),
    "recompute-step-29-tables.svg": Crop(
        "recompute-step-29.svg", 1, 53, 5, 67, ("s1  L=37", "s2  L=20", "s3  L=17")
    ),
}

ELEMENT = re.compile(
    r'<(?P<tag>rect|text) (?:fill|class)="[^"]*" x="(?P<x>[\d.]+)" y="(?P<y>[\d.]+)" '
    r'(?:width|textLength)="(?P<w>[\d.]+)"(?:[^>]*/>|[^>]*>.*?</text>)',
    re.S,
)


def crop(svg: str, part: Crop) -> str:
    """``svg``, a Rich terminal screenshot, cut to ``part``: the view box narrowed to those
    cells, and every character and background cell outside them left out."""
    right = (part.left + part.cols) * CELL_WIDTH

    def keep(match: re.Match) -> str:
        y = float(match["y"])
        row = round((y - (20 if match["tag"] == "text" else 1.5)) / CELL_HEIGHT)
        x, width = float(match["x"]), float(match["w"])
        inside = part.top <= row < part.top + part.rows
        return match[0] if inside and x < right and x + width > part.left * CELL_WIDTH else ""

    box = (
        ORIGIN_X + part.left * CELL_WIDTH - MARGIN,
        ORIGIN_Y + part.top * CELL_HEIGHT - MARGIN,
        part.cols * CELL_WIDTH + 2 * MARGIN,
        part.rows * CELL_HEIGHT + 2 * MARGIN,
    )
    view = 'viewBox="' + " ".join(f"{v:g}" for v in box) + '"'
    return re.sub(r'viewBox="[^"]*"', view, ELEMENT.sub(keep, svg), count=1)


def screen_rows(svg: str) -> list[str]:
    """The characters a screenshot (or a crop) shows, one string per terminal row, each
    character in its column: what a reader sees, without the SVG's styling."""
    cells: dict[int, dict[int, str]] = {}
    for match in ELEMENT.finditer(svg):
        if match["tag"] != "text":
            continue
        row = round((float(match["y"]) - 20) / CELL_HEIGHT)
        column = round(float(match["x"]) / CELL_WIDTH)
        text = re.sub(r"<[^>]*>", "", match[0]).replace("&#160;", " ")
        text = html.unescape(text)
        for k, char in enumerate(text):
            cells.setdefault(row, {})[column + k] = char
    return [
        "".join(line.get(c, " ") for c in range(max(line) + 1)).rstrip()
        for _, line in sorted(cells.items())
    ]


def take_screenshot(name: str, out: Path) -> None:
    """Run ``minipaged tui --screenshot`` for one of SCREENSHOT_ARGS, keeping it offline."""
    command = [sys.executable, "-m", "minipaged.cli", "tui", *SCREENSHOT_ARGS[name]]
    result = subprocess.run(
        [*command, "--screenshot", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    out.write_text(WEB_FONT.sub("", out.read_text(encoding="utf-8")), encoding="utf-8")


def write_crops() -> None:
    for name, part in CROPS.items():
        svg = (SCREENSHOTS / part.screenshot).read_text(encoding="utf-8")
        (SCREENSHOTS / name).write_text(crop(svg, part), encoding="utf-8")
        print(f"docs/assets/screenshots/{name}: cut from {part.screenshot}")


def write_all() -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name in SCREENSHOT_ARGS:
        take_screenshot(name, SCREENSHOTS / name)
        print(f"docs/assets/screenshots/{name}: written by minipaged tui")
    write_crops()


if __name__ == "__main__":
    write_all()
