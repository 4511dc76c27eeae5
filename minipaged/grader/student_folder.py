"""Where a student's work for an exercise is, and loading it: the folder ``exercises init``
made (the student in it), a folder given with ``--path``, or in a source checkout the starter in
``tutorials/``; what is missing from a folder, and what in it their imports cannot reach, said
so a student can fix it; and the work as a drop-in ``BlockManager`` for the TUI. The exercises
themselves: ``minipaged.grader.exercises``. And the code graded, which nothing written may
replace."""

from __future__ import annotations

import contextlib
import difflib
import sys
from pathlib import Path

from minipaged.grader.delegation import LIBRARY_FOLDERS
from minipaged.grader.exercises import Exercise, exercise, manager_of
from minipaged.grader.library_imports import MAX_SOURCE_BYTES, named_modules
from minipaged.grader.student import Student, installed_modules, load_folder, load_solution
from minipaged.input_file import broken_link

SOURCE_CHECKOUT = (Path(__file__).resolve().parent / "tutorials").is_symlink()
"""Whether this is a source checkout, whose ``tutorials/`` a student edits in place (the
package's ``tutorials`` is a link to it), rather than an installed package, whose starters are
read-only copies that only ``exercises init`` reads."""


def graded_code(number: int, path: Path | None, solution: bool) -> list[tuple[str, Path]]:
    """The code ``exercises check`` grades and ``tui --exercise`` runs, as
    ``output_paths.check_outputs_apart``'s inputs, which no report or screenshot may replace:
    the library modules that solve exercise ``number`` (``solution``), or every ``.py`` file
    of the student's folder (``folder_of``: refused when the files are not there), theirs
    whether the exercise names it or their files import it."""
    if solution:  # the packages lie side by side, installed or in a checkout; none imported
        packages = Path(__file__).resolve().parents[2]
        modules = exercise(number).solution.values()
        files = [packages / f"{name.replace('.', '/')}.py" for name in modules]
        return [("a library module that is graded", file) for file in files]
    return [("code that is graded", file) for file in folder_of(number, path).glob("*.py")]


def folder_of(number: int, path: Path | None = None) -> Path:
    """The folder holding the files of exercise ``number`` to grade or run: ``path`` when it is
    given; else the current folder when it holds every one of the exercise's files (a folder
    ``exercises init`` made, with the student in it); else, in a source checkout, the starter
    in ``tutorials/``. Raises ``FileNotFoundError`` saying what to do when the files are not
    there."""
    ex = exercise(number)
    if path is None:
        here = Path.cwd()
        library = {Path(folder).resolve() for folder in LIBRARY_FOLDERS}  # never a student's
        if here.resolve() not in library and _missing(ex, here) == []:
            return here
        if not SOURCE_CHECKOUT:
            raise FileNotFoundError(
                f"this folder ({here}) has no {', '.join(ex.files)}: run the command inside "
                f"the folder `minipaged exercises init {number} DIR` made, or pass --path DIR"
            )
        path = ex.starter
    folder = Path(path)
    missing = missing_files(number, folder)
    students = _students_in(ex, folder) if missing else []
    if len(students) > 1:  # an instructor who left out --batch: not "move it up"
        raise FileNotFoundError(
            f"{folder} holds no {', '.join(ex.files)} itself, but {len(students)} folders in "
            f"it do ({', '.join(students[:3])}{', ...' if len(students) > 3 else ''}): to "
            f"grade each as a student's, give --batch {folder} (or one with --path "
            f"{folder / students[0]})"
        )
    if missing:
        raise FileNotFoundError(
            f"{folder} {missing}: give the folder that holds exercise {number:02d}'s files "
            f"(make one with `minipaged exercises init {number} DIR`)"
        )
    return folder


