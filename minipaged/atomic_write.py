"""Writing a file only where the user said, and only once what goes in it is known good.

Every file the project writes (a trace, a grading report and gradebook, an exercise's starter
files, a benchmark's page and plots, a TUI screenshot, a checkpoint, its tokenizer and model
card) is written one way: the content goes to a
temporary file in the target's own folder, which is renamed over the target once complete. A
command that fails or is refused before then leaves the old file as it was; no reader ever
sees half a file; and a symbolic link at the target is replaced, never followed, so nothing is
written outside the folder named. Only a regular file (or a link to one, or nothing) is ever
replaced: a folder, a device (``/dev/null``, ``/dev/stdout``'s terminal), a FIFO or a socket
at the target is refused (``not_a_file``), since putting a file in its place would take it
from whatever else uses it (as root, ``/dev/null`` itself) or leave a reader of the FIFO
waiting for ever.

Only a file of the kind the writer writes is replaced (``minipaged.replaceable``): each writer
of the project names it (``replaces``; ``tests/test_existing_output_api_corpus.py`` finds every
writer and checks that it does), and a file of another kind standing at the name is refused
before anything is written, unless ``force``. Without ``replaces`` the mechanism alone
replaces whatever file stands there, as it always did.

One writer per file at a time: a ``Replacement`` holds an exclusive ``flock`` on its file from
the moment it is made until it is committed or dropped, and a new one for a path that another
live writer holds (its temporary file, or the file it has published and is still writing: a
trace) is refused before anything is written (``other_writer``). A file that is published and
written on (``publish``) is checked to be still in place at each write and at ``commit``: one
renamed away or removed meanwhile is an error, never a success reported for a file nobody can
read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from minipaged.path_values import as_path
from minipaged.replaceable import ANY_FILE, OutputKind, check_replaceable


def check_can_make_files(folder: Path) -> None:
    """Raise ``OSError`` unless a file can be made in ``folder`` (read-only, or ``/proc``'s,
    cannot), by making one and removing it at once: the file system answers as it will for
    the write itself, where ``os.access`` says yes to root everywhere."""
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".minipaged-probe.")
    os.close(fd)
    os.unlink(probe)


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (a named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(path: str | Path) -> str:
    """What stands at ``path`` when it is something a written file must not replace (a
    symbolic link judged by what it points to): ``"a folder"``, ``"a character device"``,
    ``"a block device"``, ``"a FIFO (a named pipe)"``, ``"a socket"``, or a link to a
    process's open file (``/dev/stdout``, whatever it leads to: with the output redirected to
    a file, it leads to that file, and replacing the link would take ``/dev/stdout`` from
    every process), or a process's open file itself (``/dev/fd/1``, ``/proc/self/fd/1``:
    ``open_stream``); ``""`` for a regular file, a dangling link or nothing. The one rule for
    every output path, where it is typed (``output_paths.output_file``) and where it is
    written (``Replacement``)."""
    stream = open_stream(path)
    if stream:  # whether or not the descriptor is open, and whatever it leads to
        return stream
    try:
        mode = os.stat(path).st_mode  # never opens it: a FIFO does not block here
    except (OSError, ValueError):  # nothing there, or a name no file can have
        return ""
    with contextlib.suppress(OSError, ValueError):  # not a link
        link = os.readlink(path)
        if link.startswith("/proc/"):
            stream = open_stream(link)
            return f"a link to a process's open file ({link}{': ' if stream else ''}{stream})"
    return next((kind for test, kind in _KINDS if test(mode)), "")


_DESCRIPTOR = re.compile(r"/proc/(?P<process>self|thread-self|\d+)(/task/\d+)?/fd/(?P<fd>\d+)")
_STREAMS = {0: "standard input", 1: "standard output", 2: "standard error"}


def open_stream(path: str | Path) -> str:
    """``path`` in a user's words when it names a file descriptor of a process (``/dev/fd/1``,
    ``/proc/self/fd/2``, ``/proc/1234/fd/5``: its folder is ``/proc/PID/fd``, however named),
    which a command cannot replace with a file it wrote: ``"this command's standard output
    (file descriptor 1)"``, ``"file descriptor 5 of process 1234"``; else ``""``."""
    try:
        folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    except (OSError, ValueError):
        return ""
    named = _DESCRIPTOR.fullmatch(os.path.join(folder, os.path.basename(path)))
    if named is None:
        return ""
    fd, process = int(named["fd"]), named["process"]  # `/dev/stdout`: a link to one
    if process in ("self", "thread-self", str(os.getpid())):
        return f"this command's {_STREAMS.get(fd, 'open file')} (file descriptor {fd})"
    return f"file descriptor {fd} of process {process}"


