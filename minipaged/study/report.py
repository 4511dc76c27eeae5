"""One results table, three renderings: a rich table for the terminal, Markdown for the docs'
results page, and a plain dict for ``--json``. ``minipaged simulate`` and every ``minipaged
bench`` sub-benchmark return a ``Report``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

PIPE_WIDTH = 160
"""Columns for tables printed to a file or a pipe, where rich would otherwise assume 80 and
cut a wide table's cells short."""


def console(stderr: bool = False) -> Console:
    """A console of the terminal's width, or ``PIPE_WIDTH`` columns off a terminal."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=PIPE_WIDTH)


@dataclass(frozen=True, slots=True)
class Column:
    """A column: ``key`` in each row, the ``header`` shown, and how a value is shown
    (``"{:.1%}"``, ``"{:,}"``...; a string value is shown as it is)."""

    key: str
    header: str
    fmt: str = "{}"

    def show(self, value: Any) -> str:
        if value is None:
            return "—"
        return value if isinstance(value, str) else self.fmt.format(value)


@dataclass
class Report:
    """A titled table of rows (dicts of raw values), with notes that say how the numbers were
    obtained (simulated or measured, model-free or real) and the plots written for it."""

    name: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)

    def rich_table(self) -> Table:
        table = Table(title=self.title, caption="\n".join(self.notes), caption_justify="left")
        for column in self.columns:
            table.add_column(column.header, justify="left" if column.fmt == "{}" else "right")
        for row in self.rows:
            table.add_row(*(column.show(row.get(column.key)) for column in self.columns))
        return table

    def markdown(self, relative_to: Path | None = None) -> str:
        """The table as Markdown, its notes as a list, and its plots as images (paths made
        relative to ``relative_to``, the page's directory)."""
        lines = [f"## {self.title}", ""]
        # A "|" inside a cell (a header such as "max |Δ|") would end the cell: escape it.
        lines.append("| " + " | ".join(_cell(column.header) for column in self.columns) + " |")
        lines.append("| " + " | ".join("---" for _ in self.columns) + " |")
        for row in self.rows:
            cells = [column.show(row.get(column.key)) for column in self.columns]
            lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
        lines.append("")
        lines.extend(f"- {note}" for note in self.notes)
        for plot in self.plots:
            target = plot.relative_to(relative_to) if relative_to else plot
            lines.extend(["", f"![{self.title}]({target.as_posix()})"])
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "columns": [{"key": c.key, "header": c.header} for c in self.columns],
            "rows": self.rows,
            "notes": self.notes,
            "plots": [str(plot) for plot in self.plots],
        }


def _cell(text: str) -> str:
    """``text`` as a Markdown table cell."""
    return text.replace("|", "\\|")
