"""The invariants panel: every rule of ``minipaged.invariants.INVARIANTS``, checked on the
snapshot under the cursor. While all hold they fold into one green line; a rule that fails
unfolds in red, naming its first violation and what the rule says.

The same predicates run after every step of the block manager's hypothesis state machine, so a
red line here is a bug the tests would also catch.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from minipaged import invariants
from tui.pane import Pane
from tui.student_error import headline
from tui.timeline import Frame


class InvariantsView(Pane):
    """The invariants on the frame's snapshot. Guarantees: an invariant shows green iff
    ``minipaged.invariants.check`` finds no violation of it, and every violated invariant
    is named in red with its statement; those that hold share one line."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("invariants", id=id)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        """The rules; above them, in red, what stopped a student's run (``tui.student_error``)
        when their code raised: the rules may all hold on the steps it made."""
        rules = self.rules(frame, width)
        stopped = getattr(self.app, "stopped", None)
        if stopped is None:
            return rules
        warning = Text(headline(stopped), style="bold red", no_wrap=True, overflow="ellipsis")
        return Group(warning, rules)

    def rules(self, frame: Frame, width: int) -> RenderableType:
        found = invariants.check(frame.step.state)
        holding = [inv for inv in invariants.INVARIANTS if not found[inv.name]]
        lines: list[Text | Padding] = []
        if len(holding) == len(invariants.INVARIANTS):  # all hold: one line, room for the rest
            line = Text(f"✓ all {len(holding)} invariants hold", style="green")
            names = ", ".join(inv.name for inv in holding)
            if len(line) + 2 + len(names) <= width:  # named where they fit, never cut
                line.append(f": {names}", style="dim green")
            elif not self.screen.has_class("-compact"):  # on the lines below, if tall enough
                line.append(f":\n{names}", style="dim green")
            return line
        if holding:
            line = Text(f"✓ {len(holding)} hold: " + ", ".join(i.name for i in holding))
            line.stylize("green")
            line.no_wrap, line.overflow = True, "ellipsis"
            lines.append(line)
        for invariant in invariants.INVARIANTS:
            problems = found[invariant.name]
            if problems:  # unfolded: what the rule says and the first violation
                line = Text(f"✗ {invariant.name}: {problems[0]}", style="bold red")
                if len(problems) > 1:
                    line.append(f" (+{len(problems) - 1} more)")
                lines.append(line)
                lines.append(Padding(Text(invariant.statement, style="dim"), (0, 0, 0, 2)))
        return Group(*lines)
