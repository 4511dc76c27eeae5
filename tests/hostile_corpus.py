"""A hostile student's hand-ins: each attack is the body of one graded function in an
exercise's starter, as ``minipaged exercises init`` copies it out, and what grading must say
of it. The attacks of one exercise share a folder (``HandIn``), one attack per function, so
that one grading shows each failing its own criteria while the others are still graded, and
the honest answers among them still pass.

Classes of attack: values that lie (objects equal to everything, subclasses of int and list,
NaN, shapes that broadcast), talking to the grader (forged report lines and frames, the
channel's file descriptors, exits and ``BaseException``s, signals, handlers), reaching the
solution (the library's functions through stolen frames, forged file names, the library's
answers under other names, the grader's own helpers rewritten), and resources (memory, output,
recursion, finalizers, representations that never end).
"""

from __future__ import annotations

import ast
import base64
import codecs
import dis
import importlib
import importlib.machinery
import importlib.util
import inspect
import marshal
import pickle
import sys
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hypothesis.stateful import invariant
from stuck import STUCK_AFTER_S
from test_grader_similarity import _Rename

from minipaged.grader.exercises import EXERCISES, TUTORIALS

ANSWERS = Path(__file__).parent / "student_answers"

SECRET_NAME, SECRET = "GRADESCOPE_API_SECRET", "s3cr3t-0f-the-grader"
"""A variable of the grader's environment no student's code may see (``test_grader_hostile``
sets it while grading the corpus)."""


@dataclass(frozen=True)
class Attack:
    """``body`` replaces the starter's ``raise NotImplementedError("...{todo}...")`` line (its
    indentation kept, ``\\n`` starting each further line at the same indentation); ``fails``:
    the criteria it must fail, one message at least containing ``said`` (none: an attack on
    the grading itself, which must go on to grade the next criterion). A process it starts
    must end with the grading: one whose command line holds ``leaves``, and a fork of the
    grading child, whose command line names the hand-in's folder (``test_grader_hostile``
    looks for both)."""

    name: str
    todo: str
    body: str
    fails: tuple[str, ...]
    said: str = ""
    leaves: str = ""  # in the command line of a process it starts, which must end with the grading


@dataclass(frozen=True)
class HandIn:
    """One folder of exercise ``number``: its starter with every attack written in, the
    module-level code ``appended`` to ``file``, and the criteria that must still ``pass``."""

    name: str
    number: int
    file: str
    attacks: tuple[Attack, ...]
    passes: tuple[str, ...] = ()
    honest: dict[str, str] = field(default_factory=dict)  # todo -> a right body
    appended: str = ""
    notes: str = ""  # a library module whose source the hand-in keeps as notes.txt
    files: tuple[tuple[str, str | bytes], ...] = ()  # more files of the folder: (path, text)
    made: tuple[tuple[str, Callable[[], str]], ...] = ()  # more, made as it is written
    gradings: int = 1  # graded this many times in a row: what one grading leaves, the next finds

    def write(self, folder: Path) -> Path:
        """The hand-in as a folder below ``folder``."""
        target = folder / self.name
        target.mkdir(parents=True)
        ex = EXERCISES[self.number]
        for name in ex.files:
            (target / name).write_text((TUTORIALS / ex.folder / "starter" / name).read_text())
        path = target / self.file
        source = path.read_text()
        bodies = {a.todo: a.body for a in self.attacks} | self.honest
        for todo, body in bodies.items():
            line = next(line for line in source.splitlines() if f": {todo}" in line)
            indent = line[: len(line) - len(line.lstrip())]
            source = source.replace(line, indent + body.replace("\n", "\n" + indent))
        path.write_text(source + self.appended)
        for name, text in self.files:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):  # a .pyc, say
                (target / name).write_bytes(text)
            else:
                (target / name).write_text(text)
        for name, make in self.made:  # what a student made at home, with the library
            (target / name).write_text(make())
        if self.notes:
            spec = importlib.util.find_spec(self.notes)
            (target / "notes.txt").write_text(Path(spec.origin).read_text())
        return target


# -- exercise 01: values that lie, and talking to the grader ---------------------------------

LIES = """
class _Liar(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__

class _Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return 0
    def __index__(self): return 2
    def __int__(self): return 2
    def __len__(self): return 0
    def __bool__(self): return True

class _EndlessRepr:
    def __eq__(self, other): return True
    def __repr__(self):
        while True:
            pass

class _HugeRepr:
    def __eq__(self, other): return True
    def __repr__(self): return "x" * (50 * 2**20)

class _BadStr(ValueError):
    def __str__(self): raise RuntimeError("no text for you")

class _Text(str):
    def __getitem__(self, key): return self
    def __str__(self): return self

class _SneakyRepr:
    def __repr__(self):
        return _Text("2\\n\\x1b[1A\\x1b[2K\\r  \\x1b[32mPASS\\x1b[0m     num_logical_blocks")
"""

RIGHT_SLOT = {
    "look up T_r[j], then return T_r[j] * B + o": (
        "j = t // block_size\nif not 0 <= j < len(block_table):\n"
        "    raise ValueError(f'no logical block {j}')\n"
        "return block_table[j] * block_size + t % block_size"
    ),
}
"""Exercise 01's slot, answered honestly beside the attacks: it must still pass."""

VALUES = HandIn(
    "values-that-lie",
    1,
    "memory.py",
    (
        Attack(
            "int-subclass-equal-to-all",
            "return j = floor(t / B)",
            "return _Liar(0)",
            ("logical_block",),
            "expected 2",
        ),
        Attack(
            "object-equal-to-all",
            "return o = t mod B",
            "return _Anything()",
            ("block_offset",),
            "expected 6",
        ),
        Attack(
            "float-for-a-count",
            "return M = ceil(L / B)",
            "return float(-(-num_tokens // block_size))",
            ("num_logical_blocks",),
            "got the float 0.0",
        ),
        Attack(
            "endless-repr",
            "keys and values, for every layer and KV head",
            "return _EndlessRepr()",
            ("kv_bytes_per_token",),
            "",
        ),
        Attack("huge-repr", "M_KV(L)", "return _HugeRepr()", ("kv_bytes",), ""),
        Attack(
            "float-of-the-right-value",
            "one block, one layer",
            "return float(2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes)",
            ("block_bytes",),
            "expected the int 65536, got the float 65536.0",
        ),
        Attack("bool-for-an-int", "one block, all layers", "return True", ("block_bytes",), ""),
    ),
    passes=("slot", "slot_outside_the_table"),
    honest=RIGHT_SLOT,
    appended=LIES,
)

FORGED_LINE = (
    'print("\\x1b[1A\\x1b[2K\\r  PASS     logical_block\\n"'
    ' "8 pass, 0 fail, 0 blocked, 100/100 points: all criteria met")'
)

