"""Figures for the results page, written as SVG that is the same byte for byte when the numbers
are (no date, fixed element ids), so regenerating the page only changes what changed.

Figures are built with matplotlib's object API (``Figure``), not
``pyplot``: no display, no global backend, nothing to close. matplotlib is imported by the
first figure, not with this module: ``minipaged simulate`` shares the benchmarks' code but
draws nothing, and the import alone took a second of its run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from minipaged import atomic_write
from minipaged.replaceable import OutputKind

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


WIDTH_IN = 5.0
"""A figure's width in inches: at 390 px, a phone's column, its smallest text (matplotlib's
"small", 8.3 pt) still draws about 8 px high, as the docs' own figures do."""


def figure(panels: int = 1, width: float = WIDTH_IN) -> tuple[Figure, list[Axes]]:
    """A figure with ``panels`` axes, one under the other, so that each keeps the column's
    width and its text stays legible on a phone (the browser test checks every image)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 3.6 * panels), layout="tight")
    return fig, list(fig.subplots(panels, 1, squeeze=False)[:, 0])


CREATOR = "minipaged bench"
"""The start of the creator ``save`` writes into each plot's SVG metadata (then Matplotlib's
version): what tells a plot of ours from any other Matplotlib SVG, whose creator is
Matplotlib."""


def is_plot(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, starts an SVG that ``save`` wrote: what a plot
    may replace without ``force``."""
    start = head[:4096]
    return b"<svg" in start and f"<dc:title>{CREATOR} (Matplotlib".encode() in start


PLOT = OutputKind("a plot minipaged bench drew (a Matplotlib SVG)", is_plot)


def save(fig: Figure, out: Path | None, name: str, force: bool = False) -> Path | None:
    """Write ``fig`` to ``out/name.svg`` (over a file that is no plot only with ``force``:
    ``Options.force``) and return the path; with ``out`` None (no folder to write to), write
    nothing and return None."""
    if out is None:
        return None
    import matplotlib

    path = out / f"{name}.svg"
    with (
        matplotlib.rc_context({"svg.hashsalt": "minipaged"}),
        atomic_write.replacing(path, "wb", replaces=PLOT, force=force) as replacement,
    ):
        creator = f"{CREATOR} (Matplotlib v{matplotlib.__version__})"
        fig.savefig(replacement.file, format="svg", metadata={"Date": None, "Creator": creator})
    return path
