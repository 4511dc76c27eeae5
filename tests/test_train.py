"""``python -m minipaged.train`` on a toy corpus: it writes a loadable model directory, trains
its own tokenizer or reuses a target's (a draft model must share the target's vocabulary), and
rejects bad arguments with a message instead of a traceback."""

from __future__ import annotations

import json

import pytest
import torch

from minipaged import train
from minipaged.checkpoint import EMBEDDED_MODELS, load_model
from minipaged.tokenizer import Tokenizer

TINY = EMBEDDED_MODELS["tiny"]
SMALL = ["--steps", "3", "--batch-size", "2", "--context", "32", "--eval-every", "2"]
SHAPE = ["--dim", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "24"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lines = [
        f"Paragraph {i}: it is a truth universally acknowledged that {i} blocks are enough."
        for i in range(120)
    ]
    path = tmp_path_factory.mktemp("corpus") / "toy.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_draft_reuses_its_targets_tokenizer_and_says_so(corpus, tmp_path):
    out = tmp_path / "draft"
    train.main(
        ["--corpus", str(corpus), "--out", str(out), "--tokenizer", str(TINY), *SMALL, *SHAPE]
    )
    assert (out / "tokenizer.json").read_bytes() == (TINY / "tokenizer.json").read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == json.loads((TINY / "config.json").read_text())["vocab_size"]
    card = (out / "MODEL_CARD.md").read_text()
    assert "draft model" in card and "Reused unchanged from `tiny`" in card
    model = load_model(out)
    logits = model.forward_contiguous(torch.tensor([Tokenizer(out).encode("It is")]))
    assert logits.shape[-1] == config["vocab_size"] and torch.isfinite(logits).all()


def test_without_a_tokenizer_it_trains_its_own(corpus, tmp_path):
    out = tmp_path / "own"
    train.main(["--corpus", str(corpus), "--out", str(out), "--vocab-size", "300", *SMALL, *SHAPE])
    assert Tokenizer(out).vocab_size <= 300
    assert "trained on the training paragraphs only" in (out / "MODEL_CARD.md").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tokenizer", "no-such-dir"], "has no tokenizer.json"),
        (["--steps", "0"], "--steps must be positive"),
        (["--corpus", "no-such-file.txt"], "does not exist"),
        # --out is refused before training, not when the trained model is saved minutes later
        (["--out", "{corpus}"], "name a folder for the trained model"),
        (["--out", "{corpus}/model"], "on the way to"),
        (["--out", "/dev/null"], "name a folder for the trained model"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(argv, message, corpus, capsys):
    argv = [word.format(corpus=corpus) for word in argv]
    base = ["--corpus", str(corpus)] if "--corpus" not in argv else []
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(base + argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_shipped_draft_shares_the_tiny_vocabulary_and_fits_in_a_megabyte():
    draft = EMBEDDED_MODELS["tiny-draft"]
    assert (draft / "tokenizer.json").read_bytes() == (TINY / "tokenizer.json").read_bytes()
    assert (draft / "model.safetensors").stat().st_size <= 1_000_000
    assert (draft / "MODEL_CARD.md").is_file()
