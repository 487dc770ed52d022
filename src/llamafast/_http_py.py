# Strategy: one HTTP/1.1 response, sans-I/O, over a buffer the parser owns: a transport asks for
# `free()` (recv_into / BufferedProtocol.get_buffer write there), says how much it wrote with
# `filled(n)`, and gets the body's bytes back as views into that same buffer (the chunked framing
# cut out, nothing copied). The buffer never changes size, so the views a transport holds while
# it writes stay valid; it is compacted before the next `free()`.
"""HTTP/1.1 response head and body framing (chunked, Content-Length, until close), pure twin."""

from __future__ import annotations

from ._errors import TruncatedError

__all__ = ["BUFFER", "HttpParseError", "ResponseParser", "parse_head"]

BUFFER = 1 << 16  # the read buffer; also the longest head and chunk-size line accepted
_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(6)
_CHUNKED, _LENGTH, _CLOSE = range(3)
_HEX_DIGITS = b"0123456789abcdefABCDEF"


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
