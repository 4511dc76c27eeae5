"""Which pages may open the websocket of ``minipaged tui --serve``: the server's own, and the
origins the user names. A websocket drives a process on this machine, and a browser lets any
page it has open try to open one, so the page's ``Origin`` is checked. Reaching the server by
an IP address or ``localhost`` is what makes a page its own: a name (``evil.example``) could be
pointed at this machine by whoever controls it (DNS rebinding), so a name must be named."""

from __future__ import annotations

import argparse
import ipaddress
import re
from urllib.parse import urlsplit

HOST_HEADER = re.compile(r"[A-Za-z0-9.\-]+(:\d+)?|\[[0-9A-Fa-f:.]+\](:\d+)?")
"""What a ``Host`` header may hold: a name or address, and a port."""

LOCAL_NAMES = ("localhost",)

LONGEST_ORIGIN = len("https://") + 253 + len(":65535")
"""The longest origin: a scheme, the longest DNS name and a port."""


def allowed_origin(origin: str | None, host: str, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a websocket from a page of ``origin`` may drive an app: the page is this
    server's own (``origin``'s host and port are the request's ``host``, which is an IP
    address or ``localhost``), or ``origin`` (whole, or its host and port, or its host) is
    one of ``allowed``."""
    if not origin:
        return False  # browsers always send Origin; a page that hides it is not ours
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    if origin in allowed or parts.netloc in allowed or parts.hostname in allowed:
        return True
    return parts.netloc == host.lower() and _is_address(parts.hostname or "")


def _is_address(name: str) -> bool:
    if name in LOCAL_NAMES:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def origin_flag(value: str) -> str:
    """An argparse type for ``--allow-origin``: an origin (``https://course.example.org``,
    with a port if it has one) or a host (``course.example.org``, ``10.0.0.5:8765``), as
    ``allowed_origin`` compares it (lower case, no trailing slash). Anything else could never
    match a browser's ``Origin`` and would allow nothing while seeming to: refused, ``*``
    with it (a wildcard would let every page a browser has open drive this machine)."""
    origin = _as_origin(value.strip()) if len(value) <= LONGEST_ORIGIN else None
    if origin is None:
        raise argparse.ArgumentTypeError(
            f"must be an origin such as https://course.example.org (scheme, host and port, no "
            f"path) or a host such as course.example.org, got {value[:60]!r}; name each origin "
            "with its own --allow-origin: a wildcard would let every page a browser has open "
            "drive this machine"
        )
    return origin


def _as_origin(value: str) -> str | None:
    """``value`` as ``allowed_origin`` compares it, or None if no browser's origin matches."""
    if "://" not in value:
        return value.lower() if HOST_HEADER.fullmatch(value) else None
    parts = urlsplit(value)
    host = parts.netloc.lower()
    whole = parts.path in ("", "/") and not (parts.query or parts.fragment)
    if parts.scheme in ("http", "https") and whole and HOST_HEADER.fullmatch(host):
        return f"{parts.scheme}://{host}"  # HOST_HEADER has no "@": no user name either
    return None