def missing_files(number: int, folder: Path) -> str:
    """``""`` when ``folder`` holds every file of exercise ``number``, else what is missing:
    ``"has no block_manager.py (found Block_Manager.py: rename it to block_manager.py)"``."""
    missing = _missing(exercise(number), folder)
    if not missing:
        return ""
    if not folder.is_dir():
        return "is no folder"
    try:
        present = [p.name for p in folder.iterdir() if p.is_file()]
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    found = []
    for name in missing:
        near = difflib.get_close_matches(name.lower(), [n.lower() for n in present], 1, 0.75)
        if (there := _not_a_file(folder / name)) is not None:  # said not there: it is
            found.append(f"{name} is {there}: put the file itself there")
        elif near:
            original = next(n for n in present if n.lower() == near[0])
            found.append(f"found {original}: rename it to {name}")
        elif below := _below(folder, name):
            found.append(
                f"found {below.relative_to(folder)}: move it up, into {folder.name}/ itself"
            )
    return f"has no {', '.join(missing)}" + (f" ({'; '.join(found)})" if found else "")


def _students_in(ex: Exercise, folder: Path) -> list[str]:
    """The names of the sub-folders of ``folder`` that hold every file of ``ex``, in order."""
    try:
        found = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    return [p.name for p in found if not _missing(ex, p)]


def _below(folder: Path, name: str) -> Path | None:
    """The file ``name`` in a sub-folder of ``folder``, one or two levels down, or None."""
    for pattern in (f"*/{name}", f"*/*/{name}"):
        found = sorted(p for p in folder.glob(pattern) if p.is_file())
        if found:
            return found[0]
    return None


def shadowed_files(number: int, folder: Path) -> list[str]:
    """One line for each file (or package) of ``folder`` that the student's files import by a
    name Python's own modules or an installed package already take (``numpy.py``, ``rich/``):
    their import gets the installed module, never their file (``student.import_from_source``),
    so a function they wrote there is missing however right it is. Exercise files, imported
    by their path, are not among them."""
    ex = exercise(number)
    installed = installed_modules([folder])
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    named = set()
    for path in entries:
        with contextlib.suppress(OSError):
            if path.suffix == ".py" and path.is_file() and path.stat().st_size <= MAX_SOURCE_BYTES:
                source = path.read_text(errors="replace")
                named |= {n.partition(".")[0] for n in named_modules(source)}
    said = []
    for path in entries:
        stem = path.stem if path.suffix == ".py" else path.name
        package = path.is_dir() and (path / "__init__.py").is_file()
        if path.name in ex.files or not (package or path.suffix == ".py"):
            continue
        if stem in installed and stem in named:
            whose = "Python's own module" if stem in sys.stdlib_module_names else "the installed"
            said.append(
                f"your {path.name}{'/' if package else ''} is not what `import {stem}` loads "
                f"({whose} {stem} is): rename it, e.g. to my_{stem}{path.suffix}, and import "
                f"my_{stem}"
            )
    return said


def _not_a_file(path: Path) -> str | None:
    """What stands at ``path`` where a file should, when something does: a folder, a link
    that leads to no file, something else that is no regular file."""
    if path.is_symlink() and not path.exists():
        return broken_link(path)
    if path.is_dir():
        return "a folder"
    return "not a regular file" if path.exists() else None


def _missing(ex: Exercise, folder: Path) -> list[str]:
    return [name for name in ex.files if not (folder / name).is_file()]


def load(number: int, path: Path | None = None, solution: bool = False) -> Student:
    """The work to grade: the library (``solution``), or the files of ``folder_of``."""
    ex = exercise(number)
    if solution:
        return load_solution(ex.solution)
    return load_folder(folder_of(number, path), tuple(ex.solution))


def block_manager_class(number: int, path: Path | None = None, solution: bool = False) -> type:
    """A drop-in ``BlockManager`` (same constructor, same methods) built on the student's work
    for an exercise of ``TUI_EXERCISES``: 02 (the library's manager on their allocator), 03, 04
    or 05 (their manager), or 12 (the library's manager with their radix tree as its
    ``"radix"`` prefix cache)."""
    return manager_of(number, load(number, path, solution))


def graded_label(number: int, path: Path | None, solution: bool) -> str:
    """What a report says was graded: the folder, or the library modules."""
    ex = exercise(number)
    if solution:
        return "solution: " + ", ".join(ex.solution.values())
    return str(folder_of(number, path))
