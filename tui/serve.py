"""``minipaged tui --serve``: the same app in a browser, for a class following on laptops.

textual-serve runs one copy of ``minipaged tui`` (with the other flags given) per browser tab
and streams its screen over a local websocket. Its page would fetch a web font from another
host; ``tui/templates/app_index.html`` is that page with the font served locally instead, so
nothing is fetched from anywhere but this server.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from minipaged.arguments import config_flags_given

TEMPLATES = Path(__file__).with_name("templates")


FORWARDED = ("scenario", "exercise", "path", "trace", "n", "beam_width", "max_tokens")
"""The run flags besides the engine's, which ``config_flags_given`` passes on, every one."""


def command_for(args: argparse.Namespace) -> str:
    """The shell command each browser tab runs: ``minipaged tui`` with the same run flags
    (not ``--serve``, ``--host``, ``--port`` or the screenshot's)."""
    argv = []
    for name in FORWARDED:
        value = getattr(args, name, None)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    argv += config_flags_given(args)
    for prompt in getattr(args, "prompt", None) or ():
        argv += ["--prompt", prompt]
    argv += [f"--{flag}" for flag in ("solution", "projection") if getattr(args, flag, False)]
    return shlex.join([sys.executable, "-m", "minipaged.cli", "tui", *argv])


def serve(args: argparse.Namespace) -> int:
    """Serve the app at http://HOST:PORT (``args.host``, ``args.port``) until interrupted.
    Raises ``ValueError`` (with the way out) when textual-serve is not installed."""
    try:
        from textual_serve.server import Server
    except ImportError as error:
        raise ValueError(
            "--serve needs textual-serve: pip install 'minipaged[serve]' (or textual-serve)"
        ) from error
    server = Server(
        command_for(args),
        host=args.host,
        port=args.port,
        title="minipaged tui",
        templates_path=str(TEMPLATES),
    )
    server.serve()
    return 0
