# Strategy: a thin driver of the sans-I/O core (llamafast._core): a stream carries out the core's
# commands (connect and send, wait for bytes, sleep, wait for a turn) and hands out the events the
# core reads from the connection. Every rule is the core's. This file is the one source of both
# drivers: _sync.py is generated from it by tools/unasync.py (`await` dropped, the asyncio
# primitives swapped for blocking ones), and a test fails when that copy is stale. The stream
# holds no generator of its own and nothing refers back to it, so a stream dropped without
# close() is freed at once and its finalizer gives back the slot and the connection.
"""The asyncio client: `AsyncClient(cfg).stream(req)` and `await .complete(req)`.

Both clients follow the same rules, give the same events and raise the same errors (see
`ChatExchange`); only the waiting is `await`,
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
from typing import Any, ClassVar, TypeVar, Unpack

from .._body import build_body
from .._config import Config, Limits
from .._core import (
    BEFORE_FIRST_CHUNK,
    EMBED_PATH,
    MAX_SLOTS_BODY,
    RERANK_PATH,
    ChatExchange,
    Close,
    Connect,
    Done,
    EmbedPlan,
    Emit,
    Fleet,
    Phase,
    Receive,
    Release,
    Resume,
    ServerCall,
    ServerState,
    Sleep,
    StreamState,
    WaitTurn,
    WholeCall,
    read_ranked,
    read_slots,
    rerank_body,
    server_budget,
    step,
    text_of,
)
from .._engine._embeddings import Embeddings
from .._engine._stream_state import AsyncClosesOnExit
from .._errors import InferError, StreamClosedEarlyError
from .._messages import ChatFields, chat_request
from .._url import Target
from .._values import (
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Completion,
    ModelInfo,
    Ranked,
    ServerProps,
)
from . import _transport
from ._deliver import async_deliver
from ._pool import AsyncPool, give_back
from ._stop import Stopper
from ._transport import SELECTED, Engine
from ._waits import AsyncTurns, async_run_all, async_sleep_until

T = TypeVar("T")
_Servers = list[tuple[Target, AsyncPool]]  # each server's target and pool, in the order of urls

__all__ = ["AsyncClient", "AsyncClientStream"]


class AsyncClient:
    """A llama-server client for asyncio: standard library only (uvloop works too).

    `stream(req)` gives a stream to iterate for ChatEvents (then `.completion`);
    `complete(req, on_event=None)` does that loop for you. A connection whose answer was read
    to its end carries the next request (keep-alive, at most `max_connections` open). The
    rules (the per-slot order, waiting for a slot or a model load, retries, the thinking
    budget, the deadline of each request) and which error ends a request are those of
    `ChatExchange` (docs/client.md). Once the stream has started nothing is retried, and the
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
    # The class of this client's streams: llamafast.otel swaps in a subclass that records a
    # span (on the class for every client, on one client for that one); nothing else is
    # checked per request, so an uninstrumented client does no telemetry work at all.
    _stream_type: ClassVar[type[AsyncClientStream]]

    def __init__(self, cfg: Config, *, ssl_context: ssl.SSLContext | None = None) -> None:
        """`ssl_context`: what an https:// server is checked against (else a context trusting
        `cfg.infer.ca_file`, else the system's CAs)."""
        if not isinstance(cfg, Config):
            raise TypeError(f"{type(self).__name__} needs a Config, not {type(cfg).__name__}")
        self._cfg = cfg
        self._ssl = _transport.client_ssl_context(cfg.infer.ca_file, ssl_context)
        self._stopper = Stopper(self._engine, self._ssl)  # streams closed early (rule RESUME)
        self._fleet = Fleet.of(cfg, sink=self._engine.Sink)  # a Core and a pool per server
        self._core = self._fleet.cores[0]  # the first: the one of a lone url
        self._target = self._core.target
        self._turns = AsyncTurns()
        limit = cfg.limits.max_connections
        self._servers = [(core.target, AsyncPool(limit)) for core in self._fleet.cores]
        self._pool = self._servers[0][1]
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
        **fields: Unpack[ChatFields],
    ) -> AsyncClientStream:
        """The answer as a stream to iterate (`with` / `async with`). `req` is a ChatRequest,
        or the messages (the library's values or openai-shaped dicts) with the request's
        fields as keywords (ChatRequest's, typed by `ChatFields`; `slot` None unless given).
        `limits` bounds this request instead of the client's Limits. The body is built now, so
        a bad request raises ValueError/TypeError here, before anything is sent."""
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed: make a new one")
        req = chat_request(req, fields)
        cfg = self._cfg
        if limits is not None:
            if not isinstance(limits, Limits):
                raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
            cfg = dataclasses.replace(cfg, limits=limits)
        req = server_budget(self._core, req, cfg.limits)
        stream = self._stream_type(self, req, build_body(cfg, req), limits)
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
        **fields: Unpack[ChatFields],
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
        `limits.embed_batch` texts, as many at a time as the server has slots (at most
        `limits.max_connections`), each asking
        for base64 float32, decoded straight into the one buffer (a server that answers
        lists of numbers is read too). A vector of the wrong length, a value that is not
        finite, an index missing or repeated: ProtocolError naming the text. A server that
        does not serve embeddings: HttpError saying to start it with `--embeddings`.
        `model`: the `model` field (InferConfig.model when None); `limits`: this call's."""
        plan = EmbedPlan(self._core, texts, model, limits)
        vectors = self._engine.Vectors(plan.n)

        async def batch(first: int, count: int) -> None:
            call = WholeCall(
                plan.core(first), "POST", EMBED_PATH, plan.body(first, count), limits=plan.limits
            )
            status, parts = await self._call(call.phases())
            if status != 200:
                raise call.not_served(status, parts, "--embeddings", "embeddings")
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
        call = WholeCall(self._fleet.any_up(), "POST", RERANK_PATH, body)
        status, parts = await self._call(call.phases())
        if status != 200:
            raise call.not_served(status, parts, "--reranking", "reranking")
        return read_ranked(b"".join(parts), count, top_n)

    async def _width(self, plan: EmbedPlan) -> int:
        """Requests of one call at once: on each of its servers, the server's slot count (GET
        /slots, once per client; one when the server does not say)."""
        for core in plan.cores:
            if core.slot_count is None:
                ask = WholeCall(core, "GET", "/slots", None, MAX_SLOTS_BODY)
                try:
                    status, parts = await self._call(ask.phases())
                    if status == 200:
                        core.slot_count = len(read_slots(text_of(parts)))
                except (OSError, InferError):
                    pass
        return sum(plan.width(core.slot_count) for core in plan.cores)

    async def props(self) -> ServerProps:
        """What `GET /props` says (context size, model, modalities, slot count), asked once and
        kept until the client sees the server may have restarted (a connection refused or
        reset, a 503, a model loading, another slot count or context size than it said)."""
        return await self._call(ServerCall(self._fleet.any_up()).props())

    async def count_tokens(
        self,
        req: ChatRequest | Sequence[ChatMessage | Mapping[str, Any]],
        /,
        **fields: Unpack[ChatFields],
    ) -> int:
        """The prompt tokens the server would count for `req` (a ChatRequest, or a list of
        messages with ChatRequest's keywords as `fields`): POST
        /v1/chat/completions/input_tokens, or on a server without it /apply-template then
        /tokenize. The body is `stream(req)`'s, so the count is the one the chat would make."""
        request = chat_request(req, fields)
        body = build_body(self._cfg, request).encode("utf-8")
        return await self._call(ServerCall(self._fleet.any_up()).count_tokens(body, request.model))

    async def models(self) -> tuple[ModelInfo, ...]:
        """The models of a router-mode server (`GET /models`) with their state ("loaded",
        "loading", "unloaded", ...); a server with one model lists it, "loaded"."""
        return await self._call(ServerCall(self._fleet.any_up()).models())

    async def load_model(self, id: str) -> None:
        """Load model `id` on a router-mode server and wait until it is loaded (at most
        `load_timeout`: LoadTimeoutError). One already loaded is no error; an unknown one is
        ValueError naming it."""
        await self._call(ServerCall(self._fleet.any_up()).load_model(id))

    async def unload_model(self, id: str) -> None:
        """Unload model `id` on a router-mode server; one not running is no error, an unknown
        one is ValueError naming it."""
        await self._call(ServerCall(self._fleet.any_up()).unload_model(id))

    def servers(self) -> tuple[ServerState, ...]:
        """Each server (url, up, slots, this client's busy requests): docs/client.md, FLEET."""
        return self._fleet.states()

    async def _call(self, phase: Phase[T]) -> T:
        """Carry out one of the core's calls to its end (its events, Retrying and Waiting, are
        not handed out); every connection it opened is closed."""
        commands = _Commands(self._engine, self._servers, self._ssl, self._turns)
        try:
            done = await commands._drive(phase, [])
        finally:
            commands._close_all()
        value: T = done.value
        return value

    async def aclose(self) -> None:
        """Close every stream of this client that is still open (their connections, their
        slots) and every connection kept alive; the client then refuses new requests.
        Idempotent; leaving `async with AsyncClient(cfg) as client:` calls it."""
        self._closed = True
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            await stream.aclose()
        for _, pool in self._servers:
            pool.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._target.url!r})"


