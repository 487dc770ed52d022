"""TLS (docs/client.md, rule TLS): a private CA trusted through `infer.ca_file` (the config, the
TOML file, the command line's --ca-file) or an `ssl.SSLContext` handed to either client, against
the loopback server speaking HTTPS with a certificate that CA signed.

The CA and the server's certificate are made by the `openssl` command in a fixture (the
`cryptography` package is not a dependency); without it these tests skip, saying why.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import llamafast
from _drivers import AsyncDriver, CompleteDriver, SyncDriver, req
from _drivers import cfg as kit_cfg
from _embed import EmbedServer, embed_handler, vector_for
from _keepalive import KeepAliveServer
from _loopback import LoopbackServer
from _pki import Pki, server_context
from _server import ReplayServer, Reply, chunked, expected
from llamafast import (
    AsyncClient,
    Client,
    Config,
    ConnectError,
    InferConfig,
    _cli,
)
from llamafast._client import _tls
from llamafast._errors import HandshakeClosed, HandshakeTimeout

CHAT = "/v1/chat/completions"
# No waiting between retries; time enough for a handshake on a slow machine.
cfg = functools.partial(
    kit_cfg, base={"retries": 2, "retry_base_ms": 1, "retry_max_ms": 1, "connect_timeout": 10.0}
)


@pytest.fixture
def https(pki: Pki) -> Iterator[ReplayServer]:
    """The loopback server over TLS (it wraps each accepted socket with this context)."""
    with ReplayServer(tls=server_context(pki)) as srv:
        srv.default = Reply("reasoning_then_content")
        yield srv


def test_ca_file_trusts_the_private_ca(drive: Any, https: ReplayServer, pki: Pki) -> None:
    assert https.url.startswith("https://")
    out = drive.run(cfg(https, ca_file=pki.ca), req())
    assert out.events == expected("reasoning_then_content")[0]
    assert out.ok() == expected("reasoning_then_content")[1]
    assert https.paths() == ["/slots", CHAT]  # every request over TLS


def test_without_the_ca_the_certificate_is_refused_and_not_retried(
    drive: Any, https: ReplayServer, pki: Pki
) -> None:
    for ca_file in (None, pki.stranger):  # the system's CAs; a CA that signed something else
        out = drive.run(cfg(https, ca_file=ca_file), req())
        err = out.raised(ConnectError)
        assert isinstance(err.error, ssl.SSLCertVerificationError), err.error
        assert out.events == []  # no Retrying: a refused certificate is refused every time
    assert https.requests == []  # nothing was sent in the clear


def _context(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def test_the_sync_client_takes_an_ssl_context(https: ReplayServer, pki: Pki) -> None:
    out = SyncDriver.run_on(Client(cfg(https), ssl_context=_context(pki)), req())
    assert out.ok() == expected("reasoning_then_content")[1]
    refused = SyncDriver.run_on(Client(cfg(https), ssl_context=ssl.create_default_context()), req())
    assert isinstance(refused.raised(ConnectError).error, ssl.SSLCertVerificationError)


@pytest.mark.parametrize("driver", [AsyncDriver, CompleteDriver])
def test_the_async_client_takes_an_ssl_context(driver: Any, https: ReplayServer, pki: Pki) -> None:
    async def main(ctx: ssl.SSLContext) -> Any:
        async with AsyncClient(cfg(https), ssl_context=ctx) as client:
            return await driver.run_on(client, req())

    out = asyncio.run(main(_context(pki)))
    assert out.ok() == expected("reasoning_then_content")[1]
    refused = asyncio.run(main(ssl.create_default_context()))
    assert isinstance(refused.raised(ConnectError).error, ssl.SSLCertVerificationError)


def test_the_pure_clients_take_them_too(https: ReplayServer, pki: Pki) -> None:
    pure = llamafast.pure
    out = SyncDriver.run_on(pure.Client(cfg(https, ca_file=pki.ca)), req())
    assert out.ok() == expected("reasoning_then_content")[1]
    out = SyncDriver.run_on(pure.Client(cfg(https), ssl_context=_context(pki)), req())
    assert out.ok() == expected("reasoning_then_content")[1]


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_a_bad_ca_file_fails_when_the_client_is_made(cls: Any, pki: Pki, tmp_path: Path) -> None:
    config = Config(InferConfig(url="https://127.0.0.1:9", ca_file=str(tmp_path / "none.pem")))
    with pytest.raises(FileNotFoundError, match=r"infer.ca_file '.*none.pem' cannot be read"):
        cls(config)
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    config = Config(InferConfig(url="https://127.0.0.1:9", ca_file=str(tmp_path / "junk.pem")))
    with pytest.raises(ValueError, match=r"infer.ca_file '.*junk.pem' holds no CA certificate"):
        cls(config)


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_a_context_and_a_ca_file_together_are_refused(cls: Any, pki: Pki) -> None:
    config = Config(InferConfig(url="https://127.0.0.1:9", ca_file=pki.ca))
    with pytest.raises(ValueError, match=r"both ssl_context and infer\.ca_file"):
        cls(config, ssl_context=_context(pki))
    with pytest.raises(TypeError, match=r"ssl_context must be an ssl\.SSLContext, not str"):
        cls(Config(), ssl_context=pki.ca)


def test_ca_file_in_the_toml_file(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('[infer]\nca_file = "/etc/my-ca.pem"\n')
    assert Config.from_toml(tmp_path / "c.toml").infer.ca_file == "/etc/my-ca.pem"
    (tmp_path / "c.toml").write_text("[infer]\nca_file = 3\n")
    with pytest.raises(ValueError, match=r"c.toml: infer.ca_file must be a string, not 3"):
        Config.from_toml(tmp_path / "c.toml")
    (tmp_path / "c.toml").write_text('[infer]\nca_file = ""\n')
    with pytest.raises(ValueError, match=r"c.toml: infer.ca_file is empty"):
        Config.from_toml(tmp_path / "c.toml")
    assert InferConfig().ca_file is None


def test_the_command_line_trusts_ca_file(
    https: ReplayServer,
    pki: Pki,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no llamafast.toml here
    argv = ["chat", "--url", https.url, "--json", "hi"]
    assert _cli.main([*argv[:-1], "--ca-file", pki.ca, "hi"]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["type"] == "completion" and last["content"]
    # the same through ./llamafast.toml
    (tmp_path / "llamafast.toml").write_text(f"[infer]\nca_file = {json.dumps(pki.ca)}\n")
    assert _cli.main(argv) == 0
    capsys.readouterr()
    # and without it, one line saying the certificate was not accepted
    (tmp_path / "llamafast.toml").unlink()
    assert _cli.main(["chat", "--url", https.url, "hi"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert "the server's certificate was not accepted" in err


def test_the_command_line_with_a_missing_ca_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    missing = str(tmp_path / "none.pem")
    argv = ["chat", "--url", "https://127.0.0.1:9", "--ca-file", missing, "hi"]
    assert _cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "infer.ca_file" in err and "none.pem" in err, err


# --- https:// to a plain-HTTP port (docs/client.md, rule ONCE) ---------------------------------


class PlainPort(LoopbackServer):
    """A plain-HTTP port spoken to in TLS: it answers the ClientHello with an HTTP 400 ("400",
    as python's http.server does), closes once it has read it ("close", as a server whose wait
    for a request head ends), or says nothing at all ("silent"). `connections` counts them."""

    scheme = "https"

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.connections = 0

    def _accepted(self, conn: socket.socket) -> Any:
        self.connections += 1  # under the lock
        return None

    def handle(self, conn: socket.socket, accepted: Any) -> None:
        hello = conn.recv(65536)
        assert hello[:1] == b"\x16"  # a TLS handshake record
        if self.mode == "400":
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
        elif self.mode == "silent":
            while conn.recv(65536):  # until the client gives up (or the server stops)
                pass


@pytest.mark.parametrize(
    ("mode", "error", "why"),
    [
        ("400", ssl.SSLError, "does not speak TLS (it answered with bytes that are not TLS)"),
        ("close", HandshakeClosed, "does not seem to speak TLS"),
        (
            "silent",
            HandshakeTimeout,
            "does not seem to speak TLS (or the server is very slow)",
        ),
    ],
)
def test_tls_to_a_plain_port_fails_once_saying_to_try_http(
    drive: Any, mode: str, error: type[BaseException], why: str
) -> None:
    with PlainPort(mode) as port:
        out = drive.run(kit_cfg(port, connect_timeout=1.0, retries=3), req())
        err = out.raised(ConnectError)
        assert isinstance(err.error, error), err.error
        plain = port.url.replace("https://", "http://")
        assert str(err) == (
            f"could not connect to the server {port.url}: {err.error!r}; the port {why}: if the "
            f"server is plain HTTP, use {plain}"
        )
        assert port.connections == 1 and out.events == []  # one attempt: no Retrying


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_one_handshake_carries_many_requests(package: Any, pki: Pki) -> None:
    # Keep-alive over TLS (rule KEEP-ALIVE): the handshake is paid once, both clients.
    async def twenty(url: str) -> None:
        async with package.AsyncClient(cfg(url, ca_file=pki.ca)) as client:
            for _ in range(10):
                await client.complete([{"role": "user", "content": "hi"}])
                await client.models()

    with KeepAliveServer(tls=server_context(pki)) as server:
        with package.Client(cfg(server.url, ca_file=pki.ca)) as client:
            for _ in range(10):
                client.complete([{"role": "user", "content": "hi"}])
                client.models()
        asyncio.run(twenty(server.url))
        assert len(server.answered) == 40
        assert server.accepted == 2  # one per client


class TlsEmbedServer(EmbedServer):
    """EmbedServer over TLS."""

    scheme = "https"

    def __init__(self, tls: ssl.SSLContext) -> None:
        super().__init__(embed_handler(4096), slots=1)
        self.tls = tls

    def _wrap(self, conn: socket.socket) -> socket.socket:
        return self.tls.wrap_socket(conn, server_side=True)


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_embeddings_of_many_records_come_whole_over_tls(package: Any, pki: Pki) -> None:
    # A 64-vector answer of 4,096 dimensions is some 90 TLS records, read on into one buffer
    # (docs/client.md, WHOLE-BODY): the same rows as over http, both clients.
    texts = [f"text {i}" for i in range(70)]
    want = struct.pack(f"<{70 * 4096}f", *(x for t in texts for x in vector_for(t, 4096)))
    with TlsEmbedServer(server_context(pki)) as server:
        settings = cfg(server.url, ca_file=pki.ca)
        with package.Client(settings) as client:
            assert client.embed(texts).tobytes() == want

        async def embed() -> bytes:
            async with package.AsyncClient(settings) as client:
                return (await client.embed(texts)).tobytes()

        assert asyncio.run(embed()) == want


# --- the async client's TLS transport (_tls.py): writes and reads past one socket buffer ------

EVENT = (
    b'data: {"choices":[{"index":0,"delta":{"content":"%06d "},"finish_reason":null}],'
    b'"id":"c","object":"chat.completion.chunk","created":1,"model":"m"}\n\n'
)
LAST = (
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"id":"c","object":"chat.completion.chunk","created":1,"model":"m"}\n\ndata: [DONE]\n\n'
)


def long_answer(events: int) -> bytes:
    """A streamed answer of `events` content deltas ("000000 ", "000001 ", ...), 64 a chunk."""
    payloads = [
        b"".join(EVENT % i for i in range(start, min(start + 64, events)))
        for start in range(0, events, 64)
    ]
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    return head + chunked([*payloads, LAST])


def test_a_request_larger_than_the_socket_buffers_goes_whole(
    drive: Any, https: ReplayServer, pki: Pki
) -> None:
    # 8 MB of prompt: the send waits for the server to read (over asyncio, the transport's
    # writer callback) and nothing of it is lost or sent twice.
    text = "".join(f"{i:07d} " for i in range(1_000_000))
    out = drive.run(cfg(https, ca_file=pki.ca), req(text=text))
    assert out.ok() == expected("reasoning_then_content")[1]
    assert [c.body["messages"][-1]["content"] == text for c in https.chats] == [True]


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_slow_reader_pauses_the_connection_and_loses_nothing(
    package: Any, https: ReplayServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 12 MB of events read by a task that sleeps after the first one: past the Sink's backlog
    # (2 MiB) the TLS transport stops reading (rule BACKLOG), and reads on when the task has
    # caught up; every event comes, in order.
    events = 80_000
    https.default = Reply(raw=long_answer(events))
    pauses: list[str] = []
    for name in ("pause_reading", "resume_reading"):
        method = getattr(_tls.TlsTransport, name)
        monkeypatch.setattr(
            _tls.TlsTransport,
            name,
            lambda self, method=method, name=name: (pauses.append(name), method(self))[1],
        )

    async def main() -> tuple[list[str], Any]:
        got: list[str] = []
        async with package.AsyncClient(cfg(https, ca_file=pki.ca)) as client:
            async with client.stream(req()) as stream:
                async for event in stream:
                    if not got:
                        await asyncio.sleep(0.5)
                    got.append(event.text)
                return got, stream.completion

    got, completion = asyncio.run(main())
    want = [f"{i:06d} " for i in range(events)]
    assert got == want
    assert completion.content == "".join(want)
    assert "resume_reading" in pauses[pauses.index("pause_reading") :], pauses


def test_under_uvloop_the_tls_transport_keeps_its_connection(pki: Pki) -> None:
    # The transport asks the loop only for reader and writer callbacks and sock_connect, which
    # uvloop has too: 10 requests, one handshake.
    uvloop = pytest.importorskip("uvloop")

    async def ten(url: str) -> None:
        async with llamafast.AsyncClient(cfg(url, ca_file=pki.ca)) as client:
            for _ in range(5):
                await client.complete([{"role": "user", "content": "hi"}])
                await client.models()

    with KeepAliveServer(tls=server_context(pki)) as server:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(ten(server.url))
        assert len(server.answered) == 10
        assert server.accepted == 1
