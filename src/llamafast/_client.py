# Strategy: a thin driver of the sans-I/O core (_client_core): one generator per request carries
# out the core's commands over a blocking socket of its own (_transport: recv_into the response
# parser's buffer, the body's views straight to the engine) and yields the ChatEvents. One
# connection per request, closed by us (closing it is how a stream is cancelled: the server then
# frees the slot; some builds answer `Connection: close`, others keep-alive).
"""The synchronous client: `Client(cfg).stream(req)` and `.complete(req)`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any

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
    WaitTurn,
)
from ._config import Config
from ._errors import SseError, SseIoError, SseTimeoutError
from ._transport import HttpParseError, Sink, SyncConnection, request_bytes
from ._values import ChatEvent, ChatRequest, Completion

if TYPE_CHECKING:
    from ._assemble_py import Assembler

_CHAT_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}

__all__ = ["Client", "ClientStream"]


class Client:
    """A synchronous llama-server client: standard library only, safe to share across threads.

    `stream(req)` gives a context manager to iterate for ChatEvents (then `.completion`);
    `complete(req, on_event=None)` does that loop for you. One connection per request.

    The rules (the per-slot order, waiting for a slot or a model load, retries, the thinking
    budget) and which error ends a request are those of `RequestCore`. Once the stream has
    started nothing is retried, and the reader's errors map to:

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

    def __init__(self, cfg: Config) -> None:
        if not isinstance(cfg, Config):
            raise TypeError(f"Client needs a Config, not {type(cfg).__name__}")
        self._cfg = cfg
        self._core = Core(cfg)
        self._target = self._core.target
        self._turns = threading.Condition()

    @property
    def config(self) -> Config:
        return self._cfg

    def stream(self, req: ChatRequest) -> ClientStream:
        """The answer to `req` as a context manager to iterate; the body is built now, so a bad
        request raises ValueError/TypeError here, before anything is sent."""
        return ClientStream(self, req, build_body(self._cfg, req))

    def complete(
        self, req: ChatRequest, on_event: Callable[[ChatEvent], object] | None = None
    ) -> Completion:
        """Stream `req` to its end, handing each event to `on_event`; the Completion."""
        with self.stream(req) as stream:
            for event in stream:
                if on_event is not None:
                    on_event(event)
            return stream.completion

    def __repr__(self) -> str:
        return f"Client({self._target.url!r})"

    # --- what the driver carries out for the core ---------------------------------------------

    def _request(self, method: str, path: str, body: bytes | None, extra: dict[str, str]) -> bytes:
        headers = dict(extra)
        headers.update(self._core.headers)
        return request_bytes(method, self._target, path, body, headers)

    def _fetch(self, cmd: Fetch) -> tuple[int, str]:
        """A small request on its own connection, its body read whole up to `cmd.limit`."""
        wait = self._cfg.limits.connect_timeout  # to connect, then for each read
        conn = SyncConnection(self._target, wait)
        try:
            extra = {"Content-Type": "application/json"} if cmd.body is not None else {}
            path = self._target.path(cmd.path)
            conn.send(self._request(cmd.method, path, cmd.body, extra), wait)
            conn.read_head(wait)
            return conn.parser.status, conn.read_whole(cmd.limit, wait).decode("utf-8", "replace")
        except HttpParseError as err:
            raise NotHttp(str(err)) from err
        finally:
            conn.close()

    def _wait_turn(self, cmd: WaitTurn) -> None:
        with self._turns:
            while cmd.ticket.moves == cmd.seen:
                left = cmd.until - time.monotonic()
                if left <= 0:
                    return
                self._turns.wait(left)

    def _wake(self, moved: list[Any]) -> None:
        if moved:
            with self._turns:
                self._turns.notify_all()


