"""Projection mode is readable from the back of a classroom: every character on its screen,
timeline letters and sequence labels included, meets WCAG AA (4.5:1) against what it is drawn
on, measured on the composed screen after Textual has resolved every colour, with a block or a
token selected and in every dialog (help, scenario picker, palette, go to step); and each of the
app's two ANSI themes keeps its named colours readable on its own backgrounds.

The screens are those of a run replayed (``tests/tui_runs.py``: each scenario run once per test
process): the panes, gauges and dialogs draw a replay as they draw the live run, from the same
timeline, so its colours are the ones a classroom sees, without running the model 14 times."""

from __future__ import annotations

import pytest
from rich.color import Color as RichColor
from textual.screen import ModalScreen

from minipaged.checkpoint import model_directory
from tests.colour_metrics import contrast
from tests.tui_runs import replaying
from tui.ansi_themes import DARK, PROJECTION, PROJECTION_THEME
from tui.app import PagedApp

THEMES = {  # each theme's backgrounds: Textual's background, surface and panel
    "dark": (DARK, ("#121212", "#1e1e1e", "#242f38")),
    "projection": (PROJECTION, ("#e0e0e0", "#d8d8d8", "#d0d0d0")),
}
NAMES = ("red", "green", "yellow", "blue", "magenta", "cyan")
AA = 4.5


def hex_of(triplet) -> str:
    return "#{:02x}{:02x}{:02x}".format(*triplet)


@pytest.mark.parametrize("which", THEMES)
@pytest.mark.parametrize("name", [*NAMES, *(f"bright_{n}" for n in NAMES), "bright_black"], ids=str)
def test_each_named_colour_is_readable_on_its_themes_backgrounds(which, name):
    theme, backgrounds = THEMES[which]
    colour = hex_of(RichColor.parse(name).get_truecolor(theme))
    for background in backgrounds:
        assert contrast(colour, background) >= AA, (name, colour, background)


@pytest.mark.parametrize("which", THEMES)
def test_red_and_magenta_are_not_one_colour(which):
    theme, _ = THEMES[which]
    red, magenta = (RichColor.parse(n).get_truecolor(theme) for n in ("red", "magenta"))
    bright = [RichColor.parse(f"bright_{n}").get_truecolor(theme) for n in ("red", "magenta")]
    assert red != magenta and bright[0] != bright[1]


def is_text(character: str) -> bool:
    """A character a reader reads: not a space, a box-drawing line or a bar of a gauge."""
    return not character.isspace() and not 0x2500 <= ord(character) <= 0x259F


def unreadable(app: PagedApp) -> list[tuple[str, str, str, float]]:
    """Every run of text on the composed screen below AA: (text, colour, background, ratio).
    With a dialog open, only the dialog's own cells count: the screen behind it is dimmed on
    purpose, to say it is not the one to read."""
    screen = app.screen
    dialog = [w.region for w in screen.query("*") if w.region.area]
    if isinstance(screen, ModalScreen):
        assert dialog, f"{type(screen).__name__} shows nothing"
    update = screen._compositor.render_update(full=True)
    background = hex_of(RichColor.parse(app.get_css_variables()["background"]).triplet)
    found = []
    for y, line in enumerate(update.strips):
        x = 0
        for segment in (segment for strip in line for segment in strip):
            style, left = segment.style, x
            x += segment.cell_length
            if isinstance(screen, ModalScreen) and not any(r.contains(left, y) for r in dialog):
                continue
            if style is None or not any(is_text(ch) for ch in segment.text):
                continue
            fg = hex_of(style.color.triplet) if style.color and style.color.triplet else None
            bg = hex_of(style.bgcolor.triplet) if style.bgcolor and style.bgcolor.triplet else None
            fg, bg = fg or "#1f1f1f", bg or background
            if style.reverse:
                fg, bg = bg, fg
            ratio = contrast(fg, bg)
            if ratio < AA:
                found.append((segment.text.strip(), fg, bg, round(ratio, 2)))
    return found


needs_model = pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)


async def settled(pilot) -> None:
    await pilot.pause()
    await pilot.pause(0.2)


@needs_model
@pytest.mark.anyio
@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=str)
@pytest.mark.parametrize("name", ["tour", "parallel"])
async def test_every_character_of_a_projection_screen_meets_wcag_aa(size, name):
    """At three steps, then with a token and then its block selected (the inspector's pane)."""
    async with replaying(name, projection=True).run_test(size=size) as pilot:
        app = pilot.app
        for step in (2, 4, 12):
            app.seek_step(step)
            await settled(pilot)
            assert not unreadable(app), (step, unreadable(app)[:12])
        for key in ("down", "right_square_bracket", "enter"):
            await pilot.press(key)
            await settled(pilot)
            assert not unreadable(app), (key, unreadable(app)[:12])


# Each dialog, opened from step 3, and what is typed into it (its list filtered, an error shown).
DIALOGS = {
    "help": ("question_mark", ""),
    "scenario picker": ("s", ""),
    "command palette": ("ctrl+p", "jump"),
    "go to step": ("g", ""),
    "go to step, refused": ("g", "9999\n"),
}


@needs_model
@pytest.mark.anyio
@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=str)
@pytest.mark.parametrize("dialog", DIALOGS)
async def test_every_dialog_of_projection_mode_meets_wcag_aa(size, dialog):
    """Textual's light theme drew a dialog's title in an orange at 1.4:1 and the go-to-step
    box's placeholder at 2.5:1 (tui.ansi_themes.PROJECTION_THEME darkens both)."""
    key, typed = DIALOGS[dialog]
    async with replaying("swap", projection=True).run_test(size=size) as pilot:
        app = pilot.app
        app.seek_step(3)
        await settled(pilot)
        await pilot.press(key)
        await settled(pilot)
        for character in typed:
            await pilot.press("enter" if character == "\n" else character)
        await settled(pilot)
        assert isinstance(app.screen, ModalScreen), f"{key} opened no dialog"
        assert not unreadable(app), unreadable(app)[:12]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.parametrize("role", ["primary", "secondary", "warning", "error", "success", "accent"])
def test_projection_themes_colour_roles_are_readable_on_its_greys(role):
    colour = getattr(PROJECTION_THEME, role)
    for background in (*THEMES["projection"][1], "#cecece"):  # #cecece: a dialog's input
        assert contrast(colour, background) >= AA, (role, colour, background)
