"""The key bar along the bottom: the keys of ``tui.keymap`` that have a key bar item, the most
used first (``keymap.FOOTER_ORDER``), as many whole items as the width holds. ``?`` comes
first: the help screen lists every key, so a narrow bar drops items but never cuts one."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from tui.keymap import in_footer_order

KEY = Style(color="bright_yellow", bold=True)  # an ANSI name: readable in both themes


class KeyBar(Widget):
    """Guarantees: every item shown is whole; items keep ``in_footer_order``; a click on an
    item runs its action."""

    DEFAULT_CSS = """
    KeyBar { height: 1; background: $panel; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.set_reactive(Widget.auto_links, False)  # items are clickable, not underlined links

    @property
    def link_style(self) -> Style:
        return Style()

    def render(self) -> Text:
        width = self.content_size.width
        bar = Text(no_wrap=True, overflow="crop")
        for key in in_footer_order():
            if not key.footer:
                continue
            item = Text.assemble(("  " if bar else ""), (key.footer_keys or key.display, KEY))
            item.append(f" {key.footer}")
            if len(bar) + len(item) > width:
                break
            bar.append_text(item)
            bar.stylize(Style.from_meta({"@click": f"app.{key.action}"}), len(bar) - len(item))
        return bar
