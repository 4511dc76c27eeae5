"""``minipaged tui --serve`` in a real browser: headless Chromium loads the page, fetches
nothing from another host, and receives the app's screen over the websocket."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from minipaged.checkpoint import model_directory
from minipaged.cli import build_parser
from minipaged.cli import main as cli_main
from tests.held_port import held_port
from tests.stuck import STUCK_AFTER_S
from tui.command import tui_parser
from tui.origins import allowed_origin
from tui.serve import (
    DEFAULT_PORT,
    HEADLESS_ONLY,
    SERVER_ONLY,
    TEMPLATES,
    command_for,
)
from tui.sessions import DEFAULT_MAX_SESSIONS


@pytest.fixture
def anyio_backend():
    return "asyncio"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPO = Path(__file__).resolve().parents[1]


def test_the_served_page_names_no_other_host():
    page = (TEMPLATES / "app_index.html").read_text(encoding="utf-8")
    hosts = {urlparse(url).netloc for url in page.split('"') if url.startswith("http")}
    assert hosts <= {"www.w3.org"}, hosts  # the SVG namespace is a name, not a fetch


def test_each_tab_runs_the_same_flags_without_serving_again():
    args = build_parser().parse_args(["tui", "--serve", "--port", "9", "--scenario", "beam"])
    command = command_for(args, tui_parser())
    assert "--scenario beam" in command and "--serve" not in command and "--port" not in command


def forwarded_actions() -> list[argparse.Action]:
    skipped = {*SERVER_ONLY, *HEADLESS_ONLY, "help"}
    return [a for a in tui_parser()._actions if a.option_strings and a.dest not in skipped]


def a_value_other_than_the_default(action: argparse.Action) -> str:
    if action.choices:
        return str(next(c for c in action.choices if c != action.default))
    for text in ("3", "2", "0.5", "It is a truth", "cuda:1"):  # the last: a device's rule
        try:
            value = action.type(text) if action.type else text
        except (argparse.ArgumentTypeError, ValueError):
            continue
        if value != action.default:
            return text
    raise AssertionError(f"no test value for {action.option_strings}")


def words_for(action: argparse.Action) -> list[str]:
    """``action``'s flag with a value other than its default, and the flag it requires."""
    flag = action.option_strings[-1]
    needed = getattr(action, "required_option", None)  # minipaged.arguments.requires
    before = [] if needed is None else words_for(needed)
    if action.nargs == 0:
        return [*before, flag]
    times = 2 if isinstance(action, argparse._AppendAction) else 1
    return [*before, *[flag, a_value_other_than_the_default(action)] * times]


def test_every_flag_of_minipaged_tui_reaches_the_served_command():
    """Walks the parser: each option of ``minipaged tui`` but the server's own and the
    screenshot's, set to a value other than its default (beside the flag it requires, if any;
    one at a time, since some contradict each other), parses back from the command each tab
    runs to the same value. A flag added later is covered without touching this test."""
    parser = build_parser()
    for action in forwarded_actions():
        given = parser.parse_args(["tui", "--serve", "--port", "9000", *words_for(action)])
        served = shlex.split(command_for(given, tui_parser()))
        assert served[1:4] == ["-m", "minipaged.cli", "tui"]
        again = parser.parse_args(served[3:])
        name = action.dest
        assert getattr(again, name) == getattr(given, name) != action.default, name
        assert not again.serve and again.port != 9000


def test_the_default_port_is_not_the_docs_server_s():
    assert build_parser().parse_args(["tui"]).port == DEFAULT_PORT != 8000


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "accepted"),
    [
        ("http://127.0.0.1:8765", "127.0.0.1:8765", (), True),
        ("http://localhost:8765", "localhost:8765", (), True),
        ("http://[::1]:8765", "[::1]:8765", (), True),
        ("http://192.168.1.20:8765", "192.168.1.20:8765", (), True),
        ("http://evil.example", "127.0.0.1:8765", (), False),
        ("http://127.0.0.1:9999", "127.0.0.1:8765", (), False),  # another local server's page
        ("http://evil.example:8765", "evil.example:8765", (), False),  # DNS rebinding
        ("null", "127.0.0.1:8765", (), False),  # a sandboxed frame or a file:// page
        (None, "127.0.0.1:8765", (), False),
        ("file://", "127.0.0.1:8765", (), False),
        ("https://course.example.org", "10.0.0.5:8765", ("https://course.example.org",), True),
        ("http://lab-pc.local:8765", "lab-pc.local:8765", ("lab-pc.local",), True),
        ("http://lab-pc.local:8765", "lab-pc.local:8765", ("other.local",), False),
    ],
)
def test_a_websocket_is_allowed_only_from_the_servers_own_pages(origin, host, allowed, accepted):
    assert allowed_origin(origin, host, allowed) is accepted


STDIN_ONCE = shlex.join([sys.executable, "-c", "import sys; sys.stdin.buffer.read(1)"])
"""A stand-in for the app: it runs until the server sends it anything (the quit at the end)."""


