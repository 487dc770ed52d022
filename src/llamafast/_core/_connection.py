# Strategy: the core never touches a socket; it reads what arrived from the connection its
# `Connect` command was answered with. This is all it reads, declared (as httpcore's
# `_backends/base.py` declares a network stream), so that any driver's connection (the
# transport's sync and asyncio ones, the tests' scripted one) can carry the core's rules.
"""What the core reads of a connection: `Arrival` and its `ParsedResponse`."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Arrival", "ParsedResponse"]


class ParsedResponse(Protocol):
    """The response parser's reading of the bytes that came (`_http_*.ResponseParser`)."""

    @property
    def head_done(self) -> bool: ...

    @property
    def done(self) -> bool: ...

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> dict[str, str]: ...

    @property
    def overflow(self) -> bool: ...

    @property
    def body_read(self) -> int:
        """Bytes of the body, after chunked decoding, handed out so far (rule RESUME)."""

    def eof(self) -> None:
        """The connection ended: TruncatedError or HttpParseError if the body is not
        complete."""

    def whole(self, limit: int, taken: list[bytes]) -> bool:
        """The body from here into one buffer (docs/client.md, rule WHOLE-BODY): False when
        its declared length passes `limit`."""

    def take_body(self) -> memoryview:
        """The whole body."""


class Arrival(Protocol):
    """One request's connection as the core reads it. The driver parses every byte that
    arrives into it; the core reads `received` (bytes that came, parsed or not), `parser`,
    `early` (the body's pieces before a Sink is attached; the core takes them), `eof` (the
    server ended the connection), `error` (it failed, or the answer is not HTTP: latched) and
    `stalled` (the stream's stall watchdog fired), and `reused` (a kept-alive connection that
    carried an earlier answer: one that ends before any byte of this answer had been closed by
    the server before the request reached it)."""

    received: int
    reused: bool
    early: list[bytes]
    eof: bool
    error: BaseException | None
    stalled: bool

    @property
    def parser(self) -> ParsedResponse: ...
