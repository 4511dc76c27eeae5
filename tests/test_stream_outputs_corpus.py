"""An output named by a process's file descriptor: ``--json /dev/fd/1`` (or ``/proc/self/fd/1``,
``/dev/stdout``) typed to see the report printed. No output can be streamed there: each is put
in place of its name (``minipaged.atomic_write``). Before ``atomic_write.open_stream`` the
refusal read "no file can be made in /dev/fd (No such file or directory)", which says nothing a
user who meant standard output can act on. Now every output flag says it is standard output
(or which descriptor), that the output only goes to a file, and to read that file instead;
status 2, one line, before any work, and nothing is written."""

from __future__ import annotations

import os

import pytest
from test_output_paths_corpus import OUTPUTS, refused

from minipaged import atomic_write, cli

STREAMS = {  # a path naming a descriptor, and the words for it
    "/dev/fd/1": "this command's standard output (file descriptor 1)",
    "/proc/self/fd/1": "this command's standard output (file descriptor 1)",
    "/proc/PID/fd/1": "this command's standard output (file descriptor 1)",  # PID: our own
    "/dev/fd/2": "this command's standard error (file descriptor 2)",
    "/dev/fd/0": "this command's standard input (file descriptor 0)",
    "/dev/fd/97": "this command's open file (file descriptor 97)",  # not open: still no file
    "/dev/stdout": "a link to a process's open file (/proc/self/fd/1: this command's standard "
    "output (file descriptor 1))",
    "/proc/1/fd/1": "file descriptor 1 of process 1",
}


@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("output", list(OUTPUTS))
def test_an_output_named_by_a_file_descriptor_says_it_only_goes_to_a_file(
    output, stream, tmp_path, capsys
):
    words = STREAMS[stream]
    stream = stream.replace("PID", str(os.getpid()))  # here, not in the id: a worker's own
    line = refused(OUTPUTS[output](tmp_path, stream), capsys, stream, words)
    assert "not a file" in line and "can only go to a file" in line and "cat FILE" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stream", ["/dev/fd/1", "/proc/self/fd/1"])
def test_a_folder_named_by_a_file_descriptor_is_named_for_what_it_is(stream, tmp_path, capsys):
    refused(["bench", "memory", "--quick", "--out", stream], capsys, STREAMS[stream])


@pytest.mark.parametrize("stream", ["/dev/fd/1", "/proc/self/fd/2"])
def test_a_library_write_to_a_file_descriptor_is_refused_in_the_same_words(stream):
    with pytest.raises(OSError, match=rf"cannot write {stream}: it is this command's standard"):
        atomic_write.write_text(stream, "{}\n")


def test_a_file_whose_name_only_looks_like_a_descriptor_is_written(tmp_path, monkeypatch):
    (tmp_path / "fd").mkdir()
    monkeypatch.chdir(tmp_path)
    assert atomic_write.open_stream("fd/1") == ""
    atomic_write.write_text("fd/1", "a file\n")
    assert (tmp_path / "fd" / "1").read_text() == "a file\n"
    assert cli.main(["exercises", "check", "1", "--solution", "--json", "fd/2"]) == 0