@contextlib.asynccontextmanager
async def guarded(**options):
    aiohttp = pytest.importorskip("aiohttp")
    test_utils = pytest.importorskip("aiohttp.test_utils")
    from tui.guarded_server import GuardedServer

    with held_port() as port:
        server = GuardedServer(
            STDIN_ONCE, templates=TEMPLATES, host="127.0.0.1", port=port, **options
        )
        app = await server._make_app()
        async with test_utils.TestServer(app, port=port), aiohttp.ClientSession() as session:
            yield server, session, f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + STUCK_AFTER_S
            while server.sessions:  # each app's process is told to quit once its tab has gone
                assert time.monotonic() < deadline, "a session outlived its websocket"
                await asyncio.sleep(0.05)
            gc.collect()  # textual-serve leaves each app's process transport to the collector:
            await asyncio.sleep(0.1)  # let it close while the event loop still runs


async def handshake(session, url: str, origin: str | None):
    import aiohttp

    headers = {"Origin": origin} if origin else {}
    try:
        return await session.ws_connect(f"{url}/ws", headers=headers)
    except aiohttp.WSServerHandshakeError as refused:
        return refused.status


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("origin", "accepted"),
    [("SELF", True), ("http://evil.example", False), (None, False), ("null", False)],
)
async def test_the_served_app_refuses_a_websocket_handshake_from_another_origin(origin, accepted):
    async with guarded() as (server, session, url):
        result = await handshake(session, url, url if origin == "SELF" else origin)
        if accepted:
            assert not isinstance(result, int), result
            assert server.sessions == 1
            await result.close()
        else:
            assert result == 403 and server.sessions == 0


@pytest.mark.anyio
async def test_an_origin_named_with_allow_origin_is_accepted():
    async with guarded(allowed=("https://course.example.org",)) as (server, session, url):
        connection = await handshake(session, url, "https://course.example.org")
        assert not isinstance(connection, int) and server.sessions == 1
        await connection.close()


@pytest.mark.anyio
async def test_past_the_session_cap_a_tab_is_told_why_and_no_app_starts():
    async with guarded(max_sessions=1) as (server, session, url):
        first = await handshake(session, url, url)
        second = await handshake(session, url, url)
        message = await second.receive(timeout=STUCK_AFTER_S)
        text = message.data.decode()
        assert "all 1 sessions are in use" in text and "--max-sessions" in text
        assert server.sessions == 1
        await second.close()
        await first.close()


@pytest.mark.anyio
async def test_the_page_names_the_address_the_browser_used():
    async with guarded() as (_, session, url):
        async with session.get(f"{url}/", headers={"Host": "10.1.2.3:8765"}) as page:
            assert "ws://10.1.2.3:8765/ws" in await page.text()
        async with session.get(f"{url}/", headers={"Host": "x<script>"}) as page:
            assert page.status == 400


def wait_for_port(port: int, server: subprocess.Popen) -> None:
    """Return once ``server`` listens on ``port``, a port the test holds (``held_port``), so
    that what listens there is ``server`` and no other test's."""
    deadline = time.monotonic() + STUCK_AFTER_S  # a new process loads torch and the model
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, "the server did not start"
        assert server.poll() is None, server.stdout.read().decode()
        time.sleep(0.2)


@contextlib.contextmanager
def served(port: int, *flags: str):
    """``minipaged tui --serve --port PORT [FLAGS]`` running, until the block ends; yields it."""
    server = subprocess.Popen(
        [sys.executable, "-m", "minipaged.cli", "tui", "--serve", "--port", str(port), *flags],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, server)
        yield server
    finally:
        server.terminate()  # the server tells each app to quit, and waits for it
        server.wait(STUCK_AFTER_S)


def test_minipaged_tui_serve_refuses_a_handshake_from_another_site():
    """The real command, a real handshake: a page of another site gets 403 and no process."""
    pytest.importorskip("textual_serve")
    with held_port() as port, served(port) as server:
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\nOrigin: http://evil.example\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", port), timeout=STUCK_AFTER_S) as s:
            s.sendall(request.encode())
            status = s.recv(1024).decode().split("\r\n")[0]
        assert status.startswith("HTTP/1.1 403"), status
    log = server.stdout.read().decode()
    assert "refused a websocket from a page of http://evil.example" in log


# -- the served app in headless Chromium: one server and one browser for these checks ---------

VIEWPORT = {"width": 1024, "height": 640}
MOST_MEAN_DIFFERENCE = 8.0
"""Mean |grey level difference| (of 255) below which two pictures show the same screen: with
the ratio reported as 1 it measured 1.7; without, the quarter-app picture 20.6."""


STILL_AFTER_S = 1.2
"""A served replay's screen is still once no frame has come for this long: its last frames came
in one burst up to 0.72 s after the first that named the physical blocks, up to 0.7 s after the
frame before them, and none in the 3.3 s after; a fixed 3 s wait took over a second longer than
the screen did."""


