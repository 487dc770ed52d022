# Strategy: every rule of the two clients, once, with no I/O (h11's manner). A request is a plain
# generator that yields commands (Fetch, Open, AwaitHead, ReadBody, CloseResponse, Sleep,
# WaitTurn, Emit) and is sent their results, or thrown the transport's OSError / NotHttp; the
# sync and asyncio clients are loops that carry the commands out. The clock is injected, so the
# rules run in tests against a fake clock and a scripted server.
"""The sans-I/O core of `Client` and `AsyncClient`: the phases of a request and their errors."""

from __future__ import annotations

import dataclasses
import json
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

from ._config import Config, Limits
from ._errors import (
    BusyError,
    ConnectError,
    HttpError,
    InferError,
    LineTooLongError,
    LoadTimeoutError,
    NotHttp,
    NotUtf8Error,
    ProtocolError,
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

__all__ = [
    "CHAT_PATH",
    "CONTROL_PATH",
    "MAX_ERROR_BODY",
    "MAX_SLOTS_BODY",
    "AwaitHead",
    "CloseResponse",
    "Core",
    "Emit",
    "Fetch",
    "Head",
    "NotHttp",
    "Open",
    "ReadBody",
    "RequestCore",
    "Sleep",
    "StreamState",
    "Target",
    "WaitTurn",
]

T = TypeVar("T")
Phase = Generator[Any, Any, T]  # yields commands, is sent their results, returns T

CHAT_PATH = "/v1/chat/completions"
CONTROL_PATH = "/v1/chat/completions/control"
POLL_MAX_S = 1.0  # /health is polled at least this often while a model loads
MAX_ERROR_BODY = 1 << 16  # bytes of an error answer (or /health, control) kept
# /slots grows with the slot count (about 1.3 KB a slot in llama-server's shape): its own limit.
MAX_SLOTS_BODY = 1 << 26


# --- the commands ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Emit:
    """Hand `event` to the caller."""

    event: ChatEvent


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    """Sleep until the clock reads `until`."""

    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class WaitTurn:
    """Wait until the ticket has moved in its slot's line (its `moves` is no longer `seen`) or
    the clock reads `until`, whichever comes first."""

    ticket: Ticket
    seen: int
    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class Fetch:
    """A small request on its own connection, read whole (at most `limit` bytes): the result is
    (status, text). Transport failures are thrown in: OSError, or NotHttp for a malformed
    answer."""

    method: str
    path: str
    body: bytes | None = None
    limit: int = MAX_ERROR_BODY


@dataclasses.dataclass(frozen=True, slots=True)
class Open:
    """Connect, send the chat request, and wait for the answer's head until `until`: the
    result is the Head, or None when `until` came first (the request stays open). A failure to
    connect or send, or a connection lost before the head, is thrown in as OSError."""

    path: str
    body: bytes
    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class AwaitHead:
    """Go on waiting for the open request's head until `until`: the Head or None."""

    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class ReadBody:
    """Read the open answer's body whole, at most `limit` bytes: the text (empty if the
    connection fails: an error answer's body is a courtesy)."""

    limit: int


@dataclasses.dataclass(frozen=True, slots=True)
class CloseResponse:
    """Close the open request's connection."""


@dataclasses.dataclass(frozen=True, slots=True)
class Head:
    status: int
    content_type: str


# --- the server's address and small rules -----------------------------------------------------


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
    """Seconds between polls of /health: from retry_base_ms, doubling, at most retry_max_ms and
    at most POLL_MAX_S, so a loaded model is seen soon."""
    delay = limits.retry_base_ms / 1000
    cap = min(limits.retry_max_ms / 1000, POLL_MAX_S)
    while True:
        yield min(delay, cap)
        delay *= 2


def is_loading(status: int, body: str) -> bool:
    """llama-server's answer to every request while it loads its model (chat_while_loading)."""
    return status == 503 and server_message(body) == "Loading model"


def read_slots(text: str) -> dict[int, bool]:
    """The 200 answer of GET /slots as {slot position: is processing}. Only `id` and
    `is_processing` are read; an answer that is not a list of slots is ProtocolError."""
    try:
        slots = json.loads(text)
    except ValueError:
        slots = None
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise ProtocolError(
            f"GET /slots answered something that is not a list of slots: {cut(text)}"
        )
    busy = {i: s.get("is_processing") is True for i, s in enumerate(slots)}
    for s in slots:  # a slot's own id wins over its position, where it has one
        sid = s.get("id")
        if isinstance(sid, int) and 0 <= sid < len(slots):
            busy[sid] = s.get("is_processing") is True
    return busy


def check_slot(slot: int, count: int) -> None:
    """A slot the server does not have is ValueError: llama-server would silently wrap it
    (slot_out_of_range.http)."""
    if slot < count:
        return
    raise ValueError(
        f"slot {slot} does not exist: the server has {count} slot"
        f"{'' if count == 1 else 's'} (0 to {count - 1})"
        if count
        else f"slot {slot} does not exist: the server reports no slots"
    )


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


def map_stream_error(err: Exception, limits: Limits) -> InferError:
    """The InferError for a failure of the reader once the stream has started."""
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


# --- the per-slot lines ------------------------------------------------------------------------


class Ticket:
    """One pinned request's place in its slot's line; `moves` counts how often it moved up,
    `waker` is the driver's own (an asyncio future, say) to wake it."""

    __slots__ = ("moves", "slot", "waker")

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.moves = 0
        self.waker: Any = None


class Lines:
    """FIFO per slot among one client's requests: the head of a slot's line runs. Safe across
    threads (one lock); `leave` returns the tickets that moved up, for the driver to wake."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: dict[int, list[Ticket]] = {}

    def enter(self, ticket: Ticket) -> None:
        with self._lock:
            self._lines.setdefault(ticket.slot, []).append(ticket)

    def leave(self, ticket: Ticket) -> list[Ticket]:
        with self._lock:
            line = self._lines.get(ticket.slot, [])
            if ticket not in line:
                return []
            at = line.index(ticket)
            del line[at]
            moved = line[at:]
            for behind in moved:
                behind.moves += 1
            ticket.moves += 1  # its own waiter (closed from elsewhere) wakes and sees it left
            moved.append(ticket)
            if not line:
                del self._lines[ticket.slot]
            return moved

    def ahead(self, ticket: Ticket) -> tuple[int, int] | None:
        """(requests ahead of `ticket`, its `moves`), or None once it has left."""
        with self._lock:
            line = self._lines.get(ticket.slot)
            if line is None or ticket not in line:
                return None
            return line.index(ticket), ticket.moves


# --- the client's and the request's state -------------------------------------------------------


class Core:
    """What one client keeps across its requests: the config, the lines, the cached slot
    count (asked once, forgotten when the server restarts or refuses), the jitter's source."""

    def __init__(
        self,
        cfg: Config,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg = cfg
        self.limits = cfg.limits
        self.target = Target.parse(cfg.infer.url)
        self.clock = clock
        self.rng = rng or random.Random()
        self.lines = Lines()
        self.slot_count: int | None = None
        key = cfg.infer.api_key
        # Every request the clients make carries the key (llama-server's --api-key).
        self.headers: dict[str, str] = {} if key is None else {"Authorization": f"Bearer {key}"}

    def __repr__(self) -> str:
        return f"Core({self.target.url!r})"


class StreamState:
    """What both clients' streams show of the response: `.completion` once it has ended, and
    the assembler's state as it arrives (`.id`, `.reasoning_tokens`, ...)."""

    _chat: Any
    _completion: Completion | None
    _error: BaseException | None
    _core: RequestCore

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
        return self._core.capped

    def partial_arguments(self, index: int) -> Any:
        """The arguments of tool call `index` parsed as far as they have arrived (see
        `Assembler.partial_arguments`); IndexError before that call has begun."""
        if self._chat is None:
            raise IndexError(f"there is no tool call {index} yet: no chunk has arrived")
        return self._chat.partial_arguments(index)


class RequestCore:
    """The rules of one request, from joining its slot's line to the end of its stream.

    Before the first byte (`phases`):

    - Requests of one client pinned to the same slot run one at a time, in order:
      `Queued(ahead)` at first and whenever it shrinks. `slot=None` requests are not ordered.
    - The chat request is sent at once. `GET /slots` is asked only to learn the slot count
      (once per client: a slot the server lacks is ValueError), with `wait_for_slot = false`
      (a busy slot is BusyError before sending), and when the first byte is late (after
      `slot_check_delay`: a busy slot is `Waiting(slot_busy=True)`). Waiting for the line and
      for the first byte is bounded by `wait_timeout`: WaitTimeoutError.
    - A 503 `Loading model` is `Waiting(slot_busy=False)` (once) and polling `/health`,
      bounded by `load_timeout` from the first such answer, however many come.
    - A refused or reset connection or another 503 is retried `retries` times with back-off
      and jitter (`Retrying`), then ConnectError or HttpError; any other non-200 answer is
      HttpError, not retried.

    Once the stream has started (`budget_step`, `stream_error`, `finish`): nothing is
    retried; the thinking budget asks the server once to end the reasoning (`ThinkingCapped`);
    reasoning past the hard cap is ThinkingOverrunError; the reader's errors map to the table
    of `map_stream_error`.
    """

    def __init__(self, core: Core, req: ChatRequest, body: bytes) -> None:
        self.core = core
        self.req = req
        self.body = body
        self.slot = req.slot
        self.ticket: Ticket | None = None if req.slot is None else Ticket(req.slot)
        self.closed = False
        self.attempt = 0
        self.capped = False
        self.deadline = 0.0  # of waiting for the slot (line and first byte)
        self.load_deadline: float | None = None
        self.said_busy = False
        self.probed = False
        limits = core.limits
        self.soft = limits.thinking_budget
        self.hard_cap = limits.thinking_hard_cap
        self.asked = False  # reasoning_end was sent (once)
        self.watch_budget = bool(self.soft or self.hard_cap)

    # --- the line ------------------------------------------------------------------------------

    def enter(self) -> None:
        """Join the slot's line and start the wait_timeout clock (when the stream is entered,
        so `with client.stream(...)` order is the order across threads and tasks)."""
        self.deadline = self.core.clock() + self.core.limits.wait_timeout
        if self.ticket is not None:
            self.core.lines.enter(self.ticket)

    def leave(self) -> list[Ticket]:
        """Leave the line (idempotent); the tickets that moved up, for the driver to wake."""
        return [] if self.ticket is None else self.core.lines.leave(self.ticket)

    # --- before the first byte -----------------------------------------------------------------

    def phases(self) -> Phase[bool]:
        """Up to a 200 event-stream head; False if the stream was closed while in line."""
        core = self.core
        limits = core.limits
        if self.ticket is not None:
            if not (yield from self._wait_turn()):
                return False
        if not limits.wait_for_slot or (self.slot is not None and core.slot_count is None):
            busy = yield from self._ask_slots(strict=True)
            if busy:
                self.probed = True  # what a late first byte would ask, this request knows
                if not limits.wait_for_slot:
                    raise BusyError(self.slot)
                self.said_busy = True
                yield Emit(Waiting(slot_busy=True))
        elif self.slot is not None and core.slot_count is not None:
            check_slot(self.slot, core.slot_count)
        yield from self._post()
        return True

    def _wait_turn(self) -> Phase[bool]:
        ticket = self.ticket
        assert ticket is not None
        lines = self.core.lines
        last: int | None = None
        while True:
            place = lines.ahead(ticket)
            if place is None:  # closed meanwhile
                return False
            ahead, moves = place
            if not ahead:
                return True
            if last is None or ahead < last:
                last = ahead
                yield Emit(Queued(ahead))
                continue
            if self.core.clock() >= self.deadline:
                raise WaitTimeoutError(self.core.limits.wait_timeout)
            yield WaitTurn(ticket, moves, self.deadline)

    def _ask_slots(self, strict: bool) -> Phase[bool]:
        """GET /slots: is our slot (or, for slot=None, every slot) busy? Learns the slot count;
        `strict`: a slot the server lacks is ValueError and a malformed answer ProtocolError
        (the probe while waiting is only a courtesy: it fails quietly)."""
        core = self.core
        if strict:
            status, text = yield from self._small("GET", "/slots", MAX_SLOTS_BODY)
        else:
            try:
                status, text = yield Fetch("GET", "/slots", None, MAX_SLOTS_BODY)
            except (OSError, NotHttp):
                return False
        if status != 200:  # /slots disabled (--no-slots answers 501): nothing to learn
            return False
        try:
            busy = read_slots(text)
        except ProtocolError:
            if strict:
                raise
            return False
        core.slot_count = len(busy)
        if self.slot is None:
            return bool(busy) and all(busy.values())
        check_slot(self.slot, len(busy))
        return busy[self.slot]

    def _retry(self, err: BaseException) -> Phase[None]:
        """Count a failed attempt: Retrying and the back-off, or the final error."""
        core = self.core
        limits = core.limits
        self.attempt += 1
        core.slot_count = None  # a refusal may be a restart: ask the slot count again
        # A refused TLS handshake (no TLS on that port, a certificate not accepted) fails the
        # same way every time: not retried. An EOF may be a server restarting: retried.
        fatal = isinstance(err, ssl.SSLError) and not isinstance(err, ssl.SSLEOFError)
        if self.attempt > limits.retries or fatal:
            if isinstance(err, OSError):
                raise ConnectError(err, core.target.url) from err
            raise err
        after = backoff_ms(limits, self.attempt, core.rng)
        yield Emit(Retrying(self.attempt, after, describe(err)))
        yield Sleep(core.clock() + after / 1000)

    def _small(self, method: str, path: str, limit: int) -> Phase[tuple[int, str]]:
        """A small request under the rules of the first byte: retries, model load; returns
        (status, text) for any answer but a 503."""
        while True:
            try:
                status, text = yield Fetch(method, path, None, limit)
            except OSError as err:
                yield from self._retry(err)
                continue
            except NotHttp as err:
                raise ProtocolError(f"the answer to {method} {path} is not HTTP: {err}") from err
            if is_loading(status, text):
                yield from self._wait_loaded()
                continue
            if status == 503:
                yield from self._retry(HttpError(status, text))
                continue
            return status, text

    def _wait_loaded(self) -> Phase[None]:
        """Waiting(slot_busy=False) once, then poll /health until it answers other than 503;
        the whole request waits for a load at most load_timeout from the first loading answer
        (a proxy may say 200 on /health while the chat still answers loading)."""
        core = self.core
        limits = core.limits
        clock = core.clock
        start = clock()
        if self.load_deadline is None:
            self.load_deadline = start + limits.load_timeout
            yield Emit(Waiting(slot_busy=False))
        for delay in poll_delays(limits):
            left = self.load_deadline - clock()
            if left <= 0:
                raise LoadTimeoutError(limits.load_timeout)
            yield Sleep(clock() + min(delay, left))
            try:
                status, _ = yield Fetch("GET", "/health")
            except (OSError, NotHttp):
                continue  # a server that is starting may not even listen yet
            if status != 503:
                break
        self.deadline += clock() - start  # loading is not waiting for the slot
        core.slot_count = None  # a new model, maybe a new server: ask the slot count again

    def _post(self) -> Phase[None]:
        """POST the chat until a 200 event-stream head (the stream may start)."""
        core = self.core
        limits = core.limits
        clock = core.clock
        path = core.target.path(CHAT_PATH)
        while True:
            # Until the first byte: a busy slot is silent on the wire, so this is waiting for
            # the slot; at least stall_timeout, however little of wait_timeout is left.
            until = max(self.deadline, clock() + limits.stall_timeout)
            if self.said_busy:  # the slot is busy: its answer is waiting for the slot
                until = self.deadline
            check_at = until if self.probed else min(until, clock() + limits.slot_check_delay)
            try:
                head = yield Open(path, self.body, check_at)
                while head is None and clock() < until:
                    if not self.probed:
                        self.probed = True
                        busy = yield from self._ask_slots(strict=False)
                        if busy and not self.said_busy:
                            self.said_busy = True
                            until = min(until, max(self.deadline, clock()))
                            yield Emit(Waiting(slot_busy=True))
                    head = yield AwaitHead(until)
            except OSError as err:  # refused, reset, connect timeout: before the first byte
                yield CloseResponse()
                yield from self._retry(err)
                continue
            except NotHttp as err:
                raise ProtocolError(f"the answer to POST {path} is not HTTP: {err}") from err
            if head is None:
                raise WaitTimeoutError(limits.wait_timeout)
            if head.status == 200:
                if not head.content_type.startswith("text/event-stream"):
                    text = yield ReadBody(MAX_ERROR_BODY)
                    raise ProtocolError(
                        f"the server answered 200 with Content-Type {head.content_type!r}, not "
                        f"an event stream: {cut(text)}"
                    )
                return
            text = yield ReadBody(MAX_ERROR_BODY)
            yield CloseResponse()
            if is_loading(head.status, text):
                yield from self._wait_loaded()
                continue
            if head.status == 503:
                yield from self._retry(HttpError(head.status, text))
                continue
            raise HttpError(head.status, text)

    # --- the stream ----------------------------------------------------------------------------

    def budget_step(self, in_reasoning: bool, tokens: int, cid: str | None) -> Phase[None] | None:
        """After each event while `watch_budget`: None, or the commands to carry out now (the
        reasoning_end request and ThinkingCapped). Past the hard cap: ThinkingOverrunError."""
        if not in_reasoning:
            return None
        if self.soft and not self.asked and tokens > self.soft and cid:
            self.asked = True
            return self._end_reasoning(cid, tokens)
        self._check_overrun(tokens)
        return None

    def _check_overrun(self, tokens: int) -> None:
        if self.hard_cap and tokens > self.hard_cap:
            raise ThinkingOverrunError(tokens, self.hard_cap)

    def _end_reasoning(self, cid: str, tokens: int) -> Phase[None]:
        """POST reasoning_end for completion `cid`, once; ThinkingCapped if the server took it."""
        core = self.core
        payload = json.dumps({"id": cid, "action": "reasoning_end"}).encode()
        try:
            status, text = yield Fetch("POST", CONTROL_PATH, payload)
        except OSError as err:
            raise ConnectError(err, core.target.url) from err
        except NotHttp as err:
            raise ProtocolError(f"the control endpoint's answer is not HTTP: {err}") from err
        if control_accepted(status, text):
            self.capped = True
            yield Emit(ThinkingCapped(tokens))
        self._check_overrun(tokens)

    def stream_error(self, err: Exception) -> InferError:
        return map_stream_error(err, self.core.limits)

    def finish(self, completion: Completion) -> Completion:
        if self.capped:
            return dataclasses.replace(completion, thinking_capped=True)
        return completion
