"""The tokens of every sequence, painted by the physical block their keys and values live in.

Token $t$ of a sequence lives in logical block $j = \\lfloor t/B \\rfloor$, that is physical block
$\\mathcal{T}_r[j]$, at offset $o = t \\bmod B$. Each block's run of tokens begins with the
block's id as a superscript tag (black on white when the block is shared), on the block's
colour: two sequences that share a block show the same tag and colour under the same tokens;
after a copy-on-write they part. Rows keep their place, in sequence id order. The last sampled token
has no slot yet (the next step writes it), so it is unpainted; so is a sequence without blocks.
A swapped-out sequence's blocks are in host memory: its tokens are in italics, on the colours
their contents took with them.
``¶`` is the special paragraph token, which also begins every prompt. Generated tokens are
bold; the token this step produced is underlined.
"""

from __future__ import annotations

from functools import lru_cache

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text

from minipaged.tokenizer import Tokenizer
from tui.colours import SELECTED, SHARED, block_meta, block_style, block_tag, seq_label
from tui.pane import Pane, Selection
from tui.pool_view import changed_blocks
from tui.speculative_tree import tree_lines
from tui.timeline import Frame, Stream

LABEL_WIDTH = 5  # "s12 " plus the status glyph
STATUS_GLYPH = {"running": "▶", "waiting": "…", "swapped": "⇣", "finished": "✓"}


class TokenText:
    """Token id -> the text to show for it (one token at a time, cached)."""

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer
        self.piece = lru_cache(maxsize=4096)(self._piece)

    def _piece(self, token: int) -> str:
        if self.tokenizer is None:
            return f"{token} "
        text = self.tokenizer.decode([token])
        if not text:
            return "¶"
        text = text.replace("\n", "⏎").replace("\t", "→")
        # Control bytes would move the terminal's cursor: show them as replacement characters.
        return "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}" for ch in text)


