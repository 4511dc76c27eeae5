"""A grading child made ready for a student's code, before any of it runs
(``minipaged.grader.child``): its resources limited (``limit_resources``), the library's
graded functions stubbed and code made at run time watched (``prepare``: ``delegation``,
``runtime_code``), the checks and the library imported, its reads and writes confined
(``confinement``, ``readable``), and, for the GPU criteria, the GPU tried (``gpu_problem``).
What fails here is the grader's fault, never the student's (``fault``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import traceback
from pathlib import Path

MAX_FILE_BYTES = 256 * 2**20
"""RLIMIT_FSIZE: the largest file a student's code may write (its printed output included)."""


def limit_resources(memory_gib: float | None, cpu_seconds: int | None) -> None:
    """First thing in a child, before any student code: cap its address space, CPU time and
    file sizes. The limits hold for the rest of the process's life and for what it starts.
    ``resource`` is imported here, not with the module: Windows has none, and there the
    command line refuses to grade (``grading.platform_problem``) but still lists and copies
    out the exercises."""
    import resource

    if memory_gib is not None:
        size = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails instead of killing


def gpu_problem() -> str:
    """In a child for the GPU criteria, confined and before any student code: ``""`` if torch
    and Numba can both launch work on the GPU here, else why not. Making both CUDA contexts now
    also keeps their start (a second or so) out of the first criterion's time, and starts the
    threads the driver and cuBLAS keep before the student's code runs, so they are the
    child's from the start (a helper thread either starts later is a library's, not the
    student's: ``minipaged.grader.library_threads``)."""
    try:
        import torch

        square = torch.ones(8, 8, device="cuda")
        (square @ square).sum().item()  # cuBLAS's handle and workspace, made now
        from numba import cuda

        cuda.current_context()
    except Exception as error:  # no driver, no device, a device file out of reach
        return f"{type(error).__name__}: {error}".splitlines()[0][:300]
    return ""


def prepare(args: argparse.Namespace) -> str:
    """Guard and confine this process for the student's code (which runs only after it), and
    move into their folder; return how it is confined. What fails here is the grader's."""
    from minipaged.grader import readable
    from minipaged.grader.confined_imports import import_as_read, read_before_confinement
    from minipaged.grader.confinement import confine
    from minipaged.grader.delegation import guard
    from minipaged.grader.exercises import exercise
    from minipaged.grader.library_copies import Library, library_copy_finder
    from minipaged.grader.library_imports import load_library_imports
    from minipaged.grader.notices import refusal, teller
    from minipaged.grader.runtime_code import watch
    from minipaged.grader.student import import_from_source

    ex = exercise(args.number)
    hidden = []
    if args.path is not None:
        tell = teller(args.notices)
        # A TUI run grades nothing, and runs the library's engine around the student's code
        # (its warm-up, the scheduler on their manager): it keeps every library function.
        keeping = ex.graded + ex.answers if args.tui else ()
        keeping = tuple(ex.handed_over) if args.hands_over else keeping
        library = Library(ex)  # read before guard refuses the library's files
        guard(ex, args.path, refusal(tell), refusal(teller(args.notices)), keeping)
        watch(args.path, tell, library_copy_finder(library.prints), library.shapes)
        import_from_source([args.path, args.temp])
        # Imported now, they need not be read again: from here on no one can read them.
        mirrored = [importlib.import_module(m).__name__ for m in ex.hidden]
        hidden = readable.hidden_files(mirrored)
    # The checks load now, on the grader's time (exercise 05's pull in torch, seconds of CPU):
    # importing the student's files then costs their own code's time, even where a file
    # imports the checks (to change them, which ``tampering`` sees). So do the library's
    # modules and its dependencies that their files name (``library_imports``).
    importlib.import_module(ex.checks)
    if args.path is not None:
        load_library_imports(args.path)
    places = readable.roots(args.path, args.temp)
    rules = readable.read_rules(places, hidden)
    # A file readable by a rule of its own is unreadable once replaced: import it as read now.
    import_as_read(read_before_confinement(*rules))
    # Writes go to the child's own temporary folder alone, which the grader empties before the
    # next child starts: the student's folder is read-only while graded, so nothing one child
    # writes reaches another, in this grading or the next (``minipaged.grader.child_process``).
    writable = [args.temp]
    theirs = [args.temp] + ([args.path] if args.path is not None else [])
    # Programs run from where they were installed: not from what the student's code writes or
    # handed in, nor this interpreter under any name (another Python runs code no hook sees).
    interpreter = Path(os.path.realpath(sys.executable))
    runnable, _ = readable.read_rules(places, [p.resolve() for p in theirs] + [interpreter])
    devices = sorted(Path("/dev").glob("nvidia*")) if args.gpu else []
    confined = confine(writable, devices, rules, runnable)
    if args.path is not None:  # only now, with the library imported and guarded
        os.chdir(args.path)
        sys.path[0] = str(args.path)  # -m's folder, where their own modules import from
    return confined


def fault(error: Exception) -> str:
    """``error``, raised while the child prepared, with the grader's line it came from."""
    from minipaged.grader.exercises import DefinitionError

    if isinstance(error, DefinitionError):
        return str(error)
    where = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__}: {error} (at {Path(where.filename).name}, line {where.lineno})"
