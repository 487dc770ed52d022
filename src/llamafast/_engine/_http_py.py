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

import re
from collections.abc import Callable
from typing import Any

from .._errors import HttpParseError, TruncatedError
from .._limits import BACKLOG, BUFFER
from ._chat_py import Sink  # the body's bytes to events; re-exported here for the transports

__all__ = [
    "BACKLOG",
    "BUFFER",
    "HttpParseError",
    "Receiver",
    "ResponseParser",
    "Sink",
    "parse_head",
]

_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(6)
_CHUNKED, _LENGTH, _CLOSE = range(3)
_HEX_DIGITS = b"0123456789abcdefABCDEF"
# A Content-Length is counted in a signed 64-bit integer (the Cython twin's), which no body
# reaches: a larger one is refused, not wrapped.
MAX_CONTENT_LENGTH = (1 << 63) - 1


class ResponseParser:
    """The head (`status`, `headers` with lower-case names) and the body of one response.

    Interim answers (1xx but 101) are read and skipped: `status` and `headers` are the final
    answer's. A fault is latched in `fault`: `filled` hands out the body bytes framed before
    it and raises it only when there are none; every later `free`, `filled` and `eof` raises
    it, so a caller sees the same bytes, then the same error, however the input is split."""

    __slots__ = (
        "_buf",
        "_end",
        "_fault",
        "_framing",
        "_left",
        "_line1",
        "_seen",
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
        self._seen = 0  # bytes after _start already scanned for the end of the head or line
        self._line1 = False  # the status line of the head being read was checked
        self._state = _HEAD
        self._framing = _CLOSE
        self._left = 0  # body bytes left: of the current chunk, or of the Content-Length
        self._fault: HttpParseError | None = None
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

    @property
    def fault(self) -> HttpParseError | None:
        """The parse error found so far (None until then); every later call raises it."""
        return self._fault

    def free(self) -> memoryview:
        """Where the transport writes next (at least one byte)."""
        if self._fault is not None:
            raise self._fault
        start, end = self._start, self._end
        if start:
            if start < end:  # keep the unconsumed tail (a partial line): move it to the front
                self._buf[: end - start] = self._buf[start:end]
            self._start, self._end = 0, end - start
        if self._end == len(self._buf):
            self._fault = too_long(self._state, len(self._buf))
            raise self._fault
        return self._view[self._end :]

    def filled(self, n: int) -> list[memoryview]:
        """`n` bytes were written at `free()`: the body bytes they complete, as views (valid
        until the next `free()`)."""
        if not 0 <= n <= len(self._buf) - self._end:
            raise ValueError(f"filled({n}) with {len(self._buf) - self._end} bytes free")
        if self._fault is not None:
            raise self._fault
        self._end += n
        out: list[memoryview] = []
        buf = self._buf
        pos, end = self._start, self._end
        try:
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
                elif state == _DATA_END:
                    if end - pos < 2:
                        break
                    if buf[pos] != 13 or buf[pos + 1] != 10:
                        raise HttpParseError(
                            f"a chunk does not end with CRLF: {bytes(buf[pos : pos + 2])!r}"
                        )
                    pos += 2
                    self._state = _SIZE
                elif state == _HEAD:
                    stop = self._head_end(pos, end)
                    if stop < 0:
                        break
                    self._head(bytes(buf[pos:stop]))
                    pos = stop + 4 if stop > pos else stop + 2
                elif state == _DONE:
                    pos = end  # bytes after the body are not ours
                    break
                else:
                    eol = buf.find(b"\n", pos + self._seen, end)
                    if eol < 0:
                        self._seen = end - pos
                        break
                    self._seen = 0
                    self._line(state, bytes(buf[pos:eol]))
                    pos = eol + 1
        except HttpParseError as err:
            self._fault = err
            if not out:
                raise
        self._start = pos
        return out

    def eof(self) -> None:
        """The connection ended: fine for a body until close or a complete one; a head or a
        framed body cut short is TruncatedError."""
        if self._fault is not None:
            raise self._fault
        if self._state == _HEAD:
            raise HttpParseError("the connection closed before a complete response head")
        if self._state != _DONE and self._framing != _CLOSE:
            raise TruncatedError()

    def _head_end(self, pos: int, end: int) -> int:
        """Where the head that starts at `pos` ends (the CRLF CRLF, or the CRLF of an empty
        first line), or -1 when it has not all come. Each LF must follow a CR: a bare LF is
        refused as soon as it is there."""
        buf = self._buf
        at = pos + self._seen
        while True:
            lf = buf.find(b"\n", at, end)
            if lf < 0:
                self._seen = end - pos
                return -1
            if lf == pos or buf[lf - 1] != 13:
                line = bytes(buf[max(pos, buf.rfind(b"\n", pos, lf) + 1) : lf])
                raise HttpParseError(
                    f"a line of the response head ends in LF without CR: {line[:80]!r}"
                )
            if not self._line1:
                status_line(bytes(buf[pos : lf - 1]))
                self._line1 = True
            if lf == pos + 1:  # the first line is empty
                self._seen = 0
                self._line1 = False
                return pos
            if buf[lf - 2] == 10:  # an empty line after the fields: the head ends
                self._seen = 0
                self._line1 = False
                return lf - 3
            at = lf + 1

    def _head(self, head: bytes) -> None:
        status, headers, keep_alive, framing, left, state = parse_head(head)
        if state == _HEAD:  # an interim answer: the final one comes next
            return
        self.status, self.headers, self.keep_alive = status, headers, keep_alive
        self._framing, self._left, self._state = framing, left, state

    def _line(self, state: int, line: bytes) -> None:
        """A chunk-size or trailer line, LF cut off. Both end in CRLF, with no other CR."""
        text = line[:-1] if line[-1:] == b"\r" else line
        crlf = len(text) < len(line) and b"\r" not in text
        if state == _SIZE:
            if not crlf:
                raise HttpParseError(f"a chunk-size line does not end with CRLF: {text[:40]!r}")
            # 1 to 15 hex digits (which fit a signed 64-bit count), then optional SP/HT, then
            # nothing or extensions after a `;` (ignored)
            semicolon = text.find(b";")
            digits = (text if semicolon < 0 else text[:semicolon]).rstrip(b" \t")
            if not 0 < len(digits) <= 15 or digits.strip(_HEX_DIGITS):
                raise HttpParseError(f"a chunk size is not a hexadecimal number: {text[:40]!r}")
            self._left = int(digits, 16)
            self._state = _DATA if self._left else _TRAILER
        else:  # a trailer field (skipped), or the blank line after them
            if not crlf:
                raise HttpParseError(f"a trailer line does not end with CRLF: {text[:40]!r}")
            if not text:
                self._state = _DONE


def too_long(state: int, size: int) -> HttpParseError:
    """The error for a head, chunk-size line or trailer line that fills the whole buffer
    (shared by both twins)."""
    what = {_HEAD: "head", _TRAILER: "trailer line"}.get(state, "chunk-size line")
    return HttpParseError(f"the response's {what} is longer than {size} bytes")


# HTTP/1.<digit> SP 3DIGIT [SP reason]: the code is three ASCII digits from 100 to 999; the
# reason is ignored, but holds no CR or NUL (the rule of a field value). (Each pattern here
# runs in time linear in the line: no two parts can match the same bytes.)
_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([1-9][0-9][0-9])(?: [^\r\x00]*)?").fullmatch
# The field lines of a head, each a token for the name, the colon right after it, a value with
# no CR or NUL: the usual head, whose lines need no closer look.
_PLAIN_FIELDS = re.compile(rb"(?:\r\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n\x00]*)*").fullmatch
_TCHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def status_line(line: bytes) -> int:
    """The status code of a status line (without its CRLF); HttpParseError if it is not one.
    The parsers check it as soon as the line has come, not with the whole head, so a server
    that says something else and then waits is refused at once. Shared by both twins."""
    match = _STATUS_LINE(line)
    if match is None:
        raise HttpParseError(f"not an HTTP/1.1 status line: {line[:80]!r}")
    return int(match[2])


def parse_head(head: bytes) -> tuple[int, dict[str, str], bool, int, int, int]:
    """A response head without its blank line, its lines ended by CRLF: (status, headers with
    lower-case names, keep-alive, framing, body bytes left, parser state). The state is _HEAD
    for an interim answer (1xx): the final answer's head comes next. Shared by both twins."""
    lines = head.split(b"\r\n")
    line = lines[0]
    status = status_line(line)
    if status == 101:  # we never ask to upgrade
        raise HttpParseError(
            f"the server switched protocols, which was not asked for: {line[:80]!r}"
        )
    headers = _fields(head, lines)
    if status < 200:  # interim: no body, whatever its fields say
        return status, headers, True, _CLOSE, 0, _HEAD
    connection = headers.get("connection", "").lower()
    tokens = _tokens(connection) if "," in connection else (connection,)
    http_1_0 = line[7:8] == b"0"  # its connections close unless the server says keep-alive
    keep_alive = "keep-alive" in tokens if http_1_0 else "close" not in tokens
    if status in (204, 304):  # no body, whatever the fields say
        return status, headers, keep_alive, _CLOSE, 0, _DONE
    codings = headers.get("transfer-encoding")
    if codings is not None:  # it overrides any Content-Length
        if http_1_0:  # HTTP/1.0 has no Transfer-Encoding: the framing is faulty
            raise HttpParseError(f"an HTTP/1.0 response with a Transfer-Encoding: {codings[:40]!r}")
        # We send neither TE nor Accept-Encoding, so chunked is the only coding a server may
        # apply. Any other (gzip, or a final coding that is not chunked, whose body would run
        # until close) is one we cannot decode: refused, never handed out as the body.
        if codings != "chunked" and _tokens(codings) != ["chunked"]:
            raise HttpParseError(
                f"a Transfer-Encoding other than chunked, which was not asked for: {codings[:40]!r}"
            )
        return status, headers, keep_alive, _CHUNKED, 0, _SIZE
    length = headers.get("content-length")
    if length is not None:
        left = content_length(length)
        return status, headers, keep_alive, _LENGTH, left, _DATA if left else _DONE
    return status, headers, keep_alive, _CLOSE, -1, _DATA


def _tokens(value: str) -> list[str]:
    """A comma-separated list, lower-cased, without its empty elements."""
    return [t for t in (t.strip(" \t").lower() for t in value.split(",")) if t]


def _fields(head: bytes, lines: list[bytes]) -> dict[str, str]:
    """The field lines after the status line: names are tokens (no whitespace before the
    colon), lower-cased; values lose their surrounding SP/HT and hold no CR or NUL; a line
    that starts with SP/HT continues the one before (obs-fold, joined with one SP); a field
    repeated is one comma-separated list, in order."""
    headers: dict[str, str] = {}
    if _PLAIN_FIELDS(head, len(lines[0])) is not None:  # the usual head: no line to look into
        for raw in lines[1:]:
            name, _, value = raw.partition(b":")
            key = name.lower().decode("latin-1")
            text = value.strip(b" \t").decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        return headers
    key = ""  # the last field's name, which a folded line continues
    for raw in lines[1:]:
        folded = raw[:1] in (b" ", b"\t")  # obs-fold: it continues the line before
        if folded:
            if not key:
                raise HttpParseError(f"a folded header line with no header before it: {raw[:80]!r}")
            name, value = b"", raw
        else:
            name, colon, value = raw.partition(b":")
            if not colon:
                raise HttpParseError(f"a header line without a colon: {raw[:80]!r}")
            if not name or name.translate(None, _TCHARS):
                raise HttpParseError(f"a header name is not a token: {raw[:80]!r}")
        if b"\r" in value or b"\0" in value:
            raise HttpParseError(f"a header value holds a CR or NUL: {raw[:80]!r}")
        text = value.strip(b" \t").decode("latin-1")
        if not folded:
            key = name.lower().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        elif text:  # the value so far ends with the line this one continues
            headers[key] = f"{headers[key]} {text}"
    return headers


def content_length(text: str) -> int:
    """A Content-Length value: ASCII digits, at most MAX_CONTENT_LENGTH; a list of equal
    values (`5, 5`, or the field repeated) is that value."""
    values = [v for v in (v.strip(" \t") for v in text.split(",")) if v]
    if not values or not all(v.isascii() and v.isdigit() for v in values):
        raise HttpParseError(f"Content-Length is not a number: {text[:40]!r}")
    digits = {v.lstrip("0") or "0" for v in values}
    if len(digits) > 1:
        raise HttpParseError(f"Content-Length has differing values: {text[:40]!r}")
    value = digits.pop()
    if len(value) > 19 or int(value) > MAX_CONTENT_LENGTH:
        raise HttpParseError(f"Content-Length is larger than 2**63-1: {text[:40]!r}")
    return int(value)


class Receiver:
    """The arrival path of an asyncio BufferedProtocol reading one response: `get_buffer` hands
    out the parser's buffer, `buffer_updated` parses what came and, once a Sink is attached,
    decodes it at once (before that the body's bytes are kept in `early`), then wakes the task
    waiting on `waiter`. A parse error is latched in `error`, after the body bytes that came
    before it are handed on, and aborts the transport; reading pauses while more than BACKLOG
    bytes wait for the consumer. The owner sets `transport`, `sink`, `waiter`, `watched` (then
    every arrival's time goes to `last`), and `deliver`: a function called after each arrival
    instead of waking the task (it wakes the task when it must, and never raises)."""

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
        self.received = 0  # bytes that arrived, parsed or not
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
        self.received += nbytes
        if self.error is not None:
            return
        parser = self.parser
        try:
            pieces = parser.filled(nbytes)
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
        if parser.fault is not None:  # found after the body bytes just handed on
            self._fail(parser.fault)
            return
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
