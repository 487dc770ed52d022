# Strategy: one HTTP/1.1 response, sans-I/O, over a buffer the parser owns: a transport asks for
# `free()` (recv_into / BufferedProtocol.get_buffer write there), says how much it wrote with
# `filled(n)`, and gets the body's bytes back as views into that same buffer (the chunked framing
# cut out, nothing copied). The buffer never changes size, so the views a transport holds while
# it writes stay valid; it is compacted before the next `free()`. The Sink (_chat_py) turns those
# views into ChatEvents, and Receiver is an asyncio protocol's arrival path: the bytes of each
# arrival go through the parser into the Sink, and the waiting task is woken once.
"""HTTP/1.1 response head and body framing (chunked, Content-Length, until close), and the
asyncio arrival path: pure twin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._chat_py import Sink  # the body's bytes to events; re-exported here for the transports
from ._errors import TruncatedError

__all__ = [
    "BACKLOG",
    "BUFFER",
    "HttpParseError",
    "Receiver",
    "ResponseParser",
    "Sink",
    "parse_head",
]

BUFFER = 1 << 16  # the read buffer; also the longest head and chunk-size line accepted
_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(6)
_CHUNKED, _LENGTH, _CLOSE = range(3)
_HEX_DIGITS = b"0123456789abcdefABCDEF"
BACKLOG = 1 << 21  # bytes of body a slow consumer has not taken before reading pauses


class HttpParseError(ValueError):
    """What the server sent is not an HTTP/1.1 response (the message says where)."""


class ResponseParser:
    """The head (`status`, `headers` with lower-case names) and the body of one response."""

    __slots__ = (
        "_buf",
        "_end",
        "_framing",
        "_left",
        "_start",
        "_state",
        "_view",
        "headers",
        "keep_alive",
        "status",
    )

    def __init__(self, size: int = BUFFER) -> None:
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = 0  # bytes before this are consumed
        self._end = 0  # bytes up to this are filled
        self._state = _HEAD
        self._framing = _CLOSE
        self._left = 0  # body bytes left: of the current chunk, or of the Content-Length
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True

    @property
    def head_done(self) -> bool:
        return self._state != _HEAD

    @property
    def done(self) -> bool:
        """The body is complete by its own framing (a body until close never is)."""
        return self._state == _DONE

    def free(self) -> memoryview:
        """Where the transport writes next (at least one byte)."""
        start, end = self._start, self._end
        if start:
            if start < end:  # keep the unconsumed tail (a partial line): move it to the front
                self._buf[: end - start] = self._buf[start:end]
            self._start, self._end = 0, end - start
        if self._end == len(self._buf):
            what = "head" if self._state == _HEAD else "chunk-size line"
            raise HttpParseError(f"the response's {what} is longer than {len(self._buf)} bytes")
        return self._view[self._end :]

    def filled(self, n: int) -> list[memoryview]:
        """`n` bytes were written at `free()`: the body bytes they complete, as views (valid
        until the next `free()`)."""
        if not 0 <= n <= len(self._buf) - self._end:
            raise ValueError(f"filled({n}) with {len(self._buf) - self._end} bytes free")
        self._end += n
        out: list[memoryview] = []
        buf = self._buf
        pos, end = self._start, self._end
        while pos < end:
            state = self._state
            if state == _DATA:
                if self._framing == _CLOSE:
                    out.append(self._view[pos:end])
                    pos = end
                    break
                take = min(self._left, end - pos)
                out.append(self._view[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _DATA_END if self._framing == _CHUNKED else _DONE
            elif state == _HEAD:
                at = buf.find(b"\r\n\r\n", pos, end)
                if at < 0:
                    break
                head = parse_head(bytes(buf[pos:at]))
                self.status, self.headers, self.keep_alive = head[0], head[1], head[2]
                self._framing, self._left, self._state = head[3], head[4], head[5]
                pos = at + 4
            elif state == _DONE:
                pos = end  # bytes after the body are not ours
            else:
                eol = buf.find(b"\n", pos, end)
                if eol < 0:
                    break
                line = bytes(buf[pos:eol]).rstrip(b"\r")
                pos = eol + 1
                self._line(state, line)
        self._start = pos
        return out

    def eof(self) -> None:
        """The connection ended: fine for a body until close or a complete one; a head or a
        framed body cut short is TruncatedError."""
        if self._state == _HEAD:
            raise HttpParseError("the connection closed before a complete response head")
        if self._state != _DONE and self._framing != _CLOSE:
            raise TruncatedError()

    def _line(self, state: int, line: bytes) -> None:
        if state == _SIZE:
            size_text = line.split(b";", 1)[0].strip(b" \t")
            if not size_text or size_text.strip(_HEX_DIGITS) or len(size_text) > 15:
                raise HttpParseError(f"a chunk size is not a hexadecimal number: {line[:40]!r}")
            size = int(size_text, 16)
            if size:
                self._left = size
                self._state = _DATA
            else:
                self._state = _TRAILER
        elif state == _DATA_END:
            if line:
                raise HttpParseError(f"a chunk does not end with CRLF: {line[:40]!r}")
            self._state = _SIZE
        elif not line:  # the blank line after the trailers
            self._state = _DONE


def parse_head(head: bytes) -> tuple[int, dict[str, str], bool, int, int, int]:
    """A response head without its blank line: (status, headers with lower-case names,
    keep-alive, framing, body bytes left, parser state). Shared by both twins."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise HttpParseError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, colon, value = raw.partition(b":")
        if not colon:
            raise HttpParseError(f"a header line without a colon: {raw[:80]!r}")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    keep_alive = headers.get("connection", "").lower() != "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return status, headers, keep_alive, _CHUNKED, 0, _SIZE
    if "content-length" in headers:
        text = headers["content-length"]
        if not text.isdigit():
            raise HttpParseError(f"Content-Length is not a number: {text[:40]!r}")
        left = int(text)
        return status, headers, keep_alive, _LENGTH, left, _DATA if left else _DONE
    if status in (204, 304) or 100 <= status < 200:
        return status, headers, keep_alive, _CLOSE, 0, _DONE
    return status, headers, keep_alive, _CLOSE, -1, _DATA


