"""The grading child's notices (``minipaged.grader.notices``): what a guard tells arrives
whole, however long, in order, from any process; what no guard writes (a piece out of turn,
garbled bytes) is refused; and a pipe closed or replaced refuses the operation that wanted
it told."""

from __future__ import annotations

import contextlib
import os

import pytest

from minipaged.grader.delegation import LibraryDelegation
from minipaged.grader.frames import ProtocolError
from minipaged.grader.notices import COMPILED, PIECE, REFUSED, Notices, refusal, teller


@pytest.fixture
def pipe():
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


def test_a_notice_longer_than_a_piece_arrives_whole_and_in_order(pipe):
    read, write = pipe
    tell, heard = teller(write), Notices(read)
    source = "x = 1\n" * (3 * PIECE)
    for _ in range(2):
        tell(COMPILED, "memory.py:3", "<string>", source[: PIECE * 2])
        heard.drain()
    tell(REFUSED, "no")
    heard.drain()
    told = [COMPILED, "memory.py:3", "<string>", source[: PIECE * 2]]
    assert heard.take() == [(os.getpid(), told)] * 2 + [(os.getpid(), [REFUSED, "no"])]
    assert heard.take() == []


def test_a_refusal_is_told_before_it_is_raised(pipe):
    read, write = pipe
    heard = Notices(read)
    error = refusal(teller(write))("your code may not")
    heard.drain()
    assert isinstance(error, LibraryDelegation)
    assert heard.take() == [(os.getpid(), [REFUSED, "your code may not"])]


@pytest.mark.parametrize(
    "junk, said",
    [
        (bytes(4) + b"\x02\x00\x05hello", "out of turn"),  # a last piece with no first
        (bytes(4) + b"\x01\x00\x01a" + bytes(4) + b"\x03\x00\x01b", "out of turn"),  # 2 firsts
        (bytes(4) + b"\x09\x00\x01a", "garbled"),  # flags no guard writes
        (bytes(4) + b"\x03\xff\xff", "garbled"),  # a piece longer than a piece
        (bytes(4) + b"\x03\x00\x05" + b"\x00\x00\x00\x09a", "garbled"),  # a field past the end
    ],
)
def test_what_no_guard_writes_is_refused(pipe, junk, said):
    read, write = pipe
    os.write(write, junk)
    with pytest.raises(ProtocolError, match=said):
        Notices(read).drain()


def test_a_pipe_closed_or_replaced_refuses_the_operation(pipe):
    _, write = pipe
    tell = teller(write)
    other_read, other_write = os.pipe()
    os.dup2(other_write, write)  # another pipe, under the same number
    with pytest.raises(LibraryDelegation, match="closed or replaced"):
        tell(COMPILED, "a", "b", "c")
    os.close(write)
    with pytest.raises(LibraryDelegation, match="closed or replaced"):
        tell(REFUSED, "no")
    for fd in (other_read, other_write):
        os.close(fd)
