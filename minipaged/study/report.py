"""One results table, three renderings: a rich table for the terminal, Markdown for the docs'
results page, and a plain dict for ``--json``. ``minipaged simulate`` and every ``minipaged
bench`` sub-benchmark return a ``Report``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

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
    (``"{:.1%}"``, ``"{:,}"``..., or a function of the value; a string value is shown as it
    is). A column shown with ``"{}"`` lines up on the left, every other on the right."""

    key: str
    header: str
    fmt: str | Callable[[Any], str] = "{}"

    def show(self, value: Any) -> str:
        if value is None:
            return "—"
        if isinstance(value, str):
            return value
        return self.fmt(value) if callable(self.fmt) else self.fmt.format(value)


@dataclass(frozen=True, slots=True)
class View:
    """One of the tables a report too wide for one terminal is split into: its ``title`` and
    the keys of the columns it shows, in order (the columns that name a row repeated in each)."""

    title: str
    keys: tuple[str, ...]


@dataclass
class Report:
    """A titled table of rows (dicts of raw values), with notes that say how the numbers were
    obtained (simulated or measured, model-free or real) and the plots written for it. With
    ``views``, the rows are shown as several narrower tables, one per view."""

    name: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    views: list[View] = field(default_factory=list)

    def tables(self) -> list[tuple[str, list[Column]]]:
        """``(title, columns)`` of each table shown: one per view, or the whole report."""
        if not self.views:
            return [(self.title, self.columns)]
        by_key = {column.key: column for column in self.columns}
        return [(view.title, [by_key[key] for key in view.keys]) for view in self.views]

    def rich_table(self) -> Group:
        """Each table for the terminal, titled, with the notes under the last; the tables of
        views under the report's own title, as in the Markdown."""
        shown = self.tables()
        tables: list = [Text(self.title, style="bold")] if self.views else []
        for index, (title, columns) in enumerate(shown):
            caption = "\n".join(self.notes) if index == len(shown) - 1 else None
            table = Table(title=title, caption=caption, caption_justify="left")
            for column in columns:
                justify = "left" if column.fmt == "{}" else "right"
                # A narrow terminal wraps a header between its words, never inside one.
                shortest = max(len(word) for word in column.header.split())
                table.add_column(column.header, justify=justify, min_width=shortest)
            for row in self.rows:
                table.add_row(*(column.show(row.get(column.key)) for column in columns))
            tables.append(table)
        return Group(*tables)

    def markdown(self, relative_to: Path | None = None) -> str:
        """The tables as Markdown, their notes as a list, and the plots as images (paths made
        relative to ``relative_to``, the page's directory). A ``|`` in a header or a cell is
        escaped, or Markdown would end the cell there and show the row as plain text."""
        lines = [f"## {self.title}", ""]
        for title, columns in self.tables():
            if self.views:
                lines.extend([f"### {title}", ""])
            lines.append(markdown_row(column.header for column in columns))
            lines.append(markdown_row("---" for _ in columns))
            for row in self.rows:
                lines.append(markdown_row(column.show(row.get(column.key)) for column in columns))
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


def markdown_row(cells) -> str:
    """One row of a Markdown table, each ``|`` inside a cell escaped."""
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
