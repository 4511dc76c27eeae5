"""Where a command writes: the one rule for a path typed for writing, checked where it is
typed, before any work, so that the work is never done and then not saved, and nothing that
was there is lost.

An output is refused when its folder is missing or no file can be made in it, when something
other than a file stands where it goes (a folder, ``/dev/null``, a FIFO:
``atomic_write.not_a_file``), when another run is writing it (``atomic_write.other_writer``),
and, once every path of the command is known (``check_outputs_apart``), when two outputs name
one file or an output names a file the command reads: the second write would replace the
first, or the input, without a word. And a file that stands at an output's name is replaced
only when it is of the kind the command writes, or ``--force`` says so (``check_replaceable``:
``minipaged.replaceable``'s rule, asked before any work).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from minipaged import atomic_write, replaceable
from minipaged.arguments import named_path
from minipaged.replaceable import HEAD_BYTES as HEAD_BYTES  # where it was first defined


def check_can_write_in(folder: Path, value: str) -> None:
    """Refuse ``value`` where it is typed when no file can be made in its ``folder``
    (``atomic_write.check_can_make_files``): the work would be done and then not saved."""
    try:
        atomic_write.check_can_make_files(folder)
    except OSError as error:
        why = f"no file can be made in {folder} ({error.strerror})"
        raise argparse.ArgumentTypeError(
            f"cannot write {value}: {why}; name a path you can write"
        ) from None


def output_file(what: str) -> Callable[[str], Path]:
    """An argparse type for a file the command will write (``named_path``'s rules): refused where
    it is typed, before any work, when its folder is missing, it names a folder, or no file can
    be made in its folder."""
    named = named_path(what)

    def parse(value: str) -> Path:
        file = named(value)
        if atomic_write.typed_as_folder(value):  # Path("runs/") is Path("runs"): a file there
            ending = os.path.basename(value) or value[-1]
            raise argparse.ArgumentTypeError(
                f"{value} names a folder (it ends in {ending!r}): name {what} inside it"
            )
        kind = atomic_write.not_a_file(file)
        if kind == "a folder":
            raise argparse.ArgumentTypeError(f"{value} is a folder: name {what} inside it")
        if kind:  # /dev/null, a FIFO: a file put in its place would take it from its users
            if "file descriptor" in kind:  # --json /dev/fd/1, to see it printed
                raise argparse.ArgumentTypeError(
                    f"{value} is {kind}, not a file: {what} can only go to a file (it is put "
                    "in place of the name given); name a file, and read it from there (cat FILE)"
                )
            raise argparse.ArgumentTypeError(
                f"{value} is {kind}, not a file: name {what} elsewhere"
            )
        if not file.parent.is_dir():
            missing = "is a file" if file.parent.exists() else "does not exist; create it first"
            raise argparse.ArgumentTypeError(
                f"cannot write {value}: its folder {file.parent} {missing}"
            )
        check_can_write_in(file.parent, value)
        busy = atomic_write.other_writer(file)
        if busy:
            raise argparse.ArgumentTypeError(f"cannot write {value}: {busy}")
        return file

    parse.__name__ = "output_file"
    return parse


def output_folder(what: str) -> Callable[[str], Path]:
    """An argparse type for a folder the command will write into, made when missing
    (``named_path``'s rules): refused where it is typed, before any work, when a file is in its
    place or on its way, or nothing can be made in the nearest folder that exists on its way."""
    named = named_path(what)

    def parse(value: str) -> Path:
        folder = named(value)
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not existing.is_dir():
            where = value if existing == folder else f"{existing}, on the way to {value},"
            kind = atomic_write.not_a_file(existing) or "a file"
            raise argparse.ArgumentTypeError(f"{where} is {kind}: name {what}, or a new one")
        check_can_write_in(existing, value)
        return folder

    parse.__name__ = "output_folder"
    return parse


def check_outputs_apart(
    outputs: Iterable[tuple[str, Path | None]], inputs: Iterable[tuple[str, Path]] = ()
) -> None:
    """Refuse, before any work, two ``outputs`` that name one file, or an output that names a
    file of ``inputs`` (each ``(what it is, path)``: ``("--json", Path("r.json"))``,
    ``("code that is graded", Path("ex01/memory.py"))``; an output of None is not written).
    An output replaces what stands at its name and follows no link there (``atomic_write``),
    so it is compared by its folder's real path and its own name; an input by both where it
    is named and where its links lead. Raises ``ValueError`` naming both and the fix."""
    written: dict[str, str] = {}
    for what, path in outputs:
        if path is None:
            continue
        where = os.path.join(os.path.realpath(path.parent), path.name)
        if where in written:
            raise ValueError(
                f"{what} {path} is the file {written[where]} writes too: the second would "
                "replace the first; give each its own file"
            )
        written[where] = f"{what} {path}"
    for what, path in inputs:
        read = {os.path.join(os.path.realpath(path.parent), path.name), os.path.realpath(path)}
        for where, output in written.items():
            if where in read:
                raise ValueError(
                    f"{output} would replace {path}, {what}: name another file to write"
                )


def add_force_flag(parser: argparse.ArgumentParser, what: str) -> argparse.Action:
    """The ``--force`` flag of a command whose outputs ``check_replaceable`` guards."""
    return parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace a file where {what} goes even when it is not one minipaged wrote",
    )


def check_replaceable(
    named: str, path: Path | None, kind: str, ours: Callable[[bytes], bool], force: bool
) -> None:
    """``replaceable.check_replaceable`` for an output typed as ``named`` (``"--json"``,
    ``"the trace"``), before any work, where the file may be ``kind`` (``"a minipaged
    trace"``), as ``ours`` tells from its first ``HEAD_BYTES``: an ``OutputKind``'s two
    fields. The way out it names is ``--force``."""
    output_kind = replaceable.OutputKind(kind, ours)
    replaceable.check_replaceable(path, output_kind, force, named, way="give --force")
