"""``bench tui``: what one step of the step-through visualizer costs with 8 sequences.

A step in the TUI is an engine step (scheduling, the model's forward pass, sampling, the
block manager's events and snapshot) and a redraw of every pane for the new frame. The engine
step is timed on its own; the redraw is timed by moving the app, running headless, onto each
recorded step and waiting until Textual has drawn it. Budget: 100 ms a step, so playing at
8 steps/s keeps up. Both times are medians over the run, on this machine, under its load.
"""

from __future__ import annotations

import asyncio
import time

from minipaged.study.bench import Options, plot
from minipaged.study.report import Column, Report
from minipaged.trace import Trace

BUDGET_MS = 100.0
ROUNDS = 20  # of handling messages and painting, at most, before a move counts as drawn
SIZES = ((120, 40), (160, 50))

COLUMNS = [
    Column("size", "terminal", "{}"),
    Column("sequences", "sequences", "{:,}"),
    Column("steps", "steps", "{:,}"),
    Column("engine_ms", "engine step (ms)", "{:,.1f}"),
    Column("render_ms", "redraw (ms)", "{:,.1f}"),
    Column("idle_ms", "of which harness (ms)", "{:,.1f}"),
    Column("total_ms", "TUI step (ms)", "{:,.1f}"),
    Column("within", f"≤ {BUDGET_MS:.0f} ms", "{}"),
]


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def engine_steps(model: str, max_tokens: int):
    """Eight sequences (two prompts, n = 4 each) on a pool that makes them fork and copy:
    every step's output and how long each ``engine.step()`` took (ms)."""
    from tui.engine_config import TUI_CONFIG
    from tui.scenarios import Request, Scenario, sampled

    scenario = Scenario(
        "bench",
        "bench: 8 sequences",
        "",
        (
            Request("It is a truth universally acknowledged", sampled(max_tokens, seed=1, n=4)),
            Request("Emma Woodhouse, handsome, clever", sampled(max_tokens, seed=2, n=4)),
        ),
        TUI_CONFIG.replace(num_gpu_blocks=128),
    )
    engine = scenario.build(model)
    steps, times = [], []
    while engine.has_unfinished():
        start = time.perf_counter()
        steps.append(engine.step())
        times.append((time.perf_counter() - start) * 1e3)
    return engine, steps, times


async def drawn(pilot) -> None:
    """Return once the app has handled every message a move caused and painted the result.

    Textual paints on a timer and Pilot's ``pause`` waits for the process to look idle (20 ms
    slices of sleep), which would time the harness, not the app. Here each round waits only
    for the messages already queued to be handled, then paints at once what they left to
    paint, until a round finds nothing to do. (It reads Textual's own flags for pending
    layout and repaint: private names, checked against the pinned Textual.)"""
    app = pilot.app
    for _ in range(ROUNDS):
        await pilot._wait_for_screen()
        screen = app.screen
        if not (
            screen._layout_required
            or screen._repaint_required
            or screen._scroll_required
            or screen._dirty_widgets
        ):
            return
        screen._on_timer_update()
    raise RuntimeError(f"the app was still painting after {ROUNDS} rounds")


async def redraw_times(
    trace: Trace, tokenizer, size: tuple[int, int]
) -> tuple[list[float], list[float]]:
    """Milliseconds from moving the cursor to a step until every pane shows it, per step;
    and, interleaved with them, the same wait when nothing changed (what the harness itself
    costs: it is included in the first, not subtracted)."""
    from tui.app import PagedApp

    app = PagedApp(trace=trace, tokenizer=tokenizer)
    times, idle = [], []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for index in range(1, len(trace.steps) + 1):
            start = time.perf_counter()
            app.seek_step(index)
            await drawn(pilot)
            times.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            await drawn(pilot)
            idle.append((time.perf_counter() - start) * 1e3)
    return times, idle


def run(options: Options) -> Report:
    engine, steps, engine_ms = engine_steps(options.model, 8 if options.quick else 32)
    trace = Trace({"model": options.model}, steps)
    rows = []
    for size in SIZES[:1] if options.quick else SIZES:
        render_ms, idle_ms = asyncio.run(redraw_times(trace, engine.tokenizer, size))
        redraw = median(render_ms)
        total = median(engine_ms) + redraw
        rows.append(
            {
                "size": f"{size[0]}×{size[1]}",
                "sequences": 8,
                "steps": len(steps),
                "engine_ms": median(engine_ms),
                "render_ms": redraw,
                "idle_ms": median(idle_ms),
                "total_ms": total,
                "within": "yes" if total <= BUDGET_MS else "NO",
            }
        )
    notes = [
        f"Model {options.model} on CPU; two prompts with n = 4 samples each (8 sequences), "
        "B = 4, 128 device blocks. Medians over every step of the run.",
        "Redraw: the app headless (Textual's run_test), from seek_step until it has handled "
        "every message the move caused and painted every pane for the new step; raw, with "
        "the harness's own wait included (the idle column: the same wait with nothing to "
        "draw, measured interleaved with the redraws).",
        "Timed on a shared machine: compare the two columns with each other, not with "
        "another machine.",
    ]
    report = Report(
        "tui", f"TUI step time with 8 sequences (budget {BUDGET_MS:.0f} ms)", COLUMNS, rows, notes
    )
    report.plots.append(_plot(rows, options))
    return report


def _plot(rows: list[dict], options: Options):
    """Stacked bars: engine step and redraw per terminal size, against the budget."""
    fig, (axis,) = plot.figure()
    sizes = [row["size"] for row in rows]
    engine = [row["engine_ms"] for row in rows]
    axis.bar(sizes, engine, label="engine step")
    axis.bar(sizes, [row["render_ms"] for row in rows], bottom=engine, label="redraw")
    axis.axhline(BUDGET_MS, color="black", linestyle="--", label=f"budget {BUDGET_MS:.0f} ms")
    axis.set_ylabel("ms per step (median)")
    axis.legend(fontsize="small")
    return plot.save(fig, options.out, "tui", options.force)
