# Strategy: one generator per request walks the phases (this client's slot queue, GET /slots,
# the POST with its retries, the stream) and yields ChatEvents; every failure of a phase becomes
# the one InferError a caller catches. http.client, one connection per request, closed by us
# (closing it is how a stream is cancelled: the server then frees the slot; some builds answer
# `Connection: close`, others keep-alive), and the socket timeout set for each phase.
"""The synchronous client (issue 4): `Client(cfg).stream(req)` and `.complete(req)`.

The helpers at the top (the server's address, back-off, reading `/slots`, telling a model load
from another 503, mapping the reader's errors) are shared with the asyncio client.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from ._body import build_body
from ._compat import USE_EXTENSIONS
from ._config import Config, Limits
from ._errors import (
    BusyError,
    ConnectError,
    HttpError,
    InferError,
    LineTooLongError,
    LoadTimeoutError,
    NotUtf8Error,
    ProtocolError,
    SseError,
    SseIoError,
    SseTimeoutError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    TruncatedError,
    WaitTimeoutError,
    cut,
    server_message,
)
from ._values import (
    ChatEvent,
    ChatRequest,
    Completion,
    Queued,
    Retrying,
    ThinkingCapped,
    Waiting,
)

if TYPE_CHECKING or not USE_EXTENSIONS:
    from ._chat_py import AsyncChatStream, ChatStream
else:
    from ._chat_c import AsyncChatStream, ChatStream

__all__ = ["Client", "ClientStream"]

T = TypeVar("T")
Phase = Generator[ChatEvent, None, T]  # a phase yields events and returns its result

CHAT_PATH = "/v1/chat/completions"
CONTROL_PATH = "/v1/chat/completions/control"
POLL_MAX_S = 1.0  # /health and /slots are polled at least this often while waiting
MAX_ERROR_BODY = 1 << 16  # bytes of a non-200 body kept for HttpError


# --- shared with the asyncio client -------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """The server's address, split once from `cfg.infer.url` (a path prefix is kept)."""

    scheme: str
    host: str
    port: int
    prefix: str
    url: str

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urllib.parse.urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"infer.url has no host: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), url.rstrip("/"))

    def path(self, path: str) -> str:
        return self.prefix + path


def backoff_ms(limits: Limits, attempt: int, rng: random.Random) -> int:
    """The pause before retry `attempt` (1-based): retry_base_ms doubled per attempt, capped at
    retry_max_ms, with "equal jitter" (a random point in the upper half of that)."""
    ceiling = min(limits.retry_max_ms, limits.retry_base_ms * (1 << min(attempt - 1, 40)))
    return max(1, round(ceiling / 2 + rng.random() * ceiling / 2))


def poll_delays(limits: Limits) -> Iterator[float]:
    """Seconds between polls of /health or /slots: from retry_base_ms, doubling, at most
    retry_max_ms and at most POLL_MAX_S, so a freed slot or a loaded model is seen soon."""
    delay = limits.retry_base_ms / 1000
    cap = min(limits.retry_max_ms / 1000, POLL_MAX_S)
    while True:
        yield min(delay, cap)
        delay *= 2


def is_loading(status: int, body: str) -> bool:
    """llama-server's answer to every request while it loads its model (chat_while_loading)."""
    return status == 503 and server_message(body) == "Loading model"


def slot_busy(status: int, body: str, slot: int) -> bool:
    """Read a 200 answer of GET /slots: is `slot` processing? Raises ValueError for a slot the
    server does not have (llama-server would silently wrap it: slot_out_of_range.http) and
    ProtocolError for an answer that is not a list of slots."""
    try:
        slots = json.loads(body)
    except ValueError:
        slots = None
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise ProtocolError(
            f"GET /slots answered something that is not a list of slots: {cut(body)}"
        )
    if slot >= len(slots):
        raise ValueError(
            f"slot {slot} does not exist: the server has {len(slots)} slot"
            f"{'' if len(slots) == 1 else 's'} (0 to {len(slots) - 1})"
            if slots
            else f"slot {slot} does not exist: the server reports no slots"
        )
    entry = next((s for s in slots if s.get("id") == slot), slots[slot])
    return entry.get("is_processing") is True


def map_stream_error(err: Exception, limits: Limits) -> InferError:
    """The InferError for a failure of the reader once the stream has started (see Client)."""
    if isinstance(err, SseTimeoutError):
        return StalledError(limits.stall_timeout)
    if isinstance(err, TruncatedError):
        return StreamClosedEarlyError(f"the body was cut: {err}")
    if isinstance(err, SseIoError):
        return StreamClosedEarlyError(f"the connection failed: {err.error!r}")
    if isinstance(err, (LineTooLongError, NotUtf8Error)):
        return ProtocolError(f"the server sent a malformed event stream: {err}")
    if isinstance(err, InferError):
        return err
    return ProtocolError(f"the server sent a malformed response body: {err!r}")


