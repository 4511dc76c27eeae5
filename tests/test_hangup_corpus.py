"""A closed terminal (SIGHUP) and Ctrl-\\ (SIGQUIT), one by one, where they had not been sent:
to ``minipaged generate`` as the model writes, to ``trace record`` before its first step, and
to a checkpoint being saved. Each ends as Ctrl-C does (``minipaged.ending_signals``): one line
naming the signal, status 128 + its number, nothing half written. A checkpoint is five or six
files, and was put in place one file after another: a signal between two left new weights
beside an old config, or a model card of another run. Now its files are all written first and
put in place together (``checkpoint.write_together``), the signal held back meanwhile
(``ending_signals.held_back``): the old checkpoint or the new one, never a mix. Each signal is
real, sent to a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from stuck import STUCK_AFTER_S
from test_cli_fuzz import interrupt

from minipaged import ending_signals

HANGUPS = [signal.SIGHUP, signal.SIGQUIT]


@pytest.mark.parametrize("number", HANGUPS, ids=[s.name for s in HANGUPS])
def test_generate_ends_in_one_line_with_its_status(number):
    argv = ("generate", "--prompt", "Emma", "--max-tokens", "400", "--ignore-eos", "--n", "16")
    status, err = interrupt(None, *argv, number=number)
    assert status == 128 + number, err
    assert err.strip().splitlines() == [f"minipaged generate: {ending_signals.ENDING[number]}"]


@pytest.mark.parametrize("number", HANGUPS, ids=[s.name for s in HANGUPS])
def test_trace_record_before_its_first_step_leaves_the_old_trace_alone(tmp_path, number):
    path = tmp_path / "run.jsonl"
    path.write_text('{"format": "minipaged-trace", "version": 2}\n')
    argv = ("trace", "record", str(path), "--prompt", "Emma", "--max-tokens", "400")
    status, err = interrupt(None, *argv, "--ignore-eos", number=number)
    assert status == 128 + number and ending_signals.ENDING[number] in err, err
    assert "Traceback" not in err and err.count("\n") == 1
    assert path.read_text() == '{"format": "minipaged-trace", "version": 2}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]


# Child code: the tiny model saved over an older save of itself, with a new model card, the
# signal sent once the second file is staged ("staged": none is in place yet) or once the
# first file is put in place ("between puts").
SAVING = """
import os, sys
from minipaged import atomic_write, ending_signals
from minipaged.checkpoint import load_model, save_model
from minipaged.models import model_directory
from minipaged.tokenizer import Tokenizer

number, moment, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ending_signals.end_on_signals(lambda: "save")
model, tokenizer = load_model("tiny"), Tokenizer(model_directory("tiny"))
made, committed = atomic_write.Replacement.__init__, atomic_write.Replacement.commit
count = []

def staged(self, *args, **kwargs):
    made(self, *args, **kwargs)
    count.append(self)
    if moment == "staged" and len(count) == 2:
        os.kill(os.getpid(), number)

def put(self):
    committed(self)
    if moment == "between puts":
        os.kill(os.getpid(), number)

atomic_write.Replacement.__init__, atomic_write.Replacement.commit = staged, put
save_model(model, tokenizer, out, extra={"MODEL_CARD.md": "# minipaged new model\\n"})
print("returned", file=sys.stderr)
"""


@pytest.fixture(scope="module")
def old_checkpoint(tmp_path_factory) -> dict[str, bytes]:
    """The files of a save of the tiny model with the card of a model named old."""
    from minipaged.checkpoint import load_model, save_model
    from minipaged.models import model_directory
    from minipaged.tokenizer import Tokenizer

    folder = tmp_path_factory.mktemp("old") / "model"
    tokenizer = Tokenizer(model_directory("tiny"))
    save_model(
        load_model("tiny"), tokenizer, folder, extra={"MODEL_CARD.md": "# minipaged old model\n"}
    )
    return {file.name: file.read_bytes() for file in folder.iterdir()}


@pytest.mark.parametrize("moment", ["staged", "between puts"])
@pytest.mark.parametrize("number", [*HANGUPS, signal.SIGTERM], ids=["SIGHUP", "SIGQUIT", "kill"])
def test_a_signal_while_a_checkpoint_is_saved_leaves_the_old_one_or_the_new_never_a_mix(
    tmp_path, old_checkpoint, number, moment
):
    folder = tmp_path / "model"
    folder.mkdir()
    for name, content in old_checkpoint.items():
        (folder / name).write_bytes(content)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", SAVING, str(int(number)), moment, str(folder)],
        capture_output=True,
        env=env,
        timeout=STUCK_AFTER_S,
    )
    err = done.stderr.decode()
    assert done.returncode == 128 + number, err
    assert err.splitlines() == [f"minipaged save: {ending_signals.ENDING[number]}"], err
    files = {file.name: file.read_bytes() for file in folder.iterdir()}
    assert sorted(files) == sorted(old_checkpoint), "a file was left half made, or hidden"
    card = files["MODEL_CARD.md"]
    if moment == "staged":  # none was in place when the signal came: the old one, whole
        assert files == old_checkpoint
    else:  # the first was in place: every file is the new save's
        assert card == b"# minipaged new model\n"
        assert files["model.safetensors"] == old_checkpoint["model.safetensors"]  # same model
