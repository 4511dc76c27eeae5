"""Which colour each live block wears: identity that two blocks on one screen never share.

Every pane paints a physical block $p$ the same way (its pool cell, its table entries, the
tokens whose keys and values it holds), so the colour must say *which* block without a doubt.
Colours are not a function of the block id (16 colours repeated every 16 blocks put blocks 0
and 16 side by side in one colour); they are handed out like the blocks themselves:

- a block that becomes live ($\\mathcal{R}[p]$ goes above 0) takes a colour no other live
  block wears, the one released longest ago (so a colour just freed does not reappear at once
  on another block, which would look like the same block);
- it keeps that colour while it stays live, and its contents keep it across a swap (§6): the
  host block a device block is swapped to wears the device block's colour, and back;
- a copy-on-write (§5) makes new contents, so the copy takes a colour of its own;
- when more blocks are live than there are colours, the blocks past them wear ``NEUTRAL``:
  their id tags carry their identity, and no colour is worn by two blocks at once; a colour
  that frees goes to the oldest neutral block first.

``PALETTE`` is chosen for it (``tests/test_tui_colours.py`` measures it): every pair of its
colours is at least ``MIN_DISTANCE`` apart in CIEDE2000 $\\Delta E_{00}$ (the issue's
confusable pairs were 3 to 7 apart), each keeps white text readable (WCAG AA, 4.5:1), and each
stands apart from the panes' backgrounds, from white (a shared block's tag) and from
``NEUTRAL``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from minipaged.events import Alloc, CowCopy, SwapIn, SwapOut
from minipaged.outputs import StepOutput

PALETTE = (
    "#0078c0",
    "#787008",
    "#e01058",
    "#004838",
    "#700088",
    "#802000",
    "#787098",
    "#008810",
    "#a86000",
    "#008088",
    "#503800",
    "#5848f8",
    "#d808b8",
    "#781838",
    "#e82000",
    "#004078",
    "#906860",
)
"""Background colours for live blocks, white text on each (see the module docstring): as many
as a dark range that keeps white text readable holds at ``MIN_DISTANCE`` apart, in an order
where each next colour is the farthest from those before it (the first blocks of a run differ
most)."""

NEUTRAL = "#505050"
"""The look of a live block that has no colour of its own: more blocks are live than
``PALETTE`` has colours. Its id tells it apart."""

MIN_DISTANCE = 20.0
"""The least CIEDE2000 distance between two colours of ``PALETTE``."""

Place = tuple[str, int]
"""A block by its pool and id: ``("device", 3)`` or ``("host", 0)``."""


@dataclass(frozen=True, slots=True)
class Colouring:
    """The colours of one frame. Guarantees: ``worn`` maps each live block that wears a
    colour to its index in ``PALETTE``, no index twice; ``released`` lists the other indices,
    the one released longest ago first; ``neutral`` lists the live blocks without one, oldest
    first."""

    worn: Mapping[Place, int] = field(default_factory=dict)
    released: tuple[int, ...] = tuple(range(len(PALETTE)))
    neutral: tuple[Place, ...] = ()

    def colour(self, block: int, pool: str = "device") -> str:
        """The colour ``block`` of ``pool`` wears (``NEUTRAL`` when it has none)."""
        index = self.worn.get((pool, block))
        return NEUTRAL if index is None else PALETTE[index]

    def after(self, step: StepOutput) -> Colouring:
        """The colouring once ``step`` has happened (see the module docstring)."""
        state = step.state
        live = [
            (pool, block)
            for pool, refcounts in (
                ("device", state.device_refcounts),
                ("host", state.host_refcounts),
            )
            for block, r in enumerate(refcounts)
            if r > 0
        ]
        renewed = {(e.pool, e.block) for e in step.events if isinstance(e, Alloc)}
        renewed |= {("device", e.dst) for e in step.events if isinstance(e, CowCopy)}
        moved: dict[Place, Place] = {}  # new place -> where its contents were before the step
        for event in step.events:
            if isinstance(event, SwapOut):
                moved.update({("host", h): ("device", d) for d, h in event.mapping})
            elif isinstance(event, SwapIn):
                moved.update({("device", d): ("host", h) for h, d in event.mapping})
        worn: dict[Place, int] = {}
        taken: set[int] = set()
        for place in live:  # blocks that stay as they were keep their colours first
            index = self.worn.get(place)
            if index is not None and place not in renewed and place not in moved:
                worn[place] = index
                taken.add(index)
        for place in live:  # then swapped contents take theirs along, unless still worn
            index = self.worn.get(moved.get(place, place))
            if place in moved and index is not None and index not in taken:
                worn[place] = index
                taken.add(index)
        gone = [i for i in sorted(self.worn.values()) if i not in taken]
        free = [i for i in (*self.released, *gone) if i not in taken]
        waiting = [p for p in self.neutral if p in live and p not in worn and p not in renewed]
        waiting += [p for p in live if p not in worn and p not in waiting]
        for place in list(waiting):
            if not free:
                break
            worn[place] = free.pop(0)
            waiting.remove(place)
        return Colouring(worn, tuple(free), tuple(waiting))
