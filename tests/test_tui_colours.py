"""Block identity that cannot be misread: on any one screen two different live blocks never
wear one colour, and the colours they wear look different to a person (CIEDE2000, measured
between every pair the palette can put on a screen together, and between the blocks a real
screen shows); past the palette's size the id tag carries identity and no colour is reused."""

from __future__ import annotations

import itertools

import pytest

from minipaged.block_state import BlockState
from minipaged.checkpoint import model_directory
from minipaged.engine import StepOutput
from minipaged.events import Alloc, CowCopy, SwapIn, SwapOut
from tests.colour_metrics import ciede2000, contrast, distance
from tests.tui_runs import until
from tui.app import PagedApp
from tui.block_colours import MIN_DISTANCE, NEUTRAL, PALETTE, Colouring
from tui.colours import SHARED
from tui.help import LEGEND
from tui.pane import Pane
from tui.pool_view import PoolView
from tui.scenarios import SCENARIOS
from tui.timeline import Timeline

needs_tiny = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)
SHARPMA = [  # Sharma, Wu and Dalal (2005), Table 1: pairs with their published Delta E00
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0009), 7.1792),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((22.7233, 20.0904, -46.694), (23.0331, 14.973, -42.5619), 2.0373),
]
BACKGROUNDS = ("#121212", "#1e1e1e", "#262626", "#e0e0e0", "#f0f0f0", "#ffffff", "#000000")
"""The panes' backgrounds in both themes, white (a shared block's tag) and black."""


@pytest.mark.parametrize(("lab1", "lab2", "expected"), SHARPMA)
def test_ciede2000_gives_the_published_distances(lab1, lab2, expected):
    assert ciede2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)


def test_the_old_palettes_confusable_pair_is_what_the_metric_calls_close():
    assert distance("#1f4e79", "#2f4f80") < 5  # blocks 0 and 15 of the palette before


def test_every_two_palette_colours_are_far_apart():
    pairs = [(distance(a, b), a, b) for a, b in itertools.combinations(PALETTE, 2)]
    assert min(pairs)[0] >= MIN_DISTANCE, min(pairs)
    assert len(set(PALETTE)) == len(PALETTE) >= 16


@pytest.mark.parametrize("colour", PALETTE)
def test_each_palette_colour_stands_apart_from_neutral_and_the_backgrounds(colour):
    for other in (NEUTRAL, *BACKGROUNDS):
        assert distance(colour, other) >= MIN_DISTANCE, (colour, other)


@pytest.mark.parametrize("colour", (*PALETTE, NEUTRAL))
def test_white_text_on_each_block_colour_meets_wcag_aa(colour):
    assert contrast("#ffffff", colour) >= 4.5


def record(name: str) -> Timeline:
    engine = SCENARIOS[name].build("tiny")
    timeline = Timeline(engine.report())  # frame 0: the requests waiting
    while engine.has_unfinished():
        timeline.record([engine.step()])
    return timeline


@pytest.fixture(scope="module")
def timelines() -> dict[str, Timeline]:
    return {name: record(name) for name in ("tour", "parallel", "swap", "prefix")}


def live(frame) -> list[tuple[str, int]]:
    state = frame.step.state
    pools = (("device", state.device_refcounts), ("host", state.host_refcounts))
    return [(pool, p) for pool, refs in pools for p, r in enumerate(refs) if r]


@needs_tiny
@pytest.mark.parametrize("name", ["tour", "parallel", "swap", "prefix"])
def test_no_two_live_blocks_wear_one_colour_in_any_frame(timelines, name):
    timeline = timelines[name]
    for index in range(timeline.recorded + 1):
        frame = timeline.frame(index)
        colours = frame.colours
        blocks = live(frame)
        assert set(colours.worn) <= set(blocks), index
        assert len(set(colours.worn.values())) == len(colours.worn), index
        coloured = min(len(blocks), len(PALETTE))
        assert len(colours.worn) == coloured, (index, len(blocks))
        assert len(colours.neutral) == len(blocks) - coloured
        assert sorted({*colours.worn.values(), *colours.released}) == list(range(len(PALETTE)))


@needs_tiny
@pytest.mark.parametrize("name", ["tour", "parallel", "swap", "prefix"])
def test_a_block_keeps_its_colour_while_it_lives_and_its_contents_keep_it_across_a_swap(
    timelines, name
):
    timeline = timelines[name]
    swaps = 0
    for index in range(1, timeline.recorded + 1):
        before, frame = timeline.frame(index - 1), timeline.frame(index)
        events = frame.step.events
        renewed = {("device", e.dst) for e in events if isinstance(e, CowCopy)}
        renewed |= {(e.pool, e.block) for e in events if e.kind == "alloc"}
        moved = {}
        for event in events:
            if isinstance(event, SwapOut):
                moved.update({("host", h): ("device", d) for d, h in event.mapping})
            if isinstance(event, SwapIn):
                moved.update({("device", d): ("host", h) for h, d in event.mapping})
        for place, colour in frame.colours.worn.items():
            if place in moved:
                swaps += 1
                source = before.colours.worn.get(moved[place])
                assert source is None or colour == source, (index, place)
            elif place not in renewed and place in before.colours.worn:
                assert colour == before.colours.worn[place], (index, place)
    if name == "swap":
        assert swaps, "the swap scenario swaps"


