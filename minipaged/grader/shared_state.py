"""Objects of a student's class that share their state, told as such.

A new allocator, block manager or prefix tree starts from nothing, whatever another one did
first. State a
class body assigns (``_free = OrderedDict()`` beside the methods) or a default argument holds
(``def __init__(self, num_blocks, free=[])``) is made once, when Python reads the class, and is
then one object for every instance: a second pool starts with the blocks the first one took.
The checks would show that as a wrong value of some later call ("cached_blocks(): expected
(0, 1), got (0, 1, 2, 5, 7, 8)"), which does not say where to look; ``expect_own_state`` makes
two objects, changes the first and says so when the second changed with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minipaged.grader.report import CheckFailed, difference


def expect_own_state(
    make: Callable[[], Any], change: Callable[[Any], Any], look: Callable[[Any], Any], what: str
) -> None:
    """Fail unless ``look(second)`` reads the same after ``change(first)`` as before it, for
    two objects ``make()`` gave; ``what`` names the look, the objects and the change."""
    first, second = make(), make()
    before = look(second)
    change(first)
    after = look(second)
    if after != before:
        raise CheckFailed(
            f"{what}: {difference(after, before)}. The two share their state: what a class "
            "body assigns beside the methods, or a default argument holds "
            "(def __init__(self, n, free=[])), is one object for every instance. Make each "
            "object's own in __init__ (self.free = [])"
        )
