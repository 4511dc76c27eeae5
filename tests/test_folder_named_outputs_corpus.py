"""An output typed as a folder: ``--json runs/``, ``trace record runs/.``. ``pathlib`` drops a
trailing ``/`` and a trailing ``.`` part, so ``exercises check 1 --json newdir/`` wrote its
report to a file named ``newdir`` and said it had: a silent change of what the user named.
Each output flag now refuses such a path where it is typed (status 2, one line naming the
path, what it ends in and the fix), and ``atomic_write`` refuses it when a notebook passes the
text; a path without them is written as before."""

from __future__ import annotations

import pytest
from test_output_paths_corpus import OUTPUTS, refused

from minipaged import atomic_write

TYPED = {"a new folder": "newdir/", "a new folder and a dot": "newdir/.", "a folder": "here/"}


@pytest.mark.parametrize("typed", list(TYPED))
@pytest.mark.parametrize("output", list(OUTPUTS))
def test_an_output_typed_as_a_folder_is_refused_and_nothing_is_made(
    output, typed, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()
    value = TYPED[typed]
    line = refused(OUTPUTS[output](tmp_path, value), capsys, value, "names a folder")
    assert "inside it" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]
    assert list((tmp_path / "here").iterdir()) == []


@pytest.mark.parametrize("typed", ["x/", "x/.", "x/..", "here/"])
def test_a_library_write_to_a_path_typed_as_a_folder_is_refused(typed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()
    with pytest.raises(IsADirectoryError, match=r"names a folder \(it ends in '[./]+'\); name a"):
        atomic_write.write_text(typed, "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]


def test_a_path_without_them_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    atomic_write.write_text("report.json", "{}\n")
    atomic_write.write_text(str(tmp_path / "a.d"), "{}\n")  # a dot inside a name is a name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.d", "report.json"]
