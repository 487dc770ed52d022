"""The server URL (docs/client.md, rule URL): checked once when the Config is made, split into
what the transport sends, and never shown with its password."""

from __future__ import annotations

import asyncio
import base64
import functools
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from _drivers import Driver, cfg, req
from _loopback import peek_until
from _server import ReplayServer
from llamafast import (
    AsyncClient,
    Client,
    ConnectError,
    InferConfig,
)
from llamafast._core import request_bytes
from llamafast._url import Target

CHAT = "/v1/chat/completions"
PASSWORD = "hunter2-Do-Not-Show"
DRIVES = ["sync", "async"]  # the `drive` fixture's (conftest.py)
config = functools.partial(cfg, base={"connect_timeout": 2.0, "retries": 0, "wait_timeout": 5.0})


class RawServer(ReplayServer):
    """The loopback server, also keeping each request line as it arrived (query and all)."""

    lines: list[str]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        lines: list[str] = []
        self.lines = lines
        read = ReplayServer._read_request

        def _read_request(conn: socket.socket) -> Any:
            data = peek_until(conn, b"\r\n")
            if data is None:
                return None
            lines.append(data.split(b"\r\n")[0].decode("latin-1"))
            return read(conn)

        self._read_request = _read_request  # type: ignore[method-assign]


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the parts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port", "host_header"),
    [
        ("http://h", "http", "h", 80, "h"),
        ("https://h", "https", "h", 443, "h"),
        ("http://h:80", "http", "h", 80, "h"),
        ("https://h:443/", "https", "h", 443, "h"),
        ("http://h:443", "http", "h", 443, "h:443"),
        ("http://127.0.0.1:8080", "http", "127.0.0.1", 8080, "127.0.0.1:8080"),
        ("http://[::1]:8080", "http", "::1", 8080, "[::1]:8080"),
        ("https://[::1]", "https", "::1", 443, "[::1]"),
        ("HTTP://Example.COM:9", "http", "example.com", 9, "example.com:9"),
        ("http://bücher.example", "http", "xn--bcher-kva.example", 80, "xn--bcher-kva.example"),
    ],
)
def test_scheme_host_port_and_the_host_header(
    url: str, scheme: str, host: str, port: int, host_header: str
) -> None:
    target = Target.parse(url)
    assert (target.scheme, target.host, target.port) == (scheme, host, port)
    # the Host header: default ports left out, an IPv6 literal in brackets, always ASCII
    assert target.host_header == host_header
    assert request_bytes("GET", target, "/health", None, {}).split(b"\r\n")[1] == (
        b"Host: " + host_header.encode()
    )


@pytest.mark.parametrize(
    ("url", "prefix"),
    [
        ("http://h", ""),
        ("http://h/", ""),
        ("http://h/llm", "/llm"),
        ("http://h/llm/", "/llm"),
        # an openai-style base URL: the client's paths already start with /v1
        ("http://h:8080/v1", ""),
        ("http://h:8080/v1/", ""),
        ("http://h/proxy/v1", "/proxy"),
        ("http://h/proxy/v1/", "/proxy"),
        ("http://h/v1x", "/v1x"),
        ("http://h/v10", "/v10"),
        ("http://h/v1/x", "/v1/x"),
    ],
)
def test_the_path_is_a_prefix_and_a_final_v1_is_the_same_server(url: str, prefix: str) -> None:
    target = Target.parse(url)
    assert target.prefix == prefix
    assert target.path("/slots") == prefix + "/slots"
    assert target.path(CHAT) == prefix + CHAT


def test_v1_or_not_sends_the_very_same_requests() -> None:
    plain, openai = Target.parse("http://h:8080"), Target.parse("http://h:8080/v1")
    for method, path in [("GET", "/slots"), ("GET", "/health"), ("POST", CHAT)]:
        a = request_bytes(method, plain, plain.path(path), b"{}", {"X": "y"})
        assert request_bytes(method, openai, openai.path(path), b"{}", {"X": "y"}) == a
    assert openai.url == plain.url == "http://h:8080"


