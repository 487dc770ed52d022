"""What `llamafast serve` reads of a request, within the bounds it holds every client to.

`RequestReader` is sans-I/O: fed the bytes as they arrive, it says when a request is whole, or
refuses it with the answer a server gives (`Refusal`: 400, 413, 431), so the one set of rules
serves the server's selector loop (`_serve_loop.py`) and the blocking `read_request` the test
kit uses (tests/_loopback.py). The idea: every cost is bounded before it is paid. The head's end
is searched for only in the bytes that arrived since the last search (h11's "searched up to
here": linear in the head, never a re-scan of the whole buffer per read) and the head is refused
past MAX_HEAD; a body is refused by its Content-Length past MAX_BODY before a byte of it is read.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field

__all__ = [
    "MAX_BODY",
    "MAX_HEAD",
    "REQUEST_DEADLINE",
    "Refusal",
    "Request",
    "RequestReader",
    "raw_response",
    "read_request",
]

MAX_HEAD = 64 * 1024
"""A request head (request line and headers, with the blank line) longer than this is refused
with 431, as h11 and aiohttp refuse one (their bounds: 16 KiB and 8 KiB a line)."""
MAX_BODY = 64 * 1024 * 1024
"""A body whose Content-Length passes this is refused with 413 before it is read. The largest
request a test or a recording sends is a few hundred KiB (a prompt past the context, a batch of
64 texts to embed); 64 MiB leaves room for images and audio sent inline (base64)."""
REQUEST_DEADLINE = 10.0
"""Seconds from the connection's accept to the request's last byte, head and body together,
however the bytes trickle in (a deadline for the whole request, not per read)."""

_END = b"\r\n\r\n"


@dataclass
class Request:
    method: str
    path: str  # the query left out
    body: bytes
    at: float  # time.monotonic() when it was read
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case


def raw_response(status: int, reason: str, body: bytes, ctype: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status} {reason}\r\nServer: llama.cpp\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


class Refusal(Exception):
    """A request this server will not read on: the status, its reason and why, answered as
    llama-server writes an error (`{"error": {"code", "message", "type"}}`)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def answer(self) -> bytes:
        error = {"code": self.status, "message": self.message, "type": "invalid_request_error"}
        return raw_response(self.status, self.reason, json.dumps({"error": error}).encode())


def timed_out(deadline: float) -> Refusal:
    return Refusal(408, "Request Timeout", f"the request took longer than {deadline:g} s")


class RequestReader:
    """One HTTP/1.1 request, its body by Content-Length: `feed` the bytes as they come; it
    returns the Request once whole (then feed no more), None while it is not, and raises
    Refusal for a request past a bound or one it cannot read."""

    __slots__ = ("_buf", "_head", "_length", "_scanned", "max_body", "max_head")

    def __init__(self, max_head: int = MAX_HEAD, max_body: int = MAX_BODY) -> None:
        self.max_head, self.max_body = max_head, max_body
        self._buf = bytearray()
        self._scanned = 0  # the head's end is not before here
        self._head: tuple[str, str, dict[str, str]] | None = None
        self._length = 0

    def feed(self, data: bytes) -> Request | None:
        self._buf += data
        if self._head is None:
            end = self._buf.find(_END, self._scanned)
            if end < 0:  # searched up to here; the end may straddle what comes next
                self._scanned = max(0, len(self._buf) - len(_END) + 1)
                if len(self._buf) > self.max_head:
                    raise self._too_long()
                return None
            if end + len(_END) > self.max_head:
                raise self._too_long()
            self._head = self._parse_head(bytes(self._buf[:end]))
            del self._buf[: end + len(_END)]
        if len(self._buf) < self._length:
            return None
        method, path, headers = self._head
        del self._buf[self._length :]
        return Request(method, path, bytes(self._buf), time.monotonic(), headers)

    def _too_long(self) -> Refusal:
        return Refusal(
            431,
            "Request Header Fields Too Large",
            f"the request head is over this server's bound of {self.max_head} bytes",
        )

    def _parse_head(self, head: bytes) -> tuple[str, str, dict[str, str]]:
        lines = head.decode("latin-1").split("\r\n")
        words = lines[0].split(" ", 2)
        if len(words) != 3 or not words[0] or not words[1]:
            raise Refusal(400, "Bad Request", f"not an HTTP request line: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            key, value = key.strip().lower(), value.strip()
            if key == "content-length" and headers.get(key, value) != value:
                raise Refusal(400, "Bad Request", "two different Content-Length headers")
            headers[key] = value
        self._length = self._content_length(headers.get("content-length", "0"))
        return words[0], words[1].split("?")[0], headers

    def _content_length(self, value: str) -> int:
        """RFC 9112: Content-Length is digits only (no sign, no space, no `_` as int() takes)."""
        if not (value.isascii() and value.isdigit()):
            raise Refusal(400, "Bad Request", f"Content-Length is not a number: {value[:40]!r}")
        length = int(value) if len(value) <= len(str(self.max_body)) else self.max_body + 1
        if length > self.max_body:
            raise Refusal(
                413,
                "Payload Too Large",
                f"the body ({value[:40]} bytes) is over this server's bound of "
                f"{self.max_body} bytes",
            )
        return length


def read_request(conn: socket.socket, timeout: float = REQUEST_DEADLINE) -> Request | None:
    """One request from `conn`, blocking: the whole of it within `timeout` seconds (TimeoutError
    past it); None if the peer closed first, or if the request was refused (its answer sent).
    `conn`'s timeout is None after."""
    deadline = time.monotonic() + timeout
    reader = RequestReader()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(str(timed_out(timeout)))
            conn.settimeout(left)
            part = conn.recv(65536)
            if not part:
                return None
            req = reader.feed(part)
            if req is not None:
                conn.settimeout(None)
                return req
    except Refusal as refusal:
        conn.sendall(refusal.answer())
        return None
