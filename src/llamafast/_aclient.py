# Strategy: a thin asyncio driver of the sans-I/O core (_client_core): one async generator per
# request carries out the core's commands over a BufferedProtocol of its own (_transport: the
# body is parsed in the arrival callback, one wake-up of the task per arrival, one stall timer
# per stream) and yields the ChatEvents; a request waiting in its slot's line sleeps on a
# future of its own, woken when a request ahead of it leaves.
"""The asyncio client: `AsyncClient(cfg).stream(req)` and `await .complete(req)`.

The same rules, events and errors as `Client` (see `RequestCore`); only the waiting is `await`,
and cancelling the task closes the connection.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from ._body import build_body
from ._client_core import (
    AwaitHead,
    CloseResponse,
    Core,
    Emit,
    Fetch,
    Head,
    NotHttp,
    Open,
    Phase,
    ReadBody,
    RequestCore,
    Sleep,
    StreamState,
    Ticket,
    WaitTurn,
)
from ._config import Config
from ._errors import SseError, SseIoError, SseTimeoutError, StreamClosedEarlyError
from ._transport import AsyncConnection, HttpParseError, Sink, request_bytes
from ._values import ChatEvent, ChatRequest, Completion

if TYPE_CHECKING:
    from ._assemble_py import Assembler

__all__ = ["AsyncClient", "AsyncClientStream"]

_CHAT_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


class AsyncClient:
    """The asyncio twin of `Client` (same rules, events and errors; see `Client`).

    Standard library only (asyncio; uvloop works too). One connection per request, so there is
    nothing to close; `aclose()` and `async with AsyncClient(cfg) as client` are kept for code
    that closes its clients. Use one client from one event loop at a time.
    """

    def __init__(self, cfg: Config) -> None:
        if not isinstance(cfg, Config):
            raise TypeError(f"AsyncClient needs a Config, not {type(cfg).__name__}")
        self._cfg = cfg
        self._core = Core(cfg)
        self._target = self._core.target

    @property
    def config(self) -> Config:
        return self._cfg

    def stream(self, req: ChatRequest) -> AsyncClientStream:
        """The answer to `req`: `async with client.stream(req) as s: async for ev in s: ...`.
        The body is built now, so a bad request raises ValueError/TypeError here."""
        return AsyncClientStream(self, req, build_body(self._cfg, req))

    async def complete(
        self,
        req: ChatRequest,
        on_event: Callable[[ChatEvent], Awaitable[object] | object] | None = None,
    ) -> Completion:
        """Stream `req` to its end, handing each event to `on_event` (awaited if it returns an
        awaitable); the Completion.

        Cheaper than `async for` over `stream(req)` when `on_event` is a plain function (or
        None): once the body streams, its events are handed to `on_event` from the event
        loop's arrival callback, as the bytes arrive, without waking this task for each one
        (so not inside this task: `asyncio.current_task()` is None there; context variables
        are the caller's). An awaitable it returns is awaited before anything more is handed
        out; a coroutine function, or a thinking budget, takes the ordinary path."""
        async with self.stream(req) as stream:
            return await stream._complete(on_event)

    async def aclose(self) -> None:
        """Nothing to release: every request has its own connection, closed when it ends."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient({self._target.url!r})"

    # --- what the driver carries out for the core ---------------------------------------------

    def _request(self, method: str, path: str, body: bytes | None, extra: dict[str, str]) -> bytes:
        headers = dict(extra)
        headers.update(self._core.headers)
        return request_bytes(method, self._target, path, body, headers)

    async def _fetch(self, cmd: Fetch) -> tuple[int, str]:
        """A small request on its own connection, its body read whole up to `cmd.limit`."""
        wait = self._cfg.limits.connect_timeout  # to connect, for the head, for each piece
        conn = await AsyncConnection.open(self._target, wait)
        try:
            extra = {"Content-Type": "application/json"} if cmd.body is not None else {}
            conn.send(self._request(cmd.method, self._target.path(cmd.path), cmd.body, extra))
            if not await conn.read_head(conn.loop.time() + wait):
                raise TimeoutError(f"no answer to {cmd.method} {cmd.path} within {wait:g} s")
            body = await conn.read_whole(cmd.limit, wait)
            return conn.parser.status, body.decode("utf-8", "replace")
        except HttpParseError as err:
            raise NotHttp(str(err)) from err
        finally:
            conn.close()

    async def _wait_turn(self, cmd: WaitTurn) -> None:
        ticket = cmd.ticket
        if ticket.moves != cmd.seen:
            return
        waker = ticket.waker = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout_at(_loop_time(cmd.until)):
                await waker
        except TimeoutError:
            pass
        finally:
            ticket.waker = None


class _Handout:
    """`AsyncClient.complete`'s delivery from the arrival callback: each item's events go to
    `on_event` as soon as they are decoded. It stops (`running` false, the task woken) at the
    body's end or failure (left latched in the Sink or on the connection, for the task to
    raise as iteration does) and when `on_event` raises (`fault`); it pauses when `on_event`
    returns an awaitable (`pending`; the task awaits it, then calls this again)."""

    __slots__ = ("conn", "context", "fault", "on_event", "pending", "rest", "running", "sink")

    def __init__(
        self,
        conn: AsyncConnection,
        sink: Sink,
        on_event: Callable[[ChatEvent], Awaitable[object] | object] | None,
    ) -> None:
        self.conn = conn
        self.sink = sink
        self.on_event = on_event
        self.context = contextvars.copy_context()  # the caller's context variables
        self.running = True
        self.pending: Awaitable[object] | None = None
        self.fault: BaseException | None = None
        self.rest: list[ChatEvent] = []  # an item's events not handed out yet, reversed

    def __call__(self) -> None:
        conn, sink, on_event = self.conn, self.sink, self.on_event
        while True:
            rest = self.rest
            if rest:
                event = rest.pop()
            else:
                try:
                    events = sink.take()
                except Exception:  # latched in the Sink: the task raises it
                    self._stop()
                    return
                if not events:
                    break
                if on_event is None:
                    continue
                if len(events) == 1:
                    event = events[0]
                else:
                    events.reverse()
                    event = events.pop()
                    self.rest = events
            assert on_event is not None
            try:
                result = self.context.run(on_event, event)
            except Exception as err:
                self.fault = err
                self._stop()
                return
            if result is not None and inspect.isawaitable(result):
                self.pending = result
                conn.deliver = None  # until the task has awaited it
                conn._wake()
                return
        if sink.done or conn.parser.done:
            self._stop()

    def _stop(self) -> None:
        self.running = False
        self.conn.deliver = None
        self.conn._wake()


def _loop_time(monotonic_at: float) -> float:
    """A time.monotonic() instant on the running loop's clock."""
    return asyncio.get_running_loop().time() + (monotonic_at - time.monotonic())


def _wake(moved: list[Ticket]) -> None:
    for ticket in moved:
        waker = ticket.waker
        if waker is not None and not waker.done():
            waker.set_result(None)


class AsyncClientStream(StreamState):
    """One request's events: `async with` and `async for` (from `AsyncClient.stream`).

    Then `.completion`; `.id`, `.reasoning_tokens`, `.in_reasoning`, `.is_finished` follow the
    stream. Leaving the block, `aclose()`, or cancelling the task closes the connection at once.
    """

    def __init__(self, client: AsyncClient, req: ChatRequest, body: str) -> None:
        self._client = client
        self._core = RequestCore(client._core, req, body.encode("utf-8"))
        self._entered = False
        self._gen: AsyncGenerator[ChatEvent, None] = self._run()
        self._chat: Assembler | None = None
        self._conn: AsyncConnection | None = None
        self._sink: Sink | None = None
        self._batch: list[ChatEvent] = []  # the rest of an item's events, reversed
        self._watch = self._core.watch_budget
        self._completion: Completion | None = None
        self._error: BaseException | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncClientStream:
        self._enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncClientStream:
        return self

    async def __anext__(self) -> ChatEvent:
        batch = self._batch
        if batch:
            return batch.pop()
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StopAsyncIteration
        try:
            if self._sink is None:  # before the first byte: the core's phases
                self._enter()
                try:
                    return await self._gen.__anext__()
                except StopAsyncIteration:
                    if not self._began or self._closed:
                        raise
                self._start_stream()
            # The stream: one item's events at a time, with no generator or coroutine in
            # between; the task sleeps only when the sink has nothing, one wake-up per arrival.
            sink, conn = self._sink, self._conn
            if conn is None or sink is None:
                raise ConnectionResetError("the connection was closed")
            try:
                while True:
                    events = sink.take()
                    if events:
                        if self._watch:
                            events += await self._budget()
                        break
                    if sink.done or conn.parser.done:
                        self._end(sink)
                    if conn.stalled:
                        raise SseTimeoutError()
                    error = conn.error
                    if error is not None:
                        if isinstance(error, OSError):
                            raise SseIoError(error) from error
                        raise error
                    if conn.eof:
                        conn.parser.eof()
                        self._end(sink)
                    if conn.paused:
                        conn.resume()
                    waiter = conn.waiter = conn.loop.create_future()
                    await waiter
            except (SseError, ValueError) as err:
                raise self._core.stream_error(err) from err
        except StopAsyncIteration:
            self._closed = True
            self._release()
            raise
        except Exception as err:
            self._release()
            if self._closed:  # closed by another task: the failed read is that close
                raise StopAsyncIteration from None
            self._error = err
            raise
        except asyncio.CancelledError:
            # Cancelling closes the connection; the stream does not pass for a finished one.
            self._release()
            self._error = StreamClosedEarlyError("the task reading it was cancelled")
            raise
        if len(events) == 1:
            return events[0]
        events.reverse()
        self._batch = events
        return events.pop()

    async def _complete(
        self, on_event: Callable[[ChatEvent], Awaitable[object] | object] | None
    ) -> Completion:
        """`AsyncClient.complete`: the events to `on_event`, then the Completion. Once the body
        streams, a plain function gets the events from the arrival callback (a `_Handout`);
        this task wakes only when that must stop or pause, and the ordinary iteration then
        gives the end or the failure exactly as `async for` would."""

        async def hand(event: ChatEvent) -> None:
            if on_event is not None:
                result = on_event(event)
                if inspect.isawaitable(result):
                    await result

        fast = not self._watch and not inspect.iscoroutinefunction(on_event)
        async for event in self:
            await hand(event)
            if fast and self._sink is not None:
                break  # the body has begun: what comes next is handed out as it arrives
        else:
            return self.completion
        while self._batch:  # the rest of the item that gave the first event
            await hand(self._batch.pop())
        conn, sink = self._conn, self._sink
        if conn is not None and sink is not None:
            handout = _Handout(conn, sink, on_event)
            conn.deliver = handout
            try:
                handout()  # what came with the first event
                while True:
                    pending = handout.pending
                    if pending is not None:  # delivery waits for it, whatever came meanwhile
                        handout.pending = None
                        await pending
                        conn.deliver = handout
                        handout()
                        continue
                    if not handout.running or conn.eof or conn.stalled or conn.error:
                        break
                    await conn.wait()  # reads again if a backlog grew meanwhile
            finally:
                conn.deliver = None
            if handout.fault is not None:
                raise handout.fault
            self._batch = handout.rest
        async for event in self:  # the end, or the failure, as iteration gives them
            await hand(event)
        return self.completion

    async def aclose(self) -> None:
        """Close the connection now and give up the slot; iteration stops. Idempotent."""
        self._closed = True
        self._core.closed = True
        self._release()
        try:
            await self._gen.aclose()
        except RuntimeError:  # being iterated by another task: the closed connection ends it
            pass

    # --- the driver -----------------------------------------------------------------------

    def _enter(self) -> None:
        if not self._entered and not self._closed:  # join now, before any await: in order
            self._entered = True
            self._core.enter()

    def _release(self) -> None:
        """Close the connection and leave the slot's line (idempotent)."""
        self._close_response()
        _wake(self._core.leave())

    async def _run(self) -> AsyncGenerator[ChatEvent, None]:
        """The phases up to the first byte; the connection stays open for the stream."""
        began = False
        try:
            async for event in self._carry(self._core.phases()):
                yield event
            began = True
        finally:
            if not began:
                self._release()

    _began = False

    async def _carry(self, phase: Phase[Any]) -> AsyncIterator[ChatEvent]:
        """Carry out the core's commands: yield its events; its result goes to `_began`."""
        client = self._client
        send: Any = None
        throw: BaseException | None = None
        while True:
            try:
                cmd = phase.send(send) if throw is None else phase.throw(throw)
            except StopIteration as stop:
                if stop.value is not None:
                    self._began = bool(stop.value)
                return
            send = throw = None
            kind = type(cmd)
            if kind is Emit:
                yield cmd.event
                continue
            try:
                if kind is Fetch:
                    send = await client._fetch(cmd)
                elif kind is Sleep:
                    await asyncio.sleep(max(0.0, cmd.until - time.monotonic()))
                elif kind is WaitTurn:
                    await client._wait_turn(cmd)
                elif kind is Open:
                    send = await self._open(cmd)
                elif kind is AwaitHead:
                    send = await self._await_head(cmd.until)
                elif kind is ReadBody:
                    send = await self._read_body(cmd.limit)
                elif kind is CloseResponse:
                    self._close_response()
                else:  # pragma: no cover - a command this driver does not know
                    raise AssertionError(f"unknown command {cmd!r}")
            except (OSError, NotHttp) as err:  # TimeoutError is an OSError too
                throw = err

    async def _open(self, cmd: Open) -> Head | None:
        client = self._client
        conn = await AsyncConnection.open(client._target, client._cfg.limits.connect_timeout)
        self._conn = conn
        conn.send(client._request("POST", cmd.path, cmd.body, _CHAT_HEADERS))
        return await self._await_head(cmd.until)

    async def _await_head(self, until: float) -> Head | None:
        conn = self._conn
        if conn is None:
            raise ConnectionResetError("the connection was closed")
        try:
            if not await conn.read_head(_loop_time(until)):
                return None
        except HttpParseError as err:
            raise NotHttp(str(err)) from err
        parser = conn.parser
        return Head(parser.status, parser.headers.get("content-type", ""))

    async def _read_body(self, limit: int) -> str:
        conn = self._conn
        try:
            wait = self._client._cfg.limits.stall_timeout
            data = b"" if conn is None else await conn.read_whole(limit, wait)
        except (OSError, ValueError, SseError):  # the body of an error answer is a courtesy
            data = b""
        return data.decode("utf-8", "replace")

    def _start_stream(self) -> None:
        conn = self._conn
        assert conn is not None
        limits = self._client._cfg.limits
        sink = self._sink = Sink(limits.max_line)
        self._chat = sink.assembler
        conn.start_stream(sink, limits.stall_timeout)

    def _end(self, sink: Sink) -> NoReturn:
        """The body has ended: the Completion, or the error that says why there is none."""
        self._completion = self._core.finish(sink.end())
        raise StopAsyncIteration

    async def _budget(self) -> list[ChatEvent]:
        """The thinking budget after an item: the reasoning_end request, ThinkingCapped."""
        chat = self._sink.assembler  # type: ignore[union-attr]
        step = self._core.budget_step(chat.in_reasoning, chat.reasoning_tokens, chat.id)
        if step is None:
            return []
        return [event async for event in self._carry(step)]

    def _close_response(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
