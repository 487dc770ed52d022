# Strategy: one HTTP/1.1 response, sans-I/O, over a buffer the parser owns: a transport asks for
# `free()` (recv_into / BufferedProtocol.get_buffer write there), says how much it wrote with
# `filled(n)`, and gets the body's bytes back as views into that same buffer (the chunked framing
# cut out, nothing copied). The buffer never changes size, so the views a transport holds while
# it writes stay valid; it is compacted before the next `free()`. The Sink (_chat_py) turns those
# views into ChatEvents, and Receiver is a transport's arrival path: the bytes of each arrival go
# through the parser into the Sink. Waiting, clocks and the socket are the transport's: it hands
# the Receiver plain callables (a one-shot waker, a clock, a fault and a backlog hook), which
# cost an arrival nothing but the call, and the rare paths only when they happen. A body the core
# asks for whole (`whole`: a whole answer's) lands in one buffer of its own instead: `free()` is
# then the rest of it, so a read takes all the socket has, and the arrivals inside it wake nobody.
"""HTTP/1.1 response head and body framing (chunked, Content-Length, until close), and the
arrival path (parse, feed the Sink): pure twin. The head's rules, which both twins follow, are
_http_head's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import HttpParseError, TruncatedError
from .._limits import BACKLOG, BUFFER, WHOLE_PAD
from ._http_head import (
    CHUNKED,
    CLOSE,
    DATA,
    DATA_END,
    DONE,
    HEAD,
    LENGTH,
    SIZE,
    TRAILER,
    parse_head,
    status_line,
    too_long,
)

if TYPE_CHECKING:
    from ._chat_py import Sink

__all__ = [
    "BACKLOG",
    "BUFFER",
    "HttpParseError",
    "Receiver",
    "ResponseParser",
    "parse_head",
]

_HEX_DIGITS = b"0123456789abcdefABCDEF"
# A whole Content-Length body's buffer is allocated at most this large before its bytes come
# (no call but embeddings allows a larger body: they grow past it as they arrive).
UP_FRONT = 64 << 20


class ResponseParser:
    """The head (`status`, `headers` with lower-case names) and the body of one response.

    Interim answers (1xx but 101) are read and skipped: `status` and `headers` are the final
    answer's. A fault is latched in `fault`: `filled` hands out the body bytes framed before
    it and raises it only when there are none; every later `free`, `filled` and `eof` raises
    it, so a caller sees the same bytes, then the same error, however the input is split."""

    __slots__ = (
        "_body",
        "_buf",
        "_end",
        "_fault",
        "_framed",
        "_framing",
        "_got",
        "_left",
        "_limit",
        "_line1",
        "_overflow",
        "_seen",
        "_start",
        "_state",
        "_total",
        "_view",
        "_whole",
        "headers",
        "keep_alive",
        "status",
        "surplus",
    )

    def __init__(self, size: int = BUFFER) -> None:
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self.reset()

    def reset(self) -> None:
        """Ready for the next response on the same connection (kept alive), in the same
        buffer: nothing of the last one kept (the views it gave are void, as after free())."""
        self._start = 0  # bytes before this are consumed
        self._end = 0  # bytes up to this are filled
        self._seen = 0  # bytes after _start already scanned for the end of the head or line
        self._line1 = False  # the status line of the head being read was checked
        self._state = HEAD
        self._framing = CLOSE
        self._left = 0  # body bytes left: of the current chunk, or of the Content-Length
        # Body bytes framed so far (docs/client.md, rule RESUME): each chunk's size as its line
        # is read, the Content-Length, a body until close's pieces; `body_read` takes `_left`
        # off, so no piece of a framed body costs an addition.
        self._framed = 0
        self._fault: HttpParseError | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.surplus = False  # bytes came after the body's end: the connection carries no more
        self._whole = False  # the body goes into `_body` (`whole`), not out as views
        self._body: bytearray | None = None
        self._got = 0  # bytes of the body in `_body`
        self._limit = 0
        self._total = 0  # a whole Content-Length body's declared length
        self._overflow = False

    @property
    def head_done(self) -> bool:
        return self._state != HEAD

    @property
    def done(self) -> bool:
        """The body is complete by its own framing (a body until close never is)."""
        return self._state == DONE

    @property
    def body_read(self) -> int:
        """Bytes of the body (after chunked decoding) handed out so far (rule RESUME: where a
        resumed stream goes on)."""
        return self._framed - self._left if self._state != HEAD else 0

    @property
    def fault(self) -> HttpParseError | None:
        """The parse error found so far (None until then); every later call raises it."""
        return self._fault

    # --- a body read whole (docs/client.md, rule WHOLE-BODY) --------------------------------

    def whole(self, limit: int, taken: list[bytes]) -> bool:
        """From now on the body goes into one buffer, which `taken` (its bytes handed out
        before) starts: for a Content-Length, a buffer of that length (False, and nothing
        allocated, when it passes `limit`); else one grown as the body comes, kept up to
        `limit` bytes (past them, `overflow`). `take_body()` hands it over."""
        size = sum(len(p) for p in taken)
        if self._framing == LENGTH:
            total = size + (self._left if self._state == DATA else 0)
            if total > limit:
                return False
            body = bytearray(min(total, UP_FRONT) + WHOLE_PAD)
        else:
            body = bytearray()
        self._body, self._got, self._limit, self._whole = body, 0, limit, True
        self._total = total if self._framing == LENGTH else 0
        for piece in taken:
            self._keep(piece)
        return True

    @property
    def body_left(self) -> int:
        """Bytes of a whole Content-Length body still to come, all of them into `free()`: a
        reader may wait for them at once (0 otherwise)."""
        if self._whole and self._framing == LENGTH and self._state == DATA:
            return self._left
        return 0

    @property
    def collecting(self) -> bool:
        """A whole body is being read and is not complete (nor past its limit)."""
        return self._whole and self._state != DONE and not self._overflow

    @property
    def overflow(self) -> bool:
        """A whole body without a Content-Length went past its limit (the rest not kept)."""
        return self._overflow

    def take_body(self) -> memoryview:
        """The whole body, with WHOLE_PAD bytes of room after it in the buffer (`.obj`); the
        parser lets go of it."""
        body, self._body = self._body, None
        if body is None:
            return memoryview(b"")
        if len(body) < self._got + WHOLE_PAD:
            body += bytes(self._got + WHOLE_PAD - len(body))
        return memoryview(body)[: self._got]

    def _room(self, need: int) -> bytearray:
        """The buffer of a whole Content-Length body, with room for `need` more bytes. Past
        UP_FRONT it grows (doubling, up to the declared length) as the bytes come: a head
        may declare up to the call's limit and send little, and bytearray() fills what it
        allocates (the Cython twin's malloc leaves untouched pages unused)."""
        body = self._body
        assert body is not None
        room = len(body) - WHOLE_PAD
        if self._got + need > room:
            size = min(self._total, max(self._got + need, 2 * room))
            grown = bytearray(size + WHOLE_PAD)
            grown[: self._got] = memoryview(body)[: self._got]
            self._body = body = grown
        return body

    def _keep(self, piece: bytes | memoryview) -> None:
        """Body bytes copied into the whole body (up to its limit)."""
        got = self._got + len(piece)
        if self._overflow or got > self._limit:
            self._overflow = True
            return
        assert self._body is not None
        if self._framing == LENGTH:
            self._room(len(piece))[self._got : got] = piece
        else:
            self._body += piece
        self._got = got

    # --- the buffer --------------------------------------------------------------------------

    def free(self) -> memoryview:
        """Where the transport writes next (at least one byte)."""
        if self._fault is not None:
            raise self._fault
        if self._whole and self._state == DATA and self._framing == LENGTH:
            body = self._room(1)
            return memoryview(body)[self._got : min(self._got + self._left, len(body) - WHOLE_PAD)]
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
        if self.body_left:
            return self._filled_whole(n)
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
                if state == DATA:
                    pos = self._data(pos, end, out)
                elif state == DATA_END:
                    if end - pos < 2:
                        break
                    if buf[pos] != 13 or buf[pos + 1] != 10:
                        raise HttpParseError(
                            f"a chunk does not end with CRLF: {bytes(buf[pos : pos + 2])!r}"
                        )
                    pos += 2
                    self._state = SIZE
                elif state == HEAD:
                    stop = self._head_end(pos, end)
                    if stop < 0:
                        break
                    self._head(bytes(buf[pos:stop]))
                    pos = stop + 4 if stop > pos else stop + 2
                elif state == DONE:
                    self.surplus = True  # bytes after the body are not ours
                    pos = end
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

    def _data(self, pos: int, end: int, out: list[memoryview]) -> int:
        """Body bytes from `pos` (state DATA) out as a view, or into the whole body: where
        the next unconsumed byte is."""
        close = self._framing == CLOSE
        take = end - pos if close else min(self._left, end - pos)
        view = self._view[pos : pos + take]
        if self._whole:
            self._keep(view)
        else:
            out.append(view)
        if close:
            self._framed += take
        else:
            self._left -= take
            if not self._left:
                self._state = DATA_END if self._framing == CHUNKED else DONE
        return pos + take

    def _filled_whole(self, n: int) -> list[memoryview]:
        """`n` bytes of a whole Content-Length body were written at `free()`."""
        if not 0 <= n <= self._left:
            raise ValueError(f"filled({n}) with {self._left} bytes free")
        self._got += n
        self._left -= n
        if not self._left:
            self._state = DONE
        return []

    def eof(self) -> None:
        """The connection ended: fine for a body until close or a complete one; a head or a
        framed body cut short is TruncatedError."""
        if self._fault is not None:
            raise self._fault
        if self._state == HEAD:
            raise HttpParseError("the connection closed before a complete response head")
        if self._state != DONE and self._framing != CLOSE:
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
        if state == HEAD:  # an interim answer: the final one comes next
            return
        self.status, self.headers, self.keep_alive = status, headers, keep_alive
        self._framing, self._left, self._state = framing, left, state
        self._framed = left

    def _line(self, state: int, line: bytes) -> None:
        """A chunk-size or trailer line, LF cut off. Both end in CRLF, with no other CR."""
        text = line[:-1] if line[-1:] == b"\r" else line
        crlf = len(text) < len(line) and b"\r" not in text
        if state == SIZE:
            if not crlf:
                raise HttpParseError(f"a chunk-size line does not end with CRLF: {text[:40]!r}")
            # 1 to 15 hex digits (which fit a signed 64-bit count), then optional SP/HT, then
            # nothing or extensions after a `;` (ignored)
            semicolon = text.find(b";")
            digits = (text if semicolon < 0 else text[:semicolon]).rstrip(b" \t")
            if not 0 < len(digits) <= 15 or digits.strip(_HEX_DIGITS):
                raise HttpParseError(f"a chunk size is not a hexadecimal number: {text[:40]!r}")
            self._left = int(digits, 16)
            self._framed += self._left
            self._state = DATA if self._left else TRAILER
        else:  # a trailer field (skipped), or the blank line after them
            if not crlf:
                raise HttpParseError(f"a trailer line does not end with CRLF: {text[:40]!r}")
            if not text:
                self._state = DONE


class Receiver:
    """The arrival path of one response, parsing and feeding only: `get_buffer` hands out the
    parser's buffer, `buffer_updated` parses what came and, once a Sink is attached, decodes it
    at once (before that the body's bytes are kept in `early`). A parse error is latched in
    `error`, after the body bytes that came before it are handed on.

    What an arrival does beyond that is the transport's, through the callables it sets here:
    `clock` (while set, every arrival's time goes to `last`), `waker` (one-shot: called with
    None, then cleared, at the next arrival or failure; a future's `set_result` fits),
    `deliver` (called after every arrival instead of `waker`; it wakes the task when it must,
    and never raises), `on_fault` (called on a parse error) and `on_backlog` (called after an
    arrival leaves more than BACKLOG bytes in the Sink)."""

    def __init__(self, parser: ResponseParser) -> None:
        self.parser = parser
        self.early: list[bytes] = []
        self.sink: Sink | None = None
        self.error: BaseException | None = None  # the connection's failure, or a parse error
        self.received = 0  # bytes that arrived, parsed or not
        self.last = 0.0
        self.clock: Callable[[], float] | None = None
        self.waker: Callable[[None], object] | None = None
        self.deliver: Callable[[], None] | None = None
        self.on_fault: Callable[[], object] | None = None
        self.on_backlog: Callable[[], object] | None = None
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
        # An arrival inside a whole body that does not complete it wakes nobody (WHOLE-BODY).
        quiet = parser.collecting
        try:
            pieces = parser.filled(nbytes)
        except HttpParseError as err:
            self._fail(err)
            return
        clock = self.clock
        if clock is not None:
            self.last = clock()
        if pieces:
            sink = self.sink
            if sink is None:
                self.early += [bytes(p) for p in pieces]
            else:
                sink.feed(pieces)
                if sink.backlog > BACKLOG and self.on_backlog is not None:
                    self.on_backlog()
        if parser.fault is not None:  # found after the body bytes just handed on
            self._fail(parser.fault)
            return
        if quiet and parser.collecting:
            return
        deliver = self.deliver
        if deliver is not None:
            deliver()
            return
        self.wake()

    def wake(self) -> None:
        """Call `waker` if it is set, and clear it. A wake that fails is dropped: its waiter
        was given up meanwhile (a cancelled task), and waking is never an arrival's failure."""
        waker = self.waker
        if waker is not None:
            self.waker = None
            try:
                waker(None)
            except Exception:  # nobody is waiting any more: nothing to wake
                pass

    def _fail(self, err: BaseException) -> None:
        self.error = err
        if self.on_fault is not None:
            self.on_fault()
        self.wake()
