"""Find shared-memory races in Numba's CUDA simulator, which otherwise cannot see them.

The simulator runs one OS thread per CUDA thread and lets them interleave however the OS
schedules them, so a kernel that forgets a ``cuda.syncthreads()`` usually still computes the
right answer there, and fails only on a real GPU, where the threads of a block really do run
at once. This module watches instead of hoping for a bad interleaving.

Between two barriers a thread is in one *epoch*: the number of ``syncthreads`` it has passed.
Barriers are collective, so epoch $e$ of every thread of a block lies between the same two
barriers. Every read and write of a shared array is recorded with its element, its thread and
that thread's epoch. A race is two different threads of one block touching one element in the
same epoch, at least one of them writing: nothing orders the two accesses, on any GPU.

A thread's epoch when it finishes is the number of barriers it passed; threads of one block
that finish with different numbers met a ``syncthreads`` that not all of them reached, which
the simulator lets pass and a GPU does not.

``watch_shared_memory()`` patches the simulator (``cuda.shared.array`` hands out watched
arrays; ``syncthreads`` counts epochs; a finishing thread records its count) for the length of
a ``with`` block; it must run in a process started with ``NUMBA_ENABLE_CUDASIM=1``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

SHOWN = 20  # races and divergent barriers a report carries


@dataclass(frozen=True)
class Access:
    thread: int  # threadIdx.x (plus y and z, flattened)
    wrote: bool
    where: str  # "file.py, line 42"


@dataclass
class RaceLog:
    """Accesses by (block, element address) and epoch, and the races found among them; and the
    barriers each thread passed, by block, once it has finished."""

    accesses: dict = field(default_factory=dict)
    races: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    barriers: dict = field(default_factory=dict)  # block -> {thread: barriers passed}

    def finish(self, block: tuple, thread: int, epoch: int) -> None:
        with self.lock:
            self.barriers.setdefault(block, {})[thread] = epoch

    def divergent_barriers(self) -> list[str]:
        """A block whose threads passed different numbers of barriers: some ``syncthreads``
        was not reached by every thread, which on a GPU hangs or is undefined."""
        found = []
        for block, passed in self.barriers.items():
            fewest, most = min(passed, key=passed.get), max(passed, key=passed.get)
            if passed[fewest] != passed[most]:
                found.append(
                    f"in thread block {list(block)}, thread {most} passed {passed[most]} "
                    f"cuda.syncthreads() and thread {fewest} only {passed[fewest]}: a barrier "
                    "that not every thread reaches (inside an if, or a loop whose trip count "
                    "differs by thread). On a GPU the block then hangs or goes wrong; put each "
                    "cuda.syncthreads() where every thread of the block passes it"
                )
        return found

    def report(self) -> dict:
        """What a watched launch that ran to its end sends back to the grader: no crash, and
        the first ``SHOWN`` races and divergent barriers (the first is what a failure names)."""
        return {
            "crash": "",
            "races": self.races[:SHOWN],
            "divergent": self.divergent_barriers()[:SHOWN],
        }

    def record(self, block: tuple, address: int, epoch: int, access: Access) -> None:
        with self.lock:
            seen = self.accesses.setdefault((block, address, epoch), {})
            for other in seen.values():
                if other.thread != access.thread and (other.wrote or access.wrote):
                    self.races.append(_describe(other, access, epoch))
                    break
            if access.wrote or access.thread not in seen:
                seen[access.thread] = access


def crash_report(error: Exception, where: str) -> dict:
    """What a watched launch that raised ``error`` (at ``where``, the student's line) sends back:
    the error, and no races, since the launch did not run to its end."""
    return {"crash": f"{type(error).__name__}: {error}{where}", "races": [], "divergent": []}


def _describe(first: Access, second: Access, epoch: int) -> str:
    def verb(a: Access) -> str:
        return "writes" if a.wrote else "reads"

    barrier = f"after its barrier {epoch}" if epoch else "before any barrier"
    return (
        f"thread {first.thread} {verb(first)} a shared element ({first.where}) and thread "
        f"{second.thread} {verb(second)} it ({second.where}), both {barrier}: no "
        "cuda.syncthreads() between them, so on a GPU either may come first"
    )


class _Watched(np.ndarray):
    """A view of a simulator shared array that reports every element it reads or writes."""

    def __getitem__(self, index):
        _note(self, index, wrote=False)
        return super().__getitem__(index)

    def __setitem__(self, index, value):
        _note(self, index, wrote=True)
        super().__setitem__(index, value)


_log: RaceLog | None = None


def _note(array: np.ndarray, index, wrote: bool) -> None:
    thread = threading.current_thread()
    if _log is None or not hasattr(thread, "threadIdx"):
        return  # not inside a simulated kernel
    base = array.__array_interface__["data"][0]
    if array.ndim == 1 and isinstance(index, (int, np.integer)):
        addresses = [base + (int(index) % array.shape[0]) * array.strides[0]]
    else:
        offsets = sum(i * s for i, s in zip(np.indices(array.shape), array.strides, strict=True))
        addresses = (base + np.asarray(offsets)[index]).ravel().tolist()
    frame = sys._getframe(2)
    where = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}, line {frame.f_lineno}"
    access = Access(thread.thread_id, wrote, where)
    block = tuple(thread.blockIdx)
    epoch = getattr(thread, "epoch", 0)
    for address in addresses:
        _log.record(block, address, epoch, access)


@contextlib.contextmanager
def watch_shared_memory() -> Iterator[RaceLog]:
    """Record shared-memory accesses of every kernel launched in the block; yields the log,
    whose ``races`` say what raced, once the block ends."""
    global _log
    from numba.cuda.simulator import kernel, kernelapi

    from cuda_kernels.simulator import one_array_per_line

    array, syncthreads = kernelapi.FakeCUDAShared.array, kernel.BlockThread.syncthreads
    run = kernel.BlockThread.run

    def watched_array(self, shape, dtype, alignment=None):
        if shape == 0:  # dynamic shared memory: one buffer for every call
            return array(self, shape, dtype, alignment).view(_Watched)
        # As the simulator does: one array per line of source that allocates it, the same
        # for threads that reach the line together.
        caller = (sys._getframe(1).f_code.co_filename, sys._getframe(1).f_lineno)
        return one_array_per_line(self, shape, dtype, caller).view(_Watched)

    def counting_syncthreads(self):
        self.epoch = getattr(self, "epoch", 0) + 1
        syncthreads(self)

    def counting_run(self):
        run(self)
        _log.finish(tuple(self.blockIdx), self.thread_id, getattr(self, "epoch", 0))

    _log = RaceLog()
    kernelapi.FakeCUDAShared.array = watched_array
    kernel.BlockThread.syncthreads = counting_syncthreads
    kernel.BlockThread.run = counting_run
    try:
        yield _log
    finally:
        kernelapi.FakeCUDAShared.array = array
        kernel.BlockThread.syncthreads = syncthreads
        kernel.BlockThread.run = run
        _log = None
