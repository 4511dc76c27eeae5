"""The scheduler's queues (§6), and why each request is where it is.

Requests are what users sent; sequences are what hold block tables (a request with n samples
or K beams has several). Each queue lists its requests, oldest first, with their sequences;
waiting and swapped requests show their block need against the free device blocks, and say
what holds them back: too few free blocks, or (head-of-line) an older request that must
move first: the scheduler takes each queue in arrival order, and admits no waiting request
while any is swapped. Needs are before prefix-cache hits, which can only lower them. A step
that preempted says why that victim: the scheduler preempts the latest arrival among the
running requests, so the oldest keep their progress.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from minipaged.events import Preempt
from tui.colours import seq_label
from tui.pane import Pane
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
    return (int(request), request) if request.isdigit() else (1 << 62, request)


class QueuesView(Pane):
    """The queues of the frame. Guarantees: every request of ``StepOutput.queues`` appears once,
    under its queue; counts name requests and sequences apart."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("scheduler: requests (sequences)", id=id)

    def draw(self, frame: Frame, width: int) -> RenderableType:
        step = frame.step
        state = step.state
        free = len(state.device_free)
        by_request: dict[str, list[Stream]] = {}
        for stream in frame.streams:
            if stream.status != "finished":
                by_request.setdefault(stream.request_id, []).append(stream)
        lines = [Text(f"{free} of {len(state.device_refcounts)} device blocks free", style="dim")]
        swapped_first = bool(step.queues.get("swapped"))
        preempted = any(isinstance(event, Preempt) for event in step.events)
        for queue in QUEUES:
            requests = step.queues.get(queue, ())
            members = sum(len(by_request.get(r, [])) for r in requests)
            line = Text(f"{queue:<8}", style="bold")
            line.append(f"{len(requests)} req ({members} seq) ", style="dim")
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
                    line.append(": behind swapped (head-of-line)", style="yellow")
                elif preempted:
                    line.append(": none move in a step that preempts", style="yellow")
                elif stuck is not None:  # the scheduler takes each queue in order
                    line.append(f": behind r{stuck} (head-of-line)", style="yellow")
                elif wanted > left:
                    line.append(f" > {left} free", style="yellow")
                    stuck = request
                else:
                    line.append(f" ≤ {left} free: goes next step", style="green")
                    left -= wanted
            lines.append(line)
        for event in step.events:
            if isinstance(event, Preempt):
                running = sorted(frame.previous.queues.get("running", ()), key=arrival_key)
                order = " < ".join(f"r{r}" for r in running)
                lines.append(
                    Text(
                        f"victim r{event.request_id}: the latest arrival among the running "
                        f"({order}); {event.mode} keeps the older ones going",
                        style="bright_red",
                    )
                )
        return Text("\n").join(lines)
