"""One file, one writer: two runs that write one path at once, and a file taken from under a
run that is writing it. Before ``atomic_write`` held a lock, two ``minipaged trace record``
runs to one path each put their file in its place: the earlier one wrote on into a file
already renamed away and reported success, its steps in no file anyone could read. Now the
second writer is refused before it writes anything, where its path is typed or where its
``Replacement`` is made, and a writer whose published file was replaced or removed says so at
its next write instead of reporting success. In each case what stands at the path is the
whole of one run's file."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from minipaged import atomic_write, cli, trace
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine
from minipaged.sampling import SamplingParams

USAGE, FAILURE = 2, 1
BUSY = "another run is writing it now"


@pytest.fixture(scope="module")
def steps():
    """Three steps of a small run: what a recorder writes."""
    engine = LLMEngine(load_model("tiny"), block_size=4)
    engine.add_request({"prompt_token_ids": [5, 6, 7]}, SamplingParams(max_tokens=3))
    return [engine.step() for _ in range(3)]


def writing(path: Path, published: bool) -> atomic_write.Replacement:
    """A writer of ``path`` in the middle of its work: its file put in place already (a
    trace after its first step) or still a temporary file beside it."""
    replacement = atomic_write.Replacement(path)
    replacement.file.write("the first run's line\n")
    if published:
        replacement.publish()
    return replacement


SECOND_WRITERS = {  # each starts while a first run writes `path`
    "a recorder": lambda path: trace.Recorder(path, {"model": "tiny"}),
    "a whole-file write": lambda path: atomic_write.write_text(path, "second\n"),
    "a checkpoint-style byte write": lambda path: atomic_write.write_bytes(path, b"second"),
    "a new file": lambda path: atomic_write.create(path, b"second"),
}


@pytest.mark.parametrize("published", [True, False], ids=["published", "not-yet-published"])
@pytest.mark.parametrize("second", list(SECOND_WRITERS))
def test_a_second_writer_of_a_file_being_written_is_refused_and_writes_nothing(
    second, published, tmp_path
):
    path = tmp_path / "run.jsonl"
    path.write_text("recorded before\n")
    first = writing(path, published)
    with pytest.raises(atomic_write.OutputBusy, match=BUSY) as refused:
        SECOND_WRITERS[second](path)
    assert str(path) in str(refused.value) and "name another file" in str(refused.value)
    first.file.write("the first run's last line\n")
    first.commit()  # the first run ends as if the second had never tried
    assert path.read_text() == "the first run's line\nthe first run's last line\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]


def test_writers_of_other_files_in_the_folder_are_not_held_up(tmp_path):
    first = writing(tmp_path / "run.jsonl", published=True)
    atomic_write.create(tmp_path / "new.txt", b"x")
    atomic_write.write_text(tmp_path / "run.jsonl.bak", "other\n")  # a name that starts alike
    first.commit()
    assert (tmp_path / "new.txt").read_bytes() == b"x"


def test_a_writer_that_ended_leaves_the_file_free_even_its_stray_temporary_file(tmp_path):
    path = tmp_path / "run.jsonl"
    writing(path, published=True).commit()
    writing(path, published=False).discard()
    (tmp_path / ".run.jsonl.left-by-a-killed-run").write_text("half")  # no one holds it
    atomic_write.write_text(path, "next run\n")
    assert path.read_text() == "next run\n"


def test_trace_record_while_another_run_records_the_path_is_refused_where_it_is_typed(
    tmp_path, capsys
):
    path = tmp_path / "run.jsonl"
    first = writing(path, published=True)
    args = ["trace", "record", str(path), "--prompt", "It is", "--max-tokens", "2"]
    assert cli.main(args) == USAGE
    err = capsys.readouterr().err
    assert f"cannot write {path}: {BUSY}" in err and "name another file" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    first.commit()
    assert path.read_text() == "the first run's line\n"


def test_a_report_asked_for_while_another_run_writes_it_is_refused_before_grading(tmp_path, capsys):
    path = tmp_path / "report.json"
    first = writing(path, published=False)
    assert cli.main(["exercises", "check", "1", "--solution", "--json", str(path)]) == USAGE
    out, err = capsys.readouterr()
    assert BUSY in err and "PASS" not in out
    first.discard()
    assert not path.exists()


TAKEN_AWAY = {  # what happened to the recorder's published file, and its word for it
    "renamed over": (lambda path: _replace_with(path, "another run's trace\n"), "replaced"),
    "removed": (lambda path: path.unlink(), "removed"),
    "moved away": (lambda path: path.rename(path.with_name("moved.jsonl")), "removed"),
}


def _replace_with(path: Path, text: str) -> None:
    other = path.with_name("other.tmp")
    other.write_text(text)
    os.replace(other, path)


@pytest.mark.parametrize("taken", list(TAKEN_AWAY))
def test_a_recorder_whose_trace_was_taken_away_says_so_at_its_next_step(taken, steps, tmp_path):
    path = tmp_path / "run.jsonl"
    take, word = TAKEN_AWAY[taken]
    with (
        pytest.raises(atomic_write.OutputReplaced) as failed,
        trace.Recorder(path, {"model": "tiny"}) as recorder,
    ):
        recorder.write(steps[0])
        take(path)
        recorder.write(steps[1])
        pytest.fail("the step after was written as if the trace were there")
    message = str(failed.value)
    assert f"{path} was {word}" in message and "write it again" in message
    if taken == "renamed over":  # the other run's file is left whole
        assert path.read_text() == "another run's trace\n"


def test_a_recorder_whose_trace_was_taken_away_after_its_last_step_fails_at_close(steps, tmp_path):
    path = tmp_path / "run.jsonl"
    recorder = trace.Recorder(path, {"model": "tiny"})
    recorder.write(steps[0])
    _replace_with(path, "another run's trace\n")
    with pytest.raises(atomic_write.OutputReplaced, match="replaced by another file"):
        recorder.close()
    assert path.read_text() == "another run's trace\n"


def test_trace_record_whose_trace_is_replaced_mid_run_exits_with_a_failure(
    tmp_path, capsys, monkeypatch
):
    path = tmp_path / "run.jsonl"
    write = trace.Recorder.write

    def replaced_after_the_first_step(recorder, step):
        write(recorder, step)
        if recorder.num_steps == 1:  # a second run, or a hand, puts its own file there
            _replace_with(path, "another run's trace\n")

    monkeypatch.setattr(trace.Recorder, "write", replaced_after_the_first_step)
    args = ["trace", "record", str(path), "--prompt", "It is", "--max-tokens", "4"]
    assert cli.main(args) == FAILURE
    out, err = capsys.readouterr()
    assert "recorded" not in out and f"{path} was replaced by another file" in err
    assert err.count("\n") == 1
    assert path.read_text() == "another run's trace\n"


def test_a_recording_nobody_touched_is_whole(steps, tmp_path):
    path = tmp_path / "run.jsonl"
    trace.save(path, {"model": "tiny"}, steps)
    assert trace.load(path).steps == steps
    assert json.loads(path.read_text().splitlines()[0])["format"] == "minipaged-trace"


def test_a_file_system_without_locks_is_still_written(tmp_path, monkeypatch):
    """``flock`` fails with ENOLCK on some network and FUSE file systems: the write goes on
    unguarded, as before there was a guard, rather than failing every output there."""

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(atomic_write.fcntl, "flock", no_locks)
    path = tmp_path / "run.jsonl"
    first = writing(path, published=True)
    atomic_write.write_text(tmp_path / "other.txt", "written\n")
    first.commit()
    assert path.read_text() == "the first run's line\n"
    assert (tmp_path / "other.txt").read_text() == "written\n"
