"""The invariants panel: every rule of ``minipaged.invariants.INVARIANTS``, checked on the
snapshot under the cursor. Green while it holds; red, naming the first violation, when not.

The same predicates run after every step of the block manager's hypothesis state machine, so a
red line here is a bug the tests would also catch.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from minipaged import invariants
from tui.pane import Pane
from tui.timeline import Frame


class InvariantsView(Pane):
    """The invariants on the frame's snapshot. Guarantees: an invariant shows green iff
    ``minipaged.invariants.check`` finds no violation of it, and every violated invariant
    is named in red, in the compact layout too (which folds the ones that hold into a line)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("invariants", id=id)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        found = invariants.check(frame.step.state)
        compact = self.screen.has_class("-compact")
        lines: list[Text | Padding] = []
        holding = [inv for inv in invariants.INVARIANTS if not found[inv.name]]
        if compact and holding:
            names = ", ".join(inv.name for inv in holding)
            lines.append(Text(f"✓ {len(holding)} hold: {names}", style="green"))
        for invariant in invariants.INVARIANTS:
            problems = found[invariant.name]
            if problems:
                line = Text(f"✗ {invariant.name}: {problems[0]}", style="bold red")
                if len(problems) > 1:
                    line.append(f" (+{len(problems) - 1} more)")
                lines.append(line)
            elif not compact:
                lines.append(Text(f"✓ {invariant.name}", style="green"))
                lines.append(Padding(Text(invariant.statement, style="dim"), (0, 0, 0, 2)))
        if compact:  # one line each, so the panel stays small on an 80×24 terminal
            for line in lines:
                if isinstance(line, Text):
                    line.no_wrap, line.overflow = True, "ellipsis"
        return Group(*lines)