def typed_as_folder(path: str | Path) -> bool:
    """Whether ``path``, as typed, ends in a separator or a ``.`` or ``..`` part (``runs/``,
    ``runs/.``), which names a folder: ``pathlib`` drops the first two, so a file would be
    written at ``runs`` where the user named a folder. A ``Path`` has lost them already: the
    rule is asked of the text where it is typed (``output_paths.output_file``) or given."""
    text = os.fspath(path)
    ends = (os.sep, os.altsep) if os.altsep else (os.sep,)
    return text.endswith(ends) or os.path.basename(text) in (".", "..")


class OutputBusy(OSError):
    """Another run is writing the file a new ``Replacement`` would replace."""


class OutputReplaced(OSError):
    """The file a ``Replacement`` published was replaced or removed before it was finished."""


def other_writer(path: str | Path, own: int | None = None) -> str:
    """Why ``path`` is not free to write, in the user's words, when another live writer holds it
    (its lock: the file it has published, or a temporary file of its beside ``path``), or
    ``""``. ``own``: a descriptor of the asking writer's own temporary file, not counted. The
    one rule, asked where an output is typed (``output_paths.output_file``) and when its
    ``Replacement`` is made."""
    path = Path(path)
    mine = os.fstat(own) if own is not None else None
    with contextlib.suppress(OSError):  # an unreadable folder: the write itself will say so
        temporaries = [
            entry for entry in path.parent.iterdir() if entry.name.startswith(f".{path.name}.")
        ]
        for candidate in (path, *temporaries):
            if _locked(candidate, mine):
                return (
                    "another run is writing it now (two runs writing one file would each "
                    "replace the other's): wait for that run to end, or name another file"
                )
    return ""


