"""Memory gauges: how full the pools are and what the run has done so far.

- device: blocks in use (R > 0) of $\\mathcal{P}_{\\max}$, and how many are shared (R > 1);
- internal waste: empty slots in the device blocks in use (§3), from
  ``minipaged.stats.slot_usage``: a shared block counts once, so it is always below $B$
  slots per sequence;
- bytes: what the device blocks in use hold of the pool's bytes, for the KV cache's element
  type ($b$ = 4, 2 or 1 bytes: FP8 fits twice the blocks of FP16 in the same bytes, §1);
- host: blocks holding swapped-out sequences (§6);
- counts from step 1 to the cursor: forks, copy-on-write copies, preemptions, swaps, and
  recomputations.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text

from minipaged.memory import memory_amount
from minipaged.stats import slot_usage
from tui.pane import Pane
from tui.timeline import Frame

LABEL = 7


@dataclass(frozen=True)
class KVMemory:
    """The KV cache's element type and the bytes of one block (``KVCache.summary()``),
    $\\text{BlockSizeBytes} = 2 \\cdot N_L \\cdot N_{KV} \\cdot d_h \\cdot B \\cdot b$ (§3)."""

    dtype: str  # as LLM(kv_cache_dtype=...) names it: "float32", "fp8_e4m3", ...
    b: int
    bytes_per_block: int

    @classmethod
    def of_summary(cls, kv: object) -> KVMemory | None:
        """From a live run's ``KVCache.summary()`` or a trace header's ``engine.kv_cache``;
        None when a trace predates it or the entry is damaged."""
        try:
            return cls(str(kv["dtype"]), int(kv["b"]), int(kv["bytes_per_block"]))
        except (KeyError, TypeError, ValueError):
            return None


def bar(used: int, total: int, width: int) -> Text:
    """``used`` of ``total`` as a bar ``width`` cells wide (nothing when the pool is empty)."""
    filled = round(width * used / total) if total else 0
    text = Text("█" * filled, style="bright_green" if used < total else "bright_red")
    text.append("░" * (width - filled), style="bright_black")
    return text


def row(label: str, *parts: Text | str) -> Text:
    text = Text(f"{label:<{LABEL}}", style="bold")
    for part in parts:
        text.append(part)
    return text


class Gauges(Pane):
    """Figures for the frame. Guarantees: used + free = the pool size; waste is computed from
    the snapshot alone; counts include the step under the cursor and nothing after it."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("memory", id=id)
        self.kv: KVMemory | None = None  # set when a run starts; unknown for old traces

    def draw(self, frame: Frame, width: int) -> RenderableType:
        state, counts = frame.step.state, frame.counts
        device = state.device_refcounts
        used = sum(1 for r in device if r)
        shared = sum(1 for r in device if r > 1)
        filled, allocated = slot_usage(state)
        waste = (allocated - filled) / allocated if allocated else 0.0
        figures = f" {used}/{len(device)}"
        compact = self.screen.has_class("-compact")
        lines = [
            row("device", bar(used, len(device), max(width - LABEL - len(figures), 4)), figures)
        ]
        if not compact:  # a short terminal: the pool above shows the shared blocks
            lines.append(row("", f"{len(device) - used} free, {shared} shared (R>1)"))
            if self.kv is not None:
                block = self.kv.bytes_per_block
                held = f"{memory_amount(used * block)}/{memory_amount(len(device) * block)}"
                lines.append(row("bytes", f"{held} {self.kv.dtype} b={self.kv.b}"))
        lines.append(row("waste", f"{allocated - filled}/{allocated} slots empty ({waste:.0%})"))
        host = state.host_refcounts
        if host:
            host_used = sum(1 for r in host if r)
            figures = f" {host_used}/{len(host)}"
            gauge = bar(host_used, len(host), max(width - LABEL - len(figures), 4))
            lines.append(row("host", gauge, figures))
        if compact:  # a short terminal: the counts as few lines as the width allows
            items = [
                f"{counts['fork']} forks",
                f"{counts['cow-copy']} CoW",
                f"{counts['swap-out']} out",
                f"{counts['swap-in']} in",
                f"{counts['preempt']} preempted",
                f"{counts['recompute']} recomputed",
            ]
            filled = [""]
            for item in items:  # whole items to a line: a count never parts from its word
                if filled[-1] and len(filled[-1]) + 1 + len(item) > width - LABEL:
                    filled.append("")
                filled[-1] = f"{filled[-1]} {item}".lstrip()
            lines += [row("so far" if i == 0 else "", line) for i, line in enumerate(filled)]
            return Text("\n").join(lines)
        lines += [
            row("so far", f"{counts['fork']} forks, {counts['cow-copy']} CoW copies"),
            row("", f"{counts['preempt']} preempted, {counts['recompute']} recomputed"),
            row("", f"swaps: {counts['swap-out']} out, {counts['swap-in']} in"),
        ]
        return Text("\n").join(lines)
