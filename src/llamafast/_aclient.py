# Strategy: the sync client's phases as one async generator per request, over aiohttp (imported
# lazily: the optional extra llamafast[async]); per-slot FIFO with one asyncio.Event per waiting
# request; the stall timeout wraps each read, so the server's `:` pings reset it like any bytes.
"""The asyncio client (issue 4): `AsyncClient(cfg).stream(req)` and `await .complete(req)`.

The same rules, events and errors as `Client` (see its docstring for the table of which error
means what); only the waiting is `await`, and cancelling the task closes the connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._body import build_body
from ._client import (
    CHAT_PATH,
    CONTROL_PATH,
    MAX_ERROR_BODY,
    Budget,
    StreamState,
    Target,
    backoff_ms,
    control_accepted,
    describe,
    is_loading,
    map_stream_error,
    poll_delays,
    slot_busy,
)
from ._compat import USE_EXTENSIONS
from ._config import Config
from ._errors import (
    BusyError,
    ConnectError,
    HttpError,
    LoadTimeoutError,
    ProtocolError,
    SseError,
    SseIoError,
    SseTimeoutError,
    ThinkingOverrunError,
    TruncatedError,
    WaitTimeoutError,
    cut,
)
from ._values import ChatEvent, ChatRequest, Completion, Queued, Retrying, ThinkingCapped, Waiting

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


class _Ticket:
    __slots__ = ("moved",)

    def __init__(self) -> None:
        self.moved = asyncio.Event()


class _SlotQueues:
    """FIFO per slot among this client's tasks (rule 1): the head of a slot's line runs; the
    others sleep on their own Event, set whenever a request ahead of them leaves."""

    def __init__(self) -> None:
        self._lines: dict[int, list[_Ticket]] = {}

    def enter(self, slot: int, ticket: _Ticket) -> None:
        self._lines.setdefault(slot, []).append(ticket)

    def leave(self, slot: int, ticket: _Ticket) -> None:
        line = self._lines.get(slot, [])
        if ticket in line:
            at = line.index(ticket)
            del line[at]
            for behind in line[at:]:
                behind.moved.set()

    async def wait(
        self, slot: int, ticket: _Ticket, deadline: float, seconds: float
    ) -> AsyncIterator[ChatEvent]:
        last: int | None = None
        while True:
            line = self._lines[slot]
            if ticket not in line:  # closed meanwhile
                return
            ahead = line.index(ticket)
            if not ahead:
                return
            if last is None or ahead < last:
                last = ahead
                yield Queued(ahead)
                continue
            ticket.moved.clear()
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(left):
                    await ticket.moved.wait()
            except TimeoutError:
                raise WaitTimeoutError(seconds) from None


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
        self._target = Target.parse(cfg.infer.url)
        self._queues = _SlotQueues()
        self._rng = random.Random()
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

    async def _fetch(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        """A small request on its own connection: (status, body text). Raises aiohttp's
        errors and TimeoutError (after connect_timeout) as they come."""
        session = self._get_session()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        async with asyncio.timeout(self._cfg.limits.connect_timeout):
            async with session.request(
                method, self._target.url + path, data=body, headers=headers
            ) as resp:
                data = await resp.content.read(MAX_ERROR_BODY)
                return resp.status, data.decode("utf-8", "replace")

    async def _end_reasoning(self, cid: str) -> bool:
        http = self._http
        payload = json.dumps({"id": cid, "action": "reasoning_end"}).encode()
        try:
            status, text = await self._fetch("POST", CONTROL_PATH, payload)
        except (OSError, http.ClientConnectionError) as err:
            raise ConnectError(_os_error(err), self._target.url) from err
        except http.ClientError as err:
            raise ProtocolError(f"the control endpoint's answer is not HTTP: {err!r}") from err
        return control_accepted(status, text)


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
        self._req = req
        self._body = body.encode("utf-8")
        self._ticket = _Ticket()
        self._entered = False
        self._t0 = 0.0
        self._deadline = 0.0
        self._gen: AsyncGenerator[ChatEvent, None] = self._run()
        self._chat: AsyncChatStream | None = None
        self._resp: aiohttp.ClientResponse | None = None
        self._result: tuple[int, str] = (0, "")
        self._completion: Completion | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._attempt = 0
        self._capped = False

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
        self._close_response()
        try:
            await self._gen.aclose()
        except RuntimeError:  # being iterated by another task: the closed response ends it
            pass
        self._client._queues.leave(self._req.slot, self._ticket)

    # --- the phases (as in Client; see there) ------------------------------------------------

    def _enter(self) -> None:
        if not self._entered and not self._closed:  # join now, before any await: in order
            self._entered = True
            self._t0 = time.monotonic()
            self._client._queues.enter(self._req.slot, self._ticket)

    async def _run(self) -> AsyncGenerator[ChatEvent, None]:
        client = self._client
        limits = client._cfg.limits
        slot = self._req.slot
        self._deadline = self._t0 + limits.wait_timeout
        try:
            async for event in client._queues.wait(
                slot, self._ticket, self._deadline, limits.wait_timeout
            ):
                yield event
            if self._closed:
                return
            async for event in self._check_slot():
                yield event
            async for event in self._post():
                yield event
            async for event in self._stream():
                yield event
        finally:
            self._close_response()
            client._queues.leave(slot, self._ticket)

    async def _retry(self, err: BaseException) -> AsyncIterator[ChatEvent]:
        client = self._client
        limits = client._cfg.limits
        self._attempt += 1
        if self._attempt > limits.retries:
            if isinstance(err, HttpError):
                raise err
            raise ConnectError(_os_error(err), client._target.url) from err
        after = backoff_ms(limits, self._attempt, client._rng)
        shown = err if isinstance(err, HttpError) else _os_error(err)
        yield Retrying(self._attempt, after, describe(shown))
        await asyncio.sleep(after / 1000)

    async def _small(self, method: str, path: str) -> AsyncIterator[ChatEvent]:
        """A small request under the rules of the first byte; its (status, text) goes to
        `self._result` for any answer but a 503."""
        client = self._client
        http = client._http
        while True:
            try:
                status, text = await client._fetch(method, path)
            except (OSError, http.ClientConnectionError, TimeoutError) as err:
                async for event in self._retry(err):
                    yield event
                continue
            except http.ClientError as err:
                raise ProtocolError(f"the answer to {method} {path} is not HTTP: {err!r}") from err
            if is_loading(status, text):
                async for event in self._wait_loaded():
                    yield event
                continue
            if status == 503:
                async for event in self._retry(HttpError(status, text)):
                    yield event
                continue
            self._result = (status, text)
            return

    async def _check_slot(self) -> AsyncIterator[ChatEvent]:
        limits = self._client._cfg.limits
        slot = self._req.slot
        delays = None
        while True:
            async for event in self._small("GET", "/slots"):
                yield event
            status, text = self._result
            if status != 200 or not slot_busy(status, text, slot):
                return
            if not limits.wait_for_slot:
                raise BusyError(slot)
            if delays is None:
                delays = poll_delays(limits)
                yield Waiting(slot_busy=True)
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError(limits.wait_timeout)
            await asyncio.sleep(min(next(delays), left))

    async def _wait_loaded(self) -> AsyncIterator[ChatEvent]:
        client = self._client
        http = client._http
        limits = client._cfg.limits
        yield Waiting(slot_busy=False)
        start = time.monotonic()
        deadline = start + limits.load_timeout
        for delay in poll_delays(limits):
            left = deadline - time.monotonic()
            if left <= 0:
                raise LoadTimeoutError(limits.load_timeout)
            await asyncio.sleep(min(delay, left))
            try:
                status, _ = await client._fetch("GET", "/health")
            except (OSError, TimeoutError, http.ClientError):
                continue
            if status != 503:
                break
        self._deadline += time.monotonic() - start

    async def _post(self) -> AsyncIterator[ChatEvent]:
        client = self._client
        http = client._http
        limits = client._cfg.limits
        session = client._get_session()
        url = client._target.url + CHAT_PATH
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        while True:
            budget = max(self._deadline - time.monotonic(), limits.stall_timeout)
            timer = asyncio.timeout(budget)
            try:
                async with timer:  # until the first byte: a busy slot is silent on the wire
                    resp = await session.post(url, data=self._body, headers=headers)
            except TimeoutError as err:
                if timer.expired():
                    raise WaitTimeoutError(limits.wait_timeout) from err
                async for event in self._retry(err):  # connect_timeout
                    yield event
                continue
            except (OSError, http.ClientConnectionError) as err:
                async for event in self._retry(err):
                    yield event
                continue
            except http.ClientError as err:
                raise ProtocolError(f"the answer to POST {url} is not HTTP: {err!r}") from err
            self._resp = resp
            if resp.status == 200:
                ctype = resp.headers.get("Content-Type", "")
                if not ctype.startswith("text/event-stream"):
                    text = await self._read_error(resp)
                    raise ProtocolError(
                        f"the server answered 200 with Content-Type {ctype!r}, not an event "
                        f"stream: {cut(text)}"
                    )
                return
            text = await self._read_error(resp)
            self._close_response()
            if is_loading(resp.status, text):
                async for event in self._wait_loaded():
                    yield event
                continue
            if resp.status == 503:
                async for event in self._retry(HttpError(resp.status, text)):
                    yield event
                continue
            raise HttpError(resp.status, text)

    @staticmethod
    async def _read_error(resp: aiohttp.ClientResponse) -> str:
        try:
            data = await resp.content.read(MAX_ERROR_BODY)
        except Exception:  # the body of an error answer is a courtesy
            data = b""
        return data.decode("utf-8", "replace")

    async def _body_bytes(self, resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """The body as it arrives, with the reader's errors: no byte for stall_timeout is
        SseTimeoutError, a cut body TruncatedError, a failed connection SseIoError."""
        http = self._client._http
        stall = self._client._cfg.limits.stall_timeout
        content = resp.content
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
        client = self._client
        limits = client._cfg.limits
        resp = self._resp
        assert resp is not None
        chat = AsyncChatStream(self._body_bytes(resp), limits.max_line)
        self._chat = chat
        budget = Budget(limits)
        try:
            async for event in chat:
                yield event
                in_reasoning = chat.in_reasoning
                tokens = chat.reasoning_tokens
                if budget.should_end(in_reasoning, tokens, chat.id):
                    assert chat.id is not None
                    if await client._end_reasoning(chat.id):
                        self._capped = True
                        yield ThinkingCapped(tokens)
                if budget.overrun(in_reasoning, tokens):
                    self._close_response()
                    raise ThinkingOverrunError(tokens, limits.thinking_hard_cap)
            completion = chat.completion
        except (SseError, ValueError) as err:
            raise map_stream_error(err, limits) from err
        if self._capped:
            completion = dataclasses.replace(completion, thinking_capped=True)
        self._completion = completion

    def _close_response(self) -> None:
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()  # closes the connection itself, at once
