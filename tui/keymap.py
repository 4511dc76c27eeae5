"""The key map: one table that the app's bindings, its footer and its help screen all read, so
they cannot disagree with each other. The README's key table lists the same keys for a reader
(``tests/test_tui.py`` holds the bindings to it)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True, slots=True)
class Key:
    """``keys`` (Textual key names) run ``action``; the help screen shows ``display`` and
    ``description``; the key bar (``tui.key_bar``) shows ``footer`` after ``footer_keys`` (by
    default ``display``), or nothing when ``footer`` is empty. Related keys share one item."""

    keys: tuple[str, ...]
    display: str
    action: str
    description: str
    footer: str = ""
    footer_keys: str = ""


KEYMAP: tuple[Key, ...] = (
    Key(("n", "right"), "n or →", "forward", "step forward", "step", "n/→"),
    Key(("b", "left"), "b or ←", "back", "step back (time travel: no recompute)", "back", "b/←"),
    Key(("space",), "space", "play", "play / pause", "play"),
    Key(("plus",), "+", "faster", "faster", "speed", "+/-"),
    Key(("minus",), "-", "slower", "slower"),
    Key(("c",), "c", "jump('cow')", "jump to the next copy-on-write", "jump", "c/w/p/h"),
    Key(("w",), "w", "jump('swap')", "jump to the next swap"),
    Key(("p",), "p", "jump('preempt')", "jump to the next preemption"),
    Key(("h",), "h", "jump('prefix')", "jump to the next prefix hit"),
    Key(("C",), "C", "jump('cow', -1)", "jump back to the previous copy-on-write"),
    Key(("W",), "W", "jump('swap', -1)", "jump back to the previous swap"),
    Key(("P",), "P", "jump('preempt', -1)", "jump back to the previous preemption"),
    Key(("H",), "H", "jump('prefix', -1)", "jump back to the previous prefix hit"),
    Key(("g",), "g", "go_to_step", "go to step N: type it, then enter"),
    Key(("down",), "↓", "next_seq(1)", "select the next sequence", "select", "↑↓[]"),
    Key(("up",), "↑", "next_seq(-1)", "select the previous sequence"),
    Key(
        ("right_square_bracket",), "]", "next_token(1)", "select the next token: its j, o, p, slot"
    ),
    Key(("left_square_bracket",), "[", "next_token(-1)", "select the previous token"),
    Key(("enter",), "enter", "token_block", "select the selected token's block: its B slots"),
    Key(("escape",), "esc", "clear_selection", "clear the selection"),
    Key(("a",), "a", "attention", "attention view: the selected sequence's decode, block by block"),
    Key(("full_stop",), ".", "walk(1)", "attention view: read the next block"),
    Key(("comma",), ",", "walk(-1)", "attention view: back to the previous block"),
    Key(("l",), "l", "layer", "attention view: the next layer"),
    Key(("k",), "k", "head", "attention view: the next query head"),
    Key(("e",), "e", "expand", "expand or fold the log's runs of like events", "expand"),
    Key(("pageup",), "page up", "scroll_log(-1)", "scroll the event log back"),
    Key(("pagedown",), "page down", "scroll_log(1)", "scroll the event log forward"),
    Key(("v",), "v", "projection", "projection mode: larger cells, light high-contrast theme"),
    Key(("r",), "r", "restart", "restart the scenario", "restart"),
    Key(("s",), "s", "scenarios", "scenario picker", "scenario"),
    Key(("question_mark",), "?", "help", "help screen", "help"),
    Key(("ctrl+p",), "ctrl+p", "command_palette", "command palette", "palette", "^p"),
    Key(("q",), "q", "quit", "quit", "quit"),
)


FOOTER_ORDER = ("help", "forward", "back", "play", "jump('cow')", "scenarios", "quit")
"""Key bar items that come first, so an 80-column key bar still shows them; the rest follow
as the width allows."""


def in_footer_order() -> list[Key]:
    """``KEYMAP`` with the ``FOOTER_ORDER`` keys first."""
    first_in_footer = {action: rank for rank, action in enumerate(FOOTER_ORDER)}
    return sorted(KEYMAP, key=lambda k: first_in_footer.get(k.action, len(FOOTER_ORDER)))


def bindings() -> list[Binding]:
    """Textual bindings for ``KEYMAP``, in footer order. ctrl+p is also Textual's own
    binding (``App.COMMAND_PALETTE_BINDING``); listing it here keeps the palette's key in
    the key bar's order."""
    out = []
    for key in in_footer_order():
        first, *others = key.keys
        out.append(
            Binding(
                first,
                key.action,
                key.footer or key.description,
                show=bool(key.footer),
                key_display=key.footer_keys or key.display,
            )
        )
        out += [Binding(other, key.action, key.description, show=False) for other in others]
    return out
