# What TLS itself costs an asyncio client per request: one kept connection, a request written
# and a 20-chunk event stream read to its end, 3,000 times, the client process's CPU per request.
# Four ways, side by side in one run: plain TCP, asyncio's own TLS transport (what AsyncClient
# used until 2026-12-06), a TLS layer written over a plain transport with ssl.MemoryBIO, and
# AsyncClient's own transport (a non-blocking ssl.SSLSocket read and written from the loop's
# callbacks, src/llamafast/_client/_tls.py: the one llamafast piece here). The server runs in
# another process (its CPU is not counted), the certificate is made by bench/request/run.py's
# make_pki.
"""asyncio's TLS per request, beside plain TCP, a MemoryBIO layer and an SSLSocket one.

python bench/request/tls_layers.py [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamafast._client import _tls
from request.run import make_pki

EVENT = b"data: " + b"x" * 150 + b"\n\n"
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(EVENT), EVENT) for _ in range(20))
    + b"0\r\n\r\n"
)
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"


def serve(listener: socket.socket, cert: str | None, key: str | None) -> None:
    """Answer every request on every connection with ANSWER (a thread per connection)."""
    tls = None
    if cert is not None:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = tls.wrap_socket(conn, server_side=True) if tls else conn
        threading.Thread(target=_answer, args=(peer,), daemon=True).start()


def _answer(conn: socket.socket) -> None:
    pending = b""
    try:
        while data := conn.recv(65536):
            pending += data
            while b"\r\n\r\n" in pending:
                _, pending = pending.split(b"\r\n\r\n", 1)
                conn.sendall(ANSWER)
    except OSError:
        pass


class Reader(asyncio.BufferedProtocol):
    """Reads into one buffer; `done` is set when a whole ANSWER has come."""

    def __init__(self) -> None:
        self.buf = memoryview(bytearray(65536))
        self.got = 0
        self.done: asyncio.Future[None] | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buf[self.got :]

    def buffer_updated(self, nbytes: int) -> None:
        self.got += nbytes
        if self.got >= len(ANSWER) and self.done is not None:
            self.got = 0
            self.done.set_result(None)


class MemoryTls(asyncio.Protocol):
    """TLS over a plain transport: ssl.SSLObject between two MemoryBIOs, plaintext to `app`."""

    def __init__(self, app: Reader, tls: ssl.SSLContext) -> None:
        self.app = app
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = tls.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")
        self.shaken = asyncio.get_running_loop().create_future()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self._handshake()

    def _handshake(self) -> None:
        try:
            self.obj.do_handshake()
            self.shaken.set_result(None)
        except ssl.SSLWantReadError:
            pass
        self._flush()

    def _flush(self) -> None:
        if self.outgoing.pending:
            self.transport.write(self.outgoing.read())

    def data_received(self, data: bytes) -> None:
        self.incoming.write(data)
        if not self.shaken.done():
            self._handshake()
            return
        app = self.app
        while True:
            try:
                n = self.obj.read(len(app.buf) - app.got, app.buf[app.got :])
            except ssl.SSLWantReadError:
                break
            if not n:
                break
            app.buffer_updated(int(n))  # read into a buffer: the count of bytes
        self._flush()

    def write(self, data: bytes) -> None:
        self.obj.write(data)
        self._flush()


async def cpu_per_request(kind: str, port: int, tls: ssl.SSLContext, requests: int) -> float:
    """µs of this process's CPU per request over one kept connection of `kind`."""
    loop = asyncio.get_running_loop()
    app = Reader()
    write: Callable[[bytes], None]
    if kind == "SSLSocket TLS":  # AsyncClient's own transport, as its https connections open
        raw = await _tls.connect("127.0.0.1", port)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = tls.wrap_socket(raw, server_hostname="127.0.0.1", do_handshake_on_connect=False)
        await _tls.handshake(sock)
        transport = _tls.TlsTransport(loop, sock, app)
        write = transport.write
    elif kind == "plain":
        transport, _ = await loop.create_connection(lambda: app, "127.0.0.1", port)
        write = transport.write
    elif kind == "asyncio TLS":
        transport, _ = await loop.create_connection(
            lambda: app, "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1"
        )
        write = transport.write
    else:
        transport, layer = await loop.create_connection(
            lambda: MemoryTls(app, tls), "127.0.0.1", port
        )
        await layer.shaken
        write = layer.write
    start = 0.0
    for i in range(requests + 200):  # 200 to warm up
        if i == 200:
            start = time.process_time()
        app.done = loop.create_future()
        write(REQUEST)
        await app.done
    transport.close()
    return (time.process_time() - start) / requests * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="per cell (default 3000)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as where:
        pki = make_pki(Path(where))
        servers, ports = [], {}
        for kind, cert in (("plain", None), ("tls", pki.cert)):
            listener = socket.create_server(("127.0.0.1", 0))
            ports[kind] = listener.getsockname()[1]
            proc = multiprocessing.Process(
                target=serve, args=(listener, cert, pki.key), daemon=True
            )
            proc.start()
            servers.append(proc)
        tls = ssl.create_default_context(cafile=pki.ca)
        kinds = {
            "plain": ports["plain"],
            "asyncio TLS": ports["tls"],
            "MemoryBIO TLS": ports["tls"],
            "SSLSocket TLS": ports["tls"],
        }
        cells: dict[str, list[float]] = {kind: [] for kind in kinds}
        try:
            for _ in range(args.rounds):
                for kind, port in kinds.items():
                    cost = asyncio.run(cpu_per_request(kind, port, tls, args.requests))
                    cells[kind].append(cost)
        finally:
            for proc in servers:
                proc.kill()
    print(f"{args.requests} requests x {args.rounds} rounds, client CPU µs per request")
    for kind, values in cells.items():
        print(f"  {kind:14} min {min(values):6.1f}   " + ", ".join(f"{v:.1f}" for v in values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