class _Commands:
    """What carries out the core's commands for one call or stream: its connections (`_conns`),
    each server's target and pool (`_servers`), the lines' waits (`_turns`); `_closed`."""

    def __init__(
        self, engine: Engine, servers: _Servers, tls: ssl.SSLContext | None, turns: AsyncTurns
    ) -> None:
        self._engine = engine
        self._servers = servers
        self._ssl = tls
        self._turns = turns
        self._conns: list[Any] = []  # every connection this request holds
        self._closed = False

    async def _drive(self, phase: Phase[Any], events: list[ChatEvent] | None) -> Any:
        """The one command loop: carry out `phase`'s commands until it returns (its `Done`),
        its events (Emit) collected in `events`; with `events` None, until it emits (the
        `Emit`: the phase goes on at the next call). Closed from elsewhere: StopAsyncIteration,
        what the core would do next is moot."""
        result: Any = None
        failure: BaseException | None = None
        while True:
            if self._closed:
                raise StopAsyncIteration
            cmd = step(phase, result, failure)
            result = failure = None
            kind = type(cmd)
            if kind is Emit:
                if events is None:
                    return cmd
                events.append(cmd.event)
                continue
            if kind is Done:
                return cmd
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
            return await self._connect(cmd)
        elif kind is Release:
            self._keep(cmd.conn, cmd.streamed)
        elif kind is Close:
            cmd.conn.close()
            if cmd.conn in self._conns:
                self._conns.remove(cmd.conn)
        elif kind is Sleep:
            await async_sleep_until(cmd.until)
        elif kind is WaitTurn:
            await self._turns.wait(cmd)
        else:
            raise AssertionError(f"unknown command {cmd!r}")
        return None

    async def _connect(self, cmd: Connect) -> Any:
        """`cmd.request` sent on a connection: a kept one (rule KEEP-ALIVE), else a new one;
        after a `stale` one, a new one. A kept one that fails the send is dropped the same
        way."""
        target, pool = self._servers[cmd.server]
        fresh = cmd.stale is not None
        if fresh:
            self._conns.remove(cmd.stale)
            pool.stale(cmd.stale)
        conn = await pool.acquire(cmd.queue_until, fresh, bool(self._conns))
        if conn is not None:
            self._conns.append(conn)
            try:
                conn.send(cmd.request, cmd.until)
                return conn
            except OSError:
                self._conns.remove(conn)
                pool.stale(conn)
            await pool.acquire(cmd.queue_until, True, bool(self._conns))
        try:
            conn = await self._engine.AsyncConnection.open(target, cmd.until, self._ssl)
        except BaseException:
            pool.unreserve()
            raise
        self._conns.append(pool.opened_one(conn))
        if self._closed:  # closed from elsewhere meanwhile
            conn.close()
            raise ConnectionResetError("the stream was closed")
        conn.send(cmd.request, cmd.until)
        return conn

    def _keep(self, conn: Any, streamed: bool) -> None:
        """`conn`'s answer was read to its end: the pool keeps it, or closes it."""
        if conn in self._conns:
            self._conns.remove(conn)
        give_back(conn, streamed)

    def _close_all(self) -> None:
        conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()


