# Strategy: a thin driver of the sans-I/O core (_client_core): one generator per request carries
# out the core's commands with blocking sockets and yields the ChatEvents. http.client, one
# connection per request, closed by us (closing it is how a stream is cancelled: the server then
# frees the slot; some builds answer `Connection: close`, others keep-alive).
"""The synchronous client: `Client(cfg).stream(req)` and `.complete(req)`."""

from __future__ import annotations

import http.client
import select
import socket
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
from ._compat import USE_EXTENSIONS
from ._config import Config
from ._errors import SseError
from ._values import ChatEvent, ChatRequest, Completion

if TYPE_CHECKING or not USE_EXTENSIONS:
    from ._chat_py import ChatStream
else:
    from ._chat_c import ChatStream

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

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        t = self._target
        cls = http.client.HTTPSConnection if t.scheme == "https" else http.client.HTTPConnection
        return cls(t.host, t.port, timeout=timeout)

    def _fetch(self, cmd: Fetch) -> tuple[int, str]:
        """A small request on its own connection, its body read whole up to `cmd.limit`."""
        conn = self._connection(self._cfg.limits.connect_timeout)
        try:
            headers = dict(self._core.headers)
            if cmd.body is not None:
                headers["Content-Type"] = "application/json"
            conn.request(cmd.method, self._target.path(cmd.path), body=cmd.body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read(cmd.limit).decode("utf-8", "replace")
        except http.client.HTTPException as err:
            if isinstance(err, OSError):  # RemoteDisconnected is also ConnectionResetError
                raise
            raise NotHttp(repr(err)) from err
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
        self._chat: ChatStream | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None  # kept: http.client drops it on Connection: close
        self._resp: http.client.HTTPResponse | None = None
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
        conn = client._connection(client._cfg.limits.connect_timeout)
        self._conn = conn
        conn.connect()
        sock = conn.sock
        assert sock is not None
        self._sock = sock
        sock.settimeout(max(cmd.until - time.monotonic(), client._cfg.limits.connect_timeout))
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        headers.update(client._core.headers)
        try:
            conn.request("POST", cmd.path, body=cmd.body, headers=headers)
        except http.client.HTTPException as err:
            raise NotHttp(repr(err)) from err
        return self._await_head(cmd.until)

    def _await_head(self, until: float) -> Head | None:
        """The head once its first byte has come, or None at `until` (a busy slot is silent)."""
        sock, conn = self._sock, self._conn
        if sock is None or conn is None:
            raise ConnectionResetError("the connection was closed")
        pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted
        if not (pending and pending()):
            left = until - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                return None
        sock.settimeout(self._client._cfg.limits.stall_timeout)
        try:
            resp = conn.getresponse()
        except http.client.HTTPException as err:
            if isinstance(err, OSError):  # RemoteDisconnected: reset before the first byte
                raise
            raise NotHttp(repr(err)) from err
        self._resp = resp
        return Head(resp.status, resp.getheader("Content-Type", ""))

    def _read_body(self, limit: int) -> str:
        resp = self._resp
        try:
            data = b"" if resp is None else resp.read(limit)
        except (OSError, http.client.HTTPException):  # an error answer's body is a courtesy
            data = b""
        return data.decode("utf-8", "replace")

    def _stream(self) -> Generator[ChatEvent, None, None]:
        """The events of the body; nothing is retried from here on."""
        core = self._core
        resp = self._resp
        assert resp is not None
        chat = ChatStream(resp, self._client._cfg.limits.max_line)
        self._chat = chat
        watch = core.watch_budget
        try:
            for event in chat:
                yield event
                if watch:
                    step = core.budget_step(chat.in_reasoning, chat.reasoning_tokens, chat.id)
                    if step is not None:
                        yield from self._carry(step)
            completion = chat.completion
        except (SseError, ValueError, http.client.HTTPException) as err:
            raise core.stream_error(err) from err
        self._completion = core.finish(completion)

    def _close_connection(self) -> None:
        conn, sock, resp = self._conn, self._sock, self._resp
        self._conn = self._sock = self._resp = None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the server sees the close at once
            except OSError:
                pass
            sock.close()
        if resp is not None:
            resp.close()
        if conn is not None:
            conn.close()
