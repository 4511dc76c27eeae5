"""A served tab's app quits without the interpreter's last garbage collection. Each tab of
``minipaged tui --serve`` runs ``python -m minipaged.cli tui``; when the tab closes,
textual-serve tells it to quit and waits for the process to end. The app left the screen at
once, and then the interpreter's final collection walked every object of the model, torch and
Textual: a replay's quit took 0.86 to 1.04 s here, 0.16 to 0.36 s with the freeze (four
interleaved runs of each, the machine shared; 0.53 and 0.13 s when it was idle).
``cli.run`` now freezes what is left before exiting (``gc.freeze``), so the final collection
skips it; ``atexit`` and every ``finally`` still run.

The app is driven here as textual-serve drives it: the web driver on its standard streams,
packets in, the quit meta packet at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stuck import STUCK_AFTER_S

from minipaged import cli

# Child code: ``python -m minipaged.cli`` as a served tab runs it, reporting at exit (atexit
# runs before the final collection) how many objects were frozen by then.
TAB = """
import atexit, gc, runpy, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count(), file=sys.stderr, flush=True))
sys.argv = ["minipaged", *sys.argv[1:]]
runpy.run_module("minipaged.cli", run_name="__main__")
"""


def packet(kind: bytes, data: dict) -> bytes:
    """A packet of textual-serve's stream to the app: kind, 4-byte length, JSON."""
    payload = json.dumps(data).encode()
    return kind + len(payload).to_bytes(4, "big") + payload


def test_a_served_tab_quits_without_the_final_collection(tmp_path):
    trace = tmp_path / "run.jsonl"
    argv = ["trace", "record", str(trace), "--prompt", "Elizabeth", "--max-tokens", "4"]
    assert cli.main(argv) == 0
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver",
        "COLUMNS": "120",
        "ROWS": "40",
    }
    tab = subprocess.Popen(
        [sys.executable, "-c", TAB, "tui", "--trace", str(trace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        while (line := tab.stdout.readline()) not in (b"__GANGLION__\n", b""):
            pass
        assert line == b"__GANGLION__\n", tab.stderr.read().decode()
        tab.stdin.write(packet(b"M", {"type": "resize", "width": 120, "height": 40}))
        tab.stdin.write(packet(b"M", {"type": "quit"}))
        tab.stdin.flush()
        _, err = tab.communicate(timeout=STUCK_AFTER_S)
    finally:
        tab.kill()
    assert tab.returncode == 0, err.decode()
    frozen = [line for line in err.decode().splitlines() if line.startswith("frozen ")]
    assert frozen and int(frozen[-1].split()[1]) > 0, err.decode()


def test_the_console_script_and_python_m_run_the_same_exit():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["minipaged"] == "minipaged.cli:run"