CHANNEL = HandIn(
    "talking-to-the-grader",
    1,
    "memory.py",
    (
        Attack(
            "forged-report-and-frames",
            "return j = floor(t / B)",
            FORGED_LINE + "\nimport os, sys, json\n"
            "frame = json.dumps({'id': 2, 'v': 2}).encode()\n"
            "sys.stdout.buffer.write(len(frame).to_bytes(8, 'big') + frame)\n"
            "sys.stdout.flush()\nos._exit(0)",
            ("logical_block",),
            "PASS     logical_block",  # shown as what it printed, under the failure
        ),
        Attack(
            "dup2-over-the-channel",
            "return o = t mod B",
            "import os\nnull = os.open(os.devnull, os.O_RDWR)\n"
            "for fd in range(3, 32):\n    if fd != null:\n"
            "        try: os.dup2(null, fd)\n        except OSError: pass\nreturn 6",
            ("block_offset",),
            "the grading process",
        ),
        Attack(
            "generator-exit",
            "return M = ceil(L / B)",
            "raise GeneratorExit('done')",
            ("num_logical_blocks",),
            "your code raised GeneratorExit",
        ),
        Attack(
            "keyboard-interrupt-subclass",
            "keys and values, for every layer and KV head",
            "class Stop(KeyboardInterrupt): pass\nraise Stop('stop the grader')",
            ("kv_bytes_per_token",),
            "your code raised Stop",
        ),
        Attack(
            "recursion",
            "M_KV(L)",
            "def down(n): return down(n + 1) + 1\nreturn down(0)",
            ("kv_bytes",),
            "RecursionError",
        ),
        Attack(
            "handlers-and-hooks",
            "one block, one layer",
            "import atexit, signal, sys, time, faulthandler\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "atexit.register(time.sleep, 3600)\n"
            "faulthandler.enable(file=sys.stdout, all_threads=True)\n"
            "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes",
            (),
            "",
        ),
        Attack(
            "patched-clocks-and-checks",
            "one block, all layers",
            "import time, math, builtins, sys\n"
            "time.monotonic = time.perf_counter = time.time = lambda: 0.0\n"
            "math.isclose = lambda *a, **k: True\n"
            "for name in list(sys.modules):\n"
            "    if name.startswith('minipaged.grader.'):\n"
            "        vars(sys.modules[name]).update(expect=lambda *a, **k: None)\n"
            "while True:\n    pass",
            ("block_bytes",),
            "ran past",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
)

UNREADABLE = "your code raised an exception the grader cannot read"

PROTOCOL_EXCEPTIONS = HandIn(
    "exceptions-that-mean-something-else",
    1,
    "memory.py",
    (
        Attack(
            "stop-iteration",
            "return j = floor(t / B)",
            "raise StopIteration('done')",
            ("logical_block",),
            "your code raised StopIteration: done (memory.py, line 19), in the check's call",
        ),
        Attack(
            "stop-iteration-subclass",
            "return o = t mod B",
            "class Done(StopIteration): pass\nraise Done('done')",
            ("block_offset",),
            "your code raised Done: done",
        ),
        Attack(
            "stop-async-iteration",
            "return M = ceil(L / B)",
            "raise StopAsyncIteration('done')",
            ("num_logical_blocks",),
            "which ends the loop that called it",
        ),
        Attack(
            "exit-code-that-raises",
            "keys and values, for every layer and KV head",
            "class Out(SystemExit):\n    @property\n"
            "    def code(self): raise RuntimeError('no code')\nraise Out(3)",
            ("kv_bytes_per_token",),
            UNREADABLE,
        ),
        Attack(
            "class-that-raises",
            "M_KV(L)",
            "class Liar(ValueError):\n    @property\n"
            "    def __class__(self): raise RuntimeError('no class')\nraise Liar('x')",
            ("kv_bytes",),
            "Liar: x",
        ),
        Attack(
            "bases-that-raise",
            "one block, one layer",
            "class Meta(type):\n    @property\n"
            "    def __bases__(cls): raise RuntimeError('no bases')\n"
            "class Odd(Exception, metaclass=Meta): pass\nraise Odd('x')",
            ("block_bytes",),
            UNREADABLE,
        ),
        Attack(
            "equality-that-raises",
            "one block, all layers",
            "class Sore(ValueError):\n    def __eq__(self, other): raise RuntimeError('no')\n"
            "    __hash__ = None\n    def __repr__(self): raise RuntimeError('no')\n"
            "raise Sore('x')",
            ("block_bytes",),
            "",
        ),
    ),
    passes=("slot", "slot_outside_the_table"),
    honest=RIGHT_SLOT,
)
"""Exceptions that mean something to Python besides an error: StopIteration and its kin fail
the call that raised them with their own reason, never ending a check's loop as if it were
done; an exception whose class, exit code or equality raise when read fails its call (the
grading child once died of it, the failure blamed on ``os._exit()``)."""

RESOURCES = HandIn(
    "resources",
    1,
    "memory.py",
    (
        Attack(
            "gigabytes-of-output",
            "return j = floor(t / B)",
            "import sys\nchunk = 'x' * 2**20\nfor _ in range(400):\n"
            "    sys.stdout.write(chunk)\nreturn 2",
            ("logical_block",),
            "",
        ),
        Attack(
            "a-message-too-large",
            "return o = t mod B",
            "return 'x' * (70 * 2**20)",
            ("block_offset",),
            "",  # refused as too large, or out of time where the machine is loaded
        ),
        Attack(
            "nested-without-end",
            "keys and values, for every layer and KV head",
            "value = []\nfor _ in range(10000):\n    value = [value]\nreturn value",
            ("kv_bytes_per_token",),
            "nested",
        ),
        Attack(
            "finalizer-that-sleeps",
            "return M = ceil(L / B)",
            "import time\nclass Slow:\n    def __del__(self): time.sleep(3600)\nreturn Slow()",
            ("num_logical_blocks",),
            "ran past 4 s",
        ),
        Attack(
            "str-that-raises",
            "M_KV(L)",
            "raise _BadStr()",
            ("kv_bytes",),
            "could not be shown",
        ),
        Attack(
            "threads-that-babble",
            "one block, one layer",
            "import os, threading, time\ndef babble():\n    while True:\n"
            "        for fd in range(3, 32):\n            try: os.write(fd, b'junk')\n"
            "            except OSError: pass\n        time.sleep(0.01)\n"
            "threading.Thread(target=babble, daemon=True).start()\nreturn 0",
            ("block_bytes",),
            "",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
    appended=LIES,
)

LEFT = "running after it returned: join every thread and wait for every process"

OUTLIVES = f"{2 * STUCK_AFTER_S + 68.25:g}"
"""How long a process left running sleeps: past the grading's wall limit and the wait for its
end after (each at most ``STUCK_AFTER_S``), so that only the grader's ending it passes."""

LEFT_RUNNING = HandIn(
    "left-running",
    1,
    "memory.py",
    (
        Attack(
            "a-thread-that-babbles-later",
            "return j = floor(t / B)",
            "import os, threading, time\ndef babble():\n    time.sleep(2)\n    while True:\n"
            "        for fd in range(3, 32):\n            try: os.write(fd, b'junk')\n"
            "            except OSError: pass\n        time.sleep(0.01)\n"
            "threading.Thread(target=babble, daemon=True).start()\nreturn t // block_size",
            ("logical_block",),
            f"your code left 1 thread (Thread-1 (babble), at memory.py, line 21) {LEFT}",
        ),
        Attack(
            "a-fork-that-sleeps",
            "return o = t mod B",
            f"import os, time\nif os.fork() == 0:\n    time.sleep({OUTLIVES})\n    os._exit(0)\n"
            "return t % block_size",
            ("block_offset",),
            "a copy of the grading process, forked by your code) running after it returned",
        ),
        Attack(
            "a-thread-in-native-code",
            "return M = ceil(L / B)",
            f"import _thread, time\n_thread.start_new_thread(time.sleep, ({OUTLIVES},))\n"
            "return -(-num_tokens // block_size)",
            ("num_logical_blocks",),
            "your code left 1 thread (started with _thread, in native code) running",
        ),
        Attack(
            "a-process-in-a-session-of-its-own",
            "one block, all layers",
            "import subprocess\n"
            f"subprocess.Popen(['sleep', '{OUTLIVES}'], start_new_session=True)\n"
            "return self.num_layers * self.block_bytes_per_layer(block_size)",
            ("block_bytes",),
            "your code left 1 process (pid ",
            leaves=OUTLIVES,
        ),
        Attack(
            "a-timer-that-acts-just-after-the-answer",
            "M_KV(L)",
            "import threading\nlate = []\nthreading.Timer(0.05, late.append, (1,)).start()\n"
            "return self.kv_bytes_per_token * num_tokens",
            ("kv_bytes",),
            ", running list.append, at threading.py",
        ),
    ),
    passes=("slot", "slot_outside_the_table", "kv_bytes_per_token"),
    honest=RIGHT_SLOT
    | {
        "keys and values, for every layer and KV head": (
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes"
        ),
        "one block, one layer": (
            "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes"
        ),
    },
)
"""Code still running after its call returned: each fails the call that left it, naming what
it left, and the next criterion, in a new grading child, is blamed for nothing (a thread that
wrote on the channel after its answer once failed the next call, "cannot read"). A thread
that ends soon after the answer fails too: what it did then (an exercise 02 allocator's
``threading.Timer`` that put a freed block on the free list 0.1 s later passed 7 of 8
criteria) landed after the answer was taken, on what the next question reads."""

THREAD_AT_IMPORT = HandIn(
    "a-thread-at-import",
    1,
    "memory.py",
    (
        Attack(
            "a-thread-started-at-import",
            "return j = floor(t / B)",
            "return t // block_size",
            ("logical_block", "block_offset"),
            "importing your files left 1 thread (Thread-1 (sleep)",
        ),
    ),
    appended="\nimport threading, time\n"
    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
)

HIDDEN_THREADS = HandIn(
    "hidden-threads",
    1,
    "memory.py",
    (
        Attack(
            "a-thread-hidden-from-the-childs-look",
            "return j = floor(t / B)",
            "import sys, threading, time\nkept = threading.Thread(target=time.sleep, args=(60,))\n"
            "kept.daemon = True\nkept.start()\nreal = sys._current_exceptions\n"
            "sys._current_exceptions = lambda: {\n"
            "    k: v for k, v in real().items() if k != kept.ident}\n"
            "sys._current_frames = sys._current_exceptions\n"
            "sys.modules['__main__'].threads_left = lambda *args: ''\n"
            "return t // block_size",
            ("logical_block",),
            "your code left 1 thread that Python does not list (thread ",
        ),
        Attack(
            "a-thread-started-through-ctypes",
            "return o = t mod B",
            "import ctypes\nlibc = ctypes.CDLL(None)\nhandle = ctypes.c_ulong()\n"
            "sleep = ctypes.cast(libc.sleep, ctypes.c_void_p)\n"
            "libc.pthread_create(ctypes.byref(handle), None, sleep, ctypes.c_void_p(60))\n"
            "return t % block_size",
            ("block_offset",),
            "your code left 1 thread that Python does not list (thread ",
        ),
        Attack(
            "a-thread-that-writes-before-the-answer",
            "return M = ceil(L / B)",
            "import os, sys, threading, time\n"
            "answers = int(sys.argv[sys.argv.index('--channel') + 1].split(',')[1])\n"
            "def babble():\n    os.write(answers, b'junk' * 4)\n    time.sleep(60)\n"
            "threading.Thread(target=babble, daemon=True).start()\ntime.sleep(0.1)\n"
            "return -(-num_tokens // block_size)",
            ("num_logical_blocks",),
            "something other than the grading process's answer was written on its channel",
        ),
        Attack(
            "a-watchdog-that-dumps-tracebacks",
            "keys and values, for every layer and KV head",
            "import faulthandler, sys\n"
            "faulthandler.dump_traceback_later(0.01, repeat=True, file=sys.stdout)\n"
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes",
            ("kv_bytes_per_token",),
            "your code left 1 thread that Python does not list (thread ",
        ),
        Attack(
            "a-signal-handler-a-timer-calls-later",
            "one block, all layers",
            "import signal\nlate = []\nsignal.signal(signal.SIGALRM, lambda *_: late.append(1))\n"
            "signal.setitimer(signal.ITIMER_REAL, 0.05)\n"
            "return self.num_layers * self.block_bytes_per_layer(block_size)",
            ("block_bytes",),
            "your code left a handler for SIGALRM",  # and its timer, while still armed
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT
    | {
        "M_KV(L)": "return self.kv_bytes_per_token * num_tokens",
        "one block, one layer": (
            "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes"
        ),
    },
)
"""Threads the child's own look cannot see (its functions replaced, or no Python thread state:
ctypes, faulthandler's watchdog) and bytes on the channel before the answer: the grader sees
them from outside, in ``/proc`` (each passed, or failed with "cannot read", when the child's
look was the authority). And code that runs later with no thread at all: a signal handler a
timer calls after the answer, seen in ``/proc`` as a signal the worker now catches (an
exercise 02 decref that freed its block from a SIGALRM handler failed other criteria, each
with a wrong value, none naming the handler)."""

TIMER = (
    "libc = ctypes.CDLL(None)\ntimer = ctypes.c_void_p()\n"
    "event = (ctypes.c_int * 16)(0, 0, {signal}, 0)  # sigevent: value, signo, SIGEV_SIGNAL\n"
    "libc.timer_create(1, event, ctypes.byref(timer))  # CLOCK_MONOTONIC\n"
    "libc.timer_settime(timer, 0, (ctypes.c_long * 4)(0, 0, {seconds}, 50_000_000), None)\n"
)
"""A POSIX timer through libc's ``timer_create``, sending ``{signal}`` once, ``{seconds}`` and
50 ms from now."""

LATER_ROUTES = HandIn(
    "later-by-other-routes",
    1,
    "memory.py",
    (
        Attack(
            "a-ctypes-thread-that-ends-soon-after-the-answer",
            "return j = floor(t / B)",
            "import ctypes, os\nif os.environ.setdefault('ONCE_J', '1') == '1':\n"
            "    os.environ['ONCE_J'] = '2'  # the first call only: each waits out its thread\n"
            "    libc = ctypes.CDLL(None)\n    handle = ctypes.c_ulong()\n"
            "    nap = ctypes.cast(libc.usleep, ctypes.c_void_p)\n"
            "    libc.pthread_create(ctypes.byref(handle), None, nap, ctypes.c_void_p(400_000))\n"
            "    libc.pthread_detach(handle)\nreturn t // block_size",
            ("logical_block",),
            "your code left 1 thread that Python does not list (thread ",
        ),
        Attack(
            "a-hidden-thread-that-ends-soon-after-the-answer",
            "return o = t mod B",
            "import _thread, os, sys, time\nif os.environ.setdefault('ONCE_O', '1') == '1':\n"
            "    os.environ['ONCE_O'] = '2'\n    started, real = [], sys._current_exceptions\n"
            "    def nap():\n        started.append(_thread.get_ident())\n        time.sleep(0.4)\n"
            "    _thread.start_new_thread(nap, ())\n    while not started:\n"
            "        time.sleep(0.001)\n    sys._current_exceptions = lambda: {\n"
            "        k: v for k, v in real().items() if k not in started}\n"
            "    sys._current_frames = sys._current_exceptions\nreturn t % block_size",
            ("block_offset",),
            "your code left 1 thread that Python does not list (thread ",
        ),
        Attack(
            "a-real-time-signal-a-timer-sends-later",
            "return M = ceil(L / B)",
            "import ctypes, signal\nlate = []\n"
            "signal.signal(signal.SIGRTMIN + 2, lambda *_: late.append(1))\n"
            + TIMER.format(signal="signal.SIGRTMIN + 2", seconds=0)
            + "return -(-num_tokens // block_size)",
            ("num_logical_blocks",),
            "your code left a handler for SIGRTMIN+2 and a timer set with timer_create (timer 0, "
            "sending SIGRTMIN+2)",
        ),
        Attack(
            "a-handler-set-through-libc",
            "keys and values, for every layer and KV head",
            "import ctypes, signal\nlibc = ctypes.CDLL(None)\n"
            "libc.signal(signal.SIGRTMIN + 3, ctypes.cast(libc.getpid, ctypes.c_void_p))\n"
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes",
            ("kv_bytes_per_token",),
            "your code left a handler for SIGRTMIN+3 installed",
        ),
        Attack(
            "a-timer-for-a-signal-no-handler-catches",
            "M_KV(L)",
            "import ctypes, signal\n"
            + TIMER.format(signal="signal.SIGWINCH", seconds=60)
            + "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes"
            " * num_tokens",
            ("kv_bytes",),
            "your code left a timer set with timer_create (timer 0, sending SIGWINCH)",
        ),
        Attack(
            "a-sigchld-handler-a-process-calls-later",
            "one block, all layers",
            "import os, signal, time\nlate = []\n"
            "signal.signal(signal.SIGCHLD, lambda *_: late.append(1))\n"
            "if os.fork() == 0:\n    time.sleep(0.1)\n    os._exit(0)\n"
            "return self.num_layers * self.block_bytes_per_layer(block_size)",
            ("block_bytes",),
            "your code left a handler for SIGCHLD installed",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT
    | {
        "one block, one layer": (
            "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes"
        ),
    },
)
"""What acts after a call by routes the grader watched too narrowly: a thread with no Python
thread state the child sees (ctypes, ``_thread`` hidden) that ended within the old 0.5 s grace
(these sleep 0.4 s: one that ends before the grader looks is not seen, and a busy machine
delays the look), a real-time signal's handler, a handler set through libc, a POSIX timer, a
``SIGCHLD`` handler a process of the call's runs later. Each passed: the grader gave every
thread 0.5 s to end and watched six signals' handlers and no timer."""

DISK = HandIn(
    "filling-the-disk",
    1,
    "memory.py",
    (
        Attack(
            "files-until-the-disk-is-full",
            "return j = floor(t / B)",
            "import os, tempfile\nchunk = b'x' * 2**23\nfor i in range(10**6):\n"
            "    with open(os.path.join(tempfile.gettempdir(), f'fill{i}'), 'wb') as f:\n"
            "        f.write(chunk)\nreturn 2",
            ("logical_block",),
            "GiB of files",
        ),
        Attack(
            "a-million-small-files",
            "return o = t mod B",
            "import os, tempfile\nhere = tempfile.gettempdir()  # their folder is read-only\n"
            "for i in range(10**6):\n    open(os.path.join(here, f'empty{i}'), 'w').close()\n"
            "return 6",
            ("block_offset",),
            "files and folders",
        ),
        Attack(
            "a-repr-that-is-not-a-str",
            "return M = ceil(L / B)",
            "return _SneakyRepr()",
            ("num_logical_blocks",),
            "got 2\n",
        ),
        Attack(
            "the-graders-secrets-from-the-environment",
            "keys and values, for every layer and KV head",
            "import os\nseen = [\n"
            "    (k, v) for k, v in os.environ.items() if 'SECRET' in k or v == SECRET]\n"
            "raise ValueError(f'seen: {seen}')",
            ("kv_bytes_per_token",),
            "ValueError: seen: []",
        ),
        Attack(
            "an-interval-timer-whose-signal-ends-the-process-later",
            "M_KV(L)",
            "import signal\nsignal.setitimer(signal.ITIMER_VIRTUAL, 0.3)  # 0.3 s of its CPU\n"
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes"
            " * num_tokens",
            ("kv_bytes",),
            "your code left a timer set with signal.setitimer or signal.alarm (ITIMER_VIRTUAL)",
        ),
        Attack(
            "an-alarm-no-handler-catches",
            "one block, all layers",
            "import signal\nsignal.alarm(30)\n"
            "return self.num_layers * self.block_bytes_per_layer(block_size)",
            ("block_bytes",),
            "your code left a timer set with signal.setitimer or signal.alarm (ITIMER_REAL)",
        ),
    ),
    passes=("slot",),
    appended=LIES + f"\nSECRET = {SECRET!r}\n",
    honest=RIGHT_SLOT
    | {
        "one block, one layer": (
            "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes"
        ),
    },
)
"""Ending with what the student's code finds of the grader's environment: the whole of it
reached the grading child, and what the code raises comes back in the report (``SECRET``,
which the tests put in the grader's environment, now passes into no grading child:
``minipaged.grader.child_environment``). Then interval timers left armed whose signal no
handler catches (``setitimer``, ``alarm``: /proc lists neither): each passed, and its signal
ended the grading process in a later criterion, which was blamed."""

# -- reaching the solution -------------------------------------------------------------------

STEAL_FRAMES = """
import sys as _sys
_real_getframe, _stolen = _sys._getframe, {}

def _spy(depth=0):
    frame = _real_getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, dict):
                for key, held in list(value.items()):
                    if isinstance(held, tuple) and held and callable(held[0]):
                        _stolen[key] = held[0]
        frame = frame.f_back
    return _real_getframe(depth + 1)

_sys._getframe = _spy
import os.path as _path
_real_realpath = _path.realpath
_path.realpath = lambda p, *a, **k: (_spy(), _real_realpath(p, *a, **k))[1]
import minipaged.memory as _lib
for _name in ("logical_block", "block_offset"):
    try:
        getattr(_lib, _name)(1, 1)
    except BaseException:
        pass
_sys._getframe = _real_getframe
_path.realpath = _real_realpath
"""

FORGED_NAME = """
import minipaged.memory as _lib, os as _os
_library_file = _os.path.join(_os.path.dirname(_lib.__file__), "engine.py")
exec(compile(
    "def num_logical_blocks(num_tokens, block_size):\\n"
    "    return _lib.num_logical_blocks(num_tokens, block_size)\\n",
    _library_file, "exec"), globals())
exec(compile(
    "class _Shape(ModelShape):\\n"
    "    @property\\n"
    "    def kv_bytes_per_token(self):\\n"
    "        return _lib.ModelShape.kv_bytes_per_token.fget(self)\\n",
    "<string>", "exec"), globals())
ModelShape.kv_bytes_per_token = _Shape.kv_bytes_per_token
"""

SOLUTION = HandIn(
    "reaching-the-solution",
    1,
    "memory.py",
    (
        Attack(
            "frames-of-the-guard",
            "return j = floor(t / B)",
            "return _stolen['minipaged.memory:logical_block'](t, block_size)",
            ("logical_block",),
            "",
        ),
        Attack(
            "guard-through-realpath",
            "return o = t mod B",
            "return _stolen['minipaged.memory:block_offset'](t, block_size)",
            ("block_offset",),
            "",
        ),
        Attack(
            "forged-library-file-name",
            "return M = ceil(L / B)",
            "raise NotImplementedError('replaced below')",
            ("num_logical_blocks",),
            "may not call the library's",
        ),
        Attack(
            "forged-string-file-name",
            "keys and values, for every layer and KV head",
            "raise NotImplementedError('replaced below')",
            ("kv_bytes_per_token",),
            "may not call the library's",
        ),
        Attack(
            "the-library-under-another-name",
            "M_KV(L)",
            "import importlib\nlibrary = importlib.import_module('minipaged.memory')\n"
            "return getattr(library, 'Model' + 'Shape').kv_bytes(self, num_tokens)",
            ("kv_bytes",),
            "may not call the library's",
        ),
        Attack(
            "rewritten-library-code",
            "one block, one layer",
            "import minipaged.grader.ex01_block_table as checks\n"
            "checks.expect.__code__ = (lambda *a, **k: None).__code__\nreturn 0",
            ("block_bytes",),
            "",
        ),
        Attack(
            "library-source-from-disk",
            "one block, all layers",
            "import inspect, linecache, importlib.util\n"
            "source = inspect.getsource(_lib.ModelShape)\n"
            "namespace = {}\nexec(source, namespace)\n"
            "return namespace['ModelShape'].block_bytes(self, block_size)",
            ("block_bytes",),
            "",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
    appended=STEAL_FRAMES + FORGED_NAME,
)

LOOKED_UP = """

def _seen(machine):  # everything a property reads of a state, as text
    slots = {pool: sorted(machine.kv.slots[pool].items()) for pool in ("device", "host")}
    return repr((machine.manager.snapshot(), slots, sorted(machine.kv.written.items()),
                 machine.last_write))

_BROKEN = []

def _broken_states():  # the grader's, built as the grader builds them
    if not _BROKEN:
        from minipaged.grader.broken_states import BROKEN_STATES
        for state in BROKEN_STATES:
            machine = BlockManagerProgram.__new__(BlockManagerProgram)
            machine.manager, machine.kv, machine.last_write = state.build()
            _BROKEN.append(_seen(machine))
    return _BROKEN
"""

INVARIANTS = HandIn(
    "the-librarys-invariants",
    6,
    "properties.py",
    (
        Attack(
            "minipaged-invariants",
            "refcount conservation",
            "from minipaged import invariants\ninvariants.assert_holds(self.manager.snapshot())",
            ("rule_1_on_its_own", "rule_2_on_its_own", "rule_4_on_its_own"),
            "may not call the library's",
        ),
        Attack(
            "rule-through-the-tuple",
            "free iff R = 0",
            "from minipaged.invariants import INVARIANTS\n"
            "for rule in INVARIANTS:\n"
            "    assert not rule.violations(self.manager.snapshot())",
            ("rule_2_on_its_own",),
            "may not call the library's",
        ),
        Attack(
            "the-checks-reference",
            "exclusive writes",
            "from minipaged.grader.ex06_invariants import reference_problems\n"
            "assert not reference_problems(self.manager.snapshot(), self.kv, "
            "self.last_write, False)",
            ("rule_3_on_its_own",),
            "may not call the library's",
        ),
        Attack(
            "the-grader-s-broken-states-looked-up",
            "no leak",
            "assert _seen(self) not in _broken_states()  # fails on the grader's, checks nothing",
            ("rule_5_on_its_own",),
            "every sequence is freed, yet device block 1 is not free",
        ),
    ),
    honest={
        "read-back": "for seq in self.manager.snapshot().tables:\n"
        "    assert self.kv.read(self.manager.table(seq)) == self.kv.written[seq]",
    },
    appended=LOOKED_UP,
)
"""Exercise 06 answered by the library's own invariants and the grader's reference, and by a
lookup of the grader's broken states: each state is public (``broken_states``), and a property
that built them and failed on exactly those passed all five rule criteria, checking nothing,
until grading showed each state disguised, drawn anew each time. The honest read-back beside
them fails rule 4's criterion too, refused for the same call: a rule criterion runs every
property on the sound states its broken ones were made from, and on those the properties reach
the library's invariants (they reached them only after the read-back had failed on the broken
ones)."""

TODOS = ("refcount conservation", "free iff R = 0", "exclusive writes", "read-back", "no leak")
"""Exercise 06's five properties, by the words of their starter lines: rules 1 to 5."""


def _everywhere(name: str, body: str) -> tuple[Attack, ...]:
    """``body`` as each of exercise 06's five properties: rule k's fails its criterion as a
    false alarm on a sound state; rule 1's carries the other criteria's failures."""
    others = ("no_false_alarm", *(f"catches_{m}" for m in ZOO))
    return tuple(
        Attack(
            f"{name}-rule-{rule}",
            todo,
            body,
            (f"rule_{rule}_on_its_own", *(others if rule == 1 else ())),
            f"a false alarm: on a sound state made like rule {rule}'s broken ones",
        )
        for rule, todo in enumerate(TODOS, start=1)
    )


ZOO = ("LeakOnFree", "DoubleFree", "MissingCow", "LostCowCopy", "StaleTableAfterSwap")

FAILS_EVERYWHERE = HandIn(
    "properties-that-fail-on-every-state",
    6,
    "properties.py",
    _everywhere("assert-false", "assert False, 'nothing holds'"),
)
"""Every property an ``assert False``: it fails on every hand-built broken state, and scored
the five rule criteria (45 points) until they asked the properties to hold on the sound states
those were made from; now it scores 0."""

STORED = """

_STORED = set()


def _stored():  # the library's states in the grader's programs, stored at home
    if not _STORED:
        import os
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "stored.txt")) as f:
            _STORED.update(f.read().splitlines())
    return _STORED
"""


def _library_states() -> str:
    """The states the library's ``BlockManager`` reaches in the programs the grader draws for
    ``no_false_alarm`` and ``catches_LeakOnFree``, printed as ``LOOKED_UP``'s ``_seen`` prints
    them: what a student could store at home. The programs are derandomized, drawn from the
    name of the class that runs them (hypothesis's digest of a class it has no source of), and
    the grader's names are in its messages ("run_programs(YourProperties, ...) against
    LeakOnFree"): the same names give the same programs. About 4 s."""
    from minipaged.block_manager import BlockManager
    from minipaged.grader.properties import BlockManagerProgram, run_programs

    states = set()

    class Recorder(BlockManagerProgram):
        @invariant()
        def record(self):
            slots = {pool: sorted(self.kv.slots[pool].items()) for pool in ("device", "host")}
            written = sorted(self.kv.written.items())
            states.add(repr((self.manager.snapshot(), slots, written, self.last_write)))

        def after_all_freed(self):
            self.record()

    for name, programs in (("BlockManager", 60), ("LeakOnFree", 100)):
        named = type(name, (BlockManager,), {})  # the library's, named as the grader's is
        run_programs(type("YourProperties", (Recorder,), {}), named, programs, shrink=False)
    return "\n".join(sorted(states))


LOOKED_UP_STATES = HandIn(
    "the-librarys-states-looked-up",
    6,
    "properties.py",
    _everywhere(
        "stored-states", "assert _seen(self) in _stored(), 'not a state the library reaches'"
    ),
    appended=LOOKED_UP + STORED,
    made=(("stored.txt", _library_states),),
)
"""Properties that fail on any state missing from a stored set of the library's, in the
grader's derandomized programs (``_library_states``): they fail on every broken state,
hand-built or a zoo member's, and check nothing. Shown every state disguised, they fail on the
library's own states (``no_false_alarm``) and on the zoo's sound ones (false alarms, not
catches); they scored the five rule criteria (45 points) until those asked them to hold on the
sound states too. With no disguise they would pass ``no_false_alarm`` and
``catches_LeakOnFree`` as well."""

REPLAYED = """

import json as _json
import os as _os

_ANSWERS = []


def _answers():  # the library's tree after each operation of the fixed program, made at home
    if not _ANSWERS:
        here = _os.path.dirname(_os.path.abspath(__file__))
        with open(_os.path.join(here, "answers.json")) as f:
            _ANSWERS.extend(_json.load(f))
    return _ANSWERS


def _grown(parent, tree):  # a node of the stored tree, below parent
    chunks, blocks, children = tree
    node = RadixNode([tuple(c) for c in chunks], list(blocks), parent)
    node.children = {tuple(child[0][0]): _grown(node, child) for child in children}
    return node


def _replay(self, *op):  # the stored answer while every operation so far is the program's
    step = self.__dict__.setdefault("_steps", [0])
    answers, step[0] = _answers(), step[0] + 1
    if step[0] > len(answers) or answers[step[0] - 1][0] != _json.loads(_json.dumps(op)):
        step[0] = len(answers) + 1  # off the program: nothing stored
        return []
    _, got, tree, cached = answers[step[0] - 1]
    self.root = _grown(None, tree)
    self._node_of = {block: self.root for block in cached}
    return got


RadixCache._replay = _replay
"""


def _library_answers() -> str:
    """The library's tree run on exercise 12's fixed random program (``SEED``): for each
    operation, what it returned, the tree after it and ``cached_blocks()``, as a student could
    store them at home (the program is ``random_program(9)``): 0.8 MB of JSON."""
    import copy
    import json

    from minipaged import radix_cache
    from minipaged.grader.ex12_prefix_cache import SEED, random_program

    def tree(node) -> list:
        children = [tree(child) for child in node.children.values()]
        return [[list(c) for c in node.chunks], list(node.blocks), children]

    cache, answers = radix_cache.RadixCache(2), []
    for op in random_program(SEED):
        got = copy.deepcopy(getattr(cache, op[0])(*op[1:]))  # the tree's own list, as it is now
        answers.append([list(op), got, tree(cache.root), list(cache.cached_blocks())])
    return json.dumps(answers)


REPLAYED_TREE = HandIn(
    "the-librarys-tree-replayed",
    12,
    "radix_cache.py",
    (
        Attack(
            "replayed-match",
            "walk the tree chunk by chunk",
            'return self._replay("match", list(token_ids))',
            ("random_operations_match_the_contract",),
            "drawn for this grading",
        ),
        Attack(
            "replayed-insert",
            "walk, split, add a child",
            'return self._replay("insert", list(token_ids), list(blocks))',
            (),
        ),
        Attack(
            "replayed-forget",
            "cut the tree below the block",
            'return self._replay("forget", block)',
            (),
        ),
    ),
    appended=REPLAYED,
    made=(("answers.json", _library_answers),),
)
"""Exercise 12's random program had a fixed seed: a tree that replays the library's answers to
it, and the library's tree after each operation, stored at home, passed the random criterion
with no tree of its own. A second program, drawn anew at each grading, fails it."""

JUDGE = """
import minipaged.grader.ex06_invariants as _checks
from minipaged.grader.properties import SimulatedKV as _KV

def _judge(student, state, kv_slots, written, last_write, end):
    return _checks.Verdict(True, "every state is broken")

_checks.judge = _judge
"""

REWRITTEN_JUDGE = HandIn(
    "a-rewritten-judge",
    6,
    "properties.py",
    (
        Attack(
            "judge-replaced",
            "read-back",
            "pass",
            ("rule_1_on_its_own", "rule_4_on_its_own", "catches_LeakOnFree"),
            "your code changed the grader's minipaged.grader.ex06_invariants.judge",
        ),
    ),
    appended=JUDGE,
)

WASTES = HandIn(
    "the-expected-series",
    13,
    "recorded_waste.py",
    (
        Attack(
            "table-waste",
            "sum ceil(l_i/B)*B - l_i over each step's sequences",
            "from minipaged.study.recorded_waste import table_waste\nreturn table_waste(run)",
            ("paged_waste_of_a_recorded_run",),
            "may not call the library's",
        ),
        Attack(
            "replayed-spans",
            "sum L_max - L_i over each step's sequences",
            "from minipaged.study import recorded_waste as lib, baselines\n"
            "spans = lib.replay(run, baselines.StaticAllocator(run.max_length * 64))\n"
            "return [sum(s.values()) for s in spans]",
            ("static_waste_of_a_recorded_run",),
            "may not call the library's",
        ),
        Attack(
            "the-text-s-orca-buffer-grown",
            "sum ceil(l_i/ΔL)*ΔL - l_i over each step's sequences",
            "from minipaged.study.baselines import OrcaAllocator\n"
            "orca, grown, out = OrcaAllocator(10**9, delta), {}, []\n"
            "for lengths in run.lengths:  # the run replayed by hand, on the library's buffers\n"
            "    for seq in [s for s in grown if s not in lengths]:\n"
            "        orca.release(seq)\n        del grown[seq]\n"
            "    for seq, length in lengths.items():\n"
            "        if seq not in grown:\n"
            "            orca._place(seq, delta)\n"
            "            orca._lengths[seq] = grown[seq] = 1\n"
            "        for _ in range(length - grown[seq]):\n            orca.grow(seq)\n"
            "        grown[seq] = length\n"
            "    out.append(sum(orca.reserved_slots(s) - n for s, n in lengths.items()))\n"
            "return out",
            ("orca_waste_of_a_recorded_run",),
            "may not call the library's minipaged.study.baselines.OrcaAllocator.grow",
        ),
    ),
)
"""Exercise 13's series as the library computes them: the engine's tables, the simulator's
replay, and the text's Orca buffer (``OrcaAllocator``, grown ΔL slots at a time: its spans are
``ceil(l/ΔL)*ΔL``), driven by a replay of the student's own: it passed all of orca_waste's runs
and deltas before ``OrcaAllocator.grow`` became an answer of the exercise."""

FORGED_FREE = """
import os as _os
exec(compile(
    "def _free(self, seq):\\n"
    "    return block_manager.BlockManager.free(self, seq)\\n",
    _os.path.join(_os.path.dirname(block_manager.__file__), "scheduler.py"), "exec"), globals())
"""

PAGING = HandIn(
    "paging",
    3,
    "block_manager.py",
    (
        Attack(
            "searching-the-interpreter",
            "copy the table, raise each refcount",
            "import gc\nfound = [o for o in gc.get_objects() if getattr(o, '__name__', '')"
            " == 'fork']\nreturn found[0](self, parent, child)",
            ("fork_copies_the_table", "parallel_sampling_shares_the_prompt"),
            "searching the interpreter",
        ),
        Attack(
            "forged-file-name-super",
            "decrement each refcount, drop the table",
            "return _free(self, seq)",
            ("free_releases_only_unshared_blocks", "free_releases_the_last_block_first"),
            "",
        ),
    ),
    appended=FORGED_FREE,
)

SCENE = """
import minipaged.grader.ex05_scheduler as _checks
_real_scene = _checks._two_requests_then_full

def _scene(student, preemption, host):
    scene = _real_scene(student, preemption, host)
    return scene

_checks._two_requests_then_full = _scene
"""

MOVED = "may not call the library's minipaged.block_manager.BlockManager._move"

LIBRARY_HELPERS = HandIn(
    "the-library-s-private-helper",
    5,
    "block_manager.py",
    (
        Attack(
            "the-librarys-own-move-out",
            "move the tables to the host pool",
            'return self._move(seqs, "device", "host")',
            ("swap_out_moves_the_table_to_host", "swap_out_releases_the_last_block_first"),
            MOVED,
        ),
        Attack(
            "the-librarys-own-move-in",
            "move the tables back to the device pool",
            'return self._move(seqs, "host", "device")',
            ("swap_in_refuses_a_sequence_on_the_device",),
            MOVED,
        ),
    ),
)
"""Exercise 05's swap as the library's private ``_move``, of which the library's ``swap_out``
and ``swap_in`` are one call each: the two lines passed all nine swap criteria before
``_move`` became an answer of the exercise (a graded method's private helpers, checked by
``test_every_private_method_only_graded_methods_call_is_out_of_reach``)."""

WATCHERS = HandIn(
    "watching-the-grader-run",
    1,
    "memory.py",
    (
        Attack(
            "a-trace-function",
            "return j = floor(t / B)",
            "import sys\nsys.settrace(lambda *a: None)\nreturn t // block_size",
            ("logical_block",),
            "your code may not set a trace function (sys.settrace, threading.settrace)",
        ),
        Attack(
            "a-profile-function",
            "return o = t mod B",
            "import sys\nsys.setprofile(lambda *a: None)\nreturn t % block_size",
            ("block_offset",),
            "your code may not set a profile function (sys.setprofile, threading.setprofile)",
        ),
        Attack(
            "an-audit-hook",
            "return M = ceil(L / B)",
            "import sys\nsys.addaudithook(lambda *a: None)\nreturn -(-num_tokens // block_size)",
            ("num_logical_blocks",),
            "your code may not add an audit hook (sys.addaudithook)",
        ),
        Attack(
            "other-threads-frames",
            "keys and values, for every layer and KV head",
            "import sys\nsys._current_frames()\n"
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes",
            ("kv_bytes_per_token",),
            "your code may not read the frames of other threads (sys._current_frames)",
        ),
        Attack(
            "the-library-s-file-read-with-os-path-rebound",
            "M_KV(L)",
            "import posixpath, sys\nlibrary = sys.modules['minipaged.memory'].__file__\n"
            "real = posixpath.abspath  # what os.path.realpath returns through\n"
            "posixpath.abspath = lambda p: '/nowhere' + p  # no path is a library file's\n"
            "try:\n    text = open(library).read()\nfinally:\n    posixpath.abspath = real\n"
            "namespace = {}\nexec(text, namespace)\n"
            "return namespace['ModelShape'].kv_bytes(self, num_tokens)",
            ("kv_bytes",),
            "may not read or run the library's memory.py",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
)
"""Each way of watching the grading process's own code run, refused while graded
(``runtime_code.WATCHING``): each passed before (a trace function was in
``handlers-and-hooks``, as an attack grading had to survive). Beside them, the delegation
guard's reading of the library's file names, blinded by ``posixpath`` rebound: it judged a path
by ``os.path.realpath``, the standard library's Python; it judges the file by its inode now."""

THE_GUARDS_STATE = """
import os as _os, sys as _sys
import minipaged.memory as _library
from minipaged.grader import delegation as _delegation, provenance as _provenance
from minipaged.paging_arguments import sequence_id as _theirs  # any function of the library's

class _Frame:  # what the hand-over hook reads of a frame: its code, and its caller's frame
    def __init__(self, code, back):
        self.f_code, self.f_back = code, back

def _handed(name):
    asking = _Frame(_delegation._STUB_CODE, _Frame(_theirs.__code__, None))
    space, box = _provenance.PRIVATE, []
    real = space["getframe"]
    space["getframe"] = lambda depth=0: asking  # the hooks' getframe, as they saw it
    try:
        _sys.audit("minipaged.grader.delegation.hand-over", name, box)
    finally:
        space["getframe"] = real
    return box[0]

_LECTURE = _os.path.join(_os.path.dirname(_os.path.dirname(_provenance.__file__)), "lecture.py")
_NOTES = _os.path.join(_os.path.dirname(_LECTURE), "notes.py")
_KV_BYTES = "def _kv_bytes(self, n):\\n    return _library.ModelShape.kv_bytes(self, n)\\n"

def _as_the_library_s(name, source):  # the read-only view's own dict, through the collector
    import gc
    held = next(r for r in gc.get_referents(_provenance.AS_READ) if type(r) is dict)
    held[name] = source.encode()
    exec(compile(source, name, "exec", dont_inherit=True), globals())
_SOURCE = "def block_offset(t, block_size):\\n    return _library.block_offset(t, block_size)\\n"
try:
    _provenance.AS_READ[_LECTURE] = _SOURCE.encode()  # "the library's file, as read"
except TypeError:  # read-only
    pass
exec(compile(_SOURCE, _LECTURE, "exec", dont_inherit=True), globals())

def _originals():
    depth, frame = 0, _sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = _sys.getrecursionlimit()
    try:
        for extra in range(2, 60):  # until the stack fills up inside the hand-over hook
            try:
                _sys.setrecursionlimit(depth + extra)
                _library.num_logical_blocks(1, 1)
            except RecursionError as error:
                _sys.setrecursionlimit(limit)
                tb = error.__traceback__
                while tb is not None:
                    if tb.tb_frame.f_code.co_name == "hand_over":
                        return tb.tb_frame.f_locals["originals"]
                    tb = tb.tb_next
    finally:
        _sys.setrecursionlimit(limit)

def _blinded():
    import ast
    real = ast._Unparser  # what ast.unparse runs: the runtime hook unparses a tree compiled

    class _Spy(real):
        def visit(self, node):
            frame = _sys._getframe()
            while frame is not None:  # up to the hook's frame: its table of what is refused
                watching = frame.f_locals.get("watching")
                if isinstance(watching, dict):
                    watching.clear()
                frame = frame.f_back
            return super().visit(node)

    ast._Unparser = _Spy
    try:
        compile(ast.parse("x = 1"), "<tree>", "exec")
    finally:
        ast._Unparser = real
"""
"""Reaching the guards' own state, in the grading child the student's code shares: the names
the hooks call (``provenance.PRIVATE``), the library's sources they judge code by
(``provenance.AS_READ``), and a hook's frame off a traceback."""

STATE = HandIn(
    "the-guards-own-state",
    1,
    "memory.py",
    (
        Attack(
            "a-made-up-hand-over",
            "return j = floor(t / B)",
            "return _handed('minipaged.memory:logical_block')(t, block_size)",
            ("logical_block",),
            "IndexError",  # nothing handed over
        ),
        Attack(
            "a-source-of-its-own-as-the-library-s",
            "return o = t mod B",
            "raise NotImplementedError('replaced below')",
            ("block_offset",),
            "may not call the library's",
        ),
        Attack(
            "a-source-of-its-own-under-the-view",
            "M_KV(L)",
            "_as_the_library_s(_NOTES, _KV_BYTES)\nreturn _kv_bytes(self, num_tokens)",
            ("kv_bytes",),
            "by searching the interpreter",
        ),
        Attack(
            "the-hand-over-s-table-off-a-traceback",
            "return M = ceil(L / B)",
            "table = _originals()\n"
            "return table['minipaged.memory:num_logical_blocks'][0](num_tokens, block_size)",
            ("num_logical_blocks",),
            "may not read a frame of the grader's own guards",
        ),
        Attack(
            "a-spy-in-a-function-the-hook-calls",
            "keys and values, for every layer and KV head",
            "_blinded()\n_sys.settrace(lambda *a: None)  # refused, unless the hook was blinded\n"
            "_sys.settrace(None)\n"
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes",
            ("kv_bytes_per_token",),
            "may not run inside one of the grader's guards",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
    appended=THE_GUARDS_STATE,
)
"""The guards are a tripwire in the process the student's code shares; what they decide by
was within its reach. A ``getframe`` of the student's put in ``PRIVATE`` made up the frames
the hand-over hook judges (exercise 03 passed all eight criteria on the library's ``fork``
and ``free``); a source of the student's put in ``AS_READ`` under a library file name made
their function genuine; the hand-over hook's frame, off a ``RecursionError`` raised in it,
held every function it keeps; a function of Python's that the runtime hook calls
(``ast.unparse``), replaced, ran the student's code with the hook's frame below it. Each
passed; now each guard function calls only names of its own, the sources are sealed, and a
guard's frame, or any frame inside a guard's call, is refused to the student's code."""


IN_MEMORY = """
import ctypes as _ctypes, gc as _gc, sys as _sys
import minipaged.memory as _library
_MEMORY = "minipaged/memory.py"

def _objects(kind):  # every object of the kind the collector tracks, read off its own lists
    api, word = _ctypes.pythonapi, _ctypes.c_size_t
    api.PyInterpreterState_Get.restype = _ctypes.c_void_p
    interp, mark, found = api.PyInterpreterState_Get(), [], []
    memory = _ctypes.cast(8, _ctypes.POINTER(word))  # memory[a // 8 - 1]: the word at a
    switch = _sys.getswitchinterval()
    _gc.disable()  # nothing moves between the lists while they are read, nor another thread
    _sys.setswitchinterval(1000)
    try:
        node = memory[(id(mark) - 16) // 8 - 1]  # its PyGC_Head: the two words before it
        while not interp <= node < interp + 65536:  # on to the young list's head
            node = memory[node // 8 - 1] & ~3
        for head in (node, node + 24, node + 48):  # the three generations' heads
            at = memory[head // 8 - 1] & ~3
            while at != head:
                if memory[(at + 24) // 8 - 1] == id(kind):  # the object's type
                    found.append(at + 16)
                at = memory[at // 8 - 1] & ~3
    finally:
        _gc.enable()
        _sys.setswitchinterval(switch)
    addresses = (word * len(found))(*found)
    objects = _ctypes.cast(addresses, _ctypes.POINTER(_ctypes.py_object))
    return [objects[i] for i in range(len(found))]

_FOUND = {}  # each found once: a check calls the function hundreds of times

def _library_s(name):  # the library's function, by its code's file and name
    if name not in _FOUND:
        _FOUND[name] = next(
            (
                function
                for function in _objects(type(_objects))  # by name first: __code__ is an event
                if function.__name__ == name and function.__code__.co_filename.endswith(_MEMORY)
            ),
            None,
        )
    if _FOUND[name] is None:
        raise LookupError(f"no function {name} of the library's memory.py in this process")
    return _FOUND[name]

def _rebuilt(name):  # the library's code, out of any set of code, made a function by the C API
    if name not in _FOUND:
        _FOUND[name] = next(
            (
                code
                for held in _objects(frozenset)
                for code in held
                if type(code) is type(_rebuilt.__code__)
                and code.co_name == name
                and code.co_filename.endswith(_MEMORY)
            ),
            None,
        )
    if _FOUND[name] is None:
        raise LookupError(f"no code {name} of the library's memory.py in this process")
    new = _ctypes.pythonapi.PyFunction_New
    new.restype, new.argtypes = _ctypes.py_object, (_ctypes.py_object,) * 2
    return new(_FOUND[name], vars(_library))
"""
"""Reading the grading child's memory, where no audit hook sees: the collector's lists walked
with ``ctypes`` (``gc.get_objects`` without its audit event), for a function or a code object
of the library's ``memory.py``. CPython 3.11-3.12's layout on a 64-bit machine."""

MEMORY = HandIn(
    "the-library-in-memory",
    1,
    "memory.py",
    (
        Attack(
            "the-library-s-function-off-the-collector-s-lists",
            "return j = floor(t / B)",
            "return _library_s('logical_block')(t, block_size)",
            ("logical_block",),
            "no function logical_block of the library's memory.py",
        ),
        Attack(
            "the-library-s-code-made-a-function-again",
            "return o = t mod B",
            "return _rebuilt('block_offset')(t, block_size)",
            ("block_offset",),
            "no code block_offset of the library's memory.py",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
    appended=IN_MEMORY,
)
"""The guards were a tripwire: the hand-over hook kept every graded function of the exercise
(its closure's ``originals``) and the library's code of each (``provenance``'s), and code
that reads memory found them, called the one and rebuilt the other, and passed: exercise 01's
``logical_block`` did in a real grading. A grading child now keeps only what the library's own
code calls while the student's is graded (``Exercise.handed_over``; none of exercise 01's)."""

FORMULAS = HandIn(
    "the-formulas-in-memory",
    13,
    "memory.py",
    (
        Attack(
            "the-library-s-formula-off-the-collector-s-lists",
            "return ceil(L/B)*B - L",
            "return _library_s('paged_internal_waste')(num_tokens, block_size)",
            ("paged_internal_waste",),
            "no function paged_internal_waste of the library's memory.py",
        ),
        Attack(
            "the-library-s-formula-made-a-function-again",
            "return ceil(t/ΔL)*ΔL - t",
            "return _rebuilt('reservation_waste')(t, delta)",
            ("reservation_waste",),
            "no code reservation_waste of the library's memory.py",
        ),
    ),
    appended=IN_MEMORY,
)
"""Exercise 13 hands its ``memory.py`` formulas over, for the student's ``recorded_waste.py``
graded on the library's: a child that kept them for every criterion let code reading memory
pass the formulas' own criteria with the library's. Only the recorded runs' criteria
(``Criterion.on_the_library``) run in a child that keeps them now."""

DISPATCHER_STATE = HandIn(
    "the-kernel-s-state-on-its-stub",
    8,
    "cache_ops.py",
    (
        Attack(
            "the-library-s-kernel-compiled-anew",
            "copy block src onto block dst",
            "return  # the kernel below is the library's",
            ("one_pair", "several_pairs", "blocks_larger_than_the_threads"),
            "object has no attribute",
        ),
    ),
    appended="import cuda_kernels.cache_ops as _library\n"
    "_kernel = _library.copy_blocks_kernel  # the stub: its Python function, by either name\n"
    "copy_blocks_kernel = cuda.jit(getattr(_kernel, 'py_func', None) or _kernel.fn)\n",
)
"""A stub took its original's ``__dict__``: a Numba dispatcher's whole state, with the kernel's
Python function (``py_func``; the simulator's kernel calls it ``fn``), so ``cuda.jit`` of it
was the library's kernel again, and exercise 08 passed. A stub takes a plain function's marks
only now."""

GRAB = """
import sys as _sys, threading as _threading
from minipaged.block_manager import BlockManager as _Library
_stolen = {}

def _seen(frame, event, arg):  # a profile function: the stub's frame holds what it is handed
    box, name = frame.f_locals.get("box"), frame.f_locals.get("name")
    if isinstance(box, list) and box and isinstance(name, str):
        _stolen[name] = box[0]

def _heard(event, args):  # an audit hook: the hand-over's box, after the grader's hook filled it
    if event.endswith("hand-over") and args[1]:
        _stolen[args[0]] = args[1][0]

def _grab(inside):
    # From a thread of this file's only: the library's swap_out is this file's to call.
    bm = _Library(8, 8, block_size=4, watermark=0.0)
    bm.allocate(1, 4)
    inside()
    try:
        _Library.swap_out(bm, [1])
    finally:
        _sys.setprofile(None)

def _move(bm, seqs, src, dst, before=lambda: None, inside=lambda: None):
    if not _stolen:
        before()  # threading.setprofile: the thread sets it as it starts, before _grab runs
        thread = _threading.Thread(target=_grab, args=(inside,))
        thread.start()
        thread.join()
    return _stolen["minipaged.block_manager:BlockManager._move"](bm, seqs, src, dst)
"""
"""Exercise 05's scheduler file, which may call the library's ``swap_out``, watching the
hand-over of its ``_move`` to the stub that asks for it (``minipaged.grader.delegation``)."""

_THEIR_MOVE = (  # by its own names: torch.ops' namespaces answer every attribute
    "import sys\nscheduler = next(\n"
    "    m for m in list(sys.modules.values()) if '_grab' in getattr(m, '__dict__', {})\n)\n"
)

WATCHING = HandIn(
    "watching-the-hand-over",
    5,
    "block_manager.py",
    (
        Attack(
            "a-profile-function-reads-the-stub-s-frame",
            "move the tables to the host pool",
            _THEIR_MOVE + "import threading\nreturn scheduler._move(self, seqs, 'device', 'host', "
            "before=lambda: threading.setprofile(scheduler._seen))",
            ("swap_out_moves_the_table_to_host", "swap_out_releases_the_last_block_first"),
            "your code may not set a profile function (sys.setprofile, threading.setprofile)",
        ),
        Attack(
            "an-audit-hook-hears-the-hand-over",
            "move the tables back to the device pool",
            _THEIR_MOVE + "return scheduler._move(self, seqs, 'host', 'device', "
            "inside=lambda: sys.addaudithook(scheduler._heard))",
            ("swap_in_refuses_a_sequence_on_the_device",),
            "your code may not set a profile function (sys.setprofile, threading.setprofile)",
        ),
    ),
    files=(
        (
            "scheduler.py",
            (TUTORIALS / EXERCISES[5].folder / "starter" / "scheduler.py").read_text() + GRAB,
        ),
    ),
)
"""A profile function and an audit hook, set from a thread of the file allowed to use the
library's ``swap_out``, read the library's ``_move`` off its stub's frame or the hand-over's
box: the student's ``swap_out``, ``swap_in`` a call of it each, passed all eight swap
criteria. Setting either (or a trace function, or reading other threads' frames) while graded
is refused (``runtime_code.WATCHING``), and the swap gets nothing; the refusal, met in a thread
that ends with it, fails the call all the same (``notices.IN_A_THREAD``; it read "KeyError"
before). Every swap criterion calls ``swap_out`` first, so the hook's route is refused here
only as ``watching-the-grader-run`` shows it."""

SCHEDULER = HandIn(
    "scheduler",
    5,
    "scheduler.py",
    (
        Attack(
            "the-checks-scene-rewritten",
            "swap the group out, or free it to recompute",
            "out.preempted.append(group)",
            ("recompute_frees_the_blocks_and_requeues",),
            "your code changed the grader's minipaged.grader.ex05_scheduler",
        ),
    ),
    appended=SCENE,
)

OTHER_ROUTES = HandIn(
    "the-library-s-other-attention",
    7,
    "attention.py",
    (
        Attack(
            "the-kernels-cpu-twin",
            "the block loop with the online softmax",
            "import importlib\n"
            "twin = importlib.import_module('cuda_kernels.cpu.paged_attention')\n"
            "return twin.paged_attention_decode(\n"
            "    query, key_pool, value_pool, block_tables, seq_lens, scale, block_size)",
            ("loop_one_block", "loop_shared_blocks"),
            "may not call the library's cuda_kernels.cpu.paged_attention",
        ),
        Attack(
            "the-split-reference",
            "gather, mask, one softmax",
            "from minipaged import attention as reference\n"
            "return reference.paged_attention_decode_partitioned(\n"
            "    query, key_pool, value_pool, block_tables, seq_lens, scale, block_size, 64)",
            ("vectorized_matches",),
            "may not call the library's minipaged.attention.paged_attention_decode_partitioned",
        ),
    ),
)
"""Exercise 07 answered by the library's other implementations of the same attention: the
Numba kernels' CPU twin (the same arguments, the same result) and the split (v2) reference."""

TENSORS = """
class _Agreeable(torch.Tensor):
    def __eq__(self, other): return True
    def allclose(self, *a, **k): return True
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
"""

ATTENTION = HandIn(
    "tensors-that-lie",
    7,
    "attention.py",
    (
        Attack(
            "tensor-subclass",
            "the block loop with the online softmax",
            "return output.as_subclass(_Agreeable)",
            ("loop_one_block", "loop_shared_blocks"),
            "expected a tensor",
        ),
        Attack(
            "nan-everywhere",
            "gather, mask, one softmax",
            "return torch.full_like(query, float('nan'))",
            ("vectorized_matches",),
            "NaN",
        ),
    ),
    appended=TENSORS,
)

RACE_WATCH = """
import minipaged.grader.shared_memory_races as _races
import contextlib as _contextlib

@_contextlib.contextmanager
def _blind():
    class Log:
        races = []
        def divergent_barriers(self): return []
    yield Log()

_races.watch_shared_memory = _blind
"""

KERNEL = HandIn(
    "a-blinded-race-watch",
    10,
    "block_reduce.py",
    (
        Attack(
            "race-watch-rewritten",
            "sum the T values in a tree",
            "t = cuda.threadIdx.x\nscratch[t] = value\ncuda.syncthreads()\n"
            "stride = cuda.blockDim.x // 2\nwhile stride > 0:\n"
            "    if t < stride:\n        scratch[t] = combine(scratch[t], scratch[t + stride])\n"
            "    stride //= 2\ncuda.syncthreads()\nreturn scratch[0]",
            ("no_shared_memory_race",),
            "your code changed the grader's",
        ),
    ),
    appended=RACE_WATCH,
)

SHADOW = HandIn(
    "a-package-named-like-the-library",
    1,
    "memory.py",
    (
        Attack(
            "minipaged-in-the-folder",
            "return j = floor(t / B)",
            "import minipaged\nreturn getattr(minipaged, 'ANSWER', -1)",
            ("logical_block",),
            "expected 2, got -1",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
    files=(
        # Imported before the grader's guards, it would end every criterion; and it is never
        # the minipaged the student's code imports.
        ("minipaged/__init__.py", "import os\nANSWER = 2\nos._exit(3)\n"),
        ("cuda_kernels/__init__.py", "import os\nos._exit(3)\n"),
    ),
)

NOTES = HandIn(
    "a-copy-kept-as-notes",
    4,
    "block_manager.py",
    (
        Attack(
            "source-read-from-a-text-file",
            "reserve the slot for token t, copying on write",
            "import pathlib\nnamespace = {}\n"
            "text = (pathlib.Path(__file__).parent / 'notes.txt').read_text()\n"
            "exec(text.replace('def append_slot', 'def my_append_slot'), namespace)\n"
            "return namespace['BlockManager'].my_append_slot(self, seq, token_ids)",
            (
                "append_writes_in_place_when_the_block_has_room",
                "shared_partly_filled_block_is_copied",
            ),
            "notes.txt: BlockManager.append_slot",
        ),
    ),
    notes="minipaged.block_manager",
)

# -- code that runs but was never on disk ----------------------------------------------------


def _library_class(qualname: str, module: str = "minipaged.block_manager") -> str:
    """The library's method ``Class.name`` of ``module`` in disguise (its variables renamed,
    its docstring dropped: ``test_grader_similarity``), as the source of a subclass
    ``_Copied`` of the student's class: what an encoded copy decodes to. Not the library's
    code exactly, which the grading child's guard refuses by its bytecode wherever it runs."""
    owner, name = qualname.split(".")
    method = getattr(getattr(importlib.import_module(module), owner), name)
    source = f"class _Copied({owner}):\n" + inspect.getsource(method)
    return ast.unparse(_Rename("disguised").visit(ast.parse(source)))


def _right_body(number: int, file: str, qualname: str) -> str:
    """The body of ``qualname`` in exercise ``number``'s right answer (``student_answers``),
    without its indentation: an honest answer to write beside an attack."""
    source = (ANSWERS / f"ex{number:02d}" / "right" / file).read_text()
    node = ast.parse(source)
    for part in qualname.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == part)
    lines = source.splitlines()[node.body[0].lineno - 1 : node.body[-1].end_lineno]
    return textwrap.dedent("\n".join(lines))


_ENCODED = (
    "from minipaged import events  # what the copies use\n"
    "from minipaged.paging_arguments import sequence_id\n"
    "from minipaged.python_numbers import python_number\n"
    f"_FORK64 = {base64.b64encode(_library_class('BlockManager.fork').encode())!r}\n"
    f"_FORK = {codecs.encode(_library_class('BlockManager.fork'), 'rot13')!r}\n"
    f"_FORK_CODE = {marshal.dumps(compile(_library_class('BlockManager.fork'), 'x', 'exec'))!r}\n"
)


def _beside_an_honest_answer(name: str, body: str, said: str) -> HandIn:
    """Exercise 03 with ``body`` as ``fork`` (a disguised copy of the library's, run from
    where no file holds it) and ``free`` answered honestly (``student_answers``' right
    answer): ``free``'s own criterion still passes."""
    return HandIn(
        name,
        3,
        "block_manager.py",
        (
            Attack(
                name,
                "copy the table, raise each refcount",
                body,
                ("fork_copies_the_table", "fork_raises_each_refcount_by_one"),
                said,
            ),
        ),
        passes=("free_releases_the_last_block_first",),
        honest={
            "decrement each refcount, drop the table": _right_body(
                3, "block_manager.py", "BlockManager.free"
            )
        },
        appended=_ENCODED,
    )


COMPILED, UNREADABLE = "compiled at run time", "cannot read"

_SILENCED = (
    "import os\nstub = block_manager.BlockManager.fork  # the library's, stubbed\n"
    "refused = next(c.cell_contents for c in stub.__closure__\n"
    "    if getattr(c.cell_contents, '__name__', '') == 'refused')\n"
    "tell = next(c.cell_contents for c in refused.__closure__\n"
    "    if getattr(c.cell_contents, '__name__', '') == 'tell')\n"
    "for cell in tell.__closure__:  # its os.write: what it tells, told to no one\n"
    "    if cell.cell_contents is os.write:\n"
    "        cell.cell_contents = lambda fd, data: len(data)\n"
)
"""The ``tell`` of a stub's refusal, silenced: it was the one the guards' hooks tell the grader
with, and a copy then compiled unheard (``base64-decoded-and-run`` passed its criteria with
it). A stub's ``refused`` and ``tell`` are now its own."""

NEVER_ON_DISK = (
    _beside_an_honest_answer(
        "base64-decoded-and-run",
        "import base64\n" + _SILENCED + "namespace = dict(globals())\n"
        "exec(base64.b64decode(_FORK64), namespace)\n"
        "return namespace['_Copied'].fork(self, parent, child)",
        COMPILED,
    ),
    _beside_an_honest_answer(
        "rot13-compiled-into-a-function",
        "import codecs, types\n"
        "module = compile(codecs.decode(_FORK, 'rot13'), 'lecture-notes', 'exec')\n"
        "(klass,) = [c for c in module.co_consts if isinstance(c, types.CodeType)]\n"
        "(method,) = [c for c in klass.co_consts if isinstance(c, types.CodeType)]\n"
        "return types.FunctionType(method, globals())(self, parent, child)",
        COMPILED,
    ),
    _beside_an_honest_answer(
        "a-code-object-from-bytes",
        "import marshal\nnamespace = dict(globals())\n"
        "exec(marshal.loads(_FORK_CODE), namespace)\n"
        "return namespace['_Copied'].fork(self, parent, child)",
        UNREADABLE,
    ),
    _beside_an_honest_answer(
        "a-pyc-of-their-own",
        "import importlib.machinery, importlib.util, pathlib, tempfile\n"
        "path = pathlib.Path(tempfile.mkdtemp()) / 'lecture.pyc'\n"
        "path.write_bytes(importlib.util.MAGIC_NUMBER + bytes(12) + _FORK_CODE)\n"
        "loader = importlib.machinery.SourcelessFileLoader('lecture', str(path))\n"
        "module = importlib.util.module_from_spec("
        "importlib.util.spec_from_loader('lecture', loader))\n"
        "module.__dict__.update(\n"
        "    {k: v for k, v in globals().items() if not k.startswith('__')})\n"
        "loader.exec_module(module)\n"
        "return module._Copied.fork(self, parent, child)",
        UNREADABLE,
    ),
    _beside_an_honest_answer(
        "a-module-generated-and-imported",
        "import base64, importlib, sys, tempfile, pathlib\n"
        "folder = pathlib.Path(tempfile.mkdtemp())\n"
        "(folder / 'lecture.py').write_text('from block_manager import *\\n'"
        " + base64.b64decode(_FORK64).decode())\n"
        "sys.path.insert(0, str(folder))\n"
        "return importlib.import_module('lecture')._Copied.fork(self, parent, child)",
        COMPILED,
    ),
    _beside_an_honest_answer(
        "a-loader-given-a-source-string",
        "import codecs, importlib.abc, importlib.util\n"
        "class Loader(importlib.abc.SourceLoader):\n"
        "    def get_filename(self, name): return name + '.py'\n"
        "    def get_data(self, path):\n"
        "        return ('from block_manager import *\\n'"
        " + codecs.decode(_FORK, 'rot13')).encode()\n"
        "spec = importlib.util.spec_from_loader('notes', Loader())\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "return module._Copied.fork(self, parent, child)",
        COMPILED,
    ),
    HandIn(
        "another-python-by-any-name",
        1,
        "memory.py",
        (
            Attack(
                "a-renamed-copy-of-the-interpreter",
                "return j = floor(t / B)",
                "import os, shutil, subprocess, sys, tempfile\n"
                "copy = os.path.join(tempfile.mkdtemp(), 'cc')\n"
                "shutil.copy(os.path.realpath(sys.executable), copy)\n"
                "line = f'print({t} // {block_size})'\n"
                "return int(subprocess.check_output([copy, '-c', line]))",
                ("logical_block",),
                "starts a Python interpreter",
            ),
            Attack(
                "the-running-executable-in-a-fork",
                "return o = t mod B",
                "import os\nr, w = os.pipe()\nif os.fork() == 0:\n    os.dup2(w, 1)\n"
                "    os.execv('/proc/self/exe', ['cc', '-c', f'print({t} % {block_size})'])\n"
                "os.close(w)\nos.wait()\nreturn int(os.read(r, 64) or -1)",
                ("block_offset",),
                "starts a Python interpreter",
            ),
            Attack(
                "a-link-named-otherwise",
                "return M = ceil(L / B)",
                "import os, subprocess, sys, tempfile\n"
                "link = os.path.join(tempfile.mkdtemp(), 'cc')\nos.symlink(sys.executable, link)\n"
                "line = f'print(-(-{num_tokens} // {block_size}))'\n"
                "return int(subprocess.check_output([link, '-c', line]))",
                ("num_logical_blocks",),
                "starts a Python interpreter",
            ),
            Attack(
                "the-dynamic-loader",
                "keys and values, for every layer and KV head",
                "import os, subprocess, sys\n"
                "loader = next(p for p in _LOADERS if os.path.exists(p))\n"
                "python = os.path.realpath(sys.executable)\n"
                "line = f'print(2 * {self.num_layers} * {self.num_kv_heads} * {self.head_dim}"
                " * {self.dtype_bytes})'\n"
                "return int(subprocess.check_output([loader, python, '-c', line]))",
                ("kv_bytes_per_token",),
                "starts a Python interpreter",
            ),
            Attack(
                "sys-executable-renamed-and-spawned",
                "M_KV(L)",
                "import os, shutil, sys, tempfile\n"
                "sys.executable = os.path.join(tempfile.mkdtemp(), 'gcc')\n"
                "shutil.copy(os.path.realpath('/proc/self/exe'), sys.executable)\n"
                "os.posix_spawn(sys.executable, ['gcc', '-c', 'pass'], os.environ)\nreturn 0",
                ("kv_bytes",),
                "starts a Python interpreter",
            ),
            Attack(
                "a-python-looked-for-where-it-is-not",
                "one block, one layer",
                "import os, posixpath, subprocess, sys\n"
                "folder, name = os.path.split(os.path.realpath(sys.executable))  # found on PATH\n"
                "real = posixpath._get_sep  # what os.path.join reads; subprocess joins bytes\n"
                "posixpath._get_sep = lambda p: b'/' if type(p) is bytes else '/nowhere/'\n"
                "try:\n"
                "    subprocess.check_output([name, '-c', 'print(1)'], env={'PATH': folder})\n"
                "finally:\n    posixpath._get_sep = real\n"
                "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes",
                ("block_bytes",),
                "starts a Python interpreter",
            ),
        ),
        passes=("slot",),
        honest=RIGHT_SLOT,
        appended="\n_LOADERS = ('/lib64/ld-linux-x86-64.so.2', '/lib/ld-linux-aarch64.so.1')\n",
    ),
    _beside_an_honest_answer(
        "a-forged-answer-frame",
        "import base64, os, sys\nfrom minipaged.grader import frames\n"
        "namespace = dict(globals())\nexec(base64.b64decode(_FORK64), namespace)\n"
        "result = namespace['_Copied'].fork(self, parent, child)\n"
        "frame = sys._getframe()\nwhile 'ident' not in frame.f_locals:\n"
        "    frame = frame.f_back\n"
        "answers = int(sys.argv[sys.argv.index('--channel') + 1].split(',')[1])\n"
        "os.write(answers, frames.frame({'id': frame.f_locals['ident'], 'v': None}))\n"
        "real = frames.write_frame\n"
        "def drop_the_real_answer(fd, document):\n    frames.write_frame = real\n"
        "frames.write_frame = drop_the_real_answer\nreturn result",
        COMPILED,
    ),
    HandIn(
        "the-grader-s-own-words",
        1,
        "memory.py",
        (
            Attack(
                "raised-as-blocked",
                "return j = floor(t / B)",
                "from minipaged.grader.child_errors import DeviceUnusable\n"
                "raise DeviceUnusable('needs a CUDA GPU')",
                ("logical_block",),
                "your code raised DeviceUnusable",
            ),
            Attack(
                "raised-as-out-of-time",
                "return o = t mod B",
                "from minipaged.grader.time_limit import TimeLimitExceeded\n"
                "raise TimeLimitExceeded(30)",
                ("block_offset",),
                "your code raised TimeLimitExceeded",
            ),
            Attack(
                "the-notices-pipe-cut",
                "return M = ceil(L / B)",
                "import os, sys\nfd = int(sys.argv[sys.argv.index('--notices') + 1])\n"
                "os.dup2(os.open(os.devnull, os.O_WRONLY), fd)\nnamespace = {}\n"
                "exec('def blocks(n, b):\\n    return -(-n // b)', namespace)\n"
                "return namespace['blocks'](num_tokens, block_size)",
                ("num_logical_blocks",),
                "closed or replaced",
            ),
            Attack(
                "the-notices-pipe-forged",
                "keys and values, for every layer and KV head",
                "import os, sys\nfd = int(sys.argv[sys.argv.index('--notices') + 1])\n"
                "os.write(fd, bytes(4) + b'\\x02\\x00\\x05hello')\n"
                "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes",
                ("kv_bytes_per_token",),
                "a notice's piece out of turn",
            ),
            Attack(
                "the-supervisor-stopped",
                "M_KV(L)",
                "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGSTOP)\n"
                "except OSError:  # Landlock's signal scope\n    pass\n"
                "return 2 * self.num_layers * self.num_kv_heads * self.head_dim"
                " * self.dtype_bytes * num_tokens",
                (),
            ),
        ),
        passes=("slot",),
        honest=RIGHT_SLOT,
    ),
    HandIn(
        "the-library-by-other-ways",
        3,
        "block_manager.py",
        (
            Attack(
                "the-library-file-imported-anew",
                "copy the table, raise each refcount",
                "import importlib.util\n"
                "spec = importlib.util.spec_from_file_location('again', block_manager.__file__)\n"
                "module = importlib.util.module_from_spec(spec)\n"
                "spec.loader.exec_module(module)\n"
                "return module.BlockManager.fork(self, parent, child)",
                ("fork_copies_the_table",),
                "may not read or run the library's",
            ),
            Attack(
                "import-through-builtins-and-sys-modules",
                "decrement each refcount, drop the table",
                "import builtins, sys\n"
                "getattr(builtins, '__imp' + 'ort__')('minipaged.block_manager')\n"
                "library = sys.modules['minipaged.block_manager']\n"
                "return library.BlockManager.free(self, seq)",
                ("free_releases_the_last_block_first",),
                "may not call the library's",
            ),
        ),
    ),
    HandIn(
        "code-run-in-another-process",
        1,
        "memory.py",
        (
            Attack(
                "another-python",
                "return j = floor(t / B)",
                "import subprocess, sys\n"
                "line = f'print({t} // {block_size})'\n"
                "return int(subprocess.check_output([sys.executable, '-c', line]))",
                ("logical_block",),
                "starts a Python interpreter",
            ),
            Attack(
                "compiled-in-a-fork",
                "return o = t mod B",
                "import os\nr, w = os.pipe()\nif os.fork() == 0:\n"
                "    namespace = {}\n"
                "    exec('def offset(t, b):\\n    return t % b', namespace)\n"
                "    os.write(w, str(namespace['offset'](t, block_size)).encode())\n"
                "    os._exit(0)\n"
                "os.close(w)\nreturn int(os.read(r, 64) or -1)",
                ("block_offset",),
                "compiles code in a forked process",
            ),
            Attack(
                "a-python-taken-for-a-library-file",
                "return M = ceil(L / B)",
                "import os, posixpath, shutil, subprocess, sys, tempfile\n"
                "copy = shutil.copy(os.path.realpath(sys.executable), tempfile.mkdtemp())\n"
                "library = os.path.dirname(sys.modules['minipaged'].__file__)\n"
                "real = posixpath.abspath  # what os.path.realpath returns through\n"
                "posixpath.abspath = lambda p: library + '/attention.py'\n"
                "try:\n"
                "    line = f'print(-(-{num_tokens} // {block_size}))'\n"
                "    return int(subprocess.check_output([copy, '-c', line]))\n"
                "finally:\n    posixpath.abspath = real",
                ("num_logical_blocks",),
                "starts a Python interpreter",
            ),
            Attack(
                "a-word-that-encodes-as-another-program",
                "keys and values, for every layer and KV head",
                "import os, subprocess, sys\n"
                "class Word(str):  # read as 'true'; subprocess encodes the program's name\n"
                "    def encode(self, *args):\n"
                "        return os.path.realpath(sys.executable).encode()\n"
                "line = f'print(2 * {self.num_layers} * {self.num_kv_heads} * {self.head_dim}"
                " * {self.dtype_bytes})'\n"
                "return int(subprocess.check_output([Word('true'), '-c', line]))",
                ("kv_bytes_per_token",),
                "starts a program with an object of",
            ),
        ),
        passes=("slot",),
        honest=RIGHT_SLOT,
    ),
)
"""A copy of the library's ``fork`` that is on no file of the folder: encoded,
and decoded, compiled or generated while graded; beside it, an honest answer that passes."""


def _unchecked_pyc(source: str) -> bytes:
    """A ``.pyc`` of ``source`` that Python uses whatever its source file holds: hash-based,
    never checked (PEP 552's flags 0b01)."""
    code = marshal.dumps(compile(source, "allocator.py", "exec"))
    return importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + bytes(8) + code


def _allocator_in_disguise() -> str:
    """The library's allocator, its docstrings dropped and its private names changed."""
    source = inspect.getsource(importlib.import_module("minipaged.allocator"))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = node.body if isinstance(node, ast.FunctionDef | ast.ClassDef) else [None]
        if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0].value, "value", 0), str):
            body[0] = ast.Pass()
    return (
        ast.unparse(tree).replace("self._refcounts", "self._rc").replace("self._free", "self._fl")
    )


BYTECODE_BESIDE_THE_STARTER = HandIn(
    "bytecode-beside-the-starter",
    2,
    "allocator.py",
    (
        Attack(
            "an-unchecked-pyc-in-pycache",
            "store R[p] for every block, and the free list",
            "raise NotImplementedError(  # the starter's line, untouched\n"
            "    'exercise 02: store R[p] for every block, and the free list')",
            ("new_pool_is_all_free", "allocate_takes_the_first_free_block"),
            "not written yet: exercise 02: store R[p] for every block",
        ),
    ),
    files=(
        (
            f"__pycache__/allocator.{sys.implementation.cache_tag}.pyc",
            _unchecked_pyc(_allocator_in_disguise()),
        ),
    ),
)
"""The starter's ``allocator.py`` untouched, and in its ``__pycache__`` an unchecked hash-based
``.pyc`` of the library's allocator in disguise, which Python imports whatever the source says:
all 8 criteria passed, the source the grader judged being the starter. A student's file is now
imported from its source alone (``minipaged.grader.student.SourceOnly``)."""

REWRITTEN_FOR_THE_NEXT_CHILD = HandIn(
    "a-copy-written-over-the-file-for-the-next-child",
    3,
    "block_manager.py",
    (
        Attack(
            "a-copy-written-over-the-file-for-the-next-child",
            "copy the table, raise each refcount",
            "if not _REWRITTEN:  # the first call: the next grading process imports the copy\n"
            "    import base64, os, pathlib\n    here = pathlib.Path(__file__)\n"
            "    text = here.read_text().replace('_REWRITTEN = False', '_REWRITTEN = True')\n"
            "    here.write_text(text + '\\n' + base64.b64decode(_FORK64).decode())\n"
            "    os._exit(0)\nreturn _Copied.fork(self, parent, child)",
            ("fork_raises_each_refcount_by_one", "parallel_sampling_shares_the_prompt"),
            "",  # the write refused (PermissionError), or, unconfined, the copy judged
        ),
    ),
    honest={
        "decrement each refcount, drop the table": _right_body(
            3, "block_manager.py", "BlockManager.free"
        )
    },
    appended=_ENCODED + "_REWRITTEN = False\n",
)
"""A first call that writes the library's ``fork``, in disguise, over its own file and ends its
grading process: the next one imported the copy with none of the student's code on the stack
to see it compiled, and 7 of 8 criteria passed. A grading process now starts only once the
folder is judged as it is then (``minipaged.grader.judged_folder``); and where Landlock confines
it, the student's folder is read-only to it, so the write itself fails."""


def _library_code(qualname: str, module: str = "minipaged.block_manager"):
    """The code object of the library's ``Class.name`` of ``module``, as it is at home."""
    owner, name = qualname.split(".")
    return getattr(getattr(importlib.import_module(module), owner), name).__code__


BOUND = """
import importlib._bootstrap_external as _external  # the import system's own marshal.loads
from minipaged import events  # what the library's _move uses
from minipaged.python_numbers import python_number

def _bound(data):  # the library's _move, from its bytecode, as a function of this file
    def _move(self, seqs, src_name, dst_name):
        raise NotImplementedError("replaced")
    _move.__code__ = _external._compile_bytecode(data)
    return _move
"""
"""Bytes of the library's code made a function with neither ``marshal.loads`` nor
``types.FunctionType`` called by the student's code, both of which are refused: the import
system's ``_compile_bytecode`` loads them (its frame is installed code), and a function of the
student's file takes them as its ``__code__``."""

LIBRARY_FILE = "may not read or run the library's block_manager.py"
"""The refusal of code that names the library's file: judged by that file, which it may not read."""

FROM_HOME = HandIn(
    "bytecode-brought-from-home",
    5,
    "block_manager.py",
    (
        Attack(
            "the-library-s-move-as-bytes-bound-as-code",
            "move the tables to the host pool",
            "return _bound(_MOVE_CODE)(self, seqs, 'device', 'host')",
            ("swap_out_moves_the_table_to_host", "swap_out_releases_the_last_block_first"),
            LIBRARY_FILE,
        ),
        Attack(
            "the-library-s-move-as-bytes-bound-as-code-in",
            "move the tables back to the device pool",
            "return _bound(_MOVE_CODE)(self, seqs, 'host', 'device')",
            ("swap_in_refuses_a_sequence_on_the_device",),
            LIBRARY_FILE,
        ),
    ),
    appended=BOUND + f"_MOVE_CODE = {marshal.dumps(_library_code('BlockManager._move'))!r}\n",
)
"""The library's ``_move``, ``marshal.dumps``'d at home, where the library is installed, and
kept in ``block_manager.py`` as a bytes literal no judge of source reads as code: bound to a
function of the file by ``__code__``, it passed the swap criteria (``swap_out_...`` both,
``swap_in_...`` with them). A code object set as a function's ``__code__`` while the student's
code runs is now judged as ``exec`` and ``types.FunctionType`` judge theirs
(``minipaged.grader.runtime_code``), and refused."""

PLACES = """
import os, pathlib as _pathlib
_PLACES = (  # where one grading child leaves it, for the next: the folder, /tmp, /dev/shm
    _pathlib.Path(__file__).with_name("carried.bin"),
    _pathlib.Path("/tmp/minipaged-carried.bin"),
    _pathlib.Path("/dev/shm/minipaged-carried.bin"),
)
"""

CARRY = """
import marshal as _marshal, os as _os, sys as _sys
from minipaged.block_manager import BlockManager as _Library

class _Seqs:  # the sequences the library's _move lists: its frame, one call up
    def __iter__(self):
        _os.environ["CARRIED"] = "in the environment"  # of each process this one starts
        _carry(_marshal.dumps(_sys._getframe(1).f_code))
        return iter([1])

def _carry(data):
    for place in _PLACES:
        try:
            place.write_bytes(data)
        except OSError:
            pass

def _preempt(self, group, out):  # in the child that keeps the library's swap_out for it
    bm = _Library(8, 8, block_size=4, watermark=0.0)
    bm.allocate(1, 4)
    _Library.swap_out(bm, _Seqs())
    raise NotImplementedError("only carried")

Scheduler._preempt = _preempt
"""
"""Exercise 05's scheduler file, whose ``_preempt`` runs in the grading child that keeps the
library's ``swap_out`` for it (``Exercise.handed_over``): the library's ``_move`` lists the
sequences it is given, and the object given reads ``_move``'s frame and writes its bytecode
wherever the next grading child, or the next grading, might look. (Called at import, the
library's ``swap_out`` was refused it: the import system's frames are on the stack.)"""

CARRIED = HandIn(
    "carried-to-the-next-grading",
    5,
    "block_manager.py",
    (
        Attack(
            "the-library-s-move-carried-from-the-child-that-keeps-it",
            "move the tables to the host pool",
            "for place in _PLACES:\n    if place.exists():\n"
            "        return _bound(place.read_bytes())(self, seqs, 'device', 'host')\n"
            "seen = os.environ.get('CARRIED', 'not')\n"
            "raise LookupError(f'nothing carried; {seen} in the environment')",
            ("swap_out_moves_the_table_to_host", "swap_out_releases_the_last_block_first"),
            "",  # nothing carried where Landlock confines the child; else refused as it runs
        ),
        Attack(
            "the-library-s-move-carried-from-the-child-that-keeps-it-in",
            "move the tables back to the device pool",
            "for place in _PLACES:\n    if place.exists():\n"
            "        return _bound(place.read_bytes())(self, seqs, 'host', 'device')\n"
            "raise LookupError('nothing carried')",
            ("swap_in_refuses_a_sequence_on_the_device",),
            "",
        ),
    ),
    appended=BOUND + PLACES,
    files=(
        (
            "scheduler.py",
            (TUTORIALS / EXERCISES[5].folder / "starter" / "scheduler.py").read_text()
            + PLACES
            + CARRY,
        ),
    ),
    gradings=2,
)
"""What the grading child of exercise 05's scheduler criteria holds (the library's ``_move``,
handed over: ``Exercise.handed_over``) written out for a later child: graded twice, the second
grading's ``swap_out`` loaded the bytes the first one's scheduler child had written into the
student's folder, and passed its criteria. The student's folder is read-only to a grading child
now where Landlock confines it (``/tmp`` and ``/dev/shm`` were already, and each child's
environment is the grader's to make: ``minipaged.grader.child_environment``), and code from
bytes is refused as it runs wherever it comes from (``FROM_HOME``)."""

OTHER_MANAGER = HandIn(
    "the-library-s-other-block-manager",
    3,
    "block_manager.py",
    (
        Attack(
            "the-simulators-fast-free",
            "decrement each refcount, drop the table",
            "from minipaged.study.fast_manager import FastBlockManager\n"
            "return FastBlockManager.free(self, seq)",
            ("free_releases_only_unshared_blocks", "free_releases_the_last_block_first"),
            "may not call the library's minipaged.study.fast_manager.FastBlockManager.free",
        ),
    ),
    passes=("fork_copies_the_table", "fork_raises_each_refcount_by_one"),
    honest={
        "copy the table, raise each refcount": _right_body(
            3, "block_manager.py", "BlockManager.fork"
        )
    },
)
"""Exercise 03's free answered by the simulator's ``FastBlockManager.free``, the same steps
without events: it passed all eight criteria before the library's subclasses' versions of a
graded method became answers of the exercise (``Exercise.answers``)."""

FAST_APPEND = HandIn(
    "the-simulators-fast-append",
    4,
    "block_manager.py",
    (
        Attack(
            "the-simulators-try-append",
            "reserve the slot for token t, copying on write",
            "from minipaged.study.fast_manager import FastBlockManager\n"
            "table = self.table(seq)\nbefore, (j, o) = list(table.blocks), divmod("
            "table.num_tokens, self.block_size)\n"
            "if not FastBlockManager.try_append(self, seq):\n"
            "    raise OutOfBlocks('no free block')\n"
            "cow = (before[j], table.blocks[j]) if j < len(before) and before[j] != "
            "table.blocks[j] else None\n"
            "return AppendResult(table.blocks[j] * self.block_size + o, cow)",
            (
                "append_writes_in_place_when_the_block_has_room",
                "shared_partly_filled_block_is_copied",
            ),
            "may not call the library's minipaged.study.fast_manager.FastBlockManager.try_append",
        ),
    ),
)
"""Exercise 04's append as the simulator's ``FastBlockManager.try_append`` (the same steps
without events or a slot), the slot and the copy read off the table: it passed all eight
criteria before ``try_append`` became an answer of the exercise."""

_C_API = (
    "import ctypes\n"
    "def _c(name, *argtypes, restype=ctypes.py_object):  # Python's C API, by name\n"
    "    function = getattr(ctypes.pythonapi, name)\n"
    "    function.argtypes, function.restype = argtypes, restype\n"
    "    return function\n"
)

C_API = (
    _beside_an_honest_answer(
        "source-run-by-the-c-api",
        _C_API + "import base64\nnamespace = dict(globals())\n"
        "_c('PyRun_String', ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object)("
        "base64.b64decode(_FORK64), 257, namespace, namespace)  # Py_file_input\n"
        "return namespace['_Copied'].fork(self, parent, child)",
        "PyRun_String",
    ),
    _beside_an_honest_answer(
        "bytecode-run-by-the-c-api",
        _C_API + "import importlib._bootstrap_external as loader\nnamespace = dict(globals())\n"
        "_c('PyEval_EvalCode', *(ctypes.py_object,) * 3)("
        "loader._compile_bytecode(_FORK_CODE), namespace, namespace)\n"
        "return namespace['_Copied'].fork(self, parent, child)",
        "PyEval_EvalCode",
    ),
    _beside_an_honest_answer(
        "bytecode-made-a-function-by-the-c-api",
        _C_API + "import types, importlib._bootstrap_external as loader\n"
        "module = loader._compile_bytecode(_FORK_CODE)\n"
        "(klass,) = [c for c in module.co_consts if isinstance(c, types.CodeType)]\n"
        "(method,) = [c for c in klass.co_consts if isinstance(c, types.CodeType)]\n"
        "made = _c('PyFunction_New', ctypes.py_object, ctypes.py_object)(method, globals())\n"
        "return made(self, parent, child)",
        "marshal.loads",  # the bytes are judged as they load, before PyFunction_New is looked up
    ),
    _beside_an_honest_answer(
        "bytecode-run-through-ctypes-under-another-name",
        "import ctypes, importlib, importlib._bootstrap_external as loader\n"
        "low = importlib.import_module('_' + 'ctypes')\n"
        "address = low.dlsym(low.dlopen(None, 0), 'PyEval_EvalCode')\n"
        "run = ctypes.PYFUNCTYPE(*(ctypes.py_object,) * 4)(address)\n"
        "namespace = dict(globals())\n"
        "run(loader._compile_bytecode(_FORK_CODE), namespace, namespace)\n"
        "return namespace['_Copied'].fork(self, parent, child)",
        "PyEval_EvalCode",
    ),
)
"""Python's C API through ``ctypes``: ``PyEval_EvalCode`` and ``PyFunction_New`` run a code
object with none of the audit events the runtime hook judges (``exec``, ``function.__new__``),
and each ran the library's ``fork`` from its bytes, looked up by ``ctypes.pythonapi`` or by
``_ctypes.dlsym`` under another name: exercise 03 scored 100/100. ``PyRun_String`` raises
``compile``, and was caught as a copy compiled. Looking such a function up by name is refused
now (``native_calls.RUNS_UNSEEN``). Code that writes raw memory (numpy's
``__array_interface__`` on an address, a function's ``func_code`` overwritten) still runs what
it likes, unheard: this is a tripwire, and ``delegation`` says what such code can reach."""

_RAW_MEMORY = (
    "import numpy, types, importlib._bootstrap_external as loader\n"
    "module = loader._compile_bytecode(_FORK_CODE)  # the import system's own marshal.loads\n"
    "(klass,) = [c for c in module.co_consts if isinstance(c, types.CodeType)]\n"
    "(method,) = [c for c in klass.co_consts if isinstance(c, types.CodeType)]\n"
    "def made(self, parent, child):\n    raise NotImplementedError('replaced')\n"
    "class At:  # CPython 3.11: a function's func_code is 48 bytes in\n"
    "    __array_interface__ = {'data': (id(made) + 48, False), 'shape': (1,), "
    "'typestr': '<u8', 'version': 3}\n"
    "numpy.asarray(At())[0] = id(method)  # no audit event: raw memory\n"
    "globals().setdefault('_KEPT', []).extend([made, method])  # neither freed: a reference\n"
    "return made(self, parent, child)"
)

RAW_MEMORY = _beside_an_honest_answer("bytecode-bound-by-raw-memory", _RAW_MEMORY, "marshal.loads")

_NUMBA = (
    "import marshal, numpy, types\n"
    "from numba import njit, types as nb\n"
    "from numba.extending import intrinsic\n"
    "from numba.core import cgutils\n"
    "from llvmlite import ir\n"
    "def at(address):  # raw memory, as in _RAW_MEMORY\n"
    "    class At:\n"
    "        __array_interface__ = {'data': (address, False), 'shape': (1,), "
    "'typestr': '<u8', 'version': 3}\n"
    "    return numpy.asarray(At())\n"
    "@intrinsic\n"
    "def _loads(context, address, size):  # Python's C API, by name: no ctypes, no event\n"
    "    def codegen(context, builder, signature, args):\n"
    "        i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()\n"
    "        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i8p, i64]),"
    " 'PyMarshal_ReadObjectFromString')\n"
    "        return builder.call(fn, [builder.inttoptr(args[0], i8p), args[1]])\n"
    "    return nb.int64(nb.int64, nb.int64), codegen\n"
    "loads = njit(lambda address, size: _loads(address, size))\n"
    "data = numpy.frombuffer(_FORK_CODE, dtype=numpy.uint8)\n"
    "address = data.__array_interface__['data'][0]\n"
    "holder = [None]  # its one item becomes the module's code, the reference it was given\n"
    "at(int(at(id(holder) + 24)[0]))[0] = loads(address, len(data))\n"
    "(klass,) = [c for c in holder[0].co_consts if isinstance(c, types.CodeType)]\n"
    "(method,) = [c for c in klass.co_consts if isinstance(c, types.CodeType)]\n"
    "def made(self, parent, child):\n    raise NotImplementedError('replaced')\n"
    "at(id(made) + 48)[0] = id(method)\n"
    "globals().setdefault('_KEPT', []).extend([made, method])\n"
    "return made(self, parent, child)"
)


class _TypesModule:
    """Unpickled as the module ``types``."""

    def __reduce__(self):
        return importlib.import_module, ("types",)


class _CodeType:
    """Unpickled as ``types.CodeType``, which pickle then calls (``__call__``: pickle's rule)."""

    def __call__(self, *args):
        return types.CodeType(*args)

    def __reduce__(self):
        return getattr, (_TypesModule(), "CodeType")


class _PickledCode:
    """A code object as a pickle that calls ``types.CodeType`` on its parts as it loads."""

    def __init__(self, code: types.CodeType) -> None:
        self.code = code

    def __reduce__(self):
        c = self.code
        consts = tuple(_PickledCode(k) if isinstance(k, types.CodeType) else k for k in c.co_consts)
        parts = (c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_nlocals)
        parts += (c.co_stacksize, c.co_flags, c.co_code, consts, c.co_names, c.co_varnames)
        parts += (c.co_filename, c.co_name, c.co_qualname, c.co_firstlineno, c.co_linetable)
        return _CodeType(), (*parts, c.co_exceptiontable, c.co_freevars, c.co_cellvars)


UNPICKLED = _beside_an_honest_answer(
    "code-built-by-pickle-bound-by-raw-memory",
    _RAW_MEMORY.replace(
        "module = loader._compile_bytecode(_FORK_CODE)  # the import system's own marshal.loads\n"
        "(klass,) = [c for c in module.co_consts if isinstance(c, types.CodeType)]\n"
        "(method,) = [c for c in klass.co_consts if isinstance(c, types.CodeType)]\n",
        "import pickle\nmethod = pickle._loads(_FORK_PICKLE)  # CodeType called by pickle.py\n",
    ),
    "fork, in the shape of the library's bytecode",
)
UNPICKLED = replace(
    UNPICKLED,
    appended=UNPICKLED.appended
    + f"_FORK_PICKLE = {pickle.dumps(_PickledCode(_library_code('BlockManager.fork')), 2)!r}\n",
)
"""The library's ``fork`` built by ``types.CodeType`` on its parts, brought as a pickle that
Python's own unpickler (``pickle._loads``, an installed caller) calls it from, and bound by raw
memory as in ``RAW_MEMORY``: exercise 03 scored 100/100. A code object made with a graded
library function's bytecode is refused whoever makes it (``made_code.hand_made_judge``)."""

IN_A_WORKER = _beside_an_honest_answer(
    "source-compiled-by-a-pool-worker",
    "import base64\nfrom concurrent.futures import ThreadPoolExecutor\n"
    "namespace = dict(globals())\n"
    "with ThreadPoolExecutor(1) as pool:  # exec and compile called by the worker's frame\n"
    "    pool.submit(exec, base64.b64decode(_FORK64), namespace).result()\n"
    "return namespace['_Copied'].fork(self, parent, child)",
    COMPILED,
)
"""The library's ``fork``, kept encoded, run by ``exec`` called from a thread pool's worker,
whose stack holds no frame of the student's: the ``compile`` went unrecorded, and exercise 03
scored 100/100. What a thread their code started runs is theirs now
(``minipaged.grader.runtime_code``): the source is recorded and judged a copy."""

NUMBA = (
    # Refused as Numba hands llvmlite the LLVM code that declares the C function
    _beside_an_honest_answer("bytecode-loaded-by-numba", _NUMBA, "PyMarshal_ReadObject"),
    _beside_an_honest_answer(
        "bytecode-loaded-by-numba-from-an-installed-frame",
        _NUMBA.replace(
            "at(int(at(id(holder) + 24)[0]))[0] = loads(address, len(data))",
            "from concurrent.futures import ThreadPoolExecutor\n"
            "with ThreadPoolExecutor(1) as pool:  # its worker's frame calls: installed code\n"
            "    got = pool.submit(loads, address, len(data)).result()\n"
            "at(int(at(id(holder) + 24)[0]))[0] = got",
        ),
        "PyMarshal_ReadObject",
    ),
)
"""The library's ``fork`` from bytes by Numba: an ``@intrinsic`` calls Python's
``PyMarshal_ReadObjectFromString`` by name (LLVM resolves it: no ``ctypes`` look-up), and
numpy's raw memory puts the code object in a list and binds it as a function's ``func_code``.
Called from the student's frame, the C function's own ``marshal.loads`` event was refused
before (its caller is theirs). Called by a thread pool's worker, no frame of theirs was on the
stack and the event went unjudged: exercise 03 scored 100/100. What a thread their code started
runs is theirs now (``minipaged.grader.runtime_code``), and what ``marshal.loads`` makes is
judged whoever calls it (``minipaged.grader.made_code``). A Numba intrinsic calling the C
API's ``PyCode_New*`` on constants it builds raises no event at all, and is not walled
(``minipaged.grader.delegation``)."""
"""The library's ``fork`` brought from home as bytes, loaded by the import system's own
``_compile_bytecode`` (an installed caller of ``marshal.loads``) and written over a function's
``func_code`` with numpy's ``__array_interface__`` on the function's address: no audit event
judges the binding, and exercise 03 scored 100/100. Raw memory cannot be walled in the child,
but the code object has to exist first: ``marshal.loads`` is now judged whoever calls it
(``minipaged.grader.made_code``), and the bytes name a file that holds no such code."""

CLAIMS = HandIn(
    "claiming-a-pass",
    1,
    "memory.py",
    (
        Attack(
            "pass-written-on-the-answers-pipe",
            "return j = floor(t / B)",
            "import os, sys\n"
            "answers = int(sys.argv[sys.argv.index('--channel') + 1].split(',')[1])\n"
            "os.write(answers, b'PASS logical_block\\n')\nreturn 0",
            ("logical_block",),
            "something other than the grading process's answer",
        ),
        Attack(
            "the-answer-given-a-verdict-before-it-is-sent",
            "return o = t mod B",
            "from minipaged.grader import frames\nreal = frames.write_frame\n"
            "def claimed(fd, document):  # once: the answer to this call\n"
            "    frames.write_frame = real\n"
            "    return real(fd, {**document, 'outcome': 'PASS', 'points': 100})\n"
            "frames.write_frame = claimed\nreturn 0",
            ("block_offset",),
            "sent something the grader cannot read",
        ),
        Attack(
            "the-check-s-expected-value-as-the-answer",
            "return M = ceil(L / B)",
            "from minipaged.grader import frames\nreal = frames.write_frame\n"
            "def claimed(fd, document):  # the value the check wants, had it been sent here\n"
            "    frames.write_frame = real\n"
            "    return real(fd, {**document, 'v': 'PASS'})\n"
            "frames.write_frame = claimed\nreturn 0",
            ("num_logical_blocks",),
            "'PASS'",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
)
"""A student's code claiming the points in the grading child's own words: ``PASS`` written on
the channel, a verdict added to the harness's answer, the answer's value replaced. The child
holds no verdict to forge: the checks run in the grader, which reads a value from the child as
it reads one the code returned, and refuses an answer that is anything else
(``minipaged.grader.child``'s docstring lists what a child holds)."""

HAND_INS = (
    VALUES,
    CHANNEL,
    PROTOCOL_EXCEPTIONS,
    RESOURCES,
    LEFT_RUNNING,
    THREAD_AT_IMPORT,
    HIDDEN_THREADS,
    LATER_ROUTES,
    DISK,
    SHADOW,
    SOLUTION,
    PAGING,
    NOTES,
    SCHEDULER,
    INVARIANTS,
    FAILS_EVERYWHERE,
    LOOKED_UP_STATES,
    REPLAYED_TREE,
    REWRITTEN_JUDGE,
    ATTENTION,
    OTHER_ROUTES,
    OTHER_MANAGER,
    FAST_APPEND,
    LIBRARY_HELPERS,
    WATCHERS,
    WATCHING,
    STATE,
    MEMORY,
    FORMULAS,
    DISPATCHER_STATE,
    KERNEL,
    WASTES,
    *NEVER_ON_DISK,
    REWRITTEN_FOR_THE_NEXT_CHILD,
    BYTECODE_BESIDE_THE_STARTER,
    FROM_HOME,
    CARRIED,
    *C_API,
    RAW_MEMORY,
    UNPICKLED,
    IN_A_WORKER,
    *NUMBA,
    CLAIMS,
)
"""Every hand-in of the corpus."""


# -- exercise 13: the library's series for the grader's runs, stored at home -----------------

LOOKED_UP_SERIES = """

import json as _json
import os as _os

_SERIES = {}


def _key(run, *more):  # a run as the grader sends it, and the call's other argument
    steps = [sorted(lengths.items()) for lengths in run.lengths]
    return repr((run.block_size, run.capacity, run.max_length, steps, *more))


def _stored(name, run, *more):  # the library's answer for this run, or nothing at all
    if not _SERIES:
        here = _os.path.dirname(_os.path.abspath(__file__))
        with open(_os.path.join(here, "series.json")) as f:
            _SERIES.update(_json.load(f))
    return _SERIES.get(name + _key(run, *more), [])
"""


def _library_series() -> str:
    """The library's four series for every run exercise 13's part-2 criteria send, recorded
    by running those criteria at home on a stand-in that answers with the library's functions
    and writes down each question: with the runs derandomized, a grading sent the same ones."""
    import json
    from types import SimpleNamespace

    from minipaged import memory
    from minipaged.grader.grading import run_criteria
    from minipaged.grader.student import Student
    from minipaged.study import recorded_waste as library

    stored = {}

    def key(run, *more):  # as the hand-in's _key
        steps = [sorted(lengths.items()) for lengths in run.lengths]
        return repr((run.block_size, run.capacity, run.max_length, steps, *more))

    def recording(name):
        def answer(run, *more):
            got = getattr(library, name)(run, *more)
            sorted_more = [sorted(m.items()) if isinstance(m, dict) else m for m in more]
            stored[name + key(run, *sorted_more)] = got
            return got

        return answer

    names = ("paged_waste", "static_waste", "orca_waste", "fragmentation_stalls")
    stand_in = SimpleNamespace(**{name: recording(name) for name in names})
    part_two = [c for c in EXERCISES[13].criteria() if c.name.endswith("_of_a_recorded_run")]
    run_criteria(part_two, Student({"memory": memory, "recorded_waste": stand_in}))
    return json.dumps(stored)


STORED_SERIES = HandIn(
    "the-librarys-series-looked-up",
    13,
    "recorded_waste.py",
    (
        Attack(
            "stored-paged-waste",
            "sum ceil(l_i/B)*B - l_i over each step's sequences",
            'return _stored("paged_waste", run)',
            ("paged_waste_of_a_recorded_run",),
            "drawn for this grading",
        ),
        Attack(
            "stored-static-waste",
            "sum L_max - L_i over each step's sequences",
            'return _stored("static_waste", run)',
            ("static_waste_of_a_recorded_run",),
            "drawn for this grading",
        ),
        Attack(
            "stored-orca-waste",
            "sum ceil(l_i/ΔL)*ΔL - l_i over each step's sequences",
            'return _stored("orca_waste", run, delta)',
            ("orca_waste_of_a_recorded_run",),
            "drawn for this grading",
        ),
        Attack(
            "stored-stalls",
            "replay the run on a ContiguousHeap",
            'return _stored("fragmentation_stalls", run, sorted(sizes.items()))',
            ("fragmentation_stalls_of_a_recorded_run",),
            "drawn for this grading",
        ),
    ),
    appended=LOOKED_UP_SERIES,
    made=(("series.json", _library_series),),
)
"""Exercise 13's generated runs were derandomized, and its other runs ship with the package: a
hand-in answering from the library's series for every run the criteria send, recorded at home
(``_library_series``), scored all four part-2 criteria (the stalls' first-fit replay is the
exercise's real work) with no formula of its own. A second set of generated runs, drawn anew
at each grading, fails each of them."""

HAND_INS += (STORED_SERIES,)

SLOW_VALUES = HandIn(
    "slow-values",
    1,
    "memory.py",
    (
        Attack(
            "a-repr-that-sleeps",
            "return j = floor(t / B)",
            "import time\nclass Slow:\n    def __repr__(self): time.sleep(3600)\nreturn Slow()",
            ("logical_block",),
            "its __repr__ ran past 4 s",
        ),
        Attack(
            "a-weakref-callback-that-sleeps",
            "M_KV(L)",
            "import time, weakref\nclass Kept:\n    pass\nkept = Kept()\n"
            "_HELD.append(weakref.ref(kept, lambda ref: time.sleep(3600)))\nreturn kept",
            ("kv_bytes",),
            "ran past 4 s: does it loop, sleep or wait?",
        ),
    ),
    appended="_HELD = []\n",
)
"""A student's code that sleeps where the grader shows what it returned (its ``__repr__``, in
the failure's message) or where the grader lets go of it (a weak reference's callback): each is
the criterion's time, told as a time-out, never a hang, a crash or a vague object."""

HAND_INS += (SLOW_VALUES,)


# -- round 15: copies in disguise, native code, values that pass every comparison -------------


def disguised(code: types.CodeType, top: bool = True) -> types.CodeType:
    """``code`` rebuilt by ``code.replace`` as a student hiding a copy would: its docstring
    dropped (``top``: the function's own; a comprehension's first constant is no docstring),
    its constants and its names each in reverse order with every instruction renumbered to
    match, its local variables renamed and its first line moved; the functions inside it
    likewise. It runs as the original does; its bytecode is no longer the original's."""
    consts = [disguised(c, False) if isinstance(c, types.CodeType) else c for c in code.co_consts]
    if top and consts and isinstance(consts[0], str):
        consts[0] = None
    const_at = {old: len(consts) - 1 - old for old in range(len(consts))}
    name_at = {old: len(code.co_names) - 1 - old for old in range(len(code.co_names))}
    raw = bytearray(code.co_code)
    for offset, op, arg in dis._unpack_opargs(code.co_code):
        if op in dis.hasconst:
            raw[offset + 1] = const_at[arg]
        elif op in dis.hasname:
            flag = 1 if dis.opname[op] == "LOAD_GLOBAL" else 0  # LOAD_GLOBAL: index << 1 | NULL
            raw[offset + 1] = name_at[arg >> flag] << flag | (arg & flag)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    return code.replace(
        co_code=bytes(raw),
        co_consts=tuple(reversed(consts)),
        co_names=tuple(reversed(code.co_names)),
        co_varnames=tuple(v if v in cells else f"v{i}" for i, v in enumerate(code.co_varnames)),
        co_firstlineno=code.co_firstlineno + 1000,
    )


DISGUISED = _beside_an_honest_answer(
    "a-disguised-copy-built-by-pickle-bound-by-raw-memory",
    UNPICKLED.attacks[0].body,
    "in the shape of the library's bytecode",
)
DISGUISED = replace(
    DISGUISED,
    appended=DISGUISED.appended
    + "_FORK_PICKLE = "
    + repr(pickle.dumps(_PickledCode(disguised(_library_code("BlockManager.fork"))), 2))
    + "\n",
)
"""``UNPICKLED``'s attack on a copy of the library's ``fork`` in disguise (``disguised``: its
docstring dropped, constants and names renumbered, locals renamed, first line moved), built by
``types.CodeType`` inside ``pickle``'s own unpickler and bound by raw memory: the digest of
exact bytecode missed it, and exercise 03 scored 100/100. A code object built by hand is judged
by its bytecode's shape (``minipaged.grader.code_shapes``), which the disguise keeps."""

HAND_INS += (DISGUISED,)


def _library_parts(qualname: str) -> tuple:
    """The arguments of ``PyCode_NewWithPosOnlyArgs`` (CPython 3.11) that make the library's
    ``Class.name`` of ``minipaged.block_manager`` again, under another file name."""
    c = _library_code(qualname)
    return (
        *(c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_nlocals),
        *(c.co_stacksize, c.co_flags, c.co_code, c.co_consts, c.co_names, c.co_varnames),
        *(c.co_freevars, c.co_cellvars, "lecture.py", c.co_name, c.co_qualname),
        *(c.co_firstlineno, c.co_linetable, c.co_exceptiontable),
    )


_BY_ADDRESS = (
    "import ctypes, os, sysconfig, llvmlite.binding as llvm\n"
    "llvm.load_library_permanently(os.path.join(  # LLVM's own dlopen: no ctypes event\n"
    "    sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')))\n"
    "P, I = ctypes.py_object, ctypes.c_int\n"
    "new_code = ctypes.PYFUNCTYPE(P, *[I] * 6, *[P] * 9, I, P, P)(\n"
    "    llvm.address_of_symbol('PyCode_NewWithPosOnlyArgs'))  # by address: no dlsym event\n"
    "new_function = ctypes.PYFUNCTYPE(P, P, P)(llvm.address_of_symbol('PyFunction_New'))\n"
    "return new_function(new_code(*_FORK_PARTS), globals())(self, parent, child)"
)

NATIVE_CODE = (
    replace(
        _beside_an_honest_answer(
            "code-made-by-the-c-api-at-an-address-llvm-found", _BY_ADDRESS, "PyCode_New"
        ),
        appended=_ENCODED + f"_FORK_PARTS = {_library_parts('BlockManager.fork')!r}\n",
    ),
)

_EXTENSION = importlib.machinery.EXTENSION_SUFFIXES[0]
_NATIVE = Path(importlib.util.find_spec("_bisect").origin).read_bytes()
"""A compiled module of Python's own (``_bisect``): native code a student could bring, whatever
it does."""

_HERE = "import os\nhere = os.path.dirname(os.path.abspath(__file__))\n"

NATIVE_IN_THE_FOLDER = HandIn(
    "native-code-in-the-folder",
    1,
    "memory.py",
    (
        Attack(
            "an-extension-module-loaded-by-the-import-machinery",
            "return j = floor(t / B)",
            _HERE + "import _imp, importlib.util\n"
            f"path = os.path.join(here, 'fast{_EXTENSION}')\n"
            "_imp.create_dynamic(importlib.util.spec_from_file_location('_bisect', path))\n"
            "return t // block_size",
            ("logical_block",),
            "loads no compiled code",
        ),
        Attack(
            "a-shared-library-under-another-name",
            "return o = t mod B",
            _HERE + "import ctypes\nctypes.CDLL(os.path.join(here, 'notes.bin'))\n"
            "return t % block_size",
            ("block_offset",),
            "loads no compiled code",
        ),
    ),
    files=((f"fast{_EXTENSION}", _NATIVE), ("notes.bin", _NATIVE)),
)
"""Native code brought in the folder, loaded by the import system's ``_imp.create_dynamic``
(no audit event) and by ``ctypes.CDLL`` under a name no suffix gives away: each loaded, and
ran its machine code in the grading process (both criteria passed; a library's machine code
can call Python's C API unheard). A folder holding native code is refused before any of the
student's code runs (``minipaged.grader.native_files``): every criterion fails, saying which
file."""

WRITTEN_NATIVE = HandIn(
    "native-code-written-while-graded",
    1,
    "memory.py",
    (
        Attack(
            "a-shared-library-written-and-loaded-by-ctypes",
            "return M = ceil(L / B)",
            "import base64, ctypes, os, tempfile\n"
            "path = os.path.join(tempfile.mkdtemp(), 'fast.so')\n"
            "with open(path, 'wb') as f:\n    f.write(base64.b64decode(_NATIVE64))\n"
            "ctypes.CDLL(path)\nreturn -(-num_tokens // block_size)",
            ("num_logical_blocks",),
            "may not load the native library",
        ),
        Attack(
            "a-compiled-module-written-and-loaded-by-the-import-machinery",
            "return o = t mod B",
            "import _imp, base64, importlib.util, os, tempfile\n"
            f"path = os.path.join(tempfile.mkdtemp(), 'fast{_EXTENSION}')\n"
            "with open(path, 'wb') as f:\n    f.write(base64.b64decode(_NATIVE64))\n"
            "_imp.create_dynamic(importlib.util.spec_from_file_location('_bisect', path))\n"
            "return t % block_size",
            ("block_offset",),
            "may not load the native library",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
    appended=f"_NATIVE64 = {base64.b64encode(_NATIVE)!r}\n",
)
"""Native code kept encoded in a source file, written to the grading child's temporary folder
and loaded by ``ctypes.CDLL`` or ``_imp.create_dynamic``: each loaded (both criteria passed).
Loading a library that is not installed (from the student's folder, the temporary one, or
anywhere not the Python installation's or the system's) is refused
(``minipaged.grader.native_calls``): ``ctypes.dlopen``'s audit event names the file, and so
does the ``import`` event ``_imp.create_dynamic`` raises."""

HAND_INS += (*NATIVE_CODE, NATIVE_IN_THE_FOLDER, WRITTEN_NATIVE)


SET_OFF = """
import base64 as _b64, functools as _functools, weakref as _weakref
_COPIED, _KEPT = [], []  # the library's fork, once the grader's own code has compiled it
_SOURCE = _b64.b64decode(_FORK64).decode() + "\\n_COPIED.append(_Copied.fork)\\n"

class _Dying:  # its finalizer is exec itself: no function of this file is on the stack
    __del__ = _functools.partial(exec, _SOURCE, globals())

class _Words(_weakref.ref):  # a weak reference that is also a mapping, exec's locals
    def __getitem__(self, name):
        raise KeyError(name)

    def __setitem__(self, name, value):
        globals()[name] = value

def _lecture():  # the copy as a module that, once imported, hands it to this one
    head = "import sys\\n_m = sys.modules[%r]\\n" % __name__
    head += "globals().update({k: v for k, v in vars(_m).items() if k[:2] != '__'})\\n"
    return head + _SOURCE.replace("_COPIED", "_m._COPIED")
"""
"""What each of ``SET_OFF_BY_THE_GRADER``'s hand-ins keeps: the library's ``fork`` encoded,
and three ways to have it compiled and run later by the interpreter, with none of the
student's functions on the stack."""

_LATER = (
    "if _COPIED:  # compiled while the grader forgot the last criterion's objects\n"
    "    return _COPIED[0](self, parent, child)\n"
    "{}\n"
    "raise NotImplementedError('fork: not written yet')"
)

SET_OFF_BY_THE_GRADER = tuple(
    replace(
        _beside_an_honest_answer(name, _LATER.format(line), COMPILED),
        appended=_ENCODED + SET_OFF,
    )
    for name, line in (
        (
            "exec-run-by-a-finalizer-when-the-grader-forgets",
            "_weakref.finalize(self, exec, _SOURCE, globals())  # when this manager is freed",
        ),
        ("exec-as-a-dunder-del", "self.last_words = _Dying()  # freed with this manager"),
        (
            "exec-as-a-weak-reference-s-callback",
            "_KEPT.append(_Words(self, _functools.partial(exec, _SOURCE, globals())))",
        ),
        (
            "a-module-imported-by-a-finalizer",
            "import importlib, pathlib, sys, tempfile\n"
            "folder = pathlib.Path(tempfile.mkdtemp())\n"
            "(folder / 'lecture.py').write_text(_lecture())\n"
            "sys.path.insert(0, str(folder))\n"
            "_weakref.finalize(self, importlib.import_module, 'lecture')  # the import, later",
        ),
    )
)
"""The library's ``fork``, kept encoded, run by ``exec`` that the interpreter calls for the
student's code after it returned: a ``weakref.finalize``, a ``__del__`` that is
``functools.partial(exec, ...)``, a weak reference's callback; or written as a module that a
``weakref.finalize`` imports (the import system compiles it). Each fires when the grader's
child forgets the criterion's objects (its ``reset``), with only the grader's own frames on
the stack, where the runtime hook judged nothing: the first criterion failed, and the copy
passed every later one of the same grading child (exercise 03 scored 87/100). Code compiled or
run in the main thread with no student frame on the stack, once their code has run, is set
off by it and judged as theirs now (``minipaged.grader.runtime_code``)."""

HAND_INS += SET_OFF_BY_THE_GRADER

NATIVE_PAST_THE_FILES_READ = HandIn(
    "native-code-past-the-files-the-grader-reads",
    1,
    "memory.py",
    (
        Attack(
            "a-shared-library-behind-two-hundred-notes",
            "return j = floor(t / B)",
            _HERE + "import ctypes\nctypes.CDLL(os.path.join(here, 'zz', 'fast.so'))\n"
            "return t // block_size",
            ("logical_block",),
            "may not load the native library",
        ),
    ),
    passes=("slot",),
    honest=RIGHT_SLOT,
    files=(
        *((f"notes/{i:03d}.txt", "a note\n") for i in range(210)),
        ("zz/fast.so", _NATIVE),
    ),
)
"""Native code placed after the 200 files the grader reads of a folder (``native_files`` and
``library_copies`` each read at most that many): the folder is not refused, and the library
is refused where it loads, as one written while graded is (``WRITTEN_NATIVE``)."""

HAND_INS += (NATIVE_PAST_THE_FILES_READ,)


FINALIZERS = """
import gc as _gc, os as _os, time as _time

def _spin(*_):
    while True:
        pass

def _fork_and_sleep(*_):
    if _os.fork() == 0:
        _time.sleep(OUTLIVES)
        _os._exit(0)

class _Burner:  # in a cycle: the collector, wherever it runs, runs its finalizer
    def __init__(self):
        self.me = self

    def __del__(self):
        end = _time.thread_time() + 1.5
        while _time.thread_time() < end:
            pass
""".replace("OUTLIVES", OUTLIVES)
"""What ``HELD_BY_FINALIZERS``' hand-in keeps: finalizers that spin, fork, or burn a second
and a half of CPU time each."""

HELD_BY_FINALIZERS = HandIn(
    "held-by-finalizers",
    1,
    "memory.py",
    (
        Attack(
            "a-cycle-collected-in-the-grader-s-time",
            "keys and values, for every layer and KV head",
            "_gc.set_threshold(1)  # the next allocation collects: the grader's, once returned\n"
            "_Burner()\n"
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes",
            ("kv_bytes_per_token",),
            "your code ran past 4 s in kv_bytes_per_token",
        ),
        Attack(
            "a-weakref-finalize-that-forks",
            "M_KV(L)",
            "import weakref\nweakref.finalize(self, _fork_and_sleep)\n"
            "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * num_tokens "
            "* self.dtype_bytes",
            ("kv_bytes",),
            "code run by a finalizer or callback your code set up",
        ),
        Attack(
            "a-dunder-del-that-never-ends",
            "one block, one layer",
            "type(self).__del__ = _spin  # every shape's, once let go\n"
            "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes",
            ("block_bytes",),
            "ran past 4 s: does it loop, sleep or wait?",
        ),
    ),
    passes=("slot", "logical_block", "block_offset", "num_logical_blocks"),
    honest=RIGHT_SLOT
    | {
        "return j = floor(t / B)": "return t // block_size",
        "return o = t mod B": "return t % block_size",
        "return M = ceil(L / B)": "return -(-num_tokens // block_size)",
        "one block, all layers": "return self.num_layers * self.block_bytes_per_layer(block_size)",
    },
    appended=FINALIZERS,
)
"""Student code that runs where no call of theirs is, each beside a right answer: a cycle
whose ``__del__`` burns 1.5 s of CPU at each call, collected (``gc.set_threshold(1)``) in the
grading child's own work after the call, which credited it to the grader: 7.5 s of the
criterion's 4 s, and it passed; finalizers of the objects the grader holds (the shapes it
made) that fork, or never end, when the grader lets go of them, which the next criterion's
start forgave by ending the child: they passed. The collector now runs only in the student's
time, and the criterion whose objects they are fails, naming the finalizer
(``minipaged.grader.harness_time``, ``grading._let_go``)."""

HAND_INS += (HELD_BY_FINALIZERS,)