def describe(err: BaseException) -> str:
    return str(err) if isinstance(err, InferError) else f"{type(err).__name__}: {err}"


class Budget:
    """The thinking budget's bookkeeping, one per stream (rule 7)."""

    __slots__ = ("asked", "capped", "hard_cap", "soft")

    def __init__(self, limits: Limits) -> None:
        self.soft = limits.thinking_budget
        self.hard_cap = limits.thinking_hard_cap
        self.asked = False  # reasoning_end was sent (once)
        self.capped = False  # ... and the server accepted it

    def should_end(self, in_reasoning: bool, tokens: int, cid: str | None) -> bool:
        if self.soft and not self.asked and in_reasoning and tokens > self.soft and cid:
            self.asked = True
            return True
        return False

    def overrun(self, in_reasoning: bool, tokens: int) -> bool:
        return bool(self.hard_cap) and in_reasoning and tokens > self.hard_cap


def control_accepted(status: int, body: str) -> bool:
    """The control endpoint's answer: True for `{"success":true}`; a `success:false` answer
    (reasoning_control_unknown_id.http: the completion already ended) is False; any other status
    is the server refusing the request: HttpError."""
    if status != 200:
        raise HttpError(status, body)
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("success"), bool):
        raise ProtocolError(f"the control endpoint answered without a success flag: {cut(body)}")
    return bool(answer["success"])


# --- the per-slot queue --------------------------------------------------------------------


class _SlotQueues:
    """FIFO per slot across this client's threads (rule 1): a ticket is at the head of its
    slot's line while its request runs; the others wait on one condition."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._lines: dict[int, list[object]] = {}

    def enter(self, slot: int, ticket: object) -> None:
        with self._cond:
            self._lines.setdefault(slot, []).append(ticket)

    def leave(self, slot: int, ticket: object) -> None:
        with self._cond:
            line = self._lines.get(slot, [])
            if ticket in line:
                line.remove(ticket)
                self._cond.notify_all()

    def wait(self, slot: int, ticket: object, deadline: float, seconds: float) -> Phase[None]:
        """Yield Queued(ahead) at first and whenever `ahead` shrinks; return at the head."""
        last: int | None = None
        while True:
            with self._cond:
                line = self._lines[slot]
                if ticket not in line:  # closed meanwhile (from another thread)
                    return
                ahead = line.index(ticket)
                if ahead and last is not None and ahead >= last:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise WaitTimeoutError(seconds)
                    self._cond.wait(left)
                    continue
            if not ahead:
                return
            last = ahead
            yield Queued(ahead)


# --- the client ------------------------------------------------------------------------------


class Client:
    """A synchronous llama-server client: standard library only, safe to share across threads.

    `stream(req)` gives a context manager to iterate for ChatEvents (then `.completion`);
    `complete(req, on_event=None)` does that loop for you. One connection per request.

    What it does before the first byte of the answer, and which error ends it:

    - Requests of this client for the same slot run one at a time, in order: `Queued(ahead)`.
    - `GET /slots` first: a slot the server does not have is `ValueError` (the server would
      silently wrap it); a busy slot is `Waiting(slot_busy=True)` and polling, or `BusyError`
      at once with `wait_for_slot = false`. All this waiting, and waiting for the answer's
      first byte (a busy slot is silent on the wire), is bounded by `wait_timeout`:
      `WaitTimeoutError`.
    - A 503 `Loading model` is `Waiting(slot_busy=False)` and polling `/health` until the model
      is loaded, bounded by `load_timeout`: `LoadTimeoutError`.
    - A refused or reset connection or another 503 is retried `retries` times with back-off
      (`Retrying` events), then `ConnectError` (`.error` is the OSError) or `HttpError`.
    - Any other non-200 answer is `HttpError(status, body)` with the server's message.

    Once the stream has started nothing is retried, and the reader's errors map to:

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

    Thinking budget: past `thinking_budget` reasoning tokens the client asks the server (once,
    on its own connection) to end the reasoning: `ThinkingCapped(tokens)`, and the Completion
    has `thinking_capped=True`. Past `thinking_hard_cap` while still reasoning the stream is
    closed: `ThinkingOverrunError`. A control request the server refuses is `HttpError`.
    """

    def __init__(self, cfg: Config) -> None:
        if not isinstance(cfg, Config):
            raise TypeError(f"Client needs a Config, not {type(cfg).__name__}")
        self._cfg = cfg
        self._target = Target.parse(cfg.infer.url)
        self._queues = _SlotQueues()
        self._rng = random.Random()

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

    # --- plain requests (no stream) ------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        t = self._target
        cls = http.client.HTTPSConnection if t.scheme == "https" else http.client.HTTPConnection
        return cls(t.host, t.port, timeout=timeout)

    def _fetch(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        """A small request on its own connection: (status, body text). Raises OSError and
        http.client.HTTPException as they come."""
        timeout = self._cfg.limits.connect_timeout
        conn = self._connection(timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, self._target.path(path), body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read(MAX_ERROR_BODY).decode("utf-8", "replace")
        finally:
            conn.close()

    def _end_reasoning(self, cid: str) -> bool:
        """POST reasoning_end for completion `cid` (rule 7); True if the server took it."""
        payload = json.dumps({"id": cid, "action": "reasoning_end"}).encode()
        try:
            status, text = self._fetch("POST", CONTROL_PATH, payload)
        except OSError as err:
            raise ConnectError(err, self._target.url) from err
        except http.client.HTTPException as err:
            raise ProtocolError(f"the control endpoint's answer is not HTTP: {err!r}") from err
        return control_accepted(status, text)


class StreamState:
    """What both clients' streams show of the response: `.completion` once it has ended, and
    the assembler's state as it arrives (`.id`, `.reasoning_tokens`, ...)."""

    _chat: ChatStream | AsyncChatStream | None
    _completion: Completion | None
    _error: BaseException | None
    _capped: bool

    @property
    def completion(self) -> Completion:
        if self._error is not None:
            raise self._error
        if self._completion is None:
            raise RuntimeError("the stream has not ended yet: iterate it to the end first")
        return self._completion

    @property
    def id(self) -> str | None:
        return None if self._chat is None else self._chat.id

    @property
    def reasoning_tokens(self) -> int:
        return 0 if self._chat is None else self._chat.reasoning_tokens

    @property
    def in_reasoning(self) -> bool:
        return False if self._chat is None else self._chat.in_reasoning

    @property
    def is_finished(self) -> bool:
        return False if self._chat is None else self._chat.is_finished

    @property
    def thinking_capped(self) -> bool:
        return self._capped


