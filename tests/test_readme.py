"""Every command in the README's bash blocks runs (``make`` lines aside) and shows what its
sentence promises: distinct samples for ``--n``, beams for ``--beam-width``, prefix cache
hits for the prefix example, a replay whose texts equal the recording's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from minipaged import cli

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[list[list[str]]]:
    """Each command line of the README's bash blocks, as the ``&&``-chained commands on it,
    each without its ``.venv/bin/minipaged`` prefix."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.DOTALL)
    lines = []
    for block in blocks:
        for line in block.strip().splitlines():
            if line.startswith("make "):
                continue
            chain = []
            for command in line.split("&&"):
                words = shlex.split(command)
                assert words[0] == ".venv/bin/minipaged", f"not a minipaged command: {line}"
                chain.append(words[1:])
            lines.append(chain)
    return lines


COMMANDS = readme_commands()


def samples(out: str) -> list[str]:
    """The texts of numbered samples ``[i] ...`` that ``print_outputs`` prints."""
    parts = re.split(r"^\[(\d+)\] ", out, flags=re.MULTILINE)[1:]
    return [" ".join(text.split("memory")[0].split()) for text in parts[1::2]]


def request_texts(out: str) -> str:
    """What ``print_outputs`` printed: everything from the first request rule on, less a
    trailing ``recorded ...`` line."""
    start = out.index("request ")
    return "\n".join(line for line in out[start:].splitlines() if not line.startswith("recorded "))


def test_the_readme_has_the_examples_this_test_checks():
    flags = [" ".join(word for command in chain for word in command) for chain in COMMANDS]
    assert any("--n 3" in f for f in flags)
    assert any("--beam-width 4" in f for f in flags)
    assert any("--prefix-caching" in f for f in flags)
    assert any("trace record" in f and "trace replay" in f for f in flags)
    assert any("--enable-chunked-prefill" in f for f in flags)


@pytest.mark.parametrize("chain", COMMANDS, ids=[" ".join(c[0][:2]) for c in COMMANDS])
def test_every_readme_command_shows_what_it_promises(chain, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    outputs = []
    for argv in chain:
        assert cli.main(argv) == 0, capsys.readouterr().err
        outputs.append(capsys.readouterr().out)
    argv, out = chain[0], outputs[0]
    assert "[dim]" not in out and "[/dim]" not in out
    if "--n" in argv:
        n = int(argv[argv.index("--n") + 1])
        texts = samples(out)
        assert len(texts) == n and len(set(texts)) == n, texts
    if "--beam-width" in argv and "--n" not in argv:  # all K beams (with --n: the n best)
        width = int(argv[argv.index("--beam-width") + 1])
        assert len(samples(out)) == width
    if "--prefix-caching" in argv:
        hits = re.search(r"prefix cache hits\s*│\s*(\d+)", out)
        assert hits and int(hits.group(1)) > 0, out
    if "--enable-chunked-prefill" in argv:  # the prompt took several steps: more than tokens
        steps = int(re.search(r"steps\s*│\s*(\d+)", out).group(1))
        assert steps > int(argv[argv.index("--max-tokens") + 1]), out
    if argv[:2] == ["trace", "record"]:
        assert chain[1][:2] == ["trace", "replay"]
        assert request_texts(outputs[1]) == request_texts(out)
        assert re.search(r'^step 1: seq 0 ".*"', outputs[1], flags=re.MULTILINE)


def test_a_prompt_with_brackets_prints_literally(capsys):
    prompt = "Emma [p] said [/dim] nothing [bold]"
    assert cli.main(["generate", "--prompt", prompt, "--n", "2", "--max-tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert prompt in out and "[0] " in out and "[1] " in out