def stream_text(stream: Stream, frame: Frame, words: TokenText, selection: Selection) -> Text:
    """``stream``'s tokens, each on the colour of the block that holds its slot; the block's id
    is tagged (superscript, black on white when shared) where the block begins."""
    state = frame.step.state
    table = state.tables.get(stream.seq_id) if stream.status != "finished" else None
    block_size = state.block_size
    new = frame.step.new_tokens.get(stream.seq_id)
    text = Text()
    last = len(stream.token_ids) - 1
    chosen_token = selection.token if selection.seq == stream.seq_id else None
    painted = table.num_tokens if table is not None else 0
    pool = table.pool if table is not None else "device"
    refcounts = state.host_refcounts if pool == "host" else state.device_refcounts
    for t, token in enumerate(stream.token_ids):
        block = table.blocks[t // block_size] if t < painted else None
        if block is not None and t % block_size == 0:
            colour = frame.colours.colour(block, pool)
            shared = refcounts[block] > 1
            text.append(block_tag(block), style=tag_style(block, pool, colour, shared))
        underline = t == last and new is not None and stream.status != "waiting"
        selected = t == chosen_token or (
            block is not None and pool == "device" and block == selection.block
        )
        colour = None if block is None else frame.colours.colour(block, pool)
        style = token_style(colour, pool, t >= stream.prompt_len, underline, selected)
        # A click on a token selects it (its address translation); the block stays named.
        text.append(words.piece(token), style=style + token_meta(stream.seq_id, t, block, pool))
    return text


@lru_cache(maxsize=1024)
def tag_style(block: int, pool: str, colour: str, shared: bool) -> Style:
    return (SHARED if shared else block_style(colour, pool)) + block_meta(block, pool)


@lru_cache(maxsize=1024)
def token_style(
    colour: str | None, pool: str, generated: bool, underline: bool, selected: bool
) -> Style:
    """A token's look (without its click): bold if generated, on its block's ``colour``
    (None: the token has no slot yet)."""
    style = Style(bold=generated, underline=underline or None)
    if colour is not None:
        style += block_style(colour, pool)
    return style + SELECTED if selected else style


def token_meta(seq: int, t: int, block: int | None, pool: str) -> Style:
    """The token's click and the block it shows, as one meta (one merge per token)."""
    meta: dict[str, object] = {"@click": f"app.select_token({seq}, {t})"}
    if block is not None:
        meta["block"] = (pool, block)
    return Style.from_meta(meta)


def dimmed(text: Text) -> Text:
    """``text`` faded, for the sequences that are not selected."""
    text.stylize(Style(dim=True))
    return text


class TokenStreams(Pane):
    """Every sequence's text at the frame. Guarantees: a painted token's colour is the colour
    the physical block that holds its slot wears; when the pane is too short, each sequence
    keeps its label, its last line and the lines with a block the step changed (a CoW's copy)
    or the selected block, and marks the lines it skips with …."""

    DEFAULT_CSS = """
    TokenStreams { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("token streams, painted by block", id=id)
        self.words = TokenText(None)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        streams = frame.streams
        if not streams:
            return Text("no sequences yet", style="dim")
        body_width = max(width - LABEL_WIDTH, 8)
        chosen = self.selection.seq
        texts = [stream_text(s, frame, self.words, self.selection) for s in streams]
        texts = [
            dimmed(text) if chosen is not None and s.seq_id != chosen else text
            for s, text in zip(streams, texts, strict=True)
        ]
        wrapped = [text.wrap(self.app.console, body_width) for text in texts]
        # A speculative step's guesses, as tokens, under the streams.
        trees = [
            row
            for tree in tree_lines(frame, self.words.piece)
            for row in tree.wrap(self.app.console, width)
        ]
        room = max(self.content_size.height - len(trees), 1)
        budget = allot([len(lines) for lines in wrapped], room)
        wanted = {
            (pool, b)
            for pool in ("device", "host")
            for b in changed_blocks(frame.step.events, pool)
        }
        if self.selection.block is not None:
            wanted.add(("device", self.selection.block))
        out = []
        for stream, lines, keep in zip(streams, wrapped, budget, strict=True):
            if not keep:
                continue
            chosen = SELECTED if self.selection.seq == stream.seq_id else Style()
            label = Text()
            label.append(f"s{stream.seq_id}", style=seq_label(stream.seq_id) + chosen)
            label.append(STATUS_GLYPH.get(stream.status, "?"), style="dim")
            label.pad_right(LABEL_WIDTH - len(label))
            shown = lines_to_show(lines, keep, wanted)
            for i, index in enumerate(shown):
                if i == 0:
                    row = label.copy()
                elif index != shown[i - 1] + 1:  # lines skipped above this one
                    row = Text("  …".ljust(LABEL_WIDTH), style="dim")
                else:
                    row = Text(" " * LABEL_WIDTH)
                row.append_text(lines[index])
                out.append(row)
        hidden = sum(1 for keep in budget if not keep)
        if hidden:
            out[-1] = Text(f"… and {hidden} more sequence(s)", style="dim")
        text = Text("\n").join(out + trees)
        text.no_wrap = True  # wrapped above already, with the labels
        return text


def lines_to_show(lines: list[Text], keep: int, wanted: set[tuple[str, int]]) -> list[int]:
    """Which ``keep`` of a stream's wrapped ``lines`` to show, in order: the lines holding a
    ``wanted`` block (what the step changed, such as a copy-on-write's copy, or the selected
    block), latest first, then its last line (the token being written), then the latest
    others."""

    def holds(line: Text) -> bool:
        return any(
            isinstance(span.style, Style) and tuple(span.style.meta.get("block", ())) in wanted
            for span in line.spans
        )

    latest_first = range(len(lines) - 1, -1, -1)
    order = [i for i in latest_first if holds(lines[i])]
    order += [i for i in latest_first if i not in order]  # the last line leads the rest
    return sorted(order[:keep])


def allot(needs: list[int], height: int) -> list[int]:
    """Share ``height`` lines among streams needing ``needs`` lines: one line each in turn
    until each has what it needs or the lines run out (earlier streams first)."""
    given = [0] * len(needs)
    left = height
    while left > 0 and any(g < n for g, n in zip(given, needs, strict=True)):
        for i, need in enumerate(needs):
            if left and given[i] < need:
                given[i] += 1
                left -= 1
    return given
