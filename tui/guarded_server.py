"""textual-serve's server with the guards ``tui.serve`` states: only this server's own pages
(and the origins named) may open a websocket, at most ``max_sessions`` apps run at once, and
the page names the address the browser used, so that it works from another machine too. Every
signal that ends a command (``minipaged.ending_signals``) ends the server as textual-serve ends
it on Ctrl-C: each open tab's session is ended at once (aiohttp would wait up to a minute for
it), its app told to quit and waited for, and the server returns; ``ended_by`` says which
signal it was."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aiohttp import web
from textual_serve.server import Server

from minipaged import ending_signals
from tui.origins import HOST_HEADER, allowed_origin
from tui.sessions import DEFAULT_MAX_SESSIONS, TAB_MB

log = logging.getLogger("textual-serve")


class GuardedServer(Server):
    """Guarantees: a websocket whose ``Origin`` is not allowed is refused (HTTP 403) before
    any process starts; ``sessions`` never exceeds ``max_sessions``, and a tab past the cap
    sees why in its terminal."""

    def __init__(
        self,
        command: str,
        *,
        templates: Path,
        host: str,
        port: int,
        allowed: tuple[str, ...] = (),
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        super().__init__(
            command, host=host, port=port, title="minipaged tui", templates_path=str(templates)
        )
        self.allowed = allowed
        self.max_sessions = max_sessions
        self.sessions = 0
        self.ended_by: int | None = None
        self.tabs: set[asyncio.Task] = set()  # the handlers of the websockets open now

    async def on_startup(self, app: web.Application) -> None:
        # textual-serve ends gracefully on SIGINT and SIGTERM only: a closed terminal or
        # Ctrl-\ ended the command at once, leaving each tab's app to notice alone
        loop = asyncio.get_running_loop()
        for number in ending_signals.ENDING:
            loop.add_signal_handler(number, self.end_on, number)
        await super().on_startup(app)

    async def on_shutdown(self, app: web.Application) -> None:
        # aiohttp waits for every open websocket's handler, up to a minute, before it ends:
        # each tab's session ends now (textual-serve's handler then tells its app to quit)
        for tab in self.tabs:
            tab.cancel()
        await super().on_shutdown(app)

    def end_on(self, number: int) -> None:
        """Stop serving, as textual-serve does on Ctrl-C, because signal ``number`` came."""
        self.ended_by = number
        self.request_exit()

    async def handle_index(self, request: web.Request) -> web.Response:
        if not HOST_HEADER.fullmatch(request.host):
            raise web.HTTPBadRequest(text=f"not a host name: {request.host!r}")
        # textual-serve writes its listening address into the page's URLs: "0.0.0.0" (every
        # interface) means nothing to another machine's browser. Name the one it used (the
        # page's handler reads public_url before it yields to any other request).
        self.public_url = f"{request.scheme}://{request.host}"
        return await super().handle_index(request)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        origin = request.headers.get("Origin")
        if not allowed_origin(origin, request.host, self.allowed):
            log.warning(
                "refused a websocket from a page of %s: only this server's own pages, reached "
                "by an IP address or localhost, may drive the app; to allow that page, start "
                "the server with --allow-origin %s",
                origin or "no origin",
                origin or "ORIGIN",
            )
            raise web.HTTPForbidden(
                text=f"minipaged tui --serve: a page of {origin or 'no origin'} may not drive "
                "this app; only the server's own pages (and --allow-origin) may"
            )
        if self.sessions >= self.max_sessions:
            return await self.refuse_busy(request)
        self.sessions += 1
        self.tabs.add(asyncio.current_task())
        try:
            return await super().handle_websocket(request)
        finally:
            self.tabs.discard(asyncio.current_task())
            self.sessions -= 1

    async def refuse_busy(self, request: web.Request) -> web.WebSocketResponse:
        """Accept the tab's websocket without starting an app, and write why into its
        terminal (the page shows bytes as terminal output); keep it open, so the message
        stays on screen, until the tab goes."""
        log.warning("refused a session: %d are running (--max-sessions)", self.sessions)
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)
        message = (
            f"\r\n  minipaged tui --serve: all {self.max_sessions} sessions are in use "
            f"(--max-sessions {self.max_sessions}).\r\n  Close another tab of this app, or "
            "restart the server with a larger --max-sessions (each session is a process of "
            f"about {TAB_MB} MB); then reload this page.\r\n"
        )
        await websocket.send_bytes(message.encode())
        async for _ in websocket:  # the tab's keys and resizes: nothing to drive
            pass
        return websocket
