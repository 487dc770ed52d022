# A loopback server with llama-server's resumable streams (docs/client.md, rule RESUME): a chat POST
# with `X-Conversation-Id` keeps its event stream under that id; `GET /v1/stream?conv_id=&from=N`
# replays it from body byte N (404 for an id it does not have, 400 for an offset it says is lost);
# `DELETE /v1/stream?conv_id=` answers 204 and forgets it. Each answer (the POST's, then each GET's)
# can be broken at a body byte the test names, as a network breaks one: a close (EOF inside the
# body), a reset, or a stall (nothing more, the connection left open). It logs every request with
# its request line and headers, so a test sees what was sent, and how often.
"""`ResumableServer`: a recorded stream behind llama-server's three resumable-stream endpoints."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from _loopback import LoopbackServer, peek_until, raw_response, read_request, split
from _server import dechunk, load

__all__ = ["EOF", "RESET", "STALL", "ResumableServer", "Sent"]

EOF, RESET, STALL = "eof", "reset", "stall"  # how an answer is broken
HEAD = (
    b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


@dataclass(frozen=True)
class Sent:
    """One request as it came: its method, its path, its query's fields, its headers."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]


def body_of(name: str) -> bytes:
    """The event-stream body (chunked decoding undone) of recording `name`."""
    return b"".join(dechunk(split(load(name))[1]))


@dataclass
class ResumableServer(LoopbackServer):
    """`breaks[k]`: answer k (0 the POST's, then each GET's) is broken at that absolute body byte
    and in that way (EOF, RESET, STALL); the others are whole. `refusal`: every GET /v1/stream is
    answered this (status, message) instead; `endpoints` False: the three are unknown paths (404
    File Not Found, as a server without them); `chunk`: body bytes per chunk. `keep_deletes`:
    a DELETE's answer keeps its connection for the next request (llama-server keeps one after a
    whole answer), else every answer closes it; `delete_s`: each DELETE is answered this many
    seconds late. `connections` counts the connections accepted; `delete_connections`, the
    distinct ones that carried a DELETE."""

    recording: str = "reasoning_then_content"
    breaks: dict[int, tuple[int, str]] = field(default_factory=dict)
    refusal: tuple[int, str] | None = None
    endpoints: bool = True
    chunk: int = 37
    keep_deletes: bool = False
    delete_s: float = 0.0

    def __post_init__(self) -> None:
        super().__init__()
        self.body = body_of(self.recording)
        self.sent: list[Sent] = []
        self.streams: dict[str, bytes] = {}  # conversation id -> its event stream
        self.deleted = threading.Event()
        self.connections = 0
        self.delete_connections: set[object] = set()  # by `_accepted`'s number
        self._answers = 0

    def _accepted(self, conn: socket.socket) -> int:
        self.connections += 1  # (under the lock)
        return self.connections

    def of(self, method: str) -> list[Sent]:
        return [s for s in self.sent if s.method == method]

    def handle(self, conn: socket.socket, accepted: object) -> None:
        while self._answer(conn, accepted):
            pass

    def _answer(self, conn: socket.socket, accepted: object) -> bool:
        """Answer one request; whether the connection carries another."""
        line = peek_until(conn, b"\r\n")
        req = read_request(conn)
        if line is None or req is None:
            return False
        target = urlsplit(line.split(b" ")[1].decode())
        query = {k: v[0] for k, v in parse_qs(target.query).items()}
        with self._lock:
            self.sent.append(Sent(req.method, req.path, query, dict(req.headers)))
        if req.method == "DELETE" and req.path == "/v1/stream" and self.endpoints:
            with self._lock:
                self.delete_connections.add(accepted)
            time.sleep(self.delete_s)
            self.streams.pop(query.get("conv_id", ""), None)
            keep = b"Keep-Alive: timeout=5, max=100" if self.keep_deletes else b"Connection: close"
            conn.sendall(b"HTTP/1.1 204 No Content\r\n" + keep + b"\r\n\r\n")
            self.deleted.set()
            return self.keep_deletes
        if req.path == "/v1/chat/completions":
            conv = req.headers.get("x-conversation-id")
            if conv is not None:
                self.streams[conv] = self.body
            self._stream(conn, 0)
        elif req.path == "/v1/stream" and self.endpoints:
            self._stream_request(conn, query)
        else:
            conn.sendall(_error(404, "File Not Found"))
        return False

    def _stream_request(self, conn: socket.socket, query: dict[str, str]) -> None:
        conv = query.get("conv_id", "")
        if self.refusal is not None:
            conn.sendall(_error(*self.refusal))
        elif conv not in self.streams:
            conn.sendall(_error(404, "Stream not found or expired"))
        else:
            self._stream(conn, int(query["from"]))

    def _stream(self, conn: socket.socket, start: int) -> None:
        """The body from byte `start`, in chunks, broken where `breaks` says."""
        with self._lock:
            cut, how = self.breaks.get(self._answers, (len(self.body) + 1, EOF))
            self._answers += 1
        conn.sendall(HEAD)
        at = start
        while at < len(self.body):
            piece = self.body[at : at + self.chunk]
            if at + len(piece) > cut:
                conn.sendall(b"%x\r\n%s" % (len(piece), piece[: cut - at]))
                _break(conn, how)
                return
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            at += len(piece)
        conn.sendall(b"0\r\n\r\n")


def _error(status: int, message: str) -> bytes:
    body = json.dumps({"error": {"code": status, "message": message, "type": "x"}}).encode()
    return raw_response(status, "Error", body)


def _break(conn: socket.socket, how: str) -> None:
    if how == RESET:  # an RST, not a FIN: the client's read fails
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif how == STALL:  # nothing more until the client closes it
        while conn.recv(4096):
            pass
