# What every loopback test server shares, written once: a listening socket on 127.0.0.1, one
# thread accepting, one thread per connection, and a stop that closes the listener and shuts
# every open connection at once (so a client blocked on one of them wakes, and no test can hang
# on a server). A subclass says only how it answers one connection (`handle`).
"""`LoopbackServer`, the base of the replay, hostile and embeddings servers; and the one import
of llamafast's serve module in the tests' kit (its request reader and answer helpers)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any, Self

# The serve module's request reader and answer helpers and the recordings' head/body split, imported
# here and nowhere else in tests/.
from llamafast._cli._serve import (
    Request,
    completion_id,
    plan,
    raw_response,
    read_request,
    release_offset,
    slots_body,
)
from llamafast._recordings import split

__all__ = [
    "LoopbackServer",
    "RelayProxy",
    "Request",
    "completion_id",
    "peek_until",
    "plan",
    "raw_response",
    "read_request",
    "release_offset",
    "slots_body",
    "split",
]


def peek_until(conn: socket.socket, end: bytes) -> bytes | None:
    """What has arrived on `conn` up to `end` at least, peeked (left for the request reader);
    None when the peer closed or stopped sending before `end`."""
    data = b""
    while end not in data:
        part = conn.recv(65536, socket.MSG_PEEK)
        if not part or len(part) == len(data):
            return None
        data = part
    return data


class LoopbackServer:
    """A server on 127.0.0.1. Use as a context manager, or `start()` / `stop()`.

    `refuse()` closes the listener (new connections are refused) and `accept()` listens again
    on the same port; `stop()` refuses for good and shuts every connection. A subclass answers
    one connection in `handle(conn, accepted)`, where `accepted` is what its `_accepted(conn)`
    returned when the connection came (called under the lock; None unless overridden).
    """

    scheme = "http"
    backlog = 64

    def __init__(self) -> None:
        self.port = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()

    # --- life -------------------------------------------------------------------------------

    def start(self) -> Self:
        self._listen()
        return self

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        """Stop listening and shut every connection."""
        self._stopped.set()
        self.refuse()
        self.drop_connections()

    def open_count(self) -> int:
        """The connections open now (their peer has not closed them, nor has the server)."""
        with self._lock:
            return len(self._conns)

    def drop_connections(self) -> None:
        """Shut every open connection (as a server closes idle ones), still listening."""
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def refuse(self) -> None:
        """Close the listening socket: new connections are refused until `accept()`."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def accept(self) -> None:
        """Listen again on the same port."""
        if self._listener is None and not self.stopped:
            self._listen()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- for the subclass -------------------------------------------------------------------

    def handle(self, conn: socket.socket, accepted: Any) -> None:
        """Answer one connection (closed after it returns); an OSError ends it quietly."""
        raise NotImplementedError

    def _accepted(self, conn: socket.socket) -> Any:
        """What `handle` is given about `conn`, made as it is accepted (under the lock)."""
        return None

    def _wrap(self, conn: socket.socket) -> socket.socket:
        """The socket `handle` talks through (a subclass may wrap it, in TLS say)."""
        return conn

    # --- the server -------------------------------------------------------------------------

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(self.backlog)
        self.port = sock.getsockname()[1]
        self._listener = sock
        threading.Thread(target=self._accept_loop, args=(sock,), daemon=True).start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self.stopped:
                    conn.close()
                    return
                self._conns.add(conn)
                accepted = self._accepted(conn)
            threading.Thread(target=self._serve, args=(conn, accepted), daemon=True).start()

    def _serve(self, raw: socket.socket, accepted: Any) -> None:
        conn = raw
        try:
            conn = self._wrap(raw)
            self.handle(conn, accepted)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(raw)
            with contextlib.suppress(OSError):
                conn.close()


class RelayProxy(LoopbackServer):
    """Relays every request to the loopback port `upstream` (one per connection), and keeps
    their lines (`requests`); with `cut`, the first chat answer is cut after `cut` bytes of its
    body (its head relayed whole, then the connection closed)."""

    def __init__(self, upstream: int, cut: int | None = None) -> None:
        super().__init__()
        self.upstream = upstream
        self.cut: int | None = cut
        self.requests: list[str] = []

    def handle(self, conn: socket.socket, accepted: object) -> None:
        head = peek_until(conn, b"\r\n\r\n")
        req = read_request(conn)
        if head is None or req is None:
            return
        head = head[: head.index(b"\r\n\r\n")] + b"\r\nConnection: close\r\n\r\n"
        self.requests.append(f"{req.method} {req.path}")
        cut = None
        if req.path == "/v1/chat/completions" and self.cut is not None:
            cut, self.cut = self.cut, None
        with socket.create_connection(("127.0.0.1", self.upstream)) as up:
            up.sendall(head + req.body)
            self._relay(up, conn, cut)

    @staticmethod
    def _relay(up: socket.socket, conn: socket.socket, cut: int | None) -> None:
        sent = b""
        body_at: int | None = None
        while True:
            data = up.recv(65536)
            if not data:
                return
            if cut is not None:
                sent += data
                if body_at is None and b"\r\n\r\n" in sent:
                    body_at = sent.index(b"\r\n\r\n") + 4
                if body_at is not None and len(sent) >= body_at + cut:
                    conn.sendall(data[: len(data) - (len(sent) - body_at - cut)])
                    return  # the connection closes: EOF inside the body
            conn.sendall(data)
