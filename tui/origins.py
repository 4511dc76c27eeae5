"""Which pages may open the websocket of ``minipaged tui --serve``: the server's own, and the
origins the user names. A websocket drives a process on this machine, and a browser lets any
page it has open try to open one, so the page's ``Origin`` is checked. Reaching the server by
an IP address or ``localhost`` is what makes a page its own: a name (``evil.example``) could be
pointed at this machine by whoever controls it (DNS rebinding), so a name must be named."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

HOST_HEADER = re.compile(r"[A-Za-z0-9.\-]+(:\d+)?|\[[0-9A-Fa-f:.]+\](:\d+)?")
"""What a ``Host`` header may hold: a name or address, and a port."""

LOCAL_NAMES = ("localhost",)


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
