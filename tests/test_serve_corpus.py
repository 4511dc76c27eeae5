"""Bad input to ``minipaged tui --serve``'s own flags: an ``--allow-origin`` no browser's
``Origin`` can match (``*``, a path, another scheme) allowed nothing while seeming to, and an
address or port the machine cannot listen on failed after the server said it served. Each is
now refused before anything starts, in one line naming the flag and the way out; an origin
taken is one a browser's page can match."""

from __future__ import annotations

import argparse
import socket

import pytest

from tests.held_port import held_port
from tests.test_cli_corpus import assert_usage_error, run
from tui.origins import allowed_origin, origin_flag
from tui.serve import check_can_listen

NEVER_MATCH = [
    "*",
    "https://*.example.org",
    "javascript:alert(1)",
    "ftp://example.org",
    "https://example.org/course",
    "https://example.org?x=1",
    "https://user@example.org",
    "example.org/course",
    "https://",
    "x" * 300,
]


@pytest.mark.parametrize("value", NEVER_MATCH)
def test_an_origin_no_page_can_have_is_refused_naming_the_forms(value):
    with pytest.raises(argparse.ArgumentTypeError, match="must be an origin such as https://"):
        origin_flag(value)


@pytest.mark.parametrize("value", ["*", "https://example.org/course"])
def test_the_command_line_refuses_it_in_one_line_before_serving(capsys, value):
    assert_usage_error(["tui", "--serve", "--allow-origin", value], capsys, "--allow-origin")


TAKEN = {  # what a user types -> an Origin header a browser sends from such a page
    "https://Course.Example.org/": "https://course.example.org",
    "http://10.0.0.5:8765": "http://10.0.0.5:8765",
    "course.example.org": "https://course.example.org",
    "10.0.0.5:8765": "http://10.0.0.5:8765",
    "[::1]:8765": "http://[::1]:8765",
}


@pytest.mark.parametrize("typed", TAKEN)
def test_every_origin_taken_matches_a_page_of_it(typed):
    """The class, not the example: a value the flag takes must let some page in, or the
    flag is a silent no-op."""
    allowed = (origin_flag(typed),)
    assert allowed_origin(TAKEN[typed], "elsewhere.example:1", allowed)
    assert not allowed_origin("https://other.example", "elsewhere.example:1", allowed)


def test_a_host_that_names_no_address_is_refused_naming_host():
    with pytest.raises(ValueError, match=r"--host no-such-host\.invalid: no such address.*127"):
        check_can_listen("no-such-host.invalid", 8765)


def test_a_port_in_use_is_refused_naming_port():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=rf"cannot listen on 127.0.0.1 port {port} .*--port"):
            check_can_listen("127.0.0.1", port)


def test_a_listen_error_without_an_errno_is_refused_in_its_own_words(monkeypatch):
    """An ``OSError`` may carry no errno (``os.strerror(None)`` is a TypeError): the refusal
    still names the address, the port and what the system said."""

    def refuses(address):
        raise OSError("no listening here")

    monkeypatch.setattr(socket, "create_server", refuses)
    with pytest.raises(ValueError, match=r"127.0.0.1 port 8765 \(no listening here\).*--port"):
        check_can_listen("127.0.0.1", 8765)


def test_an_address_and_port_free_here_are_taken_and_left_free():
    with held_port() as port:  # no other test's server can take it meanwhile
        check_can_listen("127.0.0.1", port)
        with socket.create_server(("127.0.0.1", port)):  # the check let it go again
            pass


def test_the_command_line_checks_the_port_before_the_server_starts(capsys, monkeypatch):
    import tui.guarded_server

    started = []
    monkeypatch.setattr(tui.guarded_server, "GuardedServer", lambda *a, **k: started.append(a))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        status, _, err = run(["tui", "--serve", "--port", port], capsys)
    assert status != 0 and started == []
    assert err.strip().count("\n") == 0 and f"port {port}" in err and "--port" in err


MISPLACED_HOST = {
    "http://localhost": "not a URL",
    "https://course.example.org": "not a URL",
    "localhost/app": "not a URL",
    "localhost:8000": "--host localhost --port 8000",
    "0.0.0.0:9000": "--host 0.0.0.0 --port 9000",
    ":8000": "--host 127.0.0.1 --port 8000",
    "[::1]": "without brackets",
    "[::1]:8765": "without brackets",
}


@pytest.mark.parametrize("value", MISPLACED_HOST)
def test_a_host_with_a_scheme_port_or_brackets_is_told_where_each_part_goes(capsys, value):
    """Each only failed to resolve ("no such address"); now the line says which part goes
    to --host and which to --port, before anything listens."""
    line = assert_usage_error(["tui", "--serve", "--host", value], capsys, "--host")
    assert MISPLACED_HOST[value] in line


@pytest.mark.parametrize("value", ["127.0.0.1", "localhost", "0.0.0.0", "::1", "fe80::1", "a-b.c"])
def test_an_address_or_a_host_name_alone_is_taken_as_typed(value):
    from tui.serve import host_flag

    assert host_flag(value) == value


def test_a_resolver_error_is_said_in_its_own_words_not_as_an_unknown_errno(monkeypatch):
    """``create_server`` raises getaddrinfo's errors as ``OSError`` with a negative errno (-9
    for an IPv6 address on a machine without IPv6), which ``os.strerror`` calls "Unknown
    error -9"."""
    why = "Address family for hostname not supported"

    def refuses(address):
        raise OSError(-9, f"{why} (while attempting to bind on address ('::1', 8765))")

    monkeypatch.setattr(socket, "create_server", refuses)
    with pytest.raises(ValueError, match=rf"::1 port 8765 \({why}\): if the port") as refused:
        check_can_listen("::1", 8765)
    assert "Unknown error" not in str(refused.value)