class Receiver:
    """The arrival path of an asyncio BufferedProtocol reading one response: `get_buffer` hands
    out the parser's buffer, `buffer_updated` parses what came and, once a Sink is attached,
    feeds it to the Sink at once (before that the body's bytes are kept in `early`), then
    wakes the task waiting on `waiter`. A parse error is latched in `error` and aborts the
    transport; reading pauses while more than BACKLOG bytes wait for the consumer. The owner
    sets `transport`, `sink`, `waiter`, `watched` (then every arrival's time goes to `last`),
    and `deliver`: a function called after each arrival instead of waking the task (it wakes
    the task when it must, and never raises)."""

    def __init__(self, loop: Any, parser: ResponseParser) -> None:
        self.loop = loop
        self.parser = parser
        self.transport: Any = None
        self.early: list[bytes] = []
        self.sink: Sink | None = None
        self.error: BaseException | None = None  # the connection's failure, or a parse error
        self.waiter: Any = None
        self.paused = False
        self.watched = False
        self.last = 0.0
        self.deliver: Callable[[], None] | None = None
        self._scratch: bytearray | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.error is None:
            try:
                return self.parser.free()
            except HttpParseError as err:
                self._fail(err)
        if self._scratch is None:  # failed: what still arrives is dropped
            self._scratch = bytearray(4096)
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        if self.error is not None:
            return
        try:
            pieces = self.parser.filled(nbytes)
        except HttpParseError as err:
            self._fail(err)
            return
        if self.watched:
            self.last = self.loop.time()
        if pieces:
            sink = self.sink
            if sink is None:
                self.early += [bytes(p) for p in pieces]
            else:
                sink.feed(pieces)
                if sink.backlog > BACKLOG and self.transport is not None:
                    self.paused = True
                    self.transport.pause_reading()
        deliver = self.deliver
        if deliver is not None:
            deliver()
            return
        self._wake()

    def _fail(self, err: BaseException) -> None:
        self.error = err
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)
