"""The step-through visualizer: a run of the paged engine, one step at a time, forward and back.

The model runs in a thread worker that computes the whole run ahead of the cursor from the
start (``tui.feed``); the UI only reads the recorded history (``tui.timeline``), so stepping
back is time travel, never recomputation. A recorded trace replays through the same path
without any model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical
from textual.filter import LineFilter
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import Worker, get_current_worker

from minipaged.grader.student_run import RecordedRun
from minipaged.tokenizer import Tokenizer
from minipaged.trace import Trace
from tui import ansi_themes, keymap, palette
from tui.attention_keys import AttentionKeys
from tui.attention_view import AttentionView
from tui.event_log import EventLog
from tui.feed import EVERYTHING, RunEnded, RunStarted, StepFeed, StepsReady, produce
from tui.gauges import Gauges, KVMemory
from tui.go_to_step import GoToStep
from tui.help import HelpScreen
from tui.inspector import Inspector
from tui.invariants_view import InvariantsView
from tui.key_bar import KeyBar
from tui.navigator import Move, Navigator
from tui.pane import Pane, Selection
from tui.picker import ScenarioPicker
from tui.playback import SPEEDS, PlaybackKeys
from tui.pool_view import PoolView
from tui.queues_view import QueuesView
from tui.scenarios import DEFAULT_SCENARIO, SCENARIOS, Scenario
from tui.selecting import SelectionKeys
from tui.status import StatusLine, too_small
from tui.strip import TimelineStrip
from tui.student_error import StudentError, headline
from tui.tables_view import TablesView
from tui.timeline import Timeline, opening_step_of_trace
from tui.token_streams import TokenStreams, TokenText

COMPACT_BELOW = 32  # rows: fewer than this and the panes lose their side borders


class PagedApp(PlaybackKeys, AttentionKeys, SelectionKeys, App[None]):
    """Guarantees: the panes always show one frame, the cursor's; moving the cursor never runs
    the model; widgets change only in the UI thread."""

    TITLE = "minipaged"
    BINDINGS = keymap.bindings()
    CSS = """
    #main { height: 1fr; }
    #left { width: 45%; }
    #right { width: 1fr; }
    #tables { max-height: 40%; }
    #invariants { height: auto; }
    #too-small { display: none; padding: 1 2; }
    Screen.-too-small #too-small { display: block; }
    Screen.-too-small #main, Screen.-too-small #status, Screen.-too-small KeyBar,
    Screen.-too-small #strip { display: none; }
    Screen.-compact Pane, Screen.-compact EventLog {
        border: none; border-top: round $primary 60%; padding: 0 1 0 0;
    }
    /* Short terminals: panes whose rows name themselves give their title row to the queues. */
    Screen.-compact InvariantsView, Screen.-compact Gauges { border: none; }
    Screen.-projection Pane, Screen.-projection EventLog { padding: 0 2; }
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        model: str = "tiny",
        trace: Trace | None = None,
        tokenizer: Tokenizer | None = None,
        projection: bool = False,
        stopped: RecordedRun | None = None,
    ) -> None:
        """Run ``scenario`` (default: ``DEFAULT_SCENARIO``) on ``model``, or replay ``trace``
        (or a student's run, ``stopped``), decoding tokens with ``tokenizer`` if there is one."""
        super().__init__()
        self.scenarios = dict(SCENARIOS)
        if scenario is not None:
            self.scenarios.setdefault(scenario.name, scenario)
        self.scenario = scenario
        self.model = model
        self.trace = trace
        self.trace_tokenizer = tokenizer
        self.timeline: Timeline | None = None
        self.navigator: Navigator | None = None
        self.feed: StepFeed | None = None
        self.worker: Worker | None = None
        self.selection = Selection()
        self.speed = SPEEDS.index(2.0)
        self.player: Timer | None = None
        self.error: str | None = None  # why the run could not start
        self.notice = ""
        self.projection = projection
        self.ansi_theme_dark, self.ansi_theme_light = ansi_themes.DARK, ansi_themes.PROJECTION
        self.undimmed = ansi_themes.Undimmed()
        self.stopped = stopped if stopped is not None and stopped.error else None

    # -- layout ----------------------------------------------------------------------------

    @property
    def base(self) -> Screen:
        """The screen with the panes, even while a dialog is open over it."""
        return self.screen_stack[0]

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield PoolView(id="pools")
                yield Gauges(id="gauges")
                yield InvariantsView(id="invariants")  # one line while all hold
                yield QueuesView(id="queues")
            with Vertical(id="right"):
                yield TablesView(id="tables")
                yield Inspector(id="inspector")
                yield TokenStreams(id="tokens")
                yield EventLog(id="events")
                yield AttentionView(id="attention")  # in their place while it is open
        yield TimelineStrip(id="strip")
        yield Static(id="too-small")
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        self.fit(self.size.width, self.size.height)
        self.register_theme(ansi_themes.PROJECTION_THEME)
        self.set_projection(self.projection)
        if self.trace is not None:
            self.replay(self.trace)
        else:
            self.start(self.scenario or self.scenarios[DEFAULT_SCENARIO])

    def on_resize(self, event: events.Resize) -> None:
        self.fit(event.size.width, event.size.height)

    def fit(self, width: int, height: int) -> None:
        """Below 80×24 say so instead of drawing the panes; below 32 rows drop side borders."""
        message = too_small(width, height)
        self.base.set_class(bool(message), "-too-small")
        self.base.set_class(height < COMPACT_BELOW, "-compact")
        self.base.query_one("#too-small", Static).update(message)

    # -- runs ------------------------------------------------------------------------------

    def start(self, scenario: Scenario) -> None:
        """Run ``scenario`` from step 0 in a fresh worker (the previous one is cancelled)."""
        self.pause()
        self.scenario, self.trace = scenario, None
        self.timeline = self.navigator = None
        self.feed = StepFeed()
        self.error, self.selection = None, Selection()
        self.notice = "loading the model…"
        for pane in self.base.query(Pane):
            pane.frame = None
            pane.refresh(layout=True)
        self.base.query_one(EventLog).clear()
        self.base.query_one(TimelineStrip).timeline = None
        self.worker = self.run_model(scenario, self.feed)
        self.show_status()

    def replay(self, trace: Trace) -> None:
        """Show a recorded trace (no model is loaded), and over it what stopped a student's run."""
        if self.stopped is not None:
            self.push_screen(StudentError(self.stopped))
        if not trace.steps:
            self.error = None if self.stopped else "the trace holds no steps; record some"
            self.notice = self.error or headline(self.stopped)
            self.show_status()
            return
        timeline = Timeline(opening_step_of_trace(trace.steps[0]))
        timeline.record(trace.steps)
        timeline.finished = True
        engine = trace.header.get("engine")
        kv = engine.get("kv_cache") if isinstance(engine, dict) else None  # older traces: none
        self.begin(timeline, TokenText(self.trace_tokenizer), kv)
        if trace.error:  # a damaged line ended the file: show what came before it, and say so
            self.notice = f"the trace ends early: {trace.error}"
            self.show_status()

    def begin(self, timeline: Timeline, words: TokenText, kv: object) -> None:
        """Show ``timeline``; ``kv`` is the run's ``KVCache.summary()``, if known."""
        self.timeline = timeline
        self.base.query_one(Gauges).kv = KVMemory.of_summary(kv)
        self.navigator = Navigator(timeline, self.feed)
        self.base.query_one(TokenStreams).words = words
        self.base.query_one(Inspector).words = words
        self.base.query_one(TimelineStrip).timeline = timeline
        log = self.base.query_one(EventLog)
        log.timeline = timeline
        log.intro = self.scenario.story if self.trace is None and self.scenario else ""
        self.notice = ""
        self.refresh_panes()

    @work(thread=True, exclusive=True, group="model")
    def run_model(self, scenario: Scenario, feed: StepFeed) -> None:
        """The model thread (``tui.feed.produce``); a restart, another scenario or
        quitting cancels it, and it stops within 0.1 s."""
        worker = get_current_worker()
        produce(
            lambda: scenario.build(self.model),
            feed,
            self.post_message,
            lambda: worker.is_cancelled,
        )

    def has_panes(self) -> bool:
        """False while the app quits: the model thread's late messages must then be dropped."""
        return bool(self.screen_stack) and bool(self.base.query(TimelineStrip))

    def on_run_started(self, message: RunStarted) -> None:
        if message.feed is self.feed and self.has_panes():
            self.begin(Timeline(message.opening), TokenText(message.tokenizer), message.kv)

    def on_steps_ready(self, message: StepsReady) -> None:
        if message.feed is self.feed and self.timeline is not None and self.has_panes():
            self.timeline.record(self.feed.drain())
            self.base.query_one(TimelineStrip).refresh()
            self.apply(self.navigator.recorded())

    def on_run_ended(self, message: RunEnded) -> None:
        if message.feed is not self.feed or not self.has_panes():  # stale, or quitting
            return
        if message.error is not None:
            title = self.scenario.title if self.scenario else "the scenario"
            self.error = self.notice = f"cannot run {title!r}: {message.error}"
            if message.loading:  # nothing to show: end with the message and a failure status
                self.exit(return_code=1)
                return
            self.show_status()
        elif self.timeline is not None:
            self.timeline.record(self.feed.drain())
            self.timeline.finished = True
            self.base.query_one(TimelineStrip).refresh()
            self.apply(self.navigator.recorded())

    # -- the cursor ------------------------------------------------------------------------

    def record_everything(self) -> None:
        """Ask the model thread for the whole run, not just the lookahead (``timeline.finished``
        is set when it is done): a screenshot then shows the run's final step count."""
        if self.feed is not None:
            self.feed.want(EVERYTHING)

    def seek_step(self, index: int) -> None:
        """Move to step ``index`` once it is recorded (the last step, if the run is shorter)."""
        if self.navigator is not None:
            self.apply(self.navigator.seek(index))

    def apply(self, move: Move) -> None:
        """Show what a navigator request did: redraw on a move; keep the notice otherwise."""
        if move.moved or move.notice:
            self.notice = move.notice
        if move.moved:
            self.refresh_panes()
        else:
            self.show_status()
        if move.at_end:
            self.pause()

    def refresh_panes(self) -> None:
        self.follow_walk()  # the attention view's block is the selection while it is open
        frame = self.timeline.frame()
        self.base.query_one(Inspector).set_class(self.selection != Selection(), "-active")
        for pane in self.base.query(Pane):
            pane.show(frame, self.selection)
        self.base.query_one(EventLog).show(frame, self.selection)
        self.base.query_one(TimelineStrip).refresh()
        self.show_status()

    def show_status(self) -> None:
        if self.trace is not None:
            header = self.trace.header
            title = header.get("scenario") or f"trace of {header.get('model', 'a model')}"
        else:
            title = self.scenario.title if self.scenario is not None else ""
        playing, speed = self.player is not None, SPEEDS[self.speed]
        status = (title, self.timeline, playing, speed, self.selection, self.notice)
        self.base.query_one(StatusLine).show(*status)

    # -- actions (the key map) -------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Keys belong to the open dialog while there is one; q still quits.
        return action == "quit" or not isinstance(self.screen, ModalScreen)

    def action_forward(self) -> None:
        if self.navigator is not None:
            self.apply(self.navigator.forward())

    def action_back(self) -> None:
        if self.navigator is not None:
            self.apply(self.navigator.back())

    def action_jump(self, name: str, direction: int = 1) -> None:
        if self.navigator is not None:
            self.apply(self.navigator.jump(name, direction))

    def action_go_to_step(self) -> None:
        if self.navigator is not None:
            self.pause()
            last, finished = self.timeline.recorded, self.timeline.finished
            self.push_screen(GoToStep(last, finished), self.went_to)

    def went_to(self, step: int | None) -> None:
        if step is not None:
            self.seek_step(step)

    def action_restart(self) -> None:
        if self.trace is not None:
            self.pause()
            self.seek_step(0)
        elif self.scenario is not None:
            self.start(self.scenario)

    def action_scenarios(self) -> None:
        current = self.scenario.name if self.scenario is not None else None
        self.push_screen(ScenarioPicker(self.scenarios, current), self.picked)

    def picked(self, name: str | None) -> None:
        if name is not None:
            self.start(self.scenarios[name])

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_expand(self) -> None:
        self.base.query_one(EventLog).toggle_expanded()

    def action_scroll_log(self, pages: int) -> None:
        log = self.base.query_one(EventLog)
        log.scroll_to(y=log.scroll_y + pages * max(log.size.height - 3, 1), animate=False)

    def action_projection(self) -> None:
        self.set_projection(not self.projection)

    def get_line_filters(self) -> Sequence[LineFilter]:
        filters = super().get_line_filters()
        return [self.undimmed, *filters] if self.projection else filters

    def set_projection(self, on: bool) -> None:
        """Projection mode: larger cells and a light, high-contrast theme for a classroom
        (``tui.ansi_themes``: no colour or dimmed label below WCAG AA on its greys)."""
        self.projection = on
        self.screen_stack[0].set_class(on, "-projection")
        self.theme = ansi_themes.PROJECTION_THEME.name if on else "textual-dark"
        if self.timeline is not None:
            self.refresh_panes()

    def action_select_block(self, block: int) -> None:
        self.select(Selection(block=block))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from palette.commands(self)
