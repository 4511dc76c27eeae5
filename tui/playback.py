"""Playing a run: the cursor steps forward by itself, at one of ``SPEEDS``, until the end of
the run or a pause (``space``, ``+`` / ``-``: the key map, ``tui.keymap``)."""

from __future__ import annotations

from textual.timer import Timer

from tui.navigator import Navigator

SPEEDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # steps per second while playing


class PlaybackKeys:
    """The play, pause and speed actions of ``PagedApp`` (a mixin: it moves the app's
    ``navigator`` with ``apply`` and redraws the status line with ``show_status``).
    Guarantees: ``player`` is set exactly while playing, ticking at ``SPEEDS[speed]`` steps a
    second; a tick while the model thread is still computing the next step does nothing, so a
    slow model makes playing wait rather than pile up steps to skip over."""

    navigator: Navigator | None
    player: Timer | None
    speed: int

    def action_play(self) -> None:
        if self.player is not None:
            self.pause()
        else:
            self.player = self.set_interval(1 / SPEEDS[self.speed], self.play_tick)
            self.show_status()

    def play_tick(self) -> None:
        # A slow model makes playing wait for it, rather than pile up steps to skip over.
        if self.navigator is not None and self.navigator.waiting is None:
            self.apply(self.navigator.forward())

    def pause(self) -> None:
        if self.player is not None:
            self.player.stop()
            self.player = None
        self.show_status()

    def action_faster(self) -> None:
        self.set_speed(min(self.speed + 1, len(SPEEDS) - 1))

    def action_slower(self) -> None:
        self.set_speed(max(self.speed - 1, 0))

    def set_speed(self, speed: int) -> None:
        self.speed = speed
        if self.player is not None:
            self.pause()
            self.action_play()
        self.show_status()
