"""The body's bytes to events, pure twin (docs/assembler.md, "The whole response in one loop").

`Sink` is the one engine: bytes in (`feed`), the ChatEvents of each SSE item out (`take`), the
first error latched, `data: [DONE]` ending the body, `end()` the Completion. `ChatStream` and
`AsyncChatStream` adapt it to a blocking reader and an async byte source (read, feed, take, end),
as `Events` adapts `SseDecoder`, and the clients' transports feed it what arrives.
"""

from __future__ import annotations

import _thread
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any, Self

from .._errors import CancelledReadError, busy_error, uninitialised_error
from .._limits import MAX_LINE
from .._values import ChatEvent, Completion
from ._assemble_py import Assembler
from ._sse_py import AsyncPending, Events, Pending, SseDecoder
from ._stream_state import AsyncClosesOnExit, ClosesOnExit, StreamView

__all__ = ["AsyncChatStream", "ChatStream", "Sink", "aiter_chat"]


class Sink:
    """The body's bytes to ChatEvents, with no I/O. `feed` queues the bytes as they arrive
    (copied: the caller may reuse its buffers at once); `take` decodes them (SseDecoder) and
    runs the assembler over the items, in order, and stops after each item that gave events,
    so the assembler's state (`in_reasoning`, the token count) is that item's while its
    events are handed out, as the thinking budget and the streams' properties need.

    Errors never swallow what came before them: a fault in the bytes, or a failed `feed` (a
    piece that is not bytes-like, a second caller), is raised by `take` only once everything
    fed before it has been handed out, and then again by every later `take` (latched).
    `data: [DONE]` ends the body (`.done`): nothing after it is read, not even a fault.
    One caller at a time: a second `take`, `end` or `__init__` while one runs (another thread,
    a finalizer) raises RuntimeError; a second `feed` cannot raise into the arrival path that
    made it, so it is latched as that error instead. Made without `__init__`: `take` gives
    [] until a `feed`, which latches the "never initialised" error; `end` raises it.
    """

    __slots__ = (
        "_at",
        "_busy",
        "_chunks",
        "_decoder",
        "_error",
        "_fed",
        "_feed_error",
        "_items",
        "_push",
        "assembler",
        "done",
    )
    _busy: _thread.LockType
    _decoder: SseDecoder | None  # None until __init__ runs
    _push: Callable[[str], list[ChatEvent]]  # the assembler's push (unset until __init__)
    _chunks: list[bytes]  # bytes fed and not decoded yet
    _items: list[Any]  # items decoded; those before _at are taken
    _at: int
    _fed: int  # bytes fed since take last found nothing more
    _error: BaseException | None  # latched by take
    _feed_error: BaseException | None  # a failed feed, raised after what was fed before it
    assembler: Assembler  # None until __init__ runs (as the Cython twin's)
    done: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Every field has a safe value before __init__ runs (as the Cython twin's __cinit__).
        self = super().__new__(cls)
        self._busy = _thread.allocate_lock()
        self._decoder = None
        self.assembler = None  # type: ignore[assignment]
        self._clear()
        return self

    def __init__(self, max_line: int) -> None:
        if not self._busy.acquire(False):
            raise busy_error(self, "__init__")
        try:
            decoder = SseDecoder(max_line)
            self.assembler = assembler = Assembler()
            self._decoder = decoder
            self._push = assembler.push
            self._clear()
        finally:
            self._busy.release()

    def _clear(self) -> None:
        self._chunks = []
        self._items = []
        self._at = 0
        self._fed = 0
        self._error = None
        self._feed_error = None
        self.done = False

    def feed(self, pieces: Iterable[Any]) -> None:
        """Queue the bytes of `pieces` (bytes-like objects), in order."""
        if self._error is not None or self._feed_error is not None or self.done:
            return
        if not self._busy.acquire(False):  # a finalizer or a thread inside take() or feed()
            self._feed_error = busy_error(self, "feed")
            return
        try:
            if self._decoder is None:
                self._feed_error = uninitialised_error(self)
                return
            for piece in pieces:
                if self._feed_error is not None:  # a call back in while iterating failed:
                    break  # nothing after it is kept
                self._put(piece)
        except Exception as err:  # a piece that is not bytes-like, MemoryError
            self._feed_error = err
        finally:
            self._busy.release()

    def _put(self, piece: Any) -> None:
        """Queue one piece (no lock: for feed, and for the streams, which hold their own)."""
        if type(piece) is bytes:
            chunk = piece
        else:
            # Through memoryview, as the Cython twin takes a buffer: bytes(5) would be five NUL
            # bytes, memoryview(5) is the TypeError it should be, said as the Cython twin says it.
            try:
                view = memoryview(piece)
            except TypeError:
                name = type(piece).__name__
                raise TypeError(f"a bytes-like object is required, not {name!r}") from None
            chunk = bytes(view)
        if chunk:
            self._chunks.append(chunk)
            self._fed += len(chunk)

    @property
    def backlog(self) -> int:
        """Bytes fed since the consumer last took everything there was (about what the Cython
        twin counts: the bytes in its decoder not taken yet)."""
        return 0 if self._error is not None or self.done else self._fed

    def take(self) -> list[ChatEvent]:
        """The events of the next item fed so far that gives any; [] when there is none yet.
        Raises a latched error once nothing precedes it."""
        if not self._busy.acquire(False):
            raise busy_error(self, "take")
        try:
            return self._take()
        finally:
            self._busy.release()

    def _take(self) -> list[ChatEvent]:
        """take() without the lock (the streams hold their own)."""
        if self._error is not None:
            raise self._error
        if self.done:
            return []
        decoder = self._decoder
        if decoder is None:  # never initialised: [] until a feed latched that error
            if self._feed_error is not None:
                self._error = self._feed_error
                raise self._error
            return []
        items = self._items
        at = self._at
        push = self._push
        try:
            while True:
                if at < len(items):
                    item = items[at]
                    at += 1
                    if type(item) is not str:  # DONE: nothing after it is read,
                        self.done = True  # not even a fault
                        self._items = []
                        self._at = 0
                        self._chunks = []
                        return []
                    events = push(item)
                    if events:
                        self._at = at
                        if at == len(items) and not self._chunks:
                            self._fed = 0
                        return events
                elif self._chunks:
                    # Everything decoded is taken: decode what was fed since. The decoder raises
                    # its latched fault here if the last bytes it decoded had one.
                    chunks = self._chunks
                    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    self._chunks = []
                    self._items = items = decoder._feed(data)
                    at = 0
                else:
                    break
            self._items = []
            self._at = 0
            self._fed = 0
            # Nothing precedes them now: a fault in the bytes, then a failed feed (after all
            # the bytes fed before it).
            if decoder._error is not None:
                raise decoder._error
            if self._feed_error is not None:
                raise self._feed_error
        except Exception as err:
            self._error = err
            self._items = []
            self._at = 0
            self._chunks = []
            raise
        return []

    def end(self) -> Completion:
        """The body ended (cleanly, or with DONE): the Completion, or the error that says why
        there is none (a line cut: TruncatedError; no finish reason: StreamClosedEarlyError)."""
        if not self._busy.acquire(False):
            raise busy_error(self, "end")
        try:
            return self._end()
        finally:
            self._busy.release()

    def _end(self) -> Completion:
        """end() without the lock (the streams hold their own)."""
        while self._take():  # lines fed and never taken still count
            pass
        if self._decoder is None:  # (then there is no assembler either)
            raise uninitialised_error(self)
        if not self.done:
            self._decoder._close()
        return self.assembler.finish()


class _Unready:
    """In place of the sink and the assembler until __init__ runs: every use of it is `error`."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        raise self.error


class _State(StreamView, Pending):
    """What the sync and async streams share: the Sink, the events not yet handed out, the
    outcome (a Completion or a latched error) and the read-only state for the client. One
    caller at a time (OneCaller): a second __next__ / __anext__ / __init__ while one runs is
    refused and the first goes on. The Sink is the stream's own: it is used under the
    stream's lock, through its lock-free methods. What it shows is `StreamView`'s."""

    __slots__ = ("_assembler", "_closed", "_completion", "_ended", "_sink")
    _sink: Sink | _Unready  # _Unready until __init__ runs
    _assembler: Assembler | _Unready  # the sink's
    _pending: list[ChatEvent]
    _completion: Completion | None
    _ended: bool
    _closed: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Until __init__ runs, every property and method raises the latched uninitialised
        # error (see OneCaller), the sink's and the assembler's through _Unready.
        self = super().__new__(cls, *args, **kwargs)
        assert self._error is not None  # OneCaller.__new__ set it: uninitialised_error
        self._sink = self._assembler = _Unready(self._error)
        self._completion = None
        self._ended = self._closed = False
        return self

    def _reset(self, sink: Sink) -> None:
        self._sink = sink
        self._assembler = sink.assembler
        self._pending = []  # the current item's events not handed out, reversed
        self._completion = None
        self._error = None
        self._ended = False  # iteration is over: it ended cleanly, or the stream was closed
        self._closed = False

    def _mark_closed(self) -> bool:
        """Stop the iteration; whether this is the first close."""
        if isinstance(self._sink, _Unready):
            raise self._sink.error
        first = not self._closed
        self._closed = self._ended = True
        self._pending = []
        return first


class ChatStream(_State, ClosesOnExit):
    """The ChatEvents of a blocking reader's response, in order; then `.completion`."""

    __slots__ = ("_read", "_reader")

    def __init__(self, reader: Any, max_line: int = MAX_LINE) -> None:
        self._enter("__init__")
        try:
            sink = Sink(max_line)
            # Events' reading: the reader's method chosen once, what it returns checked, its
            # errors mapped (docs/sse.md, rules READER and READ-ERRORS); its decoder is unused.
            read = Events(reader, max_line)._read_chunk
            self._reset(sink)
            self._reader = reader
            self._read = read
        finally:
            self._busy.release()

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> ChatEvent:
        if self._pending:
            return self._pending.pop()
        # Nothing is pending while a call runs, so a second caller always gets here. (The
        # lock is taken inline, not through _enter: this runs once per event.)
        busy = self._busy
        if not busy.acquire(False):
            raise busy_error(self, "__next__")
        try:
            if self._error is not None:
                raise self._error  # errors are latched (docs/assembler.md, rule STREAM-LATCH)
            if self._ended:
                raise StopIteration
            sink: Sink = self._sink  # type: ignore[assignment]  # _error is set until __init__
            take = sink._take
            try:
                while True:
                    events = take()
                    if events:
                        return self._handout(events)
                    # DONE ends the iteration (nothing after it is read); so does a clean end of
                    # the body, and then end() decides: TruncatedError for a cut line,
                    # StreamClosedEarlyError without a finish reason (docs/assembler.md, rule
                    # STREAM-DONE).
                    if sink.done:
                        break
                    chunk = self._read()
                    if not chunk:
                        break
                    sink._put(chunk)
                completion = sink._end()
            except Exception as err:
                self._error = err
                raise
            self._completion = completion
            self._ended = True
            raise StopIteration
        finally:
            busy.release()

    def close(self) -> None:
        """Close the reader (if it has close()); iteration stops."""
        if self._mark_closed():
            close = getattr(self._reader, "close", None)
            if callable(close):
                close()


class AsyncChatStream(_State, AsyncPending, AsyncClosesOnExit):
    """The same over an async byte source (httpx `aiter_bytes`, aiohttp `iter_any`)."""

    __slots__ = ("_chunks", "_interrupted", "_source")

    def __init__(self, source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> None:
        self._enter("__init__")
        try:
            sink = Sink(max_line)
            self._reset(sink)
            self._source = source
            self._chunks: AsyncIterator[bytes] | None = None  # from the first __anext__ on
            self._interrupted = False  # a read was cancelled and nothing arrived since
        finally:
            self._busy.release()

    async def _next(self) -> ChatEvent:
        if self._error is not None:
            raise self._error
        if self._ended:
            raise StopAsyncIteration
        sink: Sink = self._sink  # type: ignore[assignment]  # _error is set until __init__
        try:
            while True:
                events = sink._take()
                if events:
                    return self._handout(events)
                if sink.done:  # DONE ends the iteration: nothing after it is read
                    break
                if self._chunks is None:
                    self._chunks = self._source.__aiter__()
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    # A cancelled read may have ended an async generator source for good: its
                    # end then is not the end of the body (as aiter_events, in both twins).
                    if self._interrupted:
                        raise CancelledReadError() from None
                    break
                except Exception:  # the source's own error: latched below
                    raise
                except BaseException:  # cancelled while waiting: the next call goes on
                    self._interrupted = True
                    raise
                self._interrupted = False
                sink._put(chunk)
            completion = sink._end()
        except Exception as err:
            self._error = err
            raise
        self._completion = completion
        self._ended = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Close the source (if it has aclose()); iteration stops."""
        if self._mark_closed():
            close = getattr(self._source, "aclose", None)
            if callable(close):
                await close()


def aiter_chat(source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> AsyncChatStream:
    """`async for event in aiter_chat(source)`, then `.completion` (docs/assembler.md)."""
    return AsyncChatStream(source, max_line)
