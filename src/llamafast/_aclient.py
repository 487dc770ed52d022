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
import dataclasses
import functools
import ssl
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeVar

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
    ServerCall,
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
from ._engine._embeddings import Embeddings
from ._errors import InferError, StreamClosedEarlyError
from ._messages import chat_request
from ._transport import SELECTED, Engine, async_run_all, async_sleep_until
from ._values import (
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Completion,
    ModelInfo,
    Ranked,
    ServerProps,
)

T = TypeVar("T")

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

    def __init__(self, cfg: Config, *, ssl_context: ssl.SSLContext | None = None) -> None:
        """`ssl_context`: what an https:// server is checked against (else a context trusting
        `cfg.infer.ca_file`, else the system's CAs)."""
        if not isinstance(cfg, Config):
            raise TypeError(f"{type(self).__name__} needs a Config, not {type(cfg).__name__}")
        self._cfg = cfg
        self._ssl = _transport.client_ssl_context(cfg.infer.ca_file, ssl_context)
        self._core = Core(cfg, sink=self._engine.Sink)
        self._target = self._core.target
        self._turns = _transport.AsyncTurns()
        # The streams not yet dropped, so that closing the client closes them (a stream
        # that ended has nothing left to close; its entry goes with it).
        self._streams: weakref.WeakSet[AsyncClientStream] = weakref.WeakSet()
        self._lock = threading.Lock()  # the set, across threads (held for no I/O)
        self._closed = False

    @property
    def config(self) -> Config:
        return self._cfg

    def stream(
        self,
        req: ChatRequest | Sequence[ChatMessage | Mapping[str, Any]],
        /,
        *,
        limits: Limits | None = None,
        **fields: Any,
    ) -> AsyncClientStream:
        """The answer as a stream to iterate (`with` / `async with`). `req` is a ChatRequest,
        or the messages (the library's values or openai-shaped dicts) with the request's
        fields as keywords (ChatRequest's; `slot` None unless given). `limits` bounds this
        request instead of the client's Limits. The body is built now, so a bad request raises
        ValueError/TypeError here, before anything is sent."""
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed: make a new one")
        req = chat_request(req, fields)
        cfg = self._cfg
        if limits is not None:
            if not isinstance(limits, Limits):
                raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
            cfg = dataclasses.replace(cfg, limits=limits)
        stream = AsyncClientStream(self, req, build_body(cfg, req), limits)
        with self._lock:
            self._streams.add(stream)
        return stream

    async def complete(
        self,
        req: ChatRequest | Sequence[ChatMessage | Mapping[str, Any]],
        /,
        on_event: Callable[[ChatEvent], Awaitable[object] | object] | None = None,
        *,
        limits: Limits | None = None,
        **fields: Any,
    ) -> Completion:
        """Stream the request to its end, handing each event to `on_event`; the Completion.
        `req`, `limits` and `fields` as for `stream`.

        The asyncio client awaits what `on_event` returns when it is awaitable, and when it is
        a plain function (or None) hands it the body's events from the event loop's arrival
        callback, without waking this task for each one (docs/client.md, rule HANDOUT)."""
        async with self.stream(req, limits=limits, **fields) as stream:
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
            status, parts = await self._call(call.phases())
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
        status, parts = await self._call(CallCore(self._core, "POST", RERANK_PATH, body).phases())
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
                status, parts = await self._call(ask.phases())
                if status == 200:
                    core.slot_count = len(read_slots(text_of(parts)))
            except (OSError, InferError):
                pass
        return plan.width(core.slot_count)

    async def props(self) -> ServerProps:
        """What `GET /props` says (context size, model, modalities, slot count), asked once and
        kept until the client sees the server may have restarted (a connection refused or
        reset, a 503, a model loading, another slot count or context size than it said)."""
        return await self._call(ServerCall(self._core).props())

    async def count_tokens(
        self, req: ChatRequest | Sequence[ChatMessage | Mapping[str, Any]], /, **fields: Any
    ) -> int:
        """The prompt tokens the server would count for `req` (a ChatRequest, or a list of
        messages with ChatRequest's keywords as `fields`): POST
        /v1/chat/completions/input_tokens, or on a server without it /apply-template then
        /tokenize. The body is `stream(req)`'s, so the count is the one the chat would make."""
        request = chat_request(req, fields)
        body = build_body(self._cfg, request).encode("utf-8")
        return await self._call(ServerCall(self._core).count_tokens(body, request.model))

    async def models(self) -> tuple[ModelInfo, ...]:
        """The models of a router-mode server (`GET /models`) with their state ("loaded",
        "loading", "unloaded", ...); a server with one model lists it, "loaded"."""
        return await self._call(ServerCall(self._core).models())

    async def load_model(self, id: str) -> None:
        """Load model `id` on a router-mode server and wait until it is loaded (at most
        `load_timeout`: LoadTimeoutError). One already loaded is no error; an unknown one is
        ValueError naming it."""
        await self._call(ServerCall(self._core).load_model(id))

    async def unload_model(self, id: str) -> None:
        """Unload model `id` on a router-mode server; one not running is no error, an unknown
        one is ValueError naming it."""
        await self._call(ServerCall(self._core).unload_model(id))

    async def _call(self, phase: Phase[T]) -> T:
        """Carry out one of the core's calls to its end (its events, Retrying and Waiting, are
        not handed out); every connection it opened is closed."""
        engine = self._engine
        conns: list[Any] = []
        result: Any = None
        failure: BaseException | None = None
        try:
            while True:
                try:
                    cmd = phase.send(result) if failure is None else phase.throw(failure)
                except StopIteration as stop:
                    value: T = stop.value
                    return value
                result = failure = None
                kind = type(cmd)
                try:
                    if kind is Connect:
                        conn = await engine.AsyncConnection.open(self._target, cmd.until, self._ssl)
                        conns.append(conn)
                        conn.send(cmd.request, cmd.until)
                        result = conn
                    elif kind is Receive:
                        await cmd.conn.receive(cmd.until)
                    elif kind is Close:
                        cmd.conn.close()
                    elif kind is Sleep:
                        await async_sleep_until(cmd.until)
                    # Emit (Retrying, Waiting): these calls hand out no events
                except OSError as err:
                    failure = err
        finally:
            for conn in conns:
                conn.close()

    async def aclose(self) -> None:
        """Close every stream of this client that is still open (their connections, their
        slots); the client then refuses new requests. Idempotent; leaving
        `async with AsyncClient(cfg) as client:` calls it."""
        self._closed = True
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            await stream.aclose()

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

    def __init__(
        self, client: AsyncClient, req: ChatRequest, body: str, limits: Limits | None = None
    ) -> None:
        self._closed = True  # until __init__ is through: the finalizer has nothing to do
        self._engine = client._engine
        self._turns = client._turns
        self._ssl = client._ssl
        self._core = RequestCore(client._core, req, body.encode("utf-8"), limits)
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
            conn = await self._engine.AsyncConnection.open(target, cmd.until, self._ssl)
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
        conn.start_stream(sink, self._core.limits.stall_timeout)
