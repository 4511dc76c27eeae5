"""What a grading child's guards tell the grader the moment they act: each source a student's
code compiles (``minipaged.grader.runtime_code``) and each refusal (there, and in
``minipaged.grader.delegation``), on a pipe of their own that only the grader reads.

Not in the child's answers: the student's code shares the process that answers, and can write
an answer of its own on the channel (one without the record of what it compiled), or rebind
the code that answers. A notice is written by the guard before the operation it tells of
returns, so before a copy compiled can run, or a refused call's caller can catch the refusal;
what is written in a pipe cannot be taken back. A process the student's code forks tells the
grader too, where its answers never reach: a compile refused in a fork is then a failure with
its reason, not a wrong value, and so is a refusal met by a thread of the worker's that the
call left to end with it. (The answering thread's own refusals are raised where they happen,
and fail the call as raised; one the student's code caught left it nothing.)

The grader reads a child's notices while it waits for an answer, and judges them after it
(``minipaged.grader.remote``); the student's code can add notices of its own, which only fail
it, but not remove or change one of the guards': a piece out of turn or garbled fails the
criterion, as junk on the channel does.

A notice is fields (each a 4-byte length and UTF-8 text), sent as pieces of at most
``PIECE`` bytes (``select.PIPE_BUF``: a pipe never interleaves a write that small with
another's), each ``pid (4 bytes) | flags (1: first, 2: last) | length (2 bytes) | payload``;
the grader joins each process's pieces in order.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import select

from minipaged.grader.delegation import LibraryDelegation
from minipaged.grader.frames import ProtocolError
from minipaged.grader.provenance import private

COMPILED, REFUSED = "compiled", "refused"
"""The kinds of notice: ``[COMPILED, where, filename, source]``, ``[REFUSED, message]`` (and
``IN_A_THREAD`` after the message, for a refusal in a thread of the process that answers)."""

IN_A_THREAD = "in a thread"

PIECE = min(select.PIPE_BUF, 4096)
_HEADER = 7
_FIRST, _LAST = 1, 2

MAX_NOTICE = 17 * 2**20
"""The longest notice the grader joins: a source of ``runtime_code.MAX_RECORDED`` bytes and
its names."""

CUT = (
    "your code closed or replaced the grading process's pipe to the grader (file descriptor "
    "{}): the grader hears through it what your code compiles; leave file descriptors you did "
    "not open alone"
)


def teller(fd: int):
    """In a grading child, before any student code: ``tell(kind, *fields)``, which writes one
    notice on ``fd`` (the pipe the grader reads) or, where the pipe is no longer the one it was
    (closed, or another file in its place), refuses the operation that wanted it told."""
    stat = os.fstat(fd)
    identity = (stat.st_dev, stat.st_ino)
    write, fstat, getpid, lock = os.write, os.fstat, os.getpid, _thread.allocate_lock()
    refusal, cut, step = LibraryDelegation, CUT.format(fd), PIECE - _HEADER
    first, last = _FIRST, _LAST  # the closure's, not globals: ``tell`` runs over ``PRIVATE``

    def tell(kind: str, *fields: str) -> None:
        parts = [part.encode(errors="replace") for part in (kind, *fields)]
        payload = b"".join(len(part).to_bytes(4, "big") + part for part in parts)
        with lock:  # one thread's pieces at a time
            try:
                now = fstat(fd)
            except OSError:
                raise refusal(cut) from None
            if (now.st_dev, now.st_ino) != identity:
                raise refusal(cut)
            pid = getpid().to_bytes(4, "big")
            for start in range(0, len(payload), step):
                piece = payload[start : start + step]
                flags = (first if start == 0 else 0) | (last if start + step >= len(payload) else 0)
                data = pid + bytes((flags,)) + len(piece).to_bytes(2, "big") + piece
                try:
                    whole = write(fd, data) == len(data)
                except OSError:
                    whole = False
                if not whole:
                    raise refusal(cut)

    return private(tell)


def refusal(tell):
    """``refused(message)``: the refusal a guard raises, told to the grader first, so that
    raised in a forked process, or caught by the student's code, it still fails the call. One
    raised in a thread other than the one that answers (``IN_A_THREAD``) is told as such: the
    thread may end with it, and the call return as if nothing was refused."""
    kind, error, in_a_thread = REFUSED, LibraryDelegation, IN_A_THREAD
    answering, ident = _thread.get_ident(), _thread.get_ident

    def refused(message: str) -> LibraryDelegation:
        tell(kind, message, *(() if ident() == answering else (in_a_thread,)))
        return error(message)

    return private(refused)


def refusal_not_raised(tell):
    """``refused(message)``: a refusal told to the grader, which fails the call with it whatever
    the student's code returns, for a guard that cannot raise into their code: a stand-in that
    native code calls (``native_calls.seal_symbols``). Told as a thread's is (``IN_A_THREAD``),
    which the grader raises for the same reason."""
    kind, in_a_thread = REFUSED, IN_A_THREAD

    def refused(message: str) -> None:
        tell(kind, message, in_a_thread)

    return private(refused)


class Notices:
    """The grader's end of a child's pipe of notices; ``there``: the number of the child's
    end, in the child."""

    def __init__(self, fd: int, there: int = -1) -> None:
        self.fd, self.there = fd, there
        self.open = True  # until every writer is gone
        self._stream = bytearray()
        self._joining: dict[int, bytearray] = {}  # pid -> the notice its pieces make so far
        self._joined = 0  # bytes in ``_joining``
        self._heard: list[tuple[int, list[str]]] = []  # (the telling process, the fields)

    @classmethod
    def pipe(cls) -> tuple[Notices, int]:
        """A new pipe: the grader's end, read without waiting, and the child's end (to pass
        to it under the same number), a megabyte deep where the system allows."""
        read, write = os.pipe()
        os.set_blocking(read, False)
        with contextlib.suppress(OSError, AttributeError):  # fewer waits for a long source
            import fcntl  # Unix's, as grading is

            fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 2**20)
        return cls(read, write), write

    def verdict(self, judge, worker: int | None, loading: bool) -> tuple[str, str]:
        """After an answer of the child (``worker``, its process that runs the student's
        code): ``(ended, refused)``, why the call fails and the child must end (a copy
        compiled, in any process, as ``judge``, ``compiled_copies.Judge``, finds it; the
        worker's end of the pipe closed or replaced), and why it fails else: a refusal told by
        another process (a fork's, whose end the answer does not show) or by a thread of the
        worker's besides the one that answers (not while ``loading`` the student's files). The
        answering thread's own refusals are raised where they happen: caught, they left the
        student's code nothing, and its answer stands on its own."""
        self.drain()
        if self.cut(worker):
            return CUT.format(self.there), ""
        heard = self.take()
        copied = judge([fields[1:] for _, fields in heard if fields[0] == COMPILED])
        refused = [
            fields[1]
            for pid, fields in heard
            if fields[0] == REFUSED
            and fields[2:] in ([], [IN_A_THREAD])
            and (pid != worker or fields[2:] == [IN_A_THREAD])
        ]
        return copied, refused[0] if refused and not loading else ""

    def cut(self, worker: int | None) -> bool:
        """Whether ``worker``'s end of the pipe is closed, or another file now (read in
        ``/proc``, where the student's code cannot write; off Linux, never)."""
        if worker is None:
            return False
        try:
            there = os.stat(f"/proc/{worker}/fd/{self.there}")
        except OSError:  # closed, where /proc shows the worker
            return os.path.isdir(f"/proc/{worker}/fd")
        here = os.fstat(self.fd)
        return (there.st_dev, there.st_ino) != (here.st_dev, here.st_ino)

    def drain(self) -> None:
        """Read what the pipe holds now, without waiting for more. Raises ``ProtocolError``
        for pieces no guard writes."""
        while self.open:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return
            if not chunk:
                self.open = False
                return
            self._stream += chunk
            self._pieces()

    def take(self) -> list[tuple[int, list[str]]]:
        """The notices heard since the last call, each as the process that told it and its
        fields."""
        heard, self._heard = self._heard, []
        return heard

    def _pieces(self) -> None:
        stream = self._stream
        while len(stream) >= _HEADER:
            pid, flags = int.from_bytes(stream[:4], "big"), stream[4]
            size = int.from_bytes(stream[5:_HEADER], "big")
            if size > PIECE - _HEADER or flags > _FIRST | _LAST:
                raise ProtocolError("a garbled notice")
            if len(stream) < _HEADER + size:
                return
            payload = bytes(stream[_HEADER : _HEADER + size])
            del stream[: _HEADER + size]
            if bool(flags & _FIRST) == (pid in self._joining):
                raise ProtocolError("a notice's piece out of turn")
            joined = self._joining.setdefault(pid, bytearray())
            joined += payload
            self._joined += size
            if self._joined > MAX_NOTICE:
                raise ProtocolError(f"notices of more than {MAX_NOTICE} bytes")
            if flags & _LAST:
                self._joined -= len(joined)
                self._heard.append((pid, _fields(bytes(self._joining.pop(pid)))))


def _fields(payload: bytes) -> list[str]:
    fields, at = [], 0
    while at < len(payload):
        size = int.from_bytes(payload[at : at + 4], "big")
        if at + 4 + size > len(payload):
            raise ProtocolError("a garbled notice")
        fields.append(payload[at + 4 : at + 4 + size].decode(errors="replace"))
        at += 4 + size
    return fields
