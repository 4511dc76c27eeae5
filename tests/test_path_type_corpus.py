"""What is no path, given to the Python API as the file to read or write: ``trace.load(5)``,
``trace.save(None, ...)`` raised Python's "expected str, bytes or os.PathLike object, not
int", which says neither what the argument is nor what to pass. Every reader of a named file
(``input_file.check_input_file``) and every writer (``atomic_write.Replacement``) now refuses
it in one ``TypeError`` naming what was given and the way out, before anything is read or
made."""

from __future__ import annotations

import pytest

from minipaged import atomic_write, trace

NOT_PATHS = [5, None, 2.5, b"/tmp/trace.jsonl", ["run.jsonl"], {"path": "run.jsonl"}]
CALLS = {
    "trace.load": lambda path: trace.load(path),
    "trace.read_header": lambda path: trace.read_header(path),
    "trace.save": lambda path: trace.save(path, {"model": "tiny"}, []),
    "trace.Recorder": lambda path: trace.Recorder(path, {"model": "tiny"}),
    "atomic_write.write_text": lambda path: atomic_write.write_text(path, "text"),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("value", NOT_PATHS, ids=lambda value: type(value).__name__)
def test_no_path_is_refused_saying_what_to_pass_and_nothing_is_made(
    call, value, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # where a str() of the value would have been written
    with pytest.raises(TypeError) as refused:
        CALLS[call](value)
    message = str(refused.value)
    assert "a str or a pathlib.Path" in message and type(value).__name__ in message, message
    assert "pass the file's path" in message
    assert list(tmp_path.iterdir()) == []