@pytest.fixture(scope="module")
def screens(tmp_path_factory) -> tuple[int, dict[int, tuple[Path, set[str]]]]:
    """``minipaged tui --serve --trace run.jsonl`` opened in headless Chromium in two tabs, at
    device-pixel ratios 1 and 2: the port it served on, and each ratio's screenshot and the
    hosts its tab fetched from.
    Served as a replay, each tab shows the same still screen once its steps are read; a live
    tab runs the same page, client and server (only the app in its process differs), so the
    checks below hold for it too, and one server, one browser and two tabs cost what three
    servers' apps, two browsers and a second model run did."""
    if CHROMIUM is None:
        pytest.skip("no chromium here (apt-get install chromium)")
    if not (model_directory("tiny") / "model.safetensors").is_file():
        pytest.skip("the embedded tiny model is not built (python -m minipaged.train)")
    playwright = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("textual_serve")
    folder = tmp_path_factory.mktemp("served")
    trace = folder / "run.jsonl"
    args = ["trace", "record", str(trace), "--prompt", "Elizabeth", "--max-tokens", "6"]
    assert cli_main(args) == 0
    found = {}
    with (
        held_port() as port,
        served(port, "--trace", str(trace)),
        playwright.sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for scale in (1, 2):
            found[scale] = shot(browser, port, scale, folder / f"{scale}x.png")
        browser.close()
    return port, found


def shot(browser, port: int, scale: int, path: Path) -> tuple[Path, set[str]]:
    """The served app's screen in a new tab at device-pixel ratio ``scale``, saved at ``path``,
    and the hosts the tab fetched anything from."""
    page = browser.new_page(viewport=VIEWPORT, device_scale_factor=scale)
    hosts: set[str] = set()
    frames: list[tuple[float, str]] = []  # when each websocket frame came, and what it held
    page.on("request", lambda request: hosts.add(urlparse(request.url).netloc))
    page.on(
        "websocket",
        lambda ws: ws.on("framereceived", lambda f: frames.append((time.monotonic(), str(f)))),
    )
    page.goto(f"http://127.0.0.1:{port}/")
    deadline = time.monotonic() + STUCK_AFTER_S
    while "physical blocks" not in "".join(text for _, text in frames):
        assert time.monotonic() < deadline, "the app's screen never arrived"
        page.wait_for_timeout(250)
    # A replay: every step is known, and the screen is still once the frames stop.
    while time.monotonic() - frames[-1][0] < STILL_AFTER_S and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    page.screenshot(path=str(path))
    page.close()
    return path, hosts


@pytest.mark.slow
def test_headless_chromium_shows_the_app_served_from_this_host_alone(screens):
    port, shots = screens
    for _, hosts in shots.values():
        assert hosts == {f"127.0.0.1:{port}"}, hosts


@pytest.mark.slow
def test_the_served_app_shows_whole_at_a_device_pixel_ratio_of_2(screens):
    """textual-serve 1.1.3's terminal sizes its canvases in CSS pixels but draws its glyphs at
    the device's resolution, so at a ratio of 2 (a HiDPI or Retina screen) only the top-left
    quarter of the app showed (found with headless Chromium at deviceScaleFactor 2, 33 §5).
    ``tui/templates/app_index.html`` reports a ratio of 1 to it; the browser scales the drawing
    up. The same screen at ratios 1 and 2, the second scaled down, differ little; a quarter of
    the app, drawn twice as large, differs from the whole everywhere."""
    image = pytest.importorskip("PIL.Image")
    from PIL import ImageChops, ImageStat

    _, shots = screens
    one = image.open(shots[1][0]).convert("L")
    two = image.open(shots[2][0]).convert("L")
    assert two.size == (2 * VIEWPORT["width"], 2 * VIEWPORT["height"])
    two = two.resize(one.size, image.Resampling.BOX)
    difference = ImageStat.Stat(ImageChops.difference(one, two)).mean[0]
    assert difference < MOST_MEAN_DIFFERENCE, difference


def test_the_readme_says_what_serve_binds_and_what_host_exposes():
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    defaults = build_parser().parse_args(["tui"])
    assert defaults.host == "127.0.0.1"
    assert f"http://127.0.0.1:{DEFAULT_PORT}" in readme
    assert "By default it listens on 127.0.0.1, so only this machine can open it" in readme
    assert "`--host 0.0.0.0` (or one of this machine's addresses) exposes it" in readme
    assert f"at most `--max-sessions` apps ({DEFAULT_MAX_SESSIONS})" in readme
    assert "local network" not in readme


def test_the_readme_and_the_cli_page_say_where_serve_listens_as_the_parser_does():
    """The README once said --serve served "browsers on the local network"; it listens on
    127.0.0.1 unless --host names another address, and both documents say so."""
    host = tui_parser().parse_args(["--serve"]).host
    assert host == "127.0.0.1"
    root = Path(__file__).resolve().parent.parent
    for document in ("README.md", "docs/reference/cli.md"):
        text = " ".join((root / document).read_text(encoding="utf-8").split())
        assert f"listens on {host}" in text, document
        assert "`--host" in text, f"{document} does not say what --host exposes"
        assert "local network" not in text, document
