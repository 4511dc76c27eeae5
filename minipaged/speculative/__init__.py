"""Speculative decoding on copy-on-write branches: the fourth workload of the source text's §5.

A cheap drafter guesses a *tree* of next tokens (top-$k$ at each depth, up to depth $d$); the
target model checks every node of the tree in one forward pass; the longest path it agrees with
is kept, plus the target's own next token. The tree lives in the block manager as forked block
tables: the branch of node $n$ (the path from the root to $n$) is forked from its parent's branch,
so every branch shares the sequence's prefix blocks and copies on write only where it splits.

Reading order: ``config`` (the setting), ``drafters`` (who guesses), ``tree`` (the guesses and the
ancestors mask), ``branches`` (the tree as forked tables), ``verify`` (the one target pass),
``acceptance`` (which guesses stay), ``events`` (what each step says), ``speculator`` (how the
engine runs it all in a step).
"""

from minipaged.speculative.config import SpeculativeConfig

__all__ = ["SpeculativeConfig"]
