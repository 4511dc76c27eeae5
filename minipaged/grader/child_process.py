"""A grading child as a process: its command line, its pipes, its output file, and its end.
``minipaged.grader.remote.GradingChild`` builds on it what it asks and how long it may take.

Invariants: a started child has three pipes to the grader (requests, answers, the guards'
notices) and one process group of its own; ``stop`` ends it and every process its code
started, whatever group or session they moved to, closes the grader's ends of the pipes, and
never waits on what a grandchild still holds. Whatever the child printed stays in
``temp/output.txt``, a folder the grader made, so a student is shown their last lines. A child
held in a ``with`` block is closed (ended, and ``temp`` removed) at the block's end, and also
when a signal ends the command inside it (``ending_signals.undone_at_an_end``): the child's
session is its own, so no Ctrl-C or ``kill`` of the grader reaches it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
from pathlib import Path

from minipaged import ending_signals
from minipaged.grader import child_errors
from minipaged.grader.child import why_it_ended
from minipaged.grader.child_environment import child_environment
from minipaged.grader.child_errors import ChildGone
from minipaged.grader.delegation import LIBRARY_FOLDERS
from minipaged.grader.disk_quota import DiskQuota
from minipaged.grader.notices import Notices
from minipaged.grader.process_tree import end_descendants


def _searched_only_here(folder: str) -> bool:
    """Whether ``folder`` is on this Python's path, and not a site folder, which an isolated
    Python searches too."""
    real = os.path.realpath(folder)
    sites = {os.path.realpath(p) for p in site.getsitepackages()}
    return real not in sites and any(os.path.realpath(p) == real for p in sys.path if p)


START = os.path.join(os.path.dirname(__file__), "child_start.py")
"""The file the child's Python runs (``minipaged.grader.child_start``)."""

LIBRARY_ROOTS = tuple(
    root
    for root in dict.fromkeys(os.path.dirname(f.rstrip(os.sep)) for f in LIBRARY_FOLDERS)
    if _searched_only_here(root)
)
"""The folders on the grader's path the library's packages were found in (``PYTHONPATH``'s,
say), which an isolated Python would not search; none where an installer's finder found them
(an editable install), so that the child's path holds no more of the checkout than before."""


