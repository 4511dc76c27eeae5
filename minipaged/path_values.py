"""A path as the Python API takes it: a ``str`` or a ``pathlib.Path`` (any ``os.PathLike`` of
text). Anything else named as a file (a number, None, bytes, a list) is refused with one
message that says what was given and what to pass, where ``Path()`` or ``open()`` would say
only "expected str, bytes or os.PathLike object, not int". This module imports nothing of the
project: the readers (``input_file``) and the writer (``atomic_write``) both use it."""

from __future__ import annotations

import os
from pathlib import Path


def as_path(value: object, what: str) -> Path:
    """``value`` as a ``Path``; a ``TypeError`` naming ``what`` (``"the trace to read"``) and
    the way out when it is no path."""
    if isinstance(value, str) or (
        isinstance(value, os.PathLike) and isinstance(os.fspath(value), str)
    ):
        return Path(value)
    raise TypeError(
        f"{what} is named by its path, a str or a pathlib.Path, got {type(value).__name__} "
        f"{value!r:.60}: pass the file's path"
    )
