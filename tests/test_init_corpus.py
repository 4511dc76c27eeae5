"""``minipaged exercises init N DIR`` with folder names a student types: each line that tells
them what to type next (go inside the folder, read its README, check it with ``--path``) must
work when pasted into a shell. A name that begins with a dash was printed bare, and ``cd -x``,
``less -x/README.md`` and ``--path -x`` each take it for a flag."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from minipaged import cli

NAMES = ["-x", "--help", "-ex 01", "ex 01", "Ελίζαβετ", "a;b"]


def said(argv: list[str], capsys) -> tuple[int, str]:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, " ".join((out + err).split())


@pytest.mark.parametrize("name", NAMES)
def test_every_path_init_says_to_type_reaches_the_folder_in_a_shell(
    name, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    status, out = said(["exercises", "init", "1", "--", name], capsys)
    assert status == 0 and (tmp_path / name / "README.md").is_file(), out
    inside = out.partition("then inside ")[2].partition(" run `")[0]
    readme = out.partition("next: read ")[2].partition(", edit the")[0]
    for line in (f"cd {inside}", f"cat {readme}"):  # as the student pastes them
        done = subprocess.run(["sh", "-c", line], cwd=tmp_path, capture_output=True)
        assert done.returncode == 0, (line, done.stderr)
    status, out = said(["exercises", "init", "1", "--", name], capsys)  # once more: refused
    assert status == 2 and "already holds" in out
    command = out.partition("check the work there with `")[2].partition("`")[0]
    words = shlex.split(command)
    assert words[:4] == ["minipaged", "exercises", "check", "1"]
    parsed = cli.build_parser().parse_args(words[1:])
    assert (tmp_path / parsed.path).resolve() == (tmp_path / name).resolve()
