"""Ctrl-C before an output is put in place. The command line ends at once on SIGINT
(``os._exit``, since a library's bare ``except:`` could swallow the KeyboardInterrupt), so no
``finally`` ran and the temporary file of an output not yet put in place (a trace before its
first step, a report, a checkpoint) stayed beside it as a hidden ``.name.XXXX``. Now the
handler drops each (``atomic_write.drop_unfinished``): what stood at the name is left as it
was, and nothing else is left. ``kill`` (SIGTERM) ends a run the same way
(``minipaged.ending_signals``; every such signal: ``test_ending_signals_corpus``)."""

from __future__ import annotations

import signal

import pytest
from test_cli_fuzz import interrupt

from minipaged import atomic_write, ending_signals


def test_drop_unfinished_removes_only_what_is_not_yet_in_place(tmp_path):
    old, published = tmp_path / "old.json", tmp_path / "run.jsonl"
    old.write_text("kept\n")
    unfinished = atomic_write.Replacement(old)
    unfinished.file.write("half")
    recording = atomic_write.Replacement(published)
    recording.file.write("step 1\n")
    recording.publish()
    atomic_write.drop_unfinished()
    recording.file.write("step 2\n")
    recording.commit()
    assert old.read_text() == "kept\n" and published.read_text() == "step 1\nstep 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json", "run.jsonl"]
    unfinished.discard()  # its file is gone already: nothing to do, nothing raised


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_a_signal_before_the_first_step_leaves_the_old_trace_and_no_temporary_file(
    tmp_path, number
):
    path = tmp_path / "run.jsonl"
    before = '{"format": "minipaged-trace", "version": 2, "model": "recorded before"}\n'
    path.write_text(before)  # a trace: record replaces one without --force
    argv = ("trace", "record", str(path), "--prompt", "Emma", "--max-tokens", "400")
    status, err = interrupt(None, *argv, "--ignore-eos", number=number)
    assert status == 128 + number and ending_signals.ENDING[number] in err, err
    assert "Traceback" not in err
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]
