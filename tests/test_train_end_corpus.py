"""``python -m minipaged.train`` ends on Ctrl-C, ``kill``, a closed terminal and Ctrl-\\ as a
``minipaged`` command does (``minipaged.ending_signals``): it had no handler, so ``kill`` ended
Python before any cleanup (a checkpoint's hidden ``.model.safetensors.XXXX`` left in the model
folder when it came during the save) and Ctrl-C printed a traceback. The real signal, sent to
a real (very small) training run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from stuck import STUCK_AFTER_S

from minipaged import ending_signals

SMALL = ["--steps", "100000", "--vocab-size", "300", "--context", "32", "--batch-size", "2"]
SMALL += ["--dim", "16", "--heads", "2", "--kv-heads", "1", "--layers", "1"]
SMALL += ["--intermediate", "16", "--eval-every", "100000"]


def test_kill_ends_training_in_one_line_and_writes_nothing(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "".join(f"Paragraph {i} of a very small corpus, said she.\n" for i in range(400))
    )
    out = tmp_path / "model"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-m", "minipaged.train", "--corpus", str(corpus), "--out", str(out)]
    run = subprocess.Popen(
        [*command, *SMALL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert run.stdout.readline().startswith(b"corpus "), run.stderr.read()  # it trains
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=STUCK_AFTER_S)
    finally:
        run.kill()
    assert run.returncode == 128 + signal.SIGTERM, (run.returncode, err)
    assert err.decode().splitlines() == [
        f"minipaged train: {ending_signals.ENDING[signal.SIGTERM]}"
    ], err
    assert not out.exists() or list(out.iterdir()) == []