@needs_tiny
def test_a_copy_on_write_copy_wears_a_colour_of_its_own(timelines):
    timeline = timelines["parallel"]
    copies = 0
    for index in range(1, timeline.recorded + 1):
        frame = timeline.frame(index)
        for event in frame.step.events:
            if isinstance(event, CowCopy) and ("device", event.dst) in frame.colours.worn:
                copies += 1
                assert frame.colours.colour(event.dst) != frame.colours.colour(event.src)
    assert copies


def pool_step(live_blocks: set[int], size: int, events=()) -> StepOutput:
    """A step that leaves exactly ``live_blocks`` of a ``size``-block device pool in use."""
    refcounts = tuple(int(p in live_blocks) for p in range(size))
    free = tuple(p for p in range(size) if p not in live_blocks)
    state = BlockState(4, {}, refcounts, (), free, ())
    return StepOutput(1, {}, tuple(events), state, {}, {}, (), 0, 0)


def test_past_the_palette_the_oldest_neutral_block_takes_the_first_colour_freed():
    n = len(PALETTE) + 3
    allocated = [Alloc(0, 0, p) for p in range(n)]
    colours = Colouring().after(pool_step(set(range(n)), n, allocated))
    assert colours.neutral == tuple(("device", p) for p in range(len(PALETTE), n))
    assert colours.colour(len(PALETTE)) == NEUTRAL
    freed = colours.worn[("device", 4)]
    after = colours.after(pool_step(set(range(n)) - {4}, n))
    assert after.worn[("device", len(PALETTE))] == freed  # the oldest neutral block takes it
    assert after.neutral == (("device", len(PALETTE) + 1), ("device", len(PALETTE) + 2))


def test_a_colour_just_freed_is_the_last_one_handed_out_again():
    colours = Colouring().after(pool_step({0, 1}, 8, [Alloc(0, 0, 0), Alloc(0, 1, 1)]))
    first = colours.worn[("device", 0)]
    colours = colours.after(pool_step({1}, 8))
    colours = colours.after(pool_step({1, 2}, 8, [Alloc(0, 2, 2)]))
    assert colours.worn[("device", 2)] != first
    assert colours.released[-1] == first


def test_the_legend_says_what_colour_means():
    legend = dict(LEGEND)["block identity"]
    assert "colour means which physical block" in legend
    assert "no two live blocks wear the same colour" in legend
    assert "grey" in legend and "id" in legend


def shown_colours(app: PagedApp) -> dict[tuple[str, int], set[str]]:
    """For every block a pane shows: the background colours it is drawn on (its tag as a
    shared block and the selection's reverse look aside)."""
    seen: dict[tuple[str, int], set[str]] = {}
    for pane in app.query(Pane):
        if pane.drawn is None:
            continue
        for strip in pane.drawn[1]:
            for segment in strip:
                style = segment.style
                if style is None or "block" not in style.meta or style.reverse:
                    continue
                if style.bgcolor is None or style.bgcolor == SHARED.bgcolor:
                    continue
                place = tuple(style.meta["block"])
                seen.setdefault(place, set()).add(style.bgcolor.get_truecolor().hex)
    return seen


@needs_tiny
@pytest.mark.anyio
@pytest.mark.parametrize(("name", "steps"), [("parallel", (19, 12)), ("swap", (20, 30, 40))])
async def test_the_blocks_a_screen_shows_wear_colours_a_person_tells_apart(name, steps):
    """The issue's screen: ``parallel`` at step 19 painted blocks 0 and 16, 4 and 20, 1 and 17
    one colour each in sequences that share nothing. Now every pair of blocks on the screen
    is at least MIN_DISTANCE apart, or one of them is neutral and carries its id."""
    app = PagedApp(SCENARIOS[name])
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.navigator is not None, "the model did not load")
        for step in steps:
            app.seek_step(step)
            await until(pilot, lambda: app.navigator.waiting is None, f"no step {step}")
            await pilot.pause()
            blocks = set(live(app.timeline.frame()))  # a free cell is drawn on the pane
            seen = {p: c for p, c in shown_colours(app).items() if p in blocks}
            assert len(seen) > 10, seen
            for place, colours in seen.items():
                assert len(colours) == 1, (step, place, colours)  # one look in every pane
            worn = {place: colours.pop() for place, colours in seen.items()}
            coloured = {p: c for p, c in worn.items() if c != NEUTRAL}
            for (p1, c1), (p2, c2) in itertools.combinations(coloured.items(), 2):
                assert distance(c1, c2) >= MIN_DISTANCE, (step, p1, c1, p2, c2)
            assert len(coloured) == min(len(worn), len(PALETTE))
            assert "a colour is one block" in app.base.query_one(PoolView).border_title


@pytest.fixture
def anyio_backend():
    return "asyncio"
