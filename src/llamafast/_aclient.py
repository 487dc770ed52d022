# Strategy: a thin asyncio driver of the sans-I/O core (_client_core): one async generator per
# request carries out the core's commands over aiohttp (imported lazily: the optional extra
# llamafast[async]) and yields the ChatEvents; a request waiting in its slot's line sleeps on a
# future of its own, woken when a request ahead of it leaves.
"""The asyncio client: `AsyncClient(cfg).stream(req)` and `await .complete(req)`.

The same rules, events and errors as `Client` (see `RequestCore`); only the waiting is `await`,
and cancelling the task closes the connection.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
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
    Ticket,
    WaitTurn,
)
from ._compat import USE_EXTENSIONS
from ._config import Config
from ._errors import SseError, SseIoError, SseTimeoutError, TruncatedError
from ._values import ChatEvent, ChatRequest, Completion

if TYPE_CHECKING or not USE_EXTENSIONS:
    from ._chat_py import AsyncChatStream
else:
    from ._chat_c import AsyncChatStream

if TYPE_CHECKING:
    import aiohttp

__all__ = ["AsyncClient", "AsyncClientStream"]

_HINT = "AsyncClient needs aiohttp, the optional extra: pip install 'llamafast[async]'"


def _aiohttp() -> Any:
    try:
        import aiohttp
    except ImportError as err:
        raise ImportError(_HINT) from err
    return aiohttp


class AsyncClient:
    """The asyncio twin of `Client` (same rules, events and errors; see `Client`).

    Needs aiohttp (`pip install 'llamafast[async]'`). One aiohttp session per client, made on
    first use; close it with `await client.aclose()` or `async with AsyncClient(cfg) as client`.
    Use one client from one event loop.
    """

    def __init__(self, cfg: Config) -> None:
        if not isinstance(cfg, Config):
            raise TypeError(f"AsyncClient needs a Config, not {type(cfg).__name__}")
        self._http = _aiohttp()
        self._cfg = cfg
        self._core = Core(cfg)
        self._target = self._core.target
        self._session: aiohttp.ClientSession | None = None

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
        awaitable); the Completion."""
        async with self.stream(req) as stream:
            async for event in stream:
                if on_event is not None:
                    result = on_event(event)
                    if inspect.isawaitable(result):
                        await result
            return stream.completion

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient({self._target.url!r})"

    # --- what the driver carries out for the core ---------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            http = self._http
            connect = self._cfg.limits.connect_timeout
            self._session = http.ClientSession(
                # llama-server closes every connection after its answer: no pool to keep.
                connector=http.TCPConnector(force_close=True, limit=0),
                timeout=http.ClientTimeout(total=None, sock_connect=connect),
                auto_decompress=False,
            )
            # aiohttp silently retries an idempotent request once on a reset connection; the
            # `retries` limit counts every attempt itself (as the sync client does).
            if hasattr(self._session, "_retry_connection"):
                self._session._retry_connection = False
        return self._session

    def _transport_error(self, err: BaseException) -> BaseException | None:
        """aiohttp's errors as the core expects them: OSError for the connection, NotHttp for
        a malformed answer; None for anything else (raised as it is)."""
        http = self._http
        if isinstance(err, (OSError, http.ClientConnectionError, TimeoutError)):
            return _os_error(err)
        if isinstance(err, http.ClientError):
            return NotHttp(repr(err))
        return None

    async def _fetch(self, cmd: Fetch) -> tuple[int, str]:
        """A small request on its own connection, its body read whole up to `cmd.limit`."""
        session = self._get_session()
        headers = dict(self._core.headers)
        if cmd.body is not None:
            headers["Content-Type"] = "application/json"
        url = self._target.url + cmd.path
        wait = self._cfg.limits.connect_timeout  # for the head, then for each piece of body
        async with asyncio.timeout(wait):
            resp = await session.request(cmd.method, url, data=cmd.body, headers=headers)
        try:
            return resp.status, await _read_whole(resp, cmd.limit, wait)
        finally:
            resp.close()

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


def _loop_time(monotonic_at: float) -> float:
    """A time.monotonic() instant on the running loop's clock."""
    return asyncio.get_running_loop().time() + (monotonic_at - time.monotonic())


def _wake(moved: list[Ticket]) -> None:
    for ticket in moved:
        waker = ticket.waker
        if waker is not None and not waker.done():
            waker.set_result(None)


async def _read_whole(resp: aiohttp.ClientResponse, limit: int, wait: float) -> str:
    """The body as it arrives, however many pieces, up to `limit` bytes; at most `wait`
    seconds for each piece."""
    parts: list[bytes] = []
    got = 0
    while got < limit:
        async with asyncio.timeout(wait):
            data = await resp.content.read(limit - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts).decode("utf-8", "replace")