class AsyncClientStream(_Commands, StreamState, AsyncClosesOnExit):
    """One request's events (from `AsyncClient.stream`): enter it, iterate it, then read
    `.completion`. `.id`, `.reasoning_tokens`, `.in_reasoning`, `.is_finished` follow the
    stream as it arrives. Leaving the block, `aclose()`, dropping the stream, or cancelling
    the task closes the connection at once (the server then frees the slot)."""

    def __init__(
        self, client: AsyncClient, req: ChatRequest, body: str, limits: Limits | None = None
    ) -> None:
        self._closed = True  # until __init__ is through: the finalizer has nothing to do
        super().__init__(client._engine, client._servers, client._ssl, client._turns)
        self._closed = True
        self._core = ChatExchange(client._core, req, body.encode("utf-8"), limits)
        self._phase: Phase[bool] | None = None  # the core's phases, once entered
        self._conn: Any = None  # the chat's, once the stream has begun
        self._assembler: Any = BEFORE_FIRST_CHUNK
        self._batch: list[ChatEvent] = []  # the rest of an item's events, reversed
        self._watch = self._core.watch_budget
        self._completion: Completion | None = None
        self._error: BaseException | None = None
        self._entered = False
        self._stopper = client._stopper
        self._closed = False

    async def __aenter__(self) -> AsyncClientStream:
        self._enter()
        return self

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
            # The stream: the next item's events, straight from the Sink while it has some
            # (no call of the core per item); when it has none, or fails (the Sink latches
            # its error), the core reads the connection: the wait, the end or the fault,
            # mapped. The task sleeps only when there are no events yet, once per arrival.
            core = self._core
            sink = core.sink
            while True:
                try:
                    events: list[ChatEvent] | None = sink.take()
                except Exception:
                    events = None
                try:
                    events = events or core.next_events()
                except Resume:  # the connection broke: go on where it broke (rule RESUME)
                    await self._resume()
                    continue
                if events:
                    if self._watch:
                        step = core.budget()
                        if step is not None:
                            events += await self._side(step)
                    break
                if events is None:
                    self._completion = core.completion
                    self._keep(self._conn, True)
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
        """Close every connection, leave the slot's line (idempotent); stop it if unfinished."""
        self._close_all()
        core = self._core
        self._turns.wake(core.leave())
        if (request := core.stop_request()) is not None:  # to the server that answered (FLEET)
            self._stopper.stop(core.core.target, request, core)

    async def _resume(self) -> None:
        """Carry out the core's resume; its answer goes on into the same Sink."""
        core = self._core
        await self._drive(core.resume(), [])
        conn = self._conn = core.conn
        conn.start_stream(core.sink, core.limits.stall_timeout)

    async def _before_stream(self) -> ChatEvent | None:
        """Carry out the core's phases up to the first byte: an event to hand out, or None once
        the stream has begun."""
        phase = self._phase
        if phase is None:
            self._enter()
            phase = self._phase = self._core.phases()
        got = await self._drive(phase, None)
        if type(got) is Emit:
            return got.event
        self._phase = None
        if not got.value or self._closed:  # closed while in line
            raise StopAsyncIteration
        self._start_stream()
        return None

    async def _side(self, phase: Phase[Any]) -> list[ChatEvent]:
        """Carry out a phase to its end (the thinking budget's request): its events."""
        events: list[ChatEvent] = []
        await self._drive(phase, events)
        return events

    # --- complete()'s handout (rule HANDOUT, _deliver.py) --------------------------------------

    def _handout_start(self) -> tuple[Any, Any] | None:
        """The connection and the Sink, once the body has begun, when its events may be
        handed out from the arrival callback (no thinking budget to watch between items);
        else None."""
        if self._watch or self._conn is None:
            return None
        return self._conn, self._core.sink

    def _held(self) -> list[ChatEvent]:
        """The events of the current item not handed out yet, reversed (pop the next)."""
        return self._batch

    def _hold(self, rest: list[ChatEvent]) -> None:
        """Keep `rest` (reversed) as the events to hand out before the next item."""
        self._batch = rest

    def _start_stream(self) -> None:
        core = self._core
        conn = self._conn = core.conn
        sink = core.start_stream()
        self._assembler = sink.assembler
        conn.start_stream(sink, self._core.limits.stall_timeout)


AsyncClient._stream_type = AsyncClientStream