def _locked(path: Path, mine: os.stat_result | None) -> bool:
    """Whether a regular file at ``path`` (no link followed), other than ``mine``, is locked by
    a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # nothing there, a link, a file we may not read
        return False
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or (
            mine is not None and os.path.samestat(status, mine)
        ):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False
    finally:
        os.close(fd)  # and with it the shared lock, if it was taken


class Replacement:
    """A temporary file beside ``path`` (``file``), to ``commit`` over it or ``discard``; the
    only writer of ``path`` while it lives (``other_writer``). A file standing at ``path`` is
    replaced only when it is of the kind ``replaces`` (``replaceable.check_replaceable``: a
    ``ValueError``, and nothing left made), or ``force``; by default, any file is."""

    def __init__(
        self,
        path: str | Path,
        mode: str = "w",
        *,
        replaces: OutputKind = ANY_FILE,
        force: bool = False,
    ) -> None:
        as_path(path, "a file to write")  # a TypeError saying what to pass, for no path
        if isinstance(path, str) and typed_as_folder(path):
            ending = os.path.basename(path) or path[-1]
            raise IsADirectoryError(
                f"cannot write {path}: it names a folder (it ends in {ending!r}); name a file"
            )
        self.path = Path(path)
        folder = self.path.parent
        if not folder.is_dir():
            raise FileNotFoundError(
                f"cannot write {self.path}: its folder {folder} does not exist; create it first"
            )
        kind = not_a_file(self.path)
        if kind == "a folder":
            raise IsADirectoryError(f"cannot write {self.path}: it is a folder; name a file")
        if kind:
            raise OSError(f"cannot write {self.path}: it is {kind}, not a file; name a file")
        self.was_link = self.path.is_symlink()
        try:
            fd, self.temporary = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.")
        except OSError as error:  # named by the path asked for, not the temporary one
            raise OSError(error.errno, error.strerror, str(self.path)) from None
        _UNFINISHED.add(self)  # at once: a signal ending the command now removes it too
        self.published = False
        with contextlib.suppress(OSError):  # a file system without locks: written unguarded
            fcntl.flock(fd, fcntl.LOCK_EX)  # a file of its own, so at once: held until closed
        try:  # whose the file is, asked of a file no other run is writing
            busy = other_writer(self.path, own=fd)
            if busy:
                raise OutputBusy(f"cannot write {self.path}: {busy}")
            check_replaceable(self.path, replaces, force)
        except BaseException:
            os.close(fd)
            os.unlink(self.temporary)
            _UNFINISHED.discard(self)
            raise
        encoding = None if "b" in mode else "utf-8"
        self.file: IO = os.fdopen(fd, mode, encoding=encoding)

    def publish(self) -> None:
        """Put the file in place of ``path`` now (a link there is replaced, not followed) and
        go on writing to it: what is written from here on is readable as it is written. Once
        published, each call checks that the file is still at ``path`` (``OutputReplaced``
        when not)."""
        if self.published:
            self._check_in_place()
            return
        self.file.flush()
        os.chmod(self.temporary, 0o666 & ~_umask())
        os.replace(self.temporary, self.path)
        self.published = True
        _UNFINISHED.discard(self)

    def _check_in_place(self) -> None:
        try:
            there = os.lstat(self.path)
        except OSError:
            there = None
        if there is None or not os.path.samestat(there, os.fstat(self.file.fileno())):
            what = "removed" if there is None else "replaced by another file"
            raise OutputReplaced(
                f"{self.path} was {what} while this run was writing it, so what it wrote is "
                f"not there: write it again, one run to a file (the file at {self.path} now "
                "is not this run's)"
            )

    def commit(self) -> None:
        """Put the finished file in place of ``path``; ``OutputReplaced`` if it was published
        and is no longer there."""
        try:
            self.publish()
        except BaseException:
            self.discard()
            raise
        self.file.close()

    def discard(self) -> None:
        """Drop what was written, unless it is published already."""
        self.file.close()
        _UNFINISHED.discard(self)
        if not self.published:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temporary)

    def note(self) -> str:
        """What became of a symbolic link that stood at ``path``, or ``""``."""
        if not self.was_link:
            return ""
        return (
            f"{self.path} was a symbolic link: replaced by the file, the file it pointed to "
            "left alone"
        )


_UNFINISHED: weakref.WeakSet[Replacement] = weakref.WeakSet()
"""Each ``Replacement`` whose temporary file is not yet put in place nor dropped."""


def drop_unfinished() -> None:
    """Remove every temporary file not yet put in place, for a process about to end without
    unwinding (the command line's Ctrl-C ends it with ``os._exit``): what stands at each
    name is left as it was, and no hidden ``.name.XXXX`` file stays behind."""
    for replacement in list(_UNFINISHED):
        with contextlib.suppress(OSError):
            os.unlink(replacement.temporary)
    _UNFINISHED.clear()


@contextlib.contextmanager
def replacing(
    path: str | Path, mode: str = "w", *, replaces: OutputKind = ANY_FILE, force: bool = False
) -> Iterator[Replacement]:
    """A ``Replacement`` for ``path``, committed when the block ends normally and discarded
    when it raises."""
    replacement = Replacement(path, mode, replaces=replaces, force=force)
    try:
        yield replacement
    except BaseException:
        replacement.discard()
        raise
    replacement.commit()


def write_text(
    path: str | Path, text: str, *, replaces: OutputKind = ANY_FILE, force: bool = False
) -> str:
    """Write ``text`` to ``path`` at once and whole, over a file of the kind ``replaces`` (or
    any, with ``force``); returns ``Replacement.note``."""
    with replacing(path, replaces=replaces, force=force) as replacement:
        replacement.file.write(text)
    return replacement.note()


def write_bytes(
    path: str | Path, data: bytes, *, replaces: OutputKind = ANY_FILE, force: bool = False
) -> str:
    """Write ``data`` to ``path`` at once and whole, over a file of the kind ``replaces`` (or
    any, with ``force``); returns ``Replacement.note``."""
    with replacing(path, "wb", replaces=replaces, force=force) as replacement:
        replacement.file.write(data)
    return replacement.note()


def create(path: str | Path, data: bytes) -> None:
    """Write a new file ``path``, never one that exists: ``FileExistsError`` if anything,
    even a dangling symbolic link, has that name. Complete or absent, never half written."""
    replacement = Replacement(path, "wb")  # replaces nothing: os.link refuses a taken name
    try:
        replacement.file.write(data)
        replacement.file.close()
        os.chmod(replacement.temporary, 0o666 & ~_umask())
        os.link(replacement.temporary, path)  # fails if the name is taken; follows no link
    finally:
        replacement.discard()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
