# Strategy: the clients' own HTTP/1.1 transports, thin and fast. Both read into the response
# parser's own buffer (recv_into for the sync client, BufferedProtocol.get_buffer for asyncio),
# get the body back as views of it, and hand those straight to the engine (SseDecoder, then
# Assembler): no copy, no intermediate bytes object, no stream reader in between. The asyncio
# protocol turns bytes into events in the arrival callback and wakes the waiting task once per
# arrival; a stream's stall watchdog is one deadline, checked by one timer re-armed only when
# it fires.
"""Sync and asyncio HTTP/1.1 transports for the clients, and the body-to-events sink."""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import struct
import sys
import time
from typing import TYPE_CHECKING

from ._compat import USE_EXTENSIONS
from ._http_py import HttpParseError
from ._url import Target

if TYPE_CHECKING or not USE_EXTENSIONS:
    from ._http_py import Receiver, ResponseParser, Sink
else:
    from ._http_c import Receiver, ResponseParser, Sink

__all__ = [
    "AsyncConnection",
    "HttpParseError",
    "Sink",
    "SyncConnection",
    "request_bytes",
]


def request_bytes(
    method: str, target: Target, path: str, body: bytes | None, headers: dict[str, str]
) -> bytes:
    """One HTTP/1.1 request: head and body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {target.host_header}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if body is None else head + body


_SSL: ssl.SSLContext | None = None


def ssl_context() -> ssl.SSLContext:
    global _SSL
    if _SSL is None:
        _SSL = ssl.create_default_context()
    return _SSL


# --- the sync transport ----------------------------------------------------------------------


class SyncConnection:
    """One request on its own blocking socket."""

    __slots__ = ("early", "parser", "sock")

    def __init__(self, target: Target, connect_timeout: float) -> None:
        sock = socket.create_connection((target.host, target.port), connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if target.scheme == "https":
                sock = ssl_context().wrap_socket(sock, server_hostname=target.host)
        except BaseException:
            sock.close()
            raise
        self.sock: socket.socket = sock
        self.parser = ResponseParser()
        self.early: list[bytes] = []  # body bytes that came with the head

    def send(self, data: bytes, timeout: float) -> None:
        self.sock.settimeout(timeout)
        self.sock.sendall(data)

    def read_head(self, timeout: float, until: float | None = None) -> bool:
        """Read up to the end of the head; with `until`, wait for each piece at most until
        then (False: it had not come). Each read waits at most `timeout`."""
        sock, parser = self.sock, self.parser
        while not parser.head_done:
            if until is not None:
                pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted
                if not (pending and pending()):
                    left = until - time.monotonic()
                    if left <= 0 or not select.select([sock], [], [], left)[0]:
                        return False
            sock.settimeout(timeout)
            n = sock.recv_into(parser.free())
            if not n:
                raise ConnectionResetError("the server closed the connection before answering")
            self.early += [bytes(p) for p in parser.filled(n)]
        return True

    def stream_timeout(self, stall: float) -> None:
        """Each read of the stream waits at most `stall` seconds. On a plain socket the kernel
        keeps that bound (SO_RCVTIMEO: a late read fails with EAGAIN, BlockingIOError), which
        spares Python's poll before every read; elsewhere the socket's own timeout does."""
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) or not sys.platform.startswith(("linux", "darwin")):
            sock.settimeout(stall)
            return
        seconds = int(stall)
        micros = min(999_999, round((stall - seconds) * 1e6)) or (0 if seconds else 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, micros))
        sock.settimeout(None)

    def read(self) -> list[memoryview] | None:
        """The body's next bytes as views (valid until the next read); None at the end."""
        parser = self.parser
        n = self.sock.recv_into(parser.free())
        if not n:
            return None
        return parser.filled(n)

    def read_whole(self, limit: int, timeout: float) -> bytes:
        """The rest of the body, at most `limit` bytes."""
        parts = self.early
        self.early = []
        got = sum(len(p) for p in parts)
        self.sock.settimeout(timeout)
        parser = self.parser
        while got < limit and not parser.done:
            pieces = self.read()
            if pieces is None:
                parser.eof()
                break
            for piece in pieces:
                parts.append(bytes(piece))
                got += len(piece)
        return b"".join(parts)[:limit]

    def close(self) -> None:
        sock = self.sock
        try:
            sock.shutdown(socket.SHUT_RDWR)  # the server sees the close at once
        except OSError:
            pass
        sock.close()


