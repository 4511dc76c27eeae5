"""A speculative step's token tree as tokens: what the drafter guessed, and after the verify
pass which guesses were accepted and which rejected (source text §5's branches, read).

A speculative step shows as two frames (``tui.speculative_frames``): on the first, each
sequence's proposed tree, ``guess(child | child) | guess``, one token per forked branch; on the
second, the same tree with the accepted path in green (✓) and every rejected guess struck
through in red (✗), followed by the target's own next token. Each guess carries its branch's
sequence id (superscript), the row of the block tables that holds it.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from minipaged.speculative.events import Accept, Propose, Prune
from tui.colours import block_tag, seq_label
from tui.timeline import Frame

ACCEPTED = Style(color="green", bold=True)
REJECTED = Style(color="red", strike=True)
PROPOSED = Style(color="yellow")


def tree_lines(frame: Frame, piece) -> list[Text]:
    """One line per tree the frame's step proposed (its drafted frame) or verified (the frame
    after it); ``piece`` turns a token id into its text."""
    prunes = {e.seq: e for e in frame.step.events if isinstance(e, Prune)}
    accepts = {e.seq: e for e in frame.step.events if isinstance(e, Accept)}
    events = frame.previous.events if prunes else frame.step.events
    lines = []
    for propose in (e for e in events if isinstance(e, Propose) and e.tokens):
        prune = prunes.get(propose.seq)
        accepted = kept_path(propose, prune.kept) if prune is not None else None
        line = Text()
        line.append(f"s{propose.seq}", style=seq_label(propose.seq))
        line.append(" guessed " if accepted is None else " verified ", style="dim")
        line.append_text(subtree(propose, 0, accepted, piece))
        accept = accepts.get(propose.seq)
        if accept is not None:
            line.append(f" + {piece(accept.tokens[-1])} (target's own)", style=ACCEPTED)
        lines.append(line)
    return lines


def kept_path(propose: Propose, kept: int) -> set[int]:
    """The tree nodes on the path from the root to the kept branch ``kept`` (none past the root
    when the sequence kept no guess: ``kept`` is the sequence itself)."""
    if kept not in propose.branches:
        return set()
    node, path = propose.branches.index(kept) + 1, set()
    while node > 0:
        path.add(node)
        node = propose.parents[node - 1]
    return path


def subtree(propose: Propose, node: int, accepted: set[int] | None, piece) -> Text:
    """The guesses below ``node``, siblings apart by ``|``, each one's own below it in
    brackets; styled by ``accepted`` (None: not verified yet)."""
    text = Text()
    children = [i + 1 for i, parent in enumerate(propose.parents) if parent == node]
    for k, child in enumerate(children):
        if k:
            text.append(" | ", style="dim")
        if accepted is None:
            style, mark = PROPOSED, ""
        else:
            style, mark = (ACCEPTED, "✓") if child in accepted else (REJECTED, "✗")
        text.append(piece(propose.tokens[child - 1]) + mark, style=style)
        if child <= len(propose.branches):  # the branch's table, as the tables pane names it
            branch = propose.branches[child - 1]
            text.append(block_tag(branch), style=seq_label(branch))
        below = subtree(propose, child, accepted, piece)
        if below:
            text.append("(", style="dim")
            text.append_text(below)
            text.append(")", style="dim")
    return text
