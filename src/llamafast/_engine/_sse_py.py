"""The SSE reader, pure twin: the rules of docs/sse.md.

Sans-I/O: `SseDecoder` holds every rule; `Events`, `iter_events`, `aiter_events` are thin loops
around it. Each chunk is searched once, on arrival (`split`), and only the unfinished line is kept,
so the whole buffer is always already searched: byte-at-a-time input costs O(n) in total.
"""

from __future__ import annotations

import _thread
import http.client
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, Final, Self, TypeVar

from .._errors import (
    CancelledReadError,
    LineTooLongError,
    NotUtf8Error,
    SseError,
    SseIoError,
    SseTimeoutError,
    TruncatedError,
    busy_error,
    uninitialised_error,
)
from .._limits import MAX_LINE, READ_SIZE, SHOW_BYTES
from .._values import DONE, SseItem
from ._reader_contract import check_chunk, check_count

__all__ = ["MAX_LINE", "READ_SIZE", "Events", "SseDecoder", "aiter_events", "iter_events"]


_BOM: Final = b"\xef\xbb\xbf"


T = TypeVar("T")


class OneCaller:
    """One caller at a time, and a clear error for an object whose __init__ never ran.

    The lock is made in __new__, so it exists even when __init__ is skipped; every entry point
    takes it without blocking and a second caller (another thread, or the reader, a finalizer
    or an event handler calling back in) gets `busy_error` while the first goes on. `_error` is
    the latched error, which every entry point raises before doing anything else; until
    __init__ runs (and sets it to None) it is `uninitialised_error`, so an object never
    initialised says so, at no cost to one that was (a __getattr__ hook would slow down every
    attribute read).
    """

    __slots__ = ("_busy", "_error")
    _busy: _thread.LockType
    _error: BaseException | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        self = super().__new__(cls)
        self._busy = _thread.allocate_lock()
        self._error = uninitialised_error(self)
        return self

    def _enter(self, method: str) -> None:
        """Take the one-caller lock (release it in a finally), or refuse with busy_error."""
        if not self._busy.acquire(False):
            raise busy_error(self, method)


