"""The environment variables that change how minipaged's kernels run, checked before they take
effect: Numba reads its own when it is first imported, and a bad value is otherwise ignored in
silence ("abc" threads), told in Numba's words with no variable named, or fatal: a thread pool
of 99,999 threads ended the process with a segmentation fault at the first kernel, losing the
model and every request in flight.

``check_environment`` refuses such a value in one line naming the variable, the value and the
way out. The command line calls it before any work, and ``backend.kernels_for`` before numba
is first imported, so a notebook's ``LLM(backend="numba-cpu")`` is refused as well. This module
imports nothing of the project but the typed-integer rule, and no torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from minipaged.typed_numbers import integer_between

MAX_THREADS = 1024
"""The most threads a pool may be asked for: past any machine's cores that minipaged runs on,
and far below where creating them fails (32,768 here: libgomp's "Thread creation failed")."""

SWITCHES = ("NUMBA_ENABLE_CUDASIM", "NUMBA_DISABLE_JIT")
"""Numba's on/off variables: ``1`` on, ``0`` (or unset) off. Numba reads any other value as
off, with only a warning."""

THREAD_COUNTS = ("NUMBA_NUM_THREADS",)
"""Thread-pool sizes Numba reads once, at import, for every ``parallel=True`` kernel."""

THREADING_LAYERS = ("default", "safe", "forksafe", "threadsafe", "tbb", "omp", "workqueue")
"""What ``NUMBA_THREADING_LAYER`` may name (Numba's own list)."""


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a value of a variable above that Numba would ignore, misread or crash on."""
    environ = os.environ if environ is None else environ
    for name in SWITCHES:
        value = environ.get(name)
        if value is not None and value.strip() not in ("", "0", "1"):
            raise ValueError(
                f"{name} must be 1 (on) or 0 (off), got {value!r:.40}; set it to 1 or 0, or "
                "unset it"
            )
    for name in THREAD_COUNTS:
        value = environ.get(name)
        if value is None or not value.strip():
            continue
        try:
            integer_between(value.strip(), 1, MAX_THREADS)
        except ValueError as error:
            raise ValueError(
                f"{name}: {error}; it is the size of Numba's thread pool: set it to the "
                f"number of cores to use (this machine has {os.cpu_count()}), or unset it"
            ) from None
    layer = environ.get("NUMBA_THREADING_LAYER")
    if layer is not None and layer.strip() and layer.strip() not in THREADING_LAYERS:
        raise ValueError(
            f"NUMBA_THREADING_LAYER must be one of {', '.join(THREADING_LAYERS)}, got "
            f"{layer!r:.40}; unset it to let Numba choose"
        )