class ClientStream(StreamState):
    """One request's events: a context manager and an iterator (from `Client.stream`).

    Iterate for the ChatEvents, then read `.completion`. `.id`, `.reasoning_tokens`,
    `.in_reasoning` and `.is_finished` follow the stream as it arrives. Leaving the `with`
    block, or `close()`, shuts the connection at once (the server then frees the slot).
    """

    def __init__(self, client: Client, req: ChatRequest, body: str) -> None:
        self._client = client
        self._core = RequestCore(client._core, req, body.encode("utf-8"))
        self._entered = False
        self._gen: Generator[ChatEvent, None, None] = self._run()
        self._chat: Assembler | None = None
        self._conn: SyncConnection | None = None
        self._completion: Completion | None = None
        self._error: BaseException | None = None
        self._closed = False

    # --- the public surface ----------------------------------------------------------------

    def __enter__(self) -> ClientStream:
        self._enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> ClientStream:
        return self

    def __next__(self) -> ChatEvent:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StopIteration
        self._enter()
        try:
            return next(self._gen)
        except StopIteration:
            self._closed = True
            raise
        except Exception as err:
            self._close_connection()
            if self._closed:  # closed from another thread: the failed read is that close
                raise StopIteration from None
            self._error = err
            raise

    def close(self) -> None:
        """Close the connection now and give up the slot; iteration stops. Idempotent; may be
        called from another thread to abort a stream that is blocked reading."""
        self._closed = True
        self._core.closed = True
        self._close_connection()
        try:
            self._gen.close()
        except ValueError:  # running in another thread: the shut socket ends it there
            pass
        self._leave()

    # --- the driver -----------------------------------------------------------------------

    def _enter(self) -> None:
        # Joining the slot's line when the stream is entered (or first iterated) keeps the
        # order of `with client.stream(...)` across threads.
        if not self._entered and not self._closed:
            self._entered = True
            self._core.enter()

    def _leave(self) -> None:
        self._client._wake(self._core.leave())

    def _run(self) -> Generator[ChatEvent, None, None]:
        try:
            if (yield from self._carry(self._core.phases())) and not self._closed:
                yield from self._stream()
        finally:
            self._close_connection()
            self._leave()

    def _carry(self, phase: Phase[Any]) -> Generator[ChatEvent, None, Any]:
        """Carry out the core's commands: yield its events, return its result."""
        client = self._client
        send: Any = None
        throw: BaseException | None = None
        while True:
            try:
                cmd = phase.send(send) if throw is None else phase.throw(throw)
            except StopIteration as stop:
                return stop.value
            send = throw = None
            kind = type(cmd)
            if kind is Emit:
                yield cmd.event
                continue
            try:
                if kind is Fetch:
                    send = client._fetch(cmd)
                elif kind is Sleep:
                    time.sleep(max(0.0, cmd.until - time.monotonic()))
                elif kind is WaitTurn:
                    client._wait_turn(cmd)
                elif kind is Open:
                    send = self._open(cmd)
                elif kind is AwaitHead:
                    send = self._await_head(cmd.until)
                elif kind is ReadBody:
                    send = self._read_body(cmd.limit)
                elif kind is CloseResponse:
                    self._close_connection()
                else:  # pragma: no cover - a command this driver does not know
                    raise AssertionError(f"unknown command {cmd!r}")
            except (OSError, NotHttp) as err:
                throw = err

    def _open(self, cmd: Open) -> Head | None:
        client = self._client
        wait = client._cfg.limits.connect_timeout
        conn = SyncConnection(client._target, wait)
        self._conn = conn
        data = client._request("POST", cmd.path, cmd.body, _CHAT_HEADERS)
        conn.send(data, max(wait, cmd.until - time.monotonic()))
        return self._await_head(cmd.until)

    def _await_head(self, until: float) -> Head | None:
        """The head once it has come, or None at `until` (a busy slot is silent)."""
        conn = self._conn
        if conn is None:
            raise ConnectionResetError("the connection was closed")
        try:
            if not conn.read_head(self._client._cfg.limits.stall_timeout, until):
                return None
        except HttpParseError as err:
            raise NotHttp(str(err)) from err
        parser = conn.parser
        return Head(parser.status, parser.headers.get("content-type", ""))

    def _read_body(self, limit: int) -> str:
        conn = self._conn
        try:
            data = (
                b""
                if conn is None
                else conn.read_whole(limit, self._client._cfg.limits.stall_timeout)
            )
        except (OSError, ValueError, SseError):  # an error answer's body is a courtesy
            data = b""
        return data.decode("utf-8", "replace")

    def _stream(self) -> Generator[ChatEvent, None, None]:
        """The events of the body; nothing is retried from here on."""
        core = self._core
        conn = self._conn
        assert conn is not None
        limits = self._client._cfg.limits
        watch = core.watch_budget
        sink = Sink(limits.max_line)
        self._chat = sink.assembler
        parser = conn.parser
        read = conn.read
        take = sink.take
        sink.feed(conn.early)
        conn.early = []
        conn.stream_timeout(limits.stall_timeout)
        try:
            while True:
                events = take()
                if events:
                    yield from events
                    if watch:
                        chat = sink.assembler
                        step = core.budget_step(chat.in_reasoning, chat.reasoning_tokens, chat.id)
                        if step is not None:
                            yield from self._carry(step)
                    continue
                if sink.done or parser.done:
                    break
                try:
                    pieces = read()
                except (TimeoutError, BlockingIOError) as err:  # no byte for stall_timeout
                    raise SseTimeoutError() from err
                except OSError as err:
                    raise SseIoError(err) from err
                if pieces is None:
                    parser.eof()
                    break
                sink.feed(pieces)
            completion = sink.end()
        except (SseError, ValueError) as err:
            raise core.stream_error(err) from err
        self._completion = core.finish(completion)

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