class Pending(OneCaller):
    """Items decoded and not handed out yet, in reverse order (popped from the end)."""

    __slots__ = ("_pending",)
    _pending: list[Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        self = super().__new__(cls, *args, **kwargs)
        self._pending = []
        return self

    def _handout(self, items: list[T]) -> T:
        """The first of a non-empty `items`; the others wait in `_pending`."""
        if len(items) == 1:
            return items[0]
        items.reverse()
        self._pending = items
        return items.pop()


class AsyncPending(Pending):
    """An async iterator over `_next()`, one task at a time (a second __anext__ while one
    awaits is refused); pending items are handed out without waiting."""

    __slots__ = ()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        if self._pending:
            return self._pending.pop()
        # Nothing is pending while a call runs, so a second caller always gets here.
        self._enter("__anext__")
        try:
            return await self._next()
        finally:
            self._busy.release()

    async def _next(self) -> Any:
        raise NotImplementedError


def check_max_line(max_line: object) -> int:
    """`max_line` if it is an int >= 1 (not a bool), else ValueError naming the value."""
    if isinstance(max_line, bool) or not isinstance(max_line, int) or max_line < 1:
        raise ValueError(f"max_line must be an integer >= 1, not {max_line!r}")
    return int(max_line)


class SseDecoder(OneCaller):
    """The reader's rules with no I/O: `feed` bytes, get the items of the lines they complete."""

    __slots__ = ("_buf", "_max_line", "_skip_lf", "_started")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._enter("__init__")
        try:
            self._max_line = check_max_line(max_line)
            self._buf = bytearray()  # the unfinished line (or, before _started, a BOM prefix)
            self._started = False  # the stream start has been checked for a BOM
            self._skip_lf = False  # the last line ended in "\r": a "\n" next is part of its end
            self._error = None  # the latched fault (an SseError)
        finally:
            self._busy.release()

    def feed(self, data: bytes | bytearray | memoryview) -> list[SseItem]:
        """The items of the lines `data` completes; a fault found here is raised next call."""
        self._enter("feed")
        try:
            return self._feed(data)
        finally:
            self._busy.release()

    # The pure twin's hot loop, one function per feed (a call per part would cost every chunk).
    # Its states: a latched fault (raised again); not started (a BOM may still be arriving:
    # undecided bytes wait in the buffer); a CR just ended the last feed (its LF may open this
    # one); and the unfinished line waiting in the buffer, joined to the first line found here.
    def _feed(self, data: bytes | bytearray | memoryview) -> list[SseItem]:
        if self._error is not None:
            raise self._error
        if type(data) is not bytes:
            # Through memoryview, as the Cython twin takes a buffer: bytes(5) would be five
            # NUL bytes, memoryview(5) is the TypeError it should be.
            data = bytes(memoryview(data))
        buf = self._buf
        if not self._started:
            # docs/sse.md, rule BOM: a BOM at the very start is dropped, even when it arrives split.
            if buf:
                data = bytes(buf) + data
                buf.clear()
            if len(data) < 3 and _BOM.startswith(data):
                buf += data  # maybe a BOM: undecided, so no length check yet
                return []
            self._started = True
            if data.startswith(_BOM):
                data = data[3:]
        if self._skip_lf:
            # docs/sse.md, rule CR: "\r\n" is one line end even when split across reads.
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        if not data:
            return []
        if b"\r" in data:
            # docs/sse.md, rule LINES: a lone "\r" ends a line. The buffer never ends in "\r" (it
            # ends a line at once), so normalising each chunk on its own is exact.
            self._skip_lf = data[-1] == 0x0D
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        rest = lines.pop()  # after the last line end: the start of the next, unfinished line
        items: list[SseItem] = []
        if lines:
            if buf:
                lines[0] = bytes(buf) + lines[0]
                buf.clear()
            max_line = self._max_line
            append = items.append
            for line in lines:
                # Too long, checked before decoding (docs/sse.md, rules MAX-LINE and LENGTH-FIRST).
                if len(line) > max_line:
                    return self._fault(items, LineTooLongError(max_line))
                if line[:5] == b"data:":
                    # docs/sse.md, rule SPACE: exactly one leading space is dropped after "data:".
                    value = line[6:] if line[5:6] == b" " else line[5:]
                    if value == b"[DONE]":
                        append(DONE)
                        continue
                    try:
                        # Decoded once, whole; "data:" is ASCII, so the value is valid UTF-8 exactly
                        # when the line is (docs/sse.md, rules SPLIT and UTF8).
                        append(value.decode("utf-8"))
                    except UnicodeDecodeError:
                        return self._fault(items, NotUtf8Error(line[:SHOW_BYTES]))
                elif line == b"data":
                    append("")  # a bare "data" (no colon) is data "" (docs/sse.md, rule FIELD)
                elif not line.isascii():
                    # Blank lines, comments and other fields carry nothing, but every line must be
                    # UTF-8 (docs/sse.md, rules SKIP, FIELD and UTF8).
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError:
                        return self._fault(items, NotUtf8Error(line[:SHOW_BYTES]))
        if rest:
            buf += rest
            # A partial line is too long as soon as it exceeds max_line (docs/sse.md,
            # rule MAX-LINE).
            if len(buf) > self._max_line:
                return self._fault(items, LineTooLongError(self._max_line))
        return items

    def close(self) -> None:
        """End of input: a clean end, or TruncatedError if a partial line is buffered."""
        self._enter("close")
        try:
            self._close()
        finally:
            self._busy.release()

    def _close(self) -> None:
        if self._error is not None:
            raise self._error
        if self._buf:
            if len(self._buf) > self._max_line:  # an undecided BOM prefix, e.g. b"\xef\xbb"
                # Too long wins over cut (docs/sse.md, rules MAX-LINE and END).
                self._error = LineTooLongError(self._max_line)
            else:  # the stream ended inside a line (docs/sse.md, rule END)
                self._error = TruncatedError(bytes(self._buf[:SHOW_BYTES]))
            self._buf = bytearray()
            raise self._error
        self._skip_lf = False

    def _fault(self, items: list[SseItem], error: SseError) -> list[SseItem]:
        """Latch `error` for the next call and hand out the items that precede it."""
        self._error = error
        self._buf = bytearray()
        return items


class Events(Pending):
    """The items of a blocking reader (`read(n) -> bytes`), one at a time (docs/sse.md)."""

    __slots__ = ("_buffer", "_decoder", "_ended", "_method", "_read", "_readinto")

    def __init__(self, reader: Any, max_line: int = MAX_LINE) -> None:
        self._enter("__init__")
        try:
            self._setup(reader, max_line)
        finally:
            self._busy.release()

    def _setup(self, reader: Any, max_line: int) -> None:
        decoder = SseDecoder(max_line)
        # readinto1/read1 return what has arrived; http.client's readinto/read on a chunked body
        # block until the whole buffer is full, which stalls a live stream (docs/sse.md,
        # rule READER).
        for name in ("readinto1", "read1", "readinto", "read"):
            method = getattr(reader, name, None)
            if callable(method):
                break
        else:
            raise TypeError(f"the reader has no read(n) method: {type(reader).__name__}")
        self._decoder = decoder
        self._method = name  # for the messages about what it returned
        self._readinto: Any = None
        self._read: Any = None
        self._buffer = bytearray(0)
        if name.startswith("readinto"):
            self._readinto = method
            self._buffer = bytearray(READ_SIZE)  # what readinto writes into, through a view
        else:
            self._read = method
        self._pending: list[SseItem] = []  # items already decoded, in reverse order
        self._ended = False
        self._error = None

    def __iter__(self) -> Iterator[SseItem]:
        return self

    def __next__(self) -> SseItem:
        # An iterator of its own, as the Cython twin is: after a fault, next() raises it again.
        item = self.next_item()
        if item is None:
            raise StopIteration
        return item

    def next_item(self) -> SseItem | None:
        """The next item, or None once the stream has ended cleanly (docs/sse.md, rule END)."""
        if self._pending:
            return self._pending.pop()
        # Nothing is pending while a call runs, so a second caller always gets here.
        self._enter("next_item")
        try:
            return self._next_item()
        finally:
            self._busy.release()

    def _next_item(self) -> SseItem | None:
        if self._error is not None:
            raise self._error
        if self._ended:
            return None  # None again, the reader not read again (docs/sse.md, rule END)
        decoder = self._decoder
        while True:
            if decoder._error is not None:  # a fault after the items already handed out
                self._error = decoder._error
                raise self._error
            chunk = self._read_chunk()
            try:
                if not chunk:
                    decoder.close()
                    self._ended = True
                    return None
                items = decoder.feed(chunk)
            except SseError as error:
                self._error = error
                raise
            if items:
                return self._handout(items)

    def _read_into(self) -> bytes:
        """One readinto: a copy of what the reader wrote. A reader may keep a view of the buffer
        (a slice, memoryview(b), a PickleBuffer...) and write through it later, from any thread:
        then the next read gets a buffer of its own, so that those writes can never reach the
        bytes of a later read (as in the Cython twin)."""
        view = memoryview(self._buffer)
        n = check_count(self._readinto(view), READ_SIZE, self._method)
        chunk = bytes(view[:n])
        del view  # the last reference, unless the reader kept it
        try:
            self._buffer.append(0)  # BufferError: a view of it is still alive
            self._buffer.pop()
        except BufferError:
            self._buffer = bytearray(READ_SIZE)
        return chunk

    def _read_chunk(self) -> bytes | memoryview:
        # The reader's exceptions (docs/sse.md, rule READ-ERRORS).
        while True:
            try:
                if self._readinto is not None:
                    return self._read_into()
                return check_chunk(self._read(READ_SIZE), self._method) or b""
            except InterruptedError:
                continue  # retried
            except TimeoutError as err:  # socket.timeout is TimeoutError
                self._error = SseTimeoutError()
                raise self._error from err
            except OSError as err:
                self._error = SseIoError(err)
                raise self._error from err
            except http.client.IncompleteRead as err:  # a cut chunked body
                self._error = TruncatedError()
                raise self._error from err


def iter_events(source: Iterable[bytes], max_line: int = MAX_LINE) -> Iterator[SseItem]:
    """The items of an iterable of byte chunks (e.g. a `requests` `iter_content`)."""
    decoder = SseDecoder(max_line)  # max_line is checked now, not at the first next()
    return _iter_events(decoder, source)


def _iter_events(decoder: SseDecoder, source: Iterable[bytes]) -> Iterator[SseItem]:
    for chunk in source:
        yield from decoder.feed(chunk)
        if decoder._error is not None:
            raise decoder._error  # without waiting for another chunk
    decoder.close()


def aiter_events(source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> AsyncIterator[SseItem]:
    """The items of an async iterable of byte chunks (httpx `aiter_bytes`, aiohttp `iter_any`)."""
    return AsyncEvents(source, max_line)  # max_line is checked now, not at the first next()


class AsyncEvents(AsyncPending):
    """What `aiter_events` returns: an async iterator, not an async generator, so that a
    cancelled `__anext__` (`asyncio.wait_for` around it) does not end the iteration. The next
    `__anext__` goes on from the source; if the source then ends without having delivered
    anything since (an async generator source ends for good when a read of it is cancelled),
    that is `CancelledReadError`, never a clean end."""

    __slots__ = ("_chunks", "_closed", "_decoder", "_interrupted", "_source")

    def __init__(self, source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> None:
        self._enter("__init__")
        try:
            self._decoder = SseDecoder(max_line)
            self._source = source
            self._chunks: AsyncIterator[bytes] | None = None  # from the first __anext__ on
            self._pending: list[SseItem] = []  # items already decoded, in reverse order
            self._interrupted = False  # a read was cancelled and nothing arrived since
            self._closed = False
            self._error = None  # latched: the source's error or the decoder's
        finally:
            self._busy.release()

    async def _next(self) -> SseItem:
        if self._error is not None:
            raise self._error
        decoder = self._decoder
        while True:
            if self._error is not None:
                raise self._error
            if decoder._error is not None:  # after the items before it (docs/sse.md, rule LATCH)
                self._error = decoder._error
                raise self._error
            if self._closed:
                raise StopAsyncIteration
            if self._chunks is None:
                self._chunks = self._source.__aiter__()
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                if self._interrupted:
                    self._error = CancelledReadError()
                    raise self._error from None
                decoder.close()
                self._closed = True
                raise
            except Exception as err:  # the source's own error: latched, as Events latches
                self._error = err
                raise
            except BaseException:  # cancelled (or interrupted) while waiting for the source
                self._interrupted = True
                raise
            self._interrupted = False
            items = decoder.feed(chunk)
            if items:
                return self._handout(items)

    async def aclose(self) -> None:
        """Stop the iteration (as an async generator's aclose does); the source is left open."""
        self._closed = True
        self._pending = []