def _os_error(err: BaseException) -> OSError:
    """aiohttp's connection errors as the OSError that ConnectError carries."""
    inner = getattr(err, "os_error", None)  # ClientConnectorError: the connect's own error
    if isinstance(inner, OSError):
        return inner
    if isinstance(err, OSError):
        return err
    return ConnectionResetError(f"{type(err).__name__}: {err}")


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
        self._chat: AsyncChatStream | None = None
        self._pending: asyncio.Future[aiohttp.ClientResponse] | None = None
        self._resp: aiohttp.ClientResponse | None = None
        self._first = b""
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
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StopAsyncIteration
        self._enter()
        try:
            return await self._gen.__anext__()
        except StopAsyncIteration:
            self._closed = True
            raise
        except Exception as err:
            self._close_response()
            if self._closed:  # closed by another task: the failed read is that close
                raise StopAsyncIteration from None
            self._error = err
            raise

    async def aclose(self) -> None:
        """Close the connection now and give up the slot; iteration stops. Idempotent."""
        self._closed = True
        self._core.closed = True
        self._close_response()
        try:
            await self._gen.aclose()
        except RuntimeError:  # being iterated by another task: the closed response ends it
            pass
        _wake(self._core.leave())

    # --- the driver -----------------------------------------------------------------------

    def _enter(self) -> None:
        if not self._entered and not self._closed:  # join now, before any await: in order
            self._entered = True
            self._core.enter()

    async def _run(self) -> AsyncGenerator[ChatEvent, None]:
        try:
            gen = self._carry(self._core.phases())
            async for event in gen:
                yield event
            if self._began and not self._closed:
                async for event in self._stream():
                    yield event
        finally:
            self._close_response()
            _wake(self._core.leave())

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
            except NotHttp as err:
                throw = err
            except Exception as err:
                mapped = client._transport_error(err)
                if mapped is None:
                    raise
                throw = mapped

    async def _open(self, cmd: Open) -> Head | None:
        client = self._client
        session = client._get_session()
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        headers.update(client._core.headers)
        url = client._target.url + cmd.path[len(client._target.prefix) :]
        self._pending = asyncio.ensure_future(self._post(session, url, cmd.body, headers))
        return await self._await_head(cmd.until)

    async def _post(
        self, session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
    ) -> aiohttp.ClientResponse:
        resp = await session.post(url, data=body, headers=headers)
        # Take the body bytes that came with the head now: aiohttp raises a cut body's error
        # before handing out what it buffered, and the waiting task may wake only after that.
        if resp.status == 200:
            self._first = resp.content.read_nowait()
        return resp

    async def _await_head(self, until: float) -> Head | None:
        pending = self._pending
        if pending is None:
            raise ConnectionResetError("the connection was closed")
        left = until - time.monotonic()
        if left > 0 and not pending.done():
            await asyncio.wait((pending,), timeout=left)
        if not pending.done():
            return None
        self._pending = None
        resp = pending.result()  # aiohttp's error, if any, is raised here
        self._resp = resp
        return Head(resp.status, resp.headers.get("Content-Type", ""))

    async def _read_body(self, limit: int) -> str:
        resp = self._resp
        try:
            wait = self._client._cfg.limits.stall_timeout
            return "" if resp is None else await _read_whole(resp, limit, wait)
        except Exception:  # the body of an error answer is a courtesy
            return ""

    async def _body_bytes(self, resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """The body as it arrives, with the reader's errors: no byte for stall_timeout is
        SseTimeoutError, a cut body TruncatedError, a failed connection SseIoError."""
        http = self._client._http
        stall = self._client._cfg.limits.stall_timeout
        content = resp.content
        first, self._first = self._first, b""
        if first:
            yield first
        while True:
            try:
                async with asyncio.timeout(stall):
                    data = await content.readany()
            except TimeoutError as err:
                raise SseTimeoutError() from err
            except http.ClientPayloadError as err:
                raise TruncatedError() from err
            except (OSError, http.ClientConnectionError) as err:
                raise SseIoError(_os_error(err)) from err
            if not data:
                return
            yield data

    async def _stream(self) -> AsyncIterator[ChatEvent]:
        core = self._core
        resp = self._resp
        assert resp is not None
        chat = AsyncChatStream(self._body_bytes(resp), self._client._cfg.limits.max_line)
        self._chat = chat
        watch = core.watch_budget
        try:
            async for event in chat:
                yield event
                if watch:
                    step = core.budget_step(chat.in_reasoning, chat.reasoning_tokens, chat.id)
                    if step is not None:
                        async for capped in self._carry(step):
                            yield capped
            completion = chat.completion
        except (SseError, ValueError) as err:
            raise core.stream_error(err) from err
        self._completion = core.finish(completion)

    def _close_response(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            if pending.done():
                if not pending.cancelled() and pending.exception() is None:
                    pending.result().close()
            else:
                pending.cancel()
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()  # closes the connection itself, at once
