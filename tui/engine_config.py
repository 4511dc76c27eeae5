"""The engine settings the visualizer runs with: the library's ``EngineConfig`` with what the
TUI changes, and why. Every scenario starts from ``TUI_CONFIG``, and ``minipaged tui``'s engine
flags show its values as their defaults. Apart from ``tui.scenarios`` so that the command line
reads it without importing torch."""

from __future__ import annotations

from minipaged.config import EngineConfig

TUI_CONFIG = EngineConfig(
    block_size=4,  # not 16: a short prompt spans several blocks you can watch
    num_gpu_blocks=32,  # a pool that fits on the screen, and runs out soon enough to see
    num_cpu_blocks=0,  # no host pool unless a scenario swaps
    # The reference: a student can step into every line of it, its steps are well within the
    # TUI's budget, and unlike the CPU twins it never compiles (seconds, on a first run).
    backend="torch",
)
