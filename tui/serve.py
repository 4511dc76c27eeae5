"""``minipaged tui --serve``: the same app in a browser, for a class following on laptops.

textual-serve runs one copy of ``minipaged tui`` (with the other flags given) per browser tab
and streams its screen over a websocket. Its page would fetch a web font from another host;
``tui/templates/app_index.html`` is that page with the font served locally instead, so
nothing is fetched from anywhere but this server.

A websocket drives a process on this machine (with ``--exercise``, one that runs a student's
code), so the server guards it: it listens on 127.0.0.1 unless ``--host`` says otherwise; it
accepts a websocket only from a page it served itself or an origin named with
``--allow-origin`` (``tui.origins``); and it runs at most ``--max-sessions`` apps at once,
telling the tab past the cap why it got none (``tui.guarded_server``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import sys
from pathlib import Path

from minipaged import ending_signals
from minipaged.arguments import integer, requires, say, text
from tui.origins import origin_flag
from tui.sessions import DEFAULT_MAX_SESSIONS, TAB_MB

TEMPLATES = Path(__file__).with_name("templates")
DEFAULT_PORT = 8765
"""Not 8000, which ``make docs`` (mkdocs) takes: a class may want both at once."""

SERVER_ONLY = ("serve", "host", "port", "allow_origin", "max_sessions")
"""Flags of ``minipaged tui`` that configure the server, not the app each tab runs."""

HEADLESS_ONLY = ("screenshot", "force", "steps", "size", "keys")
"""Flags that make a screenshot and exit: a tab wants the live app."""


def add_arguments(tui: argparse.ArgumentParser) -> argparse.Action:
    """The server's flags on ``minipaged tui``'s parser; returns ``--serve``, which each of
    the others ``requires``."""
    server = tui.add_argument_group("serving the app to browsers (--serve)")
    serve = server.add_argument("--serve", action="store_true", help="serve the app to browsers")
    host = server.add_argument(
        "--host",
        type=host_flag,  # "" would listen on every address, as 0.0.0.0 does
        default="127.0.0.1",
        help="the address to listen on: 127.0.0.1 serves this machine only; 0.0.0.0 (or one "
        "of its addresses) lets every machine that reaches it open the app",
    )
    port = server.add_argument(
        "--port",
        type=integer(1, 65535),
        default=DEFAULT_PORT,
        help="the port (make docs takes 8000)",
    )
    origin = server.add_argument(
        "--allow-origin",
        action="append",
        type=origin_flag,
        metavar="ORIGIN",
        help="also accept websockets from pages of ORIGIN (https://course.example.org, or a "
        "host name this machine is reached by); repeat for several",
    )
    sessions = server.add_argument(
        "--max-sessions",
        type=integer(1, 1024),
        default=DEFAULT_MAX_SESSIONS,
        help=f"apps served at once; each is a process of about {TAB_MB} MB",
    )
    for flag in (host, port, origin, sessions):
        requires(flag, serve)
    return serve


def host_flag(value: str) -> str:
    """An argparse type for ``--host``: an address or a host name alone (``text``'s rules).
    A URL, a host with its port, or an IPv6 address in brackets is refused where it is typed,
    saying which part goes where: each would only fail to resolve, with the system's words."""
    host = text("an address")(value)
    shown = f"{value!r:.80}"
    port = host.rpartition(":")[2]
    if "://" in host or "/" in host:
        raise argparse.ArgumentTypeError(
            f"takes an address, not a URL, got {shown}: give the host alone (--host localhost, "
            "--host 0.0.0.0) and the port with --port"
        )
    if host.startswith("[") or host.endswith("]"):
        raise argparse.ArgumentTypeError(
            f"takes an IPv6 address without brackets, got {shown}: --host ::1, and the port "
            "with --port"
        )
    if host.count(":") == 1 and port.isdigit():
        raise argparse.ArgumentTypeError(
            f"takes the address without its port, got {shown}: --host "
            f"{host.rpartition(':')[0] or '127.0.0.1'} --port {port}"
        )
    return host


def command_for(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    """The shell command each browser tab runs: ``minipaged tui`` with every flag of
    ``parser`` (the ``tui`` subcommand's) that ``args`` set, except the server's own and the
    screenshot's. Walking the parser, not a list of names, means a flag added later is
    forwarded too."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in (*SERVER_ONLY, *HEADLESS_ONLY, "help"):
            continue
        argv += _flag(action, getattr(args, action.dest, None))
    return shlex.join([sys.executable, "-m", "minipaged.cli", "tui", *argv])


def _flag(action: argparse.Action, value: object) -> list[str]:
    """``action``'s option as the command line that gives it ``value``."""
    flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else None
    flag = flag or action.option_strings[0]
    if isinstance(action, argparse.BooleanOptionalAction):
        return [] if value is None else [flag if value else f"--no-{flag[2:]}"]
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return [flag] if value == action.const else []  # given (an engine flag's default is unset)
    if isinstance(action, argparse._AppendAction):
        return [part for item in value or () for part in (flag, str(item))]
    if isinstance(action, argparse._StoreAction):  # a default the tab's parser gives again
        return [] if value is None or value == action.default else [flag, str(value)]
    raise TypeError(f"{flag}: cannot forward an argparse {type(action).__name__} to the served app")


def check_can_listen(host: str, port: int) -> None:
    """Refuse, before the server starts and says it serves, an address this machine cannot
    listen on: a name that resolves to nothing, an address that is not this machine's, a port
    in use or reserved. A ``ValueError`` naming the flag and the way out; the server itself
    failed after printing "Press Ctrl+C to quit", with the system's words alone."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ValueError(
            f"--host {host}: no such address ({error.strerror}); use 127.0.0.1 to serve this "
            "machine only, 0.0.0.0 to serve every machine that reaches it, or one of its "
            "addresses"
        ) from None
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as error:  # the system's words without create_server's "(while ...)"
        # A negative errno is getaddrinfo's (EAI_*), which os.strerror does not know
        words = error.strerror or str(error)
        why = os.strerror(error.errno) if error.errno and error.errno > 0 else words
        why = why.split(" (while attempting")[0]
        raise ValueError(
            f"cannot listen on {host} port {port} ({why}): if the port "
            "is in use or reserved, pick another with --port; if the address is not this "
            "machine's, use 127.0.0.1 or 0.0.0.0 with --host"
        ) from None


def serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Serve the app at http://HOST:PORT (``args.host``, ``args.port``) until a signal ends
    it (``minipaged.ending_signals``: its line on stderr and status, once every app has quit);
    ``parser`` is the ``tui`` subcommand's. Raises ``ValueError`` (with the way out) when
    textual-serve is not installed."""
    try:
        from tui.guarded_server import GuardedServer
    except ImportError as error:
        raise ValueError(
            "--serve needs textual-serve: pip install 'minipaged[serve]' (or textual-serve)"
        ) from error
    check_can_listen(args.host, args.port)
    server = GuardedServer(
        command_for(args, parser),
        templates=TEMPLATES,
        host=args.host,
        port=args.port,
        allowed=tuple(args.allow_origin or ()),
        max_sessions=args.max_sessions,
    )
    server.serve()
    if server.ended_by is not None:  # told on stderr with the status, as for every command
        say("tui", ending_signals.ENDING[server.ended_by])
        return 128 + server.ended_by
    return 0