@pytest.mark.parametrize(
    ("url", "prefix", "query"),
    [
        ("http://h/ünï", "/%C3%BCn%C3%AF", ""),
        ("http://h/a b", "/a%20b", ""),
        ("http://h/a%20b", "/a%20b", ""),  # already encoded: kept
        ("http://h/100%", "/100%25", ""),  # a lone % is not an escape
        ('http://h/<"{|}>^`\\', "/%3C%22%7B%7C%7D%3E%5E%60%5C", ""),
        ("http://h/a:b@c!$&'()*+,;=-._~", "/a:b@c!$&'()*+,;=-._~", ""),
        ("http://h/p?a=b", "/p", "?a=b"),
        ("http://h/p/?a=b&c=d/e?f", "/p", "?a=b&c=d/e?f"),
        ("http://h?a=é b", "", "?a=%C3%A9%20b"),
        ("http://h/v1?a=b", "", "?a=b"),
        ("http://h/?", "", ""),
    ],
)
def test_the_path_and_query_are_percent_encoded_utf8(url: str, prefix: str, query: str) -> None:
    target = Target.parse(url)
    assert target.prefix == prefix
    assert target.path("/slots") == f"{prefix}/slots{query}"
    line = request_bytes("GET", target, target.path("/slots"), None, {}).split(b"\r\n")[0]
    assert line == f"GET {prefix}/slots{query} HTTP/1.1".encode("ascii")


def test_the_query_goes_on_every_request_after_the_paths_own() -> None:
    target = Target.parse("http://h/p?key=1")
    assert target.path("/health") == "/p/health?key=1"
    assert target.path("/props?model=a b") == "/p/props?model=a%20b&key=1"


