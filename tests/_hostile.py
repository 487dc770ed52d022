# A raw-socket loopback server that misbehaves on purpose: each path answers by a `Script` the
# test chooses (bytes sent whole, in pieces, or one byte at a time; then a close, a RST, or a
# hold that never answers), and every request and connection is recorded, so a test can say
# how often the client asked and when it let go. One thread per connection; everything stops
# when the test stops the server, or by itself after `lifetime` seconds, so no test can hang on
# it.
"""The hostile loopback server for tests/test_hostile.py, and the answers it can give."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Self

from _loopback import LoopbackServer, Request, raw_response, read_request, split
from _server import load

CHAT = "/v1/chat/completions"
CONTROL = "/v1/chat/completions/control"
SLOTS = "/slots"
HEALTH = "/health"
NOT_HTTP = "not-http"  # the key of the answer to a request that is not HTTP (a TLS hello)

# What a plain HTTP server (cpp-httplib among them) answers to bytes that are not a request.
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True)
class Send:
    """Bytes to send: after `after` seconds, whole (one send), or with `drip` one byte at a
    time, `drip` seconds apart."""

    data: bytes
    drip: float = 0.0
    after: float = 0.0


@dataclass(frozen=True)
class Script:
    """How to answer one request: `steps` in order, then `end`: "close" (a FIN), "rst", or
    "hold" (keep the connection open and say nothing until the client closes it or the
    server stops)."""

    steps: tuple[Send, ...] = ()
    end: str = "close"


def answer(raw: bytes, end: str = "close") -> Script:
    """`raw` in one send, then `end`."""
    return Script((Send(raw),), end)


def pieces(*parts: bytes, gap: float = 0.0, end: str = "close") -> Script:
    """Each of `parts` in its own send, `gap` seconds apart, then `end`."""
    return Script(tuple(Send(p, after=gap if i else 0.0) for i, p in enumerate(parts)), end)


def drip(raw: bytes, interval: float, *, whole_head: bool = False) -> Script:
    """`raw` one byte every `interval` seconds; with `whole_head`, its head at once and only
    the body dripped."""
    if whole_head:
        head, body = split(raw)
        return Script((Send(head), Send(body, drip=interval)))
    return Script((Send(raw, drip=interval),))


def silent() -> Script:
    """Read the request, never answer, never close."""
    return Script((), "hold")


def padded_json(raw: bytes, size: int) -> bytes:
    """The recorded JSON answer `raw` with its body padded with spaces (still the same JSON) to
    at least `size` bytes, its Content-Length made to match."""
    head, body = split(raw)
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    _, status, reason = status_line.split(" ", 2)
    json.loads(body)  # a JSON body: padding it with spaces keeps its meaning
    return raw_response(int(status), reason, body + b" " * max(0, size - len(body)))


def default_scripts() -> dict[str, Script | list[Script]]:
    """A well-behaved llama-server: the recordings."""
    return {
        CHAT: answer(load("content_only")),
        SLOTS: answer(load("get_slots")),
        HEALTH: answer(load("get_health")),
        CONTROL: answer(load("control_reasoning_end")),
        NOT_HTTP: answer(BAD_REQUEST),
    }


# One request as the server saw it (`method` "?" and `path` NOT_HTTP for bytes that are not an
# HTTP request): the serve module's Request.
Seen = Request


@dataclass
class Connection:
    """One accepted connection: when, for which request, and when the client closed it (None:
    not seen closed by the client, maybe because the server closed it first)."""

    accepted: float
    request: Seen | None = None
    client_closed: float | None = None
    ended: float | None = None  # the server was done with it


class HostileServer(LoopbackServer):
    """A loopback server answering each path by `scripts[path]`: a Script, or a list of them
    used in order (the last one again once the others are used up). Paths without a script
    answer with the recordings (`default_scripts`), unknown ones with get_unknown_path.

    A context manager; `stop()` shuts every connection and stops every script at once."""

    def __init__(
        self, scripts: dict[str, Script | list[Script]] | None = None, lifetime: float = 60.0
    ) -> None:
        super().__init__()
        self.scripts = {**default_scripts(), **(scripts or {})}
        self.lifetime = lifetime  # stops itself after this long, whatever the test does
        self.requests: list[Seen] = []
        self.connections: list[Connection] = []
        self._timer: threading.Timer | None = None

    def start(self) -> Self:
        super().start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop listening, stop every script, and shut every connection."""
        if self._timer is not None:
            self._timer.cancel()
        super().stop()

    # --- inspection -----------------------------------------------------------------------

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """How many requests came (of `method`, to `path`)."""
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method) and (path is None or r.path == path)
            )

    def connections_to(self, path: str) -> list[Connection]:
        with self._lock:
            return [c for c in self.connections if c.request and c.request.path == path]

    # --- the server ---------------------------------------------------------------------------

    def _accepted(self, sock: socket.socket) -> Connection:
        conn = Connection(time.monotonic())
        self.connections.append(conn)
        return conn

    def handle(self, sock: socket.socket, conn: Connection) -> None:
        try:
            seen = self._read_request(sock)
            if seen is None:
                return
            with self._lock:
                self.requests.append(seen)
                conn.request = seen
                script = self._script(seen.path)
            self._play(sock, conn, script)
        finally:
            conn.ended = time.monotonic()

    def _script(self, path: str) -> Script:
        scripts = self.scripts.get(path)
        if scripts is None:
            return answer(load("get_unknown_path"))
        if isinstance(scripts, list):
            return scripts.pop(0) if len(scripts) > 1 else scripts[0]
        return scripts

    def _read_request(self, sock: socket.socket) -> Seen | None:
        """The request's head and body; bytes that cannot start a request (a TLS hello) are
        taken as they come, as a request to NOT_HTTP."""
        deadline = time.monotonic() + 10
        while not select.select([sock], [], [], 0.05)[0]:
            if time.monotonic() > deadline or self.stopped:
                return None
        first = sock.recv(1, socket.MSG_PEEK)
        if not first:
            return None
        if not first.isalpha():  # a request starts with its method
            return Seen("?", NOT_HTTP, sock.recv(65536), time.monotonic())
        return read_request(sock, timeout=max(0.05, deadline - time.monotonic()))

    def _play(self, sock: socket.socket, conn: Connection, script: Script) -> None:
        for step in script.steps:
            if step.after and not self._wait(sock, conn, time.monotonic() + step.after):
                return
            if not step.drip:
                if not self._send(sock, conn, step.data):
                    return
                continue
            at = time.monotonic()
            for i in range(len(step.data)):
                if i and not self._wait(sock, conn, at + i * step.drip):
                    return
                if not self._send(sock, conn, step.data[i : i + 1]):
                    return
        if script.end == "rst":
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif script.end == "hold":
            self._wait(sock, conn, float("inf"))
        # "close": the finally of _serve closes it

    def _send(self, sock: socket.socket, conn: Connection, data: bytes) -> bool:
        if self.stopped:
            return False
        try:
            sock.sendall(data)
        except OSError:
            self._closed_by_client(conn)
            return False
        return True

    def _wait(self, sock: socket.socket, conn: Connection, until: float) -> bool:
        """Sleep until `until`, reading (and dropping) whatever the client sends; False when the
        client closed the connection or the server stopped meanwhile."""
        while not self.stopped:
            left = until - time.monotonic()
            if left <= 0:
                return True
            try:
                if select.select([sock], [], [], min(left, 0.02))[0] and not sock.recv(65536):
                    self._closed_by_client(conn)
                    return False
            except (OSError, ValueError):
                self._closed_by_client(conn)
                return False
        return False

    def _closed_by_client(self, conn: Connection) -> None:
        if conn.client_closed is None and not self.stopped:
            conn.client_closed = time.monotonic()
