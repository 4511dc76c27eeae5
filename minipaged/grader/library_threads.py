"""Threads a library started for its own work, told apart from the student's by what they run.

Ordinary calls an honest student makes start threads that outlive the call: ``torch``'s
intra-op pool grows to the size ``torch.set_num_threads(n)`` asks for at the next parallel
operation (OpenMP's ``libgomp``), its inter-op pool starts at the first ``torch.jit.fork``
(``libtorch_cpu``), Numba's threading layer starts its workers at the first ``parallel=True``
function (``libgomp``, ``omppool``, ``tbbpool``, ``workqueue``), tokenizers' Rust pool at the
first batch, and on a GPU the CUDA driver and its libraries start helper threads when first
used (``libcuda``, ``libcudart``, ``libcublas``). Each parks, waiting for the library's next
piece of work, and runs no code of the student's between calls. ``left_running`` would count
each as a thread the student's code left running, and fail an honest answer.

The grader tells one from the other from outside the worker, by what the thread's stack holds
(``pool_library``): a parked pool thread's live frames, from its stack pointer to its stack's
top, return only into the pool's library and the C library; a thread that runs Python code
(every ``threading.Thread``, a ``ctypes`` callback) has frames of the interpreter on its stack
for as long as it lives. So a thread is the library's when its stack holds a return address
into a library of ``POOL_LIBRARIES`` and none into the interpreter, and it is not running. A
thread ``ctypes`` started on a C function (``sleep``) holds neither and stays the student's.
Where the stack cannot be read (no ``/proc``, a kernel that refuses to show another process's
memory), no thread is taken for a library's: the rule is as strict as before, never looser.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

POOL_LIBRARIES = re.compile(
    r"^(libgomp|libiomp|libomp|libtorch_cpu|libc10|libtbb|omppool|tbbpool|workqueue|"
    r"tokenizers|libcuda|libcudart|libcublas|libcublasLt|libnvrtc|libnvJitLink)\d*[.-]"
)
"""The file names (up to their first dot or dash) of libraries whose threads wait, parked,
for the library's own next piece of work."""

INTERPRETER = re.compile(r"^(libpython\d|python\d?(\.\d+)?$)")
"""The file names of the interpreter: a thread with a frame in it runs Python code."""

MAX_STACK_BYTES = 8 * 2**20
"""The most of a thread's stack read (glibc's default stack size)."""


class Mapping(NamedTuple):
    start: int
    end: int
    executable: bool
    name: str  # the mapped file's name, "" for anonymous memory


def mappings(pid: int) -> list[Mapping]:
    """``pid``'s memory mappings, as ``/proc/<pid>/maps`` lists them (sorted by address);
    ``[]`` where they cannot be read."""
    found = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                start, end = (int(x, 16) for x in fields[0].split("-"))
                path = fields[5].strip() if len(fields) > 5 else ""
                found.append(Mapping(start, end, "x" in fields[1], Path(path).name))
    except (OSError, ValueError, IndexError):
        return []
    return found


def stack_libraries(words: np.ndarray, maps: list[Mapping]) -> set[str]:
    """The names of the executable mappings that any of ``words`` (a stack's 8-byte words)
    points into: the libraries the stack's frames return into (and, harmlessly, any other
    pointer to code it holds)."""
    code = [m for m in maps if m.executable and m.name]
    if not code or words.size == 0:
        return set()
    starts = np.array([m.start for m in code], dtype=np.uint64)
    ends = np.array([m.end for m in code], dtype=np.uint64)
    at = np.searchsorted(starts, words, side="right") - 1
    inside = (at >= 0) & (words < ends[np.maximum(at, 0)])
    return {code[i].name for i in np.unique(at[inside])}


def is_pool_stack(libraries: set[str]) -> bool:
    """Whether a parked thread whose stack returns into ``libraries`` is a library's pool
    thread: into a pool library, and never into the interpreter."""
    pool = any(POOL_LIBRARIES.match(name) for name in libraries)
    return pool and not any(INTERPRETER.match(name) for name in libraries)


def pool_library(pid: int, task: int, maps: list[Mapping] | None = None) -> bool:
    """Whether thread ``task`` of ``pid`` is a library's parked pool thread (``is_pool_stack``
    of its live stack); False where it is running, or its stack cannot be read."""
    try:
        with open(f"/proc/{pid}/task/{task}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    if len(fields) < 3 or fields[0] == "running":
        return False
    maps = mappings(pid) if maps is None else maps
    sp = int(fields[-2], 16)
    stack = next((m for m in maps if m.start <= sp < m.end and not m.executable), None)
    if stack is None:
        return False
    size = min(stack.end - sp, MAX_STACK_BYTES) // 8 * 8
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
            memory.seek(sp)
            data = memory.read(size)
    except (OSError, ValueError, OverflowError):
        return False
    words = np.frombuffer(data[: len(data) // 8 * 8], dtype="<u8")
    return is_pool_stack(stack_libraries(words, maps))


def library_threads(pid: int, found: list[int]) -> set[int]:
    """Those of ``pid``'s threads ``found`` that are a library's parked pool threads."""
    if not found or not os.path.exists(f"/proc/{pid}/syscall"):
        return set()
    maps = mappings(pid)
    return {task for task in found if pool_library(pid, task, maps)}
