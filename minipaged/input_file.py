"""A file the user names for reading (a trace to replay, say), checked before it is opened.

Each way such a path can be wrong gets its own one-line refusal that names the path and the
way out, instead of an ``OSError`` from deep inside a reader, a wrong "does not exist" for a
folder, or a read that waits forever on a FIFO. Writing has its own module
(``minipaged.atomic_write``); this one only reads.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from minipaged.path_values import as_path

LOOP = "a symbolic link that leads round in a loop"


def broken_link(path: Path) -> str:
    """What the symbolic link ``path``, which leads to no file, is in words: ``LOOP``, or a
    link to nothing."""
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return LOOP
    return "a symbolic link to nothing"


def check_input_file(path: str | os.PathLike, fix: str) -> Path:
    """``path`` as a ``Path``, refused unless it names a regular file this process may read:
    ``FileNotFoundError`` (missing, or a symbolic link to nothing), ``IsADirectoryError``,
    ``PermissionError``, or ``ValueError`` (a NUL byte, a FIFO, socket or device, symbolic
    links that lead round in a loop). ``fix``
    (``"record one with ..."``) ends the refusal of a missing file; a ``TypeError`` for what
    is no path (``path_values.as_path``)."""
    path = as_path(path, "a file to read")
    if "\x00" in str(path):
        raise ValueError(f"{str(path)!r} is no path: it holds a NUL byte; name the file")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise FileNotFoundError(
                f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; "
                "name the file itself"
            ) from None
        raise FileNotFoundError(f"{path} does not exist: {fix}") from None
    except NotADirectoryError:
        raise FileNotFoundError(
            f"{path} does not exist: a part of it before the last is a file, not a folder"
        ) from None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise ValueError(  # "Too many levels of symbolic links; check its permissions" misled
            f"{path} is {LOOP}, back to itself through links, so no file is there: name the "
            "file itself"
        ) from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path} is a folder, not a file: name a file inside it")
    if not stat.S_ISREG(mode):
        raise ValueError(
            f"{path} is not a regular file (a FIFO, socket or device, which could block or "
            "never end): name a file"
        )
    if not os.access(path, os.R_OK):
        raise PermissionError(f"{path} cannot be read: check its permissions")
    return path
