# Strategy: a thin driver of the sans-I/O core (_client_core): a stream carries out the core's
# commands (connect and send, wait for bytes, sleep, wait for a turn) and hands out the events the
# core reads from the connection. Every rule is the core's. This file is the one source of both
# drivers: _client.py is generated from it by tools/unasync.py (`await` dropped, the asyncio
# primitives swapped for blocking ones), and a test fails when that copy is stale. The stream
# holds no generator of its own and nothing refers back to it, so a stream dropped without
# close() is freed at once and its finalizer gives back the slot and the connection.
"""The asyncio client: `AsyncClient(cfg).stream(req)` and `await .complete(req)`.

Both clients follow the same rules, give the same events and raise the same errors (see
`RequestCore`); only the waiting is `await`,
and cancelling the task closes the connection.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, ClassVar

from . import _transport
from ._body import build_body
from ._client_core import (
    EMBED_PATH,
    MAX_SLOTS_BODY,
    RERANK_PATH,
    CallCore,
    Close,
    Connect,
    Core,
    EmbedPlan,
    Emit,
    Phase,
    Receive,
    RequestCore,
    Sleep,
    StreamState,
    WaitTurn,
    not_served,
    read_ranked,
    read_slots,
    rerank_body,
    text_of,
)
from ._config import Config, Limits
from ._deliver import async_deliver
from ._errors import InferError, StreamClosedEarlyError
from ._transport import SELECTED, Engine, async_run_all, async_sleep_until
from ._values import ChatEvent, ChatRequest, Completion, Embeddings, Ranked

__all__ = ["AsyncClient", "AsyncClientStream"]


class AsyncClient:
    """A llama-server client for asyncio: standard library only (uvloop works too).

    `stream(req)` gives a stream to iterate for ChatEvents (then `.completion`);
    `complete(req, on_event=None)` does that loop for you. One connection per request. The
    rules (the per-slot order, waiting for a slot or a model load, retries, the thinking
    budget, the deadline of each request) and which error ends a request are those of
    `RequestCore` (docs/client.md). Once the stream has started nothing is retried, and the
    reader's errors map to:

    =========================================  ====================================
    `SseTimeoutError` (no byte for             `StalledError`
    `stall_timeout`; `:` pings count)
    `TruncatedError` (body cut inside a line,  `StreamClosedEarlyError` (the reader's
    or the chunked encoding cut)               error is `__cause__`)
    `SseIoError` (connection reset, ...)       `StreamClosedEarlyError` (ditto)
    `LineTooLongError`, `NotUtf8Error`         `ProtocolError` (ditto)
    an `{"error": ...}` payload                `HttpError` with the server's code
    no finish reason before the end            `StreamClosedEarlyError`
    =========================================  ====================================
    """

    _engine: ClassVar[Engine] = SELECTED
    _parallel: ClassVar[bool] = True  # the requests of one embed call run side by side

    def __init__(self, cfg: Config) -> None:
        if not isinstance(cfg, Config):
            raise TypeError(f"{type(self).__name__} needs a Config, not {type(cfg).__name__}")
        self._cfg = cfg
        self._core = Core(cfg, sink=self._engine.Sink)
        self._target = self._core.target
        self._turns = _transport.AsyncTurns()

    @property
    def config(self) -> Config:
        return self._cfg

    def stream(self, req: ChatRequest) -> AsyncClientStream:
        """The answer to `req` as a stream to iterate (`with` / `async with`); the body is
        built now, so a bad request raises ValueError/TypeError here, before anything is sent."""
        return AsyncClientStream(self, req, build_body(self._cfg, req))

    async def complete(
        self,
        req: ChatRequest,
        on_event: Callable[[ChatEvent], Awaitable[object] | object] | None = None,
    ) -> Completion:
        """Stream `req` to its end, handing each event to `on_event`; the Completion.

        The asyncio client awaits what `on_event` returns when it is awaitable, and when it is
        a plain function (or None) hands it the body's events from the event loop's arrival
        callback, without waking this task for each one (docs/client.md, rule HANDOUT)."""
        async with self.stream(req) as stream:
            return await async_deliver(stream, on_event)

    async def embed(
        self, texts: Sequence[str], *, model: str | None = None, limits: Limits | None = None
    ) -> Embeddings:
        """The embedding of each of `texts`, in order, as one float32 buffer (`Embeddings`).

        POST /v1/embeddings (llama-server started with `--embeddings`) in batches of
        `limits.embed_batch` texts, as many at a time as the server has slots, each asking
        for base64 float32, decoded straight into the one buffer (a server that answers
        lists of numbers is read too). A vector of the wrong length, a value that is not
        finite, an index missing or repeated: ProtocolError naming the text. A server that
        does not serve embeddings: HttpError saying to start it with `--embeddings`.
        `model`: the `model` field (InferConfig.model when None); `limits`: this call's."""
        plan = EmbedPlan(self._core, texts, model, limits)
        vectors = self._engine.Vectors(plan.n)

        async def batch(first: int, count: int) -> None:
            call = CallCore(
                self._core, "POST", EMBED_PATH, plan.body(first, count), limits=plan.limits
            )
            status, parts = await self._call(call)
            if status != 200:
                raise not_served(status, parts, "--embeddings", "embeddings")
            vectors.add(parts, first, count)

        width = await self._width(plan) if self._parallel and len(plan.batches) > 1 else 1
        await async_run_all([functools.partial(batch, f, c) for f, c in plan.batches], width)
        result: Embeddings = vectors.finish()
        return result

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        model: str | None = None,
    ) -> tuple[Ranked, ...]:
        """The `documents` ranked against `query` by the server (`POST /rerank`, llama-server
        started with `--reranking` and a reranker model): `Ranked(index, score)` in the
        server's order, the best first; `top_n`: at most that many. An index that is not
        one of the documents or comes twice, a score that is not a finite number:
        ProtocolError; a server that does not rerank: HttpError saying so."""
        body, count = rerank_body(self._core, query, documents, top_n, model)
        status, parts = await self._call(CallCore(self._core, "POST", RERANK_PATH, body))
        if status != 200:
            raise not_served(status, parts, "--reranking", "reranking")
        return read_ranked(b"".join(parts), count, top_n)

    async def _width(self, plan: EmbedPlan) -> int:
        """Requests of one call at once: the server's slot count (GET /slots, once per
        client; one when the server does not say)."""
        core = self._core
        if core.slot_count is None:
            ask = CallCore(core, "GET", "/slots", None, MAX_SLOTS_BODY)
            try:
                status, parts = await self._call(ask)
                if status == 200:
                    core.slot_count = len(read_slots(text_of(parts)))
            except (OSError, InferError):
                pass
        return plan.width(core.slot_count)

    async def _call(self, call: CallCore) -> tuple[int, list[bytes]]:
        """Carry out a whole-answer request's commands: (status, the body's pieces). Its
        connections are closed however it ends."""
        phase = call.phases()
        conns: list[Any] = []
        result: Any = None
        failure: BaseException | None = None
        try:
            while True:
                try:
                    cmd = phase.send(result) if failure is None else phase.throw(failure)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                result = failure = None
                kind = type(cmd)
                try:
                    if kind is Connect:
                        conn = await self._engine.AsyncConnection.open(self._target, cmd.until)
                        conns.append(conn)
                        conn.send(cmd.request, cmd.until)
                        result = conn
                    elif kind is Receive:
                        await cmd.conn.receive(cmd.until)
                    elif kind is Close:
                        cmd.conn.close()
                    elif kind is Sleep:
                        await async_sleep_until(cmd.until)
                    # Emit (Retrying, Waiting): an embed or rerank call has no events to show
                except OSError as err:
                    failure = err
        finally:
            for conn in conns:
                conn.close()

    async def aclose(self) -> None:
        """Nothing to release: every request has its own connection, closed when it ends."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._target.url!r})"


class AsyncClientStream(StreamState):
    """One request's events (from `AsyncClient.stream`): enter it, iterate it, then read
    `.completion`. `.id`, `.reasoning_tokens`, `.in_reasoning`, `.is_finished` follow the
    stream as it arrives. Leaving the block, `aclose()`, dropping the stream, or cancelling
    the task closes the connection at once (the server then frees the slot)."""

    def __init__(self, client: AsyncClient, req: ChatRequest, body: str) -> None:
        self._closed = True  # until __init__ is through: the finalizer has nothing to do
        self._engine = client._engine
        self._turns = client._turns
        self._core = RequestCore(client._core, req, body.encode("utf-8"))
        self._phase: Phase[bool] | None = None  # the core's phases, once entered
        self._conns: list[Any] = []  # every connection this request has open
        self._conn: Any = None  # the chat's, once the stream has begun
        self._chat: Any = None
        self._batch: list[ChatEvent] = []  # the rest of an item's events, reversed
        self._watch = self._core.watch_budget
        self._completion: Completion | None = None
        self._error: BaseException | None = None
        self._entered = False
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
            if self._conn is None:  # before the first byte: the core's phases
                event = await self._before_stream()
                if event is not None:
                    return event
            # The stream: the core reads the next item's events from the connection; the
            # task sleeps only when there are none yet, one wake-up per arrival.
            core = self._core
            while True:
                events = core.next_events()
                if events:
                    if self._watch:
                        step = core.budget()
                        if step is not None:
                            events += await self._side(step)
                    break
                if events is None:
                    self._completion = core.completion
                    raise StopAsyncIteration
                await self._conn.pump()
        except StopAsyncIteration:
            self._closed = True
            self._release()
            raise
        except Exception as err:
            self._release()
            if self._closed:  # closed from elsewhere: the failed read is that close
                raise StopAsyncIteration from None
            self._error = err
            raise
        except asyncio.CancelledError:
            # Cancelling closes the connection; the stream does not pass for a finished one.
            self._release()
            self._error = StreamClosedEarlyError("the read was cancelled")
            raise
        if len(events) == 1:
            return events[0]
        events.reverse()
        self._batch = events
        return events.pop()

    async def aclose(self) -> None:
        """Close the connection now and give up the slot; iteration stops. Idempotent; the
        sync client's may be called from another thread to end a read that is blocked."""
        self._closed = True
        self._core.closed = True
        self._release()

    def __del__(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    # --- the driver ---------------------------------------------------------------------------

    def _enter(self) -> None:
        # Joining the slot's line when the stream is entered (or first iterated) keeps the
        # order of `with client.stream(...)` across threads and tasks.
        if not self._entered and not self._closed:
            self._entered = True
            self._core.enter()

    def _release(self) -> None:
        """Close every connection and leave the slot's line (idempotent)."""
        conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()
        self._turns.wake(self._core.leave())

    async def _before_stream(self) -> ChatEvent | None:
        """Carry out the core's phases up to the first byte: an event to hand out, or None once
        the stream has begun."""
        phase = self._phase
        if phase is None:
            self._enter()
            phase = self._phase = self._core.phases()
        result: Any = None
        failure: BaseException | None = None
        while True:
            if self._closed:  # closed from elsewhere: what the core would do next is moot
                raise StopAsyncIteration
            try:
                cmd = phase.send(result) if failure is None else phase.throw(failure)
            except StopIteration as stop:
                self._phase = None
                if not stop.value or self._closed:  # closed while in line
                    raise StopAsyncIteration from None
                self._start_stream()
                return None
            if type(cmd) is Emit:
                return cmd.event
            result = failure = None
            try:
                result = await self._carry(cmd)
            except OSError as err:
                failure = err

    async def _carry(self, cmd: Any) -> Any:
        """One of the core's commands (not Emit); its result."""
        kind = type(cmd)
        if kind is Receive:
            await cmd.conn.receive(cmd.until)
        elif kind is Connect:
            target = self._core.core.target
            conn = await self._engine.AsyncConnection.open(target, cmd.until)
            self._conns.append(conn)
            if self._closed:  # closed from elsewhere meanwhile
                conn.close()
                raise ConnectionResetError("the stream was closed")
            conn.send(cmd.request, cmd.until)
            return conn
        elif kind is Close:
            cmd.conn.close()
            if cmd.conn in self._conns:
                self._conns.remove(cmd.conn)
        elif kind is Sleep:
            await async_sleep_until(cmd.until)
        elif kind is WaitTurn:
            await self._turns.wait(cmd)
        else:  # pragma: no cover - a command this driver does not know
            raise AssertionError(f"unknown command {cmd!r}")
        return None

    async def _side(self, phase: Phase[Any]) -> list[ChatEvent]:
        """Carry out a phase to its end (the thinking budget's request): its events."""
        events: list[ChatEvent] = []
        result: Any = None
        failure: BaseException | None = None
        while True:
            try:
                cmd = phase.send(result) if failure is None else phase.throw(failure)
            except StopIteration:
                return events
            result = failure = None
            if type(cmd) is Emit:
                events.append(cmd.event)
                continue
            try:
                result = await self._carry(cmd)
            except OSError as err:
                failure = err

    def _start_stream(self) -> None:
        core = self._core
        conn = self._conn = core.conn
        sink = core.start_stream()
        self._chat = sink.assembler
        conn.start_stream(sink, self._core.core.limits.stall_timeout)
