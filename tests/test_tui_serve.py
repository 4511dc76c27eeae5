"""``minipaged tui --serve`` in a real browser: headless Chromium loads the page, fetches
nothing from another host, and receives the app's screen over the websocket."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from minipaged.checkpoint import model_directory
from tui.serve import TEMPLATES, command_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPO = Path(__file__).resolve().parents[1]


def test_the_served_page_names_no_other_host():
    page = (TEMPLATES / "app_index.html").read_text(encoding="utf-8")
    hosts = {urlparse(url).netloc for url in page.split('"') if url.startswith("http")}
    assert hosts <= {"www.w3.org"}, hosts  # the SVG namespace is a name, not a fetch


def test_each_tab_runs_the_same_flags_without_serving_again():
    from minipaged.cli import build_parser

    args = build_parser().parse_args(["tui", "--serve", "--port", "9", "--scenario", "beam"])
    command = command_for(args)
    assert "--scenario beam" in command and "--serve" not in command and "--port" not in command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (apt-get install chromium)")
@pytest.mark.skipif(
    not (model_directory("tiny") / "model.safetensors").is_file(),
    reason="the embedded tiny model is not built (python -m minipaged.train)",
)
def test_headless_chromium_shows_the_app_served_from_this_host_alone(tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("textual_serve")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "minipaged.cli", "tui", "--serve", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the server did not start"
            assert server.poll() is None, server.stdout.read().decode()
            time.sleep(0.2)
        hosts: set[str] = set()
        received: list[str] = []
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("request", lambda request: hosts.add(urlparse(request.url).netloc))

            def on_socket(ws) -> None:
                ws.on("framereceived", lambda frame: received.append(str(frame)))

            page.on("websocket", on_socket)
            page.goto(f"http://127.0.0.1:{port}/")
            deadline = time.monotonic() + 90
            while "physical blocks" not in "".join(received):
                assert time.monotonic() < deadline, "the app's screen never arrived"
                page.wait_for_timeout(250)
            page.wait_for_timeout(2000)
            page.screenshot(path=str(tmp_path / "served.png"))
            browser.close()
        assert hosts == {f"127.0.0.1:{port}"}, hosts
    finally:
        server.terminate()
        server.wait(10)