# --- what is refused --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://h", "must start with http:// or https://"),
        ("localhost:8080", "must start with http:// or https://"),
        ("", "must start with http:// or https://"),
        ("http://", "has no host"),
        ("http:///x", "has no host"),
        ("http://:8080", "has no host"),
        ("http://h:0", "port"),
        ("http://h:65536", "port"),
        ("http://h:http", "port"),
        ("http://h:-1", "port"),
        ("http://h/#top", "fragment"),
        ("http://h#", "fragment"),
        ("http://h/a\nb", "control character"),
        ("http://h/a\tb", "control character"),
        ("http://h/a\x7fb", "control character"),
        (" http://h", "spaces"),
        ("http://h\n", "control character"),
        ("http://a b/", "host"),
        ("http://a\\b/", "host"),
        ("http://a<b/", "host"),
        ("http://[::1/", "host"),
        ("http://[zz::1]/", "host"),
        ("http://h/\ud800", "Unicode"),
    ],
)
def test_a_bad_url_is_a_value_error_naming_the_field_and_the_value(url: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        InferConfig(url=url)
    message = str(err.value)
    assert message.startswith("infer.url ") and says in message
    assert repr(url) in message


@pytest.mark.parametrize(
    "url",
    [
        f"http://u:{PASSWORD}@h:99999",
        f"http://u:{PASSWORD}@h/#x",
        f"ftp://u:{PASSWORD}@h",
        f"u:{PASSWORD}@h:8080",
        f"http://u:{PASSWORD}@a b/",
        f"http://u:{PASSWORD}@h/a\nb",
        f"http://u:{PASSWORD}/x@h:0",  # a password with a raw / in it
        f"http://u:{PASSWORD}#x@h",
    ],
)
def test_a_refused_url_does_not_show_its_password(url: str) -> None:
    with pytest.raises(ValueError) as err:
        InferConfig(url=url)
    assert PASSWORD not in str(err.value)
    assert "***" in str(err.value)


# --- user info --------------------------------------------------------------------------------


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")


@pytest.mark.parametrize(
    ("url", "header", "shown"),
    [
        ("http://h:8080", None, "http://h:8080"),
        (f"http://u:{PASSWORD}@h:8080/v1", basic(f"u:{PASSWORD}"), "http://u:***@h:8080"),
        ("http://u@h", basic("u:"), "http://u@h"),
        ("http://u:@h", basic("u:"), "http://u:***@h"),
        ("http://:pw@h", basic(":pw"), "http://:***@h"),
        ("http://us%40r:p%3Aw%2F@h", basic("us@r:p:w/"), "http://us%40r:***@h"),
        ("http://u:p%C3%A9@h", basic("u:pé"), "http://u:***@h"),
        ("http://u:pé@h/x?a=1", basic("u:pé"), "http://u:***@h/x?a=1"),
        ("http://@h", None, "http://h"),
    ],
)
def test_user_info_is_basic_auth_and_the_password_is_not_shown(
    url: str, header: str | None, shown: str
) -> None:
    target = Target.parse(url)
    assert target.auth_header == header
    assert target.url == shown
    assert target.host == "h"
    assert PASSWORD not in repr(target)


def test_user_info_and_an_api_key_together_are_refused_without_showing_either() -> None:
    with pytest.raises(ValueError) as err:
        InferConfig(url=f"http://u:{PASSWORD}@h", api_key="sk-also-secret")
    message = str(err.value)
    assert "infer.url" in message and "infer.api_key" in message
    assert PASSWORD not in message and "sk-also-secret" not in message
    InferConfig(url="http://u@h")  # either alone is fine
    InferConfig(url="http://h", api_key="sk-also-secret")


# --- against the loopback server ------------------------------------------------------------


@pytest.fixture
def raw_server() -> Iterator[RawServer]:
    with RawServer() as srv:
        yield srv


def test_a_v1_base_url_reaches_the_same_server(drive: Driver, raw_server: RawServer) -> None:
    out = drive.run(config(raw_server.url + "/v1/"), req())
    assert out.ok()
    assert raw_server.lines == ["GET /slots HTTP/1.1", f"POST {CHAT} HTTP/1.1"]


def test_the_query_goes_with_every_request(drive: Driver) -> None:
    with RawServer(prefix="/proxy") as srv:
        srv.load_until(srv.until_asked("/health"))  # the client polls /health too
        out = drive.run(config(srv.url + "/v1?api-version=2&t=%C3%A9"), req())
        assert out.ok()
        assert {line.split(" ")[1].split("?")[0] for line in srv.lines} >= {
            "/proxy/slots",
            "/proxy/health",
            "/proxy" + CHAT,
        }
        assert all(line.endswith("?api-version=2&t=%C3%A9 HTTP/1.1") for line in srv.lines)


def test_a_non_ascii_path_is_sent_percent_encoded(drive: Driver) -> None:
    with RawServer(prefix="/mod%C3%A8le") as srv:
        url = srv.url.replace("/mod%C3%A8le", "/modèle")
        out = drive.run(config(url), req())
        assert out.ok()
        assert srv.lines == ["GET /mod%C3%A8le/slots HTTP/1.1", f"POST /mod%C3%A8le{CHAT} HTTP/1.1"]


# The core builds the headers from cfg.infer.api_key alone until it also sends
# `target.auth_header` (see the report of the `url` branch): strict, so it shows once wired.
def test_user_info_goes_as_basic_auth_on_every_request(drive: Driver) -> None:
    with ReplayServer() as srv:
        srv.load_until(srv.until_asked("/health"))
        url = srv.url.replace("http://", f"http://u:{PASSWORD}@")
        assert drive.run(config(url), req()).ok()
        assert [r.headers.get("authorization") for r in srv.requests] == [
            basic(f"u:{PASSWORD}")
        ] * len(srv.requests)


# --- never shown ------------------------------------------------------------------------------


def test_the_password_is_never_shown(closed_port: int) -> None:
    url = f"http://user:{PASSWORD}@127.0.0.1:{closed_port}/v1"
    cfg = config(url)
    assert cfg.infer.url == url  # the field keeps what was given; only its display hides it
    sync, errors = Client(cfg), []
    with pytest.raises(ConnectError) as refused:
        sync.complete(req())
    errors.append(refused.value)

    async def run() -> str:
        async with AsyncClient(cfg) as client:
            with pytest.raises(ConnectError) as refused:
                await client.complete(req())
            errors.append(refused.value)
            return repr(client)

    async_repr = asyncio.run(run())
    shown = [repr(cfg.infer), repr(cfg), repr(sync), async_repr]
    shown += [str(e) for e in errors] + [repr(e) for e in errors] + [e.url for e in errors]
    for text in shown:
        assert PASSWORD not in text, text
    assert f"http://user:***@127.0.0.1:{closed_port}" in str(errors[0])
    assert repr(sync) == f"Client('http://user:***@127.0.0.1:{closed_port}')"
    assert async_repr == f"AsyncClient('http://user:***@127.0.0.1:{closed_port}')"
    assert f"url='http://user:***@127.0.0.1:{closed_port}/v1'" in repr(cfg)
