"""Events and Assembler fused: the whole response in one loop, pure twin (docs/assembler.md,
"The whole response in one loop"). Items go one by one from the SSE reader to the
assembler and their events are handed out in order; the first error is latched and raised again.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from types import TracebackType
from typing import Any, Self

from ._assemble_py import Assembler
from ._errors import busy_error
from ._limits import MAX_LINE
from ._sse_py import AsyncPending, Events, Pending, aiter_events
from ._values import ChatEvent, Completion

__all__ = ["AsyncChatStream", "ChatStream", "aiter_chat"]

_NOT_ENDED = "the stream has not ended yet: iterate it to the end first"
_CLOSED = "the stream was closed before it ended"


class _Unready:
    """In place of the assembler until __init__ runs: every use of it is `error`."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        raise self.error


class _State(Pending):
    """What the sync and async streams share: the assembler, the events not yet handed out, the
    outcome (a Completion or a latched error) and the read-only state for the client. One
    caller at a time (OneCaller): a second __next__ / __anext__ / __init__ while one runs is
    refused and the first goes on."""

    __slots__ = ("_assembler", "_closed", "_completion", "_ended")
    _assembler: Assembler | _Unready  # _Unready until __init__ runs
    _pending: list[ChatEvent]
    _completion: Completion | None
    _ended: bool
    _closed: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Until __init__ runs, every property and method raises the latched uninitialised
        # error (see OneCaller), the assembler's through _Unready.
        self = super().__new__(cls, *args, **kwargs)
        assert self._error is not None  # OneCaller.__new__ set it: uninitialised_error
        self._assembler = _Unready(self._error)
        self._completion = None
        self._ended = self._closed = False
        return self

    def _reset(self) -> None:
        self._assembler = Assembler()
        self._pending = []  # the current item's events not handed out, reversed
        self._completion = None
        self._error = None
        self._ended = False  # iteration is over: it ended cleanly, or the stream was closed
        self._closed = False

    @property
    def completion(self) -> Completion:
        """The Completion once iteration has ended cleanly.

        docs/assembler.md, rule STREAM-COMPLETION.
        """
        if self._completion is not None:
            return self._completion
        if self._error is not None:
            raise self._error
        raise RuntimeError(_CLOSED if self._closed else _NOT_ENDED)

    @property
    def id(self) -> str | None:
        return self._assembler.id

    @property
    def reasoning_tokens(self) -> int:
        return self._assembler.reasoning_tokens

    @property
    def in_reasoning(self) -> bool:
        return self._assembler.in_reasoning

    @property
    def is_finished(self) -> bool:
        return self._assembler.is_finished

    def partial_arguments(self, index: int) -> Any:
        """The assembler's partial_arguments: tool call `index`'s arguments parsed so far."""
        return self._assembler.partial_arguments(index)

    def _mark_closed(self) -> bool:
        """Stop the iteration; whether this is the first close."""
        if isinstance(self._assembler, _Unready):
            raise self._assembler.error
        first = not self._closed
        self._closed = self._ended = True
        self._pending = []
        return first


class ChatStream(_State):
    """The ChatEvents of a blocking reader's response, in order; then `.completion`."""

    __slots__ = ("_next_item", "_reader")

    def __init__(self, reader: Any, max_line: int = MAX_LINE) -> None:
        self._enter("__init__")
        try:
            next_item = Events(reader, max_line).next_item
            self._reset()
            self._reader = reader
            self._next_item = next_item
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
            next_item = self._next_item
            push = self._assembler.push
            try:
                while True:
                    item = next_item()
                    # DONE ends the iteration (nothing after it is read); so does a clean end of
                    # the body, and then finish() decides: StreamClosedEarlyError without a
                    # finish reason (docs/assembler.md, rule STREAM-DONE).
                    if type(item) is not str:  # None or DONE
                        break
                    events: list[ChatEvent] = push(item)
                    if events:
                        return self._handout(events)
                completion = self._assembler.finish()
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

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncChatStream(_State, AsyncPending):
    """The same over an async byte source (httpx `aiter_bytes`, aiohttp `iter_any`)."""

    __slots__ = ("_items", "_source")

    def __init__(self, source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> None:
        self._enter("__init__")
        try:
            items = aiter_events(source, max_line)
            self._reset()
            self._source = source
            self._items = items
        finally:
            self._busy.release()

    async def _next(self) -> ChatEvent:
        # A cancelled await leaves everything as it was: the SSE reader (aiter_events) goes on
        # from the source next time, or raises CancelledReadError if the source ended for good.
        if self._error is not None:
            raise self._error
        if self._ended:
            raise StopAsyncIteration
        items = self._items
        push = self._assembler.push
        try:
            while True:
                try:
                    item = await items.__anext__()
                except StopAsyncIteration:
                    break
                if type(item) is not str:  # DONE
                    break
                events: list[ChatEvent] = push(item)
                if events:
                    return self._handout(events)
            completion = self._assembler.finish()
        except Exception as err:
            self._error = err
            raise
        self._completion = completion
        self._ended = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Close the source (if it has aclose()); iteration stops."""
        if self._mark_closed():
            close_items = getattr(self._items, "aclose", None)
            if callable(close_items):
                await close_items()
            close = getattr(self._source, "aclose", None)
            if callable(close):
                await close()

    async def __aenter__(self) -> AsyncChatStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def aiter_chat(source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> AsyncChatStream:
    """`async for event in aiter_chat(source)`, then `.completion` (docs/assembler.md)."""
    return AsyncChatStream(source, max_line)
