"""A thread a library starts for its own work is not counted as one the student's code left
running (``minipaged.grader.library_threads``), while every thread that runs the student's code
still is. The rule is checked on its parts (names of libraries, words of a stack) and on real
processes: torch's and Numba's pools grown by honest calls, a pool thread parked in a library
named like the CUDA driver (no GPU here: a copy of OpenMP's runtime under the driver's name
stands in for it), a Python thread and a thread ``ctypes`` started, each beside such a pool."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from minipaged.grader import left_running
from minipaged.grader.library_threads import Mapping, is_pool_stack, stack_libraries

POOLS = ("libgomp.so.1", "libgomp-a34b3233.so.1", "libtorch_cpu.so", "libcuda.so.1")
POOLS += ("libcublas.so.12", "libcublasLt.so.12", "libcudart.so.12", "omppool.cpython-311.so")
POOLS += ("workqueue.cpython-311-x86_64-linux-gnu.so", "libtbb.so.12", "libiomp5.so")
INTERPRETERS = ("libpython3.11.so.1.0", "python3.11", "python", "python3")
OTHERS = ("libc.so.6", "ld-linux-x86-64.so.2", "_multiarray_umath.cpython-311.so", "libffi.so.8")
OTHERS += ("libcudnn.so.9", "libgompish.so", "mylibcuda.so")


@pytest.mark.parametrize(
    ("pool", "interpreter", "other"),
    itertools.product(POOLS + ("",), INTERPRETERS + ("",), OTHERS[:3] + ("",)),
)
def test_a_pool_thread_returns_into_a_pool_library_and_never_into_the_interpreter(
    pool, interpreter, other
):
    libraries = {name for name in (pool, interpreter, other) if name}
    assert is_pool_stack(libraries) == bool(pool and not interpreter), libraries


@pytest.mark.parametrize("name", OTHERS)
def test_no_other_library_makes_a_pool_thread(name):
    assert not is_pool_stack({name, "libc.so.6"})


def test_a_stack_s_words_name_the_code_mappings_they_point_into():
    maps = [
        Mapping(0x1000, 0x2000, True, "libc.so.6"),
        Mapping(0x2000, 0x3000, False, "libc.so.6"),  # data: a pointer here is no return
        Mapping(0x3000, 0x4000, True, "libcuda.so.1"),
        Mapping(0x5000, 0x6000, True, ""),  # anonymous code (a JIT's)
    ]
    libraries = {
        (0x1000,): {"libc.so.6"},
        (0x1FFF,): {"libc.so.6"},
        (0x2000, 0x2FF8, 0x4000, 0x5008, 0, 2**64 - 1): set(),
        (0x3FF8, 0x1234, 7): {"libcuda.so.1", "libc.so.6"},
    }
    for words, names in libraries.items():
        assert stack_libraries(np.array(words, dtype=np.uint64), maps) == names, words


PARKED = "import sys, time\n{setup}\nprint('ready', flush=True)\ntime.sleep(60)\n"

FAKE_DRIVER = """
import ctypes, shutil
driver = shutil.copy({gomp!r}, {folder!r} + "/libcuda.so.1")  # the driver, as far as names go
gomp, libc = ctypes.CDLL(driver), ctypes.CDLL(None)
work = ctypes.cast(libc.sched_yield, ctypes.c_void_p)  # C work: no Python frame on the stack
gomp.GOMP_parallel(work, None, 2, 0)  # its second thread stays, parked in the "driver"
"""

HONEST = {
    "torch's pool grown by set_num_threads": "import torch\ntorch.set_num_threads(3)\n"
    "torch.ones(1 << 20).add_(1)\ntorch.ones(300, 300) @ torch.ones(300, 300)",
    "Numba's parallel=True workers": "import numba, numpy\n"
    "numba.njit(parallel=True)(lambda a: a.sum())(numpy.ones(1000))",
    "the GPU driver's helper thread": FAKE_DRIVER,
}

STUDENTS = {
    "a sleeping Python thread beside the driver's": FAKE_DRIVER
    + "\nimport threading\nthreading.Thread(target=time.sleep, args=(60,)).start()",
    "a working Python thread beside the driver's": FAKE_DRIVER
    + "\nimport threading\nbusy = lambda: [time.sleep(0.001) for _ in range(10**6)]\n"
    "threading.Thread(target=busy, daemon=True).start()",
    "a ctypes thread on a C function beside the driver's": FAKE_DRIVER
    + "\nhandle = ctypes.c_ulong()\nsleep = ctypes.cast(libc.sleep, ctypes.c_void_p)\n"
    "libc.pthread_create(ctypes.byref(handle), None, sleep, ctypes.c_void_p(60))",
}


def _gomp() -> str:
    """The path of an OpenMP runtime: torch's own copy, else the system's."""
    torch_lib = Path(pytest.importorskip("torch").__file__).parent / "lib"
    for found in itertools.chain(
        torch_lib.glob("libgomp*.so*"), Path("/usr/lib").rglob("libgomp.so*")
    ):
        return str(found)
    pytest.skip("no OpenMP runtime (libgomp) to stand in for a pool library")


def _left_by(setup: str, folder: Path) -> str:
    """What ``tasks_left`` finds in a process after ``setup`` ran, against its threads before."""
    setup = setup.format(gomp=_gomp(), folder=str(folder)) if "{gomp" in setup else setup
    program = PARKED.format(setup=textwrap.dedent(setup))
    env = {"OMP_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(folder), "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, env=env, cwd=folder
    )
    try:
        assert process.stdout.readline() == b"ready\n"
        main = left_running.tasks(process.pid)
        return left_running.tasks_left(process.pid, frozenset(sorted(main)[:1]))
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("what", HONEST)
def test_a_thread_a_library_started_is_not_left_running(what, tmp_path):
    assert _left_by(HONEST[what], tmp_path) == ""


@pytest.mark.parametrize("what", STUDENTS)
def test_a_thread_the_students_code_started_still_is(what, tmp_path):
    assert _left_by(STUDENTS[what], tmp_path).startswith("1 thread ("), what
