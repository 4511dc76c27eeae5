"""The scheduler's queues (§6), and why each request is where it is.

Requests are what users sent; sequences are what hold block tables (a request with n samples
or K beams has several). Each queue lists its requests, oldest first, with their sequences;
waiting and swapped requests show their block need against the free device blocks, and say
what holds them back: too few free blocks, or (head-of-line) an older request that must
move first: the scheduler takes each queue in arrival order, and admits no waiting request
while any is swapped. Needs are before prefix-cache hits, which can only lower them. A step
that preempted says why that victim: the scheduler preempts the latest arrival among the
running requests, so the oldest keep their progress. With chunked prefill a ``budget`` line
says how the step spent its token budget: a token per decode first, then each prompt chunk.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from minipaged.chunked_prefill import StepBudget
from minipaged.events import Preempt
from tui.colours import seq_label
from tui.pane import Pane, Selection
from tui.timeline import Frame, Stream

QUEUES = ("running", "swapped", "waiting")


def need(request: str, frame: Frame, members: list[Stream]) -> int:
    """Device blocks ``request`` needs to move to the running queue: a swapped one brings its
    distinct host blocks back plus one per sequence to grow; a waiting one allocates
    $\\lceil L/B \\rceil$ per sequence for its L tokens (before any prefix-cache hit)."""
    state = frame.step.state
    tables = [state.tables[s.seq_id] for s in members if s.seq_id in state.tables]
    if tables and all(t.pool == "host" for t in tables):
        return len({p for t in tables for p in t.blocks}) + len(members)
    return sum(-(-len(s.token_ids) // state.block_size) for s in members)


def arrival_key(request: str) -> tuple[int, str]:
    return (int(request), request) if request.isdecimal() else (1 << 62, request)


class QueuesView(Pane):
    """The queues of the frame. Guarantees: every request of ``StepOutput.queues`` appears once,
    under its queue; counts name requests and sequences apart."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("scheduler: requests (sequences)", id=id)

    def show(self, frame: Frame, selection: Selection) -> None:
        state = frame.step.state
        free, total = len(state.device_free), len(state.device_refcounts)
        full = f"scheduler: requests (sequences), {free}/{total} blocks free"
        fits = len(full) + 8 <= self.outer_size.width  # corners, padding, the ellipsis
        self.border_title = full if fits else f"scheduler: {free}/{total} blocks free"
        super().show(frame, selection)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        step = frame.step
        state = step.state
        free = len(state.device_free)
        by_request: dict[str, list[Stream]] = {}
        for stream in frame.streams:
            if stream.status != "finished":
                by_request.setdefault(stream.request_id, []).append(stream)
        said = SHORT if self.screen.has_class("-compact") else SAID
        lines = []
        swapped_first = bool(step.queues.get("swapped"))
        preempted = any(isinstance(event, Preempt) for event in step.events)
        for queue in QUEUES:
            requests = step.queues.get(queue, ())
            members = sum(len(by_request.get(r, [])) for r in requests)
            line = Text(f"{queue:<8}", style="bold")
            line.append(f"{len(requests)} req ({members} seq)", style="dim")
            left, stuck = free, None  # free blocks after the older requests, who blocks
            for request in requests:
                line.append(f" r{request}(")
                for n, stream in enumerate(by_request.get(request, [])):
                    line.append("," if n else "")
                    line.append(f"s{stream.seq_id}", style=seq_label(stream.seq_id))
                line.append(")")
                if queue == "running":
                    continue
                wanted = need(request, frame, by_request.get(request, []))
                line.append(f" needs {wanted}", style="bold")
                if queue == "waiting" and swapped_first:
                    line.append(said["swapped"], style="yellow")
                elif preempted:
                    line.append(said["preempted"], style="yellow")
                elif stuck is not None:  # the scheduler takes each queue in order
                    line.append(said["behind"].format(stuck), style="yellow")
                elif wanted > left:
                    line.append(f" > {left} free", style="yellow")
                    stuck = request
                else:
                    line.append(said["goes"].format(left), style="green")
                    left -= wanted
            lines.append(line)
        for event in step.events:
            if isinstance(event, StepBudget):
                lines.append(budget_line(event))
            if isinstance(event, Preempt):
                running = sorted(frame.previous.queues.get("running", ()), key=arrival_key)
                order = " < ".join(f"r{r}" for r in running)
                victim = said["victim"].format(event.request_id, order, event.mode)
                lines.append(Text(victim, style="bright_red"))
        return Text("\n").join(lines)


def budget_line(spent: StepBudget) -> Text:
    """The step's token budget and who used it: decodes first, then prompt chunks."""
    line = Text(f"{'budget':<8}", style="bold")
    line.append(f"{spent.used}/{spent.budget} tok:", style="dim")
    if spent.decodes:
        line.append(f" {len(spent.decodes)} decode")
    for seq, tokens in spent.chunks:
        line.append(f" s{seq}", style=seq_label(seq))
        line.append(f" +{tokens}")
    line.append(f", {spent.budget - spent.used} left", style="dim")
    return line


SAID = {
    "swapped": ": behind swapped (head-of-line)",
    "preempted": ": none move in a step that preempts",
    "behind": ": behind r{} (head-of-line)",
    "goes": " ≤ {} free: goes next step",
    "victim": "victim r{}: the latest arrival among the running ({}); {} keeps the older "
    "ones going",
}
SHORT = {  # the same reasons, for a short terminal (80×24) where every line counts
    "swapped": ": after swapped",
    "preempted": ": none move this step",
    "behind": ": after r{}",
    "goes": " ≤ {} free: next",
    "victim": "victim r{}: latest of {}",
}
"""Why a queued request waits, in full and short. The scheduler takes swapped requests
before waiting ones and each queue in arrival order (head-of-line); it moves none in a step
that preempts; its victim is the latest arrival among the running (``{}``: the mode)."""