class ClientStream(StreamState):
    """One request's events: a context manager and an iterator (from `Client.stream`).

    Iterate for the ChatEvents, then read `.completion`. `.id`, `.reasoning_tokens`,
    `.in_reasoning` and `.is_finished` follow the stream as it arrives. Leaving the `with`
    block, or `close()`, shuts the connection at once (the server then frees the slot).
    """

    def __init__(self, client: Client, req: ChatRequest, body: str) -> None:
        self._client = client
        self._req = req
        self._body = body.encode("utf-8")
        self._ticket = object()
        self._entered = False
        self._t0 = self._deadline = 0.0
        self._gen: Phase[None] = self._run()
        self._chat: ChatStream | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None  # kept: http.client drops it on Connection: close
        self._resp: http.client.HTTPResponse | None = None
        self._completion: Completion | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._attempt = 0
        self._capped = False

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
        self._close_connection()
        try:
            self._gen.close()
        except ValueError:  # running in another thread: the shut socket ends it there
            pass
        self._client._queues.leave(self._req.slot, self._ticket)

    # --- the phases -------------------------------------------------------------------------

    def _enter(self) -> None:
        # Joining the slot's line when the stream is entered (or first iterated) keeps the
        # order of `with client.stream(...)` across threads.
        if not self._entered and not self._closed:
            self._entered = True
            self._t0 = time.monotonic()
            self._client._queues.enter(self._req.slot, self._ticket)

    def _run(self) -> Phase[None]:
        client = self._client
        limits = client._cfg.limits
        slot = self._req.slot
        self._deadline = self._t0 + limits.wait_timeout
        try:
            yield from client._queues.wait(slot, self._ticket, self._deadline, limits.wait_timeout)
            if self._closed:
                return
            yield from self._check_slot()
            resp = yield from self._post()
            yield from self._stream(resp)
        finally:
            self._close_connection()
            client._queues.leave(slot, self._ticket)

    def _retry(self, err: BaseException) -> Phase[None]:
        """Count a failed attempt: Retrying and the back-off, or the final error (rule 4)."""
        client = self._client
        limits = client._cfg.limits
        self._attempt += 1
        if self._attempt > limits.retries:
            if isinstance(err, OSError):
                raise ConnectError(err, client._target.url) from err
            raise err
        after = backoff_ms(limits, self._attempt, client._rng)
        yield Retrying(self._attempt, after, describe(err))
        time.sleep(after / 1000)

    def _check_slot(self) -> Phase[None]:
        """GET /slots: refuse a slot the server lacks, wait while ours is busy (rule 3)."""
        limits = self._client._cfg.limits
        slot = self._req.slot
        delays = None
        while True:
            status, text = yield from self._small("GET", "/slots")
            if status != 200:  # /slots disabled (--no-slots answers 501): nothing to learn
                return
            if not slot_busy(status, text, slot):
                return
            if not limits.wait_for_slot:
                raise BusyError(slot)
            if delays is None:
                delays = poll_delays(limits)
                yield Waiting(slot_busy=True)
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError(limits.wait_timeout)
            time.sleep(min(next(delays), left))

    def _small(self, method: str, path: str) -> Phase[tuple[int, str]]:
        """A small request with the rules of the first byte: retries, model load; returns
        (status, text) for any answer but a 503."""
        client = self._client
        while True:
            try:
                status, text = client._fetch(method, path)
            except OSError as err:
                yield from self._retry(err)
                continue
            except http.client.HTTPException as err:
                raise ProtocolError(f"the answer to {method} {path} is not HTTP: {err!r}") from err
            if is_loading(status, text):
                yield from self._wait_loaded()
                continue
            if status == 503:
                yield from self._retry(HttpError(status, text))
                continue
            return status, text

    def _wait_loaded(self) -> Phase[None]:
        """Waiting(slot_busy=False), then poll /health until 200 or load_timeout (rule 2)."""
        client = self._client
        limits = client._cfg.limits
        yield Waiting(slot_busy=False)
        start = time.monotonic()
        deadline = start + limits.load_timeout
        for delay in poll_delays(limits):
            left = deadline - time.monotonic()
            if left <= 0:
                raise LoadTimeoutError(limits.load_timeout)
            time.sleep(min(delay, left))
            try:
                status, _ = client._fetch("GET", "/health")
            except (OSError, http.client.HTTPException):
                continue  # a server that is starting may not even listen yet
            if status != 503:
                break
        self._deadline += time.monotonic() - start  # loading is not waiting for the slot

    def _post(self) -> Phase[http.client.HTTPResponse]:
        """POST the chat; the 200 response with its headers read (rules 2, 4, 5)."""
        client = self._client
        limits = client._cfg.limits
        path = client._target.path(CHAT_PATH)
        while True:
            conn = client._connection(limits.connect_timeout)
            self._conn = conn
            try:
                conn.connect()
                # Until the first byte: a busy slot is silent, so this is waiting for the slot.
                sock = conn.sock
                assert sock is not None
                self._sock = sock
                sock.settimeout(max(self._deadline - time.monotonic(), limits.stall_timeout))
                conn.request(
                    "POST",
                    path,
                    body=self._body,
                    headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
                )
                resp = conn.getresponse()
                self._resp = resp
            except TimeoutError as err:
                if self._sock is None:  # the connect itself timed out
                    self._close_connection()
                    yield from self._retry(err)
                    continue
                raise WaitTimeoutError(limits.wait_timeout) from err
            except OSError as err:
                self._close_connection()
                yield from self._retry(err)
                continue
            except http.client.HTTPException as err:
                raise ProtocolError(f"the answer to POST {path} is not HTTP: {err!r}") from err
            if resp.status == 200:
                ctype = resp.getheader("Content-Type", "")
                if not ctype.startswith("text/event-stream"):
                    text = resp.read(MAX_ERROR_BODY).decode("utf-8", "replace")
                    raise ProtocolError(
                        f"the server answered 200 with Content-Type {ctype!r}, not an event "
                        f"stream: {cut(text)}"
                    )
                sock.settimeout(limits.stall_timeout)
                return resp
            try:
                text = resp.read(MAX_ERROR_BODY).decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                text = ""
            self._close_connection()
            if is_loading(resp.status, text):
                yield from self._wait_loaded()
                continue
            if resp.status == 503:
                yield from self._retry(HttpError(resp.status, text))
                continue
            raise HttpError(resp.status, text)

    def _stream(self, resp: http.client.HTTPResponse) -> Phase[None]:
        """The events of the body; nothing is retried from here on (rules 5, 6, 7)."""
        client = self._client
        limits = client._cfg.limits
        chat = ChatStream(resp, limits.max_line)
        self._chat = chat
        budget = Budget(limits)
        try:
            for event in chat:
                yield event
                in_reasoning = chat.in_reasoning
                tokens = chat.reasoning_tokens
                if budget.should_end(in_reasoning, tokens, chat.id):
                    assert chat.id is not None
                    if client._end_reasoning(chat.id):
                        self._capped = True
                        yield ThinkingCapped(tokens)
                if budget.overrun(in_reasoning, tokens):
                    self._close_connection()
                    raise ThinkingOverrunError(tokens, limits.thinking_hard_cap)
            completion = chat.completion
        except (SseError, ValueError, http.client.HTTPException) as err:
            raise map_stream_error(err, limits) from err
        if self._capped:
            completion = dataclasses.replace(completion, thinking_capped=True)
        self._completion = completion

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
