"""Sizes drawn anew at each grading, beside the fixed size a criterion's messages were written for.

A case checked at one size alone passes code that holds only at that size: a block size of 4
written as 4, two query heads a KV head written as 2. A criterion that runs its case through
``at_fixed_then_drawn`` runs it at the fixed size first, the same at every grading, so that a
bug is reported the same way each time; then at a size drawn from the system's random source,
which no hand-in can foresee. A failure at the drawn size names it, and says that the fixed size
passed, so that the student can make the case again and look for the number they wrote.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from minipaged.grader.report import CheckFailed

Size = TypeVar("Size")

DRAWN = "the case's size: "
"""Starts a note that names the size drawn for this grading at which the student's code raised;
the failure's message ends with it (``drawn_size``, read by ``grading.failure_message``)."""

DRAWS = random.SystemRandom()
"""Where each grading's sizes come from: the system's random source, whose draws no seed
foretells (the tests put a seeded ``random.Random`` in its place)."""


def at_fixed_then_drawn(
    case: Callable[[Size], None], name: str, fixed: Size, choices: Sequence[Size]
) -> Size:
    """Run ``case(fixed)``, then ``case(drawn)`` for ``drawn`` chosen from ``choices`` (none of
    which should be ``fixed``); return ``drawn``. A failure at the drawn size starts with
    ``"with {name}={drawn}, drawn for this grading"``; the message of an error of the student's
    code there ends with it (a note, ``DRAWN``)."""
    case(fixed)
    drawn = DRAWS.choice(choices)
    said = (
        f"with {name}={drawn}, drawn for this grading (the same case passed with "
        f"{name}={fixed}: is a number that holds only there written where {name} belongs?)"
    )
    try:
        case(drawn)
    except CheckFailed as failure:
        raise CheckFailed(f"{said}: {failure}") from None
    except Exception as error:
        error.add_note(DRAWN + said)
        raise
    return drawn


def drawn_size(error: BaseException) -> str:
    """``", with B=5, drawn for this grading (...)"``: the size a note on ``error`` names, or
    ``""``."""
    sizes = [n.removeprefix(DRAWN) for n in getattr(error, "__notes__", ()) if n.startswith(DRAWN)]
    return f", {sizes[0]}" if sizes else ""