class ChildProcess:
    """The process of one grading child for exercise ``number`` and the criteria that run in
    ``runs_in`` (``"process"``, ``"simulator"``, ``"gpu"``; ``"tui"``: a TUI run's, on the
    CPU, which grades nothing): launched, and launched again after it ends, on demand. With
    ``hands_over``, it keeps the library functions the exercise hands over
    (``Exercise.handed_over``), for criteria ``on_the_library``; without, none."""

    def __init__(
        self, number: int, runs_in: str, folder: Path | None, limits, hands_over: bool = False
    ) -> None:
        self.number, self.runs_in, self.folder, self.limits = number, runs_in, folder, limits
        self.hands_over = hands_over
        self.temp = Path(tempfile.mkdtemp(prefix="minipaged-grading-"))
        self.process: subprocess.Popen | None = None
        self.notices: Notices | None = None  # what the child's guards tell, as they act
        self.quota = DiskQuota([self.temp, *([folder] if folder else [])], limits.disk_gib)
        self._held = contextlib.ExitStack()

    def __enter__(self) -> ChildProcess:
        self._held.enter_context(ending_signals.undone_at_an_end(self.close))
        self._held.callback(self.close)  # first: the block ends as a signal would end it
        return self

    def __exit__(self, *raised: object) -> None:
        self._held.close()

    def launch(self) -> None:
        """Start the child in an empty ``temp`` with its three pipes; student code runs only
        once it has answered its first message (``GradingChild.start``)."""
        shutil.rmtree(self.temp, ignore_errors=True)  # what the last child left is not ours
        self.temp.mkdir(mode=0o700, exist_ok=True)
        self.quota.begin()
        requests_read, self._requests = os.pipe()
        self._answers, answers_write = os.pipe()
        os.set_blocking(self._requests, False)
        self.notices, notices_write = Notices.pipe()
        command = self.command((requests_read, answers_write), notices_write)
        with open(self.temp / "output.txt", "ab") as output:
            self.process = subprocess.Popen(
                command,
                env=self._environment(),
                cwd=self.temp,  # not the student's: their minipaged/ would shadow the library
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                pass_fds=(requests_read, answers_write, notices_write),
                start_new_session=True,  # one process group to end, apart from the grader's
            )
        os.close(requests_read)
        os.close(answers_write)
        os.close(notices_write)
        self._pidfd = os.pidfd_open(self.process.pid) if hasattr(os, "pidfd_open") else None

    def command(self, channel: tuple[int, int] = (-1, -1), notices: int = -1) -> list[str]:
        """The child's command line, its channel the file descriptors ``channel``, its pipe of
        notices ``notices``. Its Python is isolated (``-I``: no ``PYTHON*`` variable, no user
        site, no current folder on its path) and writes no bytecode (``-B``): it imports the
        library from where the grader did (``minipaged.grader.child_start``). A GPU child
        gets no address-space limit: CUDA maps far more than it uses."""
        command = [sys.executable, "-I", "-B", START, *LIBRARY_ROOTS, "--"]
        command += [str(self.number)]
        command += ["--channel", f"{channel[0]},{channel[1]}", "--notices", str(notices)]
        command += ["--temp", str(self.temp)]
        command += ["--path", str(self.folder)] if self.folder is not None else []
        command += ["--gpu"] if self.runs_in == "gpu" else []
        command += ["--tui"] if self.runs_in == "tui" else []
        command += ["--hands-over"] if self.hands_over else []
        memory = None if self.runs_in == "gpu" else self.limits.memory_gib
        command += ["--memory-gib", str(memory)] if memory is not None else []
        cpu = self.limits.cpu_seconds
        command += ["--cpu-seconds", str(cpu)] if cpu is not None else []
        return command

    def _environment(self) -> dict[str, str]:
        return child_environment(os.environ, self.temp, self.runs_in == "simulator")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """End the child and every process its code started (``minipaged.grader.process_tree``),
        and wait for the child a bounded time."""
        if self.process is None:
            return
        # A time limit or a signal ending the command that lands in here would leave the child
        # running, or this stop half done when the signal's own close runs: they wait.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, *ending_signals.ENDING})
        try:
            end_descendants(self.process.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
            for fd in (self._requests, self._answers, self._pidfd, self.notices.fd):
                if fd is not None:
                    os.close(fd)
            self.process = self._pidfd = self.notices = None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def close(self) -> None:
        """End the child (``stop``) and remove ``temp``, even where the stop fails."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.temp, ignore_errors=True)

    def output(self, lines: int = 6) -> str:
        """The last ``lines`` lines the student's code (or Python, dying) printed."""
        try:
            with open(self.temp / "output.txt", "rb") as f:
                f.seek(max(f.seek(0, os.SEEK_END) - 4096, 0))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def _ended(self, starting: bool = False):
        """The channel closed: say why the child ended (a signal, an exit, a closed pipe)."""
        try:
            status = self.process.wait(timeout=2) if self.process else None
        except subprocess.TimeoutExpired:  # alive, but its channel closed
            status = None
        if starting:
            self._fault(f"it ended, exit status {status}")  # < 0: a signal's number
        tail = self.output()
        self.stop()
        raise ChildGone(why_it_ended(status, self.limits) + (f"\n{tail}" if tail else ""))

    def _fault(self, what: str):
        """The child failed as it started: its criteria are blocked, none blames the student."""
        output = self.output(lines=4)
        self.stop()
        self.blocked = child_errors.GraderFault(what, output)
        raise self.blocked

    def _fail(self, what: str):
        self.stop()
        raise ChildGone(
            f"the grading process {what}: does your code write to file descriptors it did not "
            "open, or start threads or processes that do?"
        )