# --- the asyncio transport ---------------------------------------------------------------------


class AsyncConnection(Receiver, asyncio.BufferedProtocol):
    """One request on its own connection, as an asyncio protocol that reads into the parser's
    buffer (the arrival path is Receiver's). Before a Sink is attached the body's bytes are
    kept (`early`); after, they are decoded at once, and the task waiting in `wait()` is woken
    once per arrival."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop, ResponseParser())
        self.eof = False
        self.stalled = False
        self._stall = 0.0
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    async def open(cls, target: Target, timeout: float) -> AsyncConnection:
        loop = asyncio.get_running_loop()
        conn = cls(loop)
        tls = ssl_context() if target.scheme == "https" else None
        async with asyncio.timeout(timeout):
            await loop.create_connection(
                lambda: conn,
                target.host,
                target.port,
                ssl=tls,
                server_hostname=target.host if tls else None,
            )
        return conn

    # --- the protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if exc is not None and self.error is None:
            self.error = exc
        self._cancel_timer()
        self._wake()

    # --- what the driver calls ---------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection was closed")
        self.transport.write(data)

    def resume(self) -> None:
        """Read again: the consumer has caught up with a backlog."""
        self.paused = False
        if self.transport is not None:
            self.transport.resume_reading()

    async def wait(self) -> None:
        """Until the next arrival, the end, a failure or a stall."""
        if self.paused:
            self.resume()
        waiter = self.waiter = self.loop.create_future()
        await waiter

    async def read_head(self, until: float) -> bool:
        """Wait for the head until the loop's clock reads `until` (False: it had not come).
        A connection that ends first is ConnectionResetError; a parse error HttpParseError."""
        while not self.parser.head_done:
            if self.error is not None:
                raise self.error
            if self.eof:
                raise ConnectionResetError("the server closed the connection before answering")
            left = until - self.loop.time()
            if left <= 0:
                return False
            waiter = self.waiter = self.loop.create_future()
            handle = self.loop.call_at(until, self._wake)
            try:
                await waiter
            finally:
                handle.cancel()
        return True

    async def read_whole(self, limit: int, timeout: float) -> bytes:
        """The rest of the body, at most `limit` bytes, each piece within `timeout`."""
        parser = self.parser
        while not parser.done and sum(len(p) for p in self.early) < limit:
            if self.error is not None:
                raise self.error
            if self.eof:
                parser.eof()
                break
            async with asyncio.timeout(timeout):
                await self.wait()
        parts, self.early = self.early, []
        return b"".join(parts)[:limit]

    def start_stream(self, sink: Sink, stall: float) -> None:
        """From now on the body becomes events; the stall watchdog starts."""
        self.sink = sink
        early, self.early = self.early, []
        if early:
            sink.feed(early)
        self._stall = stall
        self.last = self.loop.time()
        self.watched = True
        self._timer = self.loop.call_at(self.last + stall, self._check_stall)

    def _check_stall(self) -> None:
        # One timer per stream: it fires at the last arrival + stall; if bytes came meanwhile
        # it is set again from the newest arrival, so arrivals themselves never touch a timer.
        now = self.loop.time()
        due = self.last + self._stall
        if now >= due:
            self._timer = None
            self.stalled = True
            self._wake()
        else:
            self._timer = self.loop.call_at(due, self._check_stall)

    def _cancel_timer(self) -> None:
        self.watched = False
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def close(self) -> None:
        self._cancel_timer()
        transport = self.transport
        if transport is not None:
            transport.abort()  # at once: the server sees the close and frees the slot
