# Strategy: every rule of the two clients, once, with no I/O (h11's manner). A request is a plain
# generator that yields commands (Connect, Receive, Close, Sleep, WaitTurn, Emit) and is sent their
# results; the drivers (the asyncio one in _aclient.py, the sync one generated from it) only carry
# them out: open a connection and send, wait for bytes, sleep. The bytes that arrive are parsed
# into the connection (a Receiver: the response parser, then the Sink) by the same arrival path
# in both drivers, and the core reads what came from there: the head, the body, the end, every
# fault, every deadline. The clock is injected, so the rules run in tests against a fake clock.
"""The sans-I/O core of `Client` and `AsyncClient`: the phases of a request and their errors."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar
from urllib.parse import quote

from ._config import Config, Limits
from ._engine import _twins
from ._engine._chat_py import _CLOSED, _NOT_ENDED  # ChatStream's words, for the same states
from ._errors import (
    BusyError,
    ConnectError,
    ContextOverflowError,
    HandshakeTimeout,
    HttpError,
    HttpParseError,
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
    http_error,
    server_message,
)
from ._url import Target
from ._values import (
    ChatEvent,
    ChatRequest,
    Completion,
    ModelInfo,
    Queued,
    Ranked,
    Retrying,
    ServerProps,
    ThinkingCapped,
    Waiting,
)

__all__ = [
    "CHAT_PATH",
    "CONTROL_PATH",
    "EMBED_PATH",
    "MAX_ERROR_BODY",
    "MAX_SLOTS_BODY",
    "RERANK_PATH",
    "CallCore",
    "Close",
    "Connect",
    "Core",
    "EmbedPlan",
    "Emit",
    "Receive",
    "RequestCore",
    "ServerCall",
    "Sleep",
    "StreamState",
    "Target",
    "WaitTurn",
    "not_served",
    "read_models",
    "read_props",
    "read_ranked",
    "request_bytes",
    "rerank_body",
    "text_of",
]

# One DEBUG line per request, wait, retry and thinking cap (docs/client.md, rule LOG): the
# URL with its password as ***, counts and ids; never a header (the API key) or message text.
log = logging.getLogger("llamafast")

T = TypeVar("T")
Phase = Generator[Any, Any, T]  # yields commands, is sent their results, returns T

CHAT_PATH = "/v1/chat/completions"
CONTROL_PATH = "/v1/chat/completions/control"
INPUT_TOKENS_PATH = "/v1/chat/completions/input_tokens"
POLL_MAX_S = 1.0  # /health is polled at least this often while a model loads
MAX_ERROR_BODY = 1 << 16  # bytes of an error answer (or /health, control) kept
# /slots grows with the slot count (about 1.3 KB a slot in llama-server's shape): its own limit.
MAX_SLOTS_BODY = 1 << 26
EMBED_PATH = "/v1/embeddings"
RERANK_PATH = "/rerank"
# An embeddings answer holds every vector of a batch (64 x 4,096 float32 in base64: 1.4 MB).
MAX_VECTORS_BODY = 1 << 31
NEEDS_MODEL = "model name is missing from the request"  # a router's 400 to a /slots without one


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
class Connect:
    """Open a connection to the server and send `request` on it, before the clock reads
    `until`. The result is the connection: a Receiver (`parser`, `early`, `received`, `eof`,
    `error`, `stalled`) into which the driver parses every byte that arrives. A failure to
    connect or send is thrown in as the OSError."""

    request: bytes
    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class Receive:
    """Wait until bytes arrive on `conn` (parsed into it), it ends or fails (`eof`, `error`
    set), or the clock reads `until`, whichever comes first. The result is None: the core
    reads what happened from `conn`."""

    conn: Any
    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class Close:
    """Close `conn` now (the server sees it at once)."""

    conn: Any


# --- the server's address and small rules -----------------------------------------------------


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


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        raise ProtocolError(f"{what} answered something that is not a JSON object: {cut(text)}")
    return answer


def read_props(text: str) -> ServerProps:
    """The 200 answer of GET /props as ServerProps: `default_generation_settings.n_ctx`,
    `model_alias` (else `model_path`), the `modalities` that are true, `total_slots` (0 when
    absent, as a router's own answer). An answer without an integer n_ctx is ProtocolError."""
    props = _json_object(text, "GET /props")
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if type(n_ctx) is not int:
        raise ProtocolError(f"GET /props answered without an integer context size: {cut(text)}")
    model = props.get("model_alias")
    if not isinstance(model, str):
        model = props.get("model_path")
    modalities = props.get("modalities")
    slots = props.get("total_slots")
    return ServerProps(
        n_ctx=n_ctx,
        model=model if isinstance(model, str) else "",
        modalities=frozenset(k for k, v in modalities.items() if v is True)
        if isinstance(modalities, dict)
        else frozenset(),
        slots=slots if type(slots) is int else 0,
    )


def read_models(text: str) -> tuple[tuple[ModelInfo, tuple[str, ...]], ...] | None:
    """The 200 answer of GET /models as (ModelInfo, its aliases) per model, or None when the
    server is not a router (its entries carry no `status`: its one model is loaded and a
    request's `model` is not routed). An answer without a `data` list is ProtocolError."""
    data = _json_object(text, "GET /models").get("data")
    if not isinstance(data, list) or not all(
        isinstance(m, dict) and isinstance(m.get("id"), str) for m in data
    ):
        raise ProtocolError(f"GET /models answered without a list of models: {cut(text)}")
    router = any(isinstance(m.get("status"), dict) for m in data)
    out = []
    for m in data:
        status = m.get("status")
        state = status.get("value") if isinstance(status, dict) else None
        aliases = m.get("aliases")
        names = tuple(a for a in aliases if isinstance(a, str)) if isinstance(aliases, list) else ()
        out.append((ModelInfo(m["id"], state if isinstance(state, str) else "loaded"), names))
    return tuple(out) if router else None


def _model_entry(models: tuple[tuple[ModelInfo, tuple[str, ...]], ...], name: str) -> ModelInfo:
    """The router's entry for `name` (an id or an alias); an unknown name is ValueError naming
    it and the models the server has."""
    for info, aliases in models:
        if name == info.id or name in aliases:
            return info
    ids = [cut(info.id, 80) for info, _ in models]
    known = ", ".join(ids[:10]) + (f", ... ({len(ids)} in all)" if len(ids) > 10 else "")
    raise ValueError(f"the server has no model {cut(name)} (its models: {known or 'none'})")


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
    if isinstance(err, HttpParseError):
        return ProtocolError(f"the server's answer is not HTTP/1.1: {err}")
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
        # Re-entrant: a dropped stream's finalizer leaves its line, whatever thread runs it.
        self._lock = threading.RLock()
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
    count (asked once, forgotten when the server restarts or refuses), the jitter's source,
    and the twin whose Sink turns a body into events."""

    def __init__(
        self,
        cfg: Config,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        sink: Callable[[int], Any] | None = None,
    ) -> None:
        self.cfg = cfg
        self.limits = cfg.limits
        self.target = Target.parse(cfg.infer.url)
        self.clock = clock
        self.rng = rng or random.Random()
        self.lines = Lines()
        self.slot_count: int | None = None
        # Cached until the server may have restarted (`forget`): its props, whether it has the
        # input_tokens endpoint, the router's models seen loaded.
        self.props: ServerProps | None = None
        self.input_tokens: bool | None = None
        self.ready_models: set[str] = set()
        self.router: bool | None = None  # a router (several models, /slots per model)?
        self.sink = _twins.SELECTED.Sink if sink is None else sink
        key = cfg.infer.api_key
        # Every request the clients make carries the key (llama-server's --api-key), or the
        # URL's user and password (the config refuses both at once).
        auth = self.target.auth_header if key is None else f"Bearer {key}"
        self.headers: dict[str, str] = {} if auth is None else {"Authorization": auth}

    def forget(self) -> None:
        """What the client knows of the server is stale: a connection refused or reset, a 503,
        a model loading are the signs of a server (re)starting, so the slot count, the props,
        the endpoints and the loaded models are asked again."""
        self.slot_count = None
        self.props = None
        self.input_tokens = None
        self.ready_models.clear()
        self.router = None

    def request(self, method: str, path: str, body: bytes | None = None) -> bytes:
        """One HTTP/1.1 request to the server, head and body."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if path == CHAT_PATH:
            headers["Accept"] = "text/event-stream"
        headers.update(self.headers)
        return request_bytes(method, self.target, self.target.path(path), body, headers)

    def __repr__(self) -> str:
        return f"Core({self.target.url!r})"


def request_bytes(
    method: str, target: Target, path: str, body: bytes | None, headers: dict[str, str]
) -> bytes:
    """One HTTP/1.1 request: head and body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {target.host_header}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if body is None else head + body


class StreamState:
    """What both clients' streams show of the response: `.completion` once it has ended, and
    the assembler's state as it arrives (`.id`, `.reasoning_tokens`, ...)."""

    _chat: Any
    _completion: Completion | None
    _error: BaseException | None
    _closed: bool
    _core: RequestCore

    @property
    def completion(self) -> Completion:
        """The Completion once iteration has ended cleanly (as `ChatStream.completion`)."""
        if self._completion is not None:
            return self._completion
        if self._error is not None:
            raise self._error
        raise RuntimeError(_CLOSED if self._closed else _NOT_ENDED)

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


def _fatal(err: BaseException) -> bool:
    """A failure that fails the same way every time, so it is not retried: a name that does
    not resolve, a refused TLS handshake (no TLS on that port, a certificate not accepted; an
    EOF may be a server restarting and is retried), a handshake that never finishes."""
    if isinstance(err, socket.gaierror):
        return True
    if isinstance(err, ssl.SSLError):
        return not isinstance(err, ssl.SSLEOFError)
    return isinstance(err, HandshakeTimeout)


def _answered(conn: Any) -> bool:
    """Some byte of an answer has come."""
    return bool(conn.received)


def _head_done(conn: Any) -> bool:
    return bool(conn.parser.head_done)


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
      HttpError, not retried. Once any byte of an answer has come, nothing is sent again.

    Once the stream has started (`next_events`, `budget_step`): nothing is retried; the
    thinking budget asks the server once to end the reasoning (`ThinkingCapped`); reasoning
    past the hard cap is ThinkingOverrunError; the reader's errors map to the table of
    `map_stream_error`.
    """

    def __init__(
        self, core: Core, req: ChatRequest, body: bytes, limits: Limits | None = None
    ) -> None:
        self.core = core
        self.req = req
        self.body = body
        # This request's bounds: the client's, or those the call gave (LIMITS).
        self.limits = core.limits if limits is None else limits
        self.slot = req.slot
        self.ticket: Ticket | None = None if req.slot is None else Ticket(req.slot)
        self.closed = False
        self.attempt = 0
        self.capped = False
        self.deadline = 0.0  # of waiting for the slot (line and first byte)
        self.load_deadline: float | None = None
        self.said_busy = False
        self.probed = False
        self.conn: Any = None  # the chat's connection, once the stream may start
        self.sink: Any = None
        self.completion: Completion | None = None  # once next_events has seen the end
        limits = self.limits
        self.soft = limits.thinking_budget
        self.hard_cap = limits.thinking_hard_cap
        self.asked = False  # reasoning_end was sent (once)
        self.watch_budget = bool(self.soft or self.hard_cap)

    # --- the line ------------------------------------------------------------------------------

    def enter(self) -> None:
        """Join the slot's line and start the wait_timeout clock (when the stream is entered,
        so `with client.stream(...)` order is the order across threads and tasks)."""
        self.deadline = self.core.clock() + self.limits.wait_timeout
        if self.ticket is not None:
            self.core.lines.enter(self.ticket)

    def leave(self) -> list[Ticket]:
        """Leave the line (idempotent); the tickets that moved up, for the driver to wake."""
        return [] if self.ticket is None else self.core.lines.leave(self.ticket)

    # --- before the first byte -----------------------------------------------------------------

    def _say(self, event: ChatEvent) -> Emit:
        """Emit `event`, with its DEBUG line (LOG)."""
        if log.isEnabledFor(logging.DEBUG):
            slot = "any slot" if self.slot is None else f"slot {self.slot}"
            match event:
                case Queued(ahead):
                    log.debug("%s: %d earlier request(s) of this client ahead", slot, ahead)
                case Waiting(True):
                    log.debug("%s: waiting, the slot is busy", slot)
                case Waiting(False):
                    log.debug("%s: waiting, the server is loading its model", slot)
                case Retrying(attempt, after_ms, error):
                    log.debug("%s: retry %d in %d ms after: %s", slot, attempt, after_ms, error)
                case ThinkingCapped(tokens):
                    log.debug("%s: thinking capped after %d reasoning tokens", slot, tokens)
        return Emit(event)

    def phases(self) -> Phase[bool]:
        """Up to a 200 event-stream head (`conn` is then the open answer); False if the
        stream was closed while in line."""
        core = self.core
        target = core.target
        # No user info and no query in the line: either may hold a credential.
        log.debug(
            "POST %s://%s%s%s: %s, %d message(s), %d bytes",
            target.scheme,
            target.host_header,
            target.prefix,
            CHAT_PATH,
            "any slot" if self.slot is None else f"slot {self.slot}",
            len(self.req.messages),
            len(self.body),
        )
        limits = self.limits
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
                yield self._say(Waiting(slot_busy=True))
        elif self.slot is not None and core.slot_count is not None:
            check_slot(self.slot, core.slot_count)
        model = self.req.model
        if model is not None and model not in core.ready_models:
            yield from self._check_model(model)
        yield from self._post()
        if model is not None:
            core.ready_models.add(model)
        return True

    def _check_model(self, model: str) -> Phase[None]:
        """A request that names its model, on a router: an unknown model is ValueError naming
        it; one that is not loaded yet is `Waiting(slot_busy=False)`, and the wait for the
        first byte (the router loads the model, then answers) is bounded by load_timeout on
        top of wait_timeout. A server that is not a router ignores `model`."""
        core = self.core
        status, text = yield from self._small("GET", "/models", MAX_SLOTS_BODY, self.deadline)
        if status != 200:
            return  # no model list: the chat's own answer says what is wrong
        models = read_models(text)
        core.router = models is not None
        if models is None:
            return
        info = _model_entry(models, model)
        if info.state == "loaded":
            core.ready_models.add(model)
            return
        limits = core.limits
        self.load_deadline = core.clock() + limits.load_timeout
        self.deadline += limits.load_timeout  # loading is not waiting for the slot
        yield Emit(Waiting(slot_busy=False))

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
                yield self._say(Queued(ahead))
                continue
            if self.core.clock() >= self.deadline:
                raise WaitTimeoutError(self.limits.wait_timeout)
            yield WaitTurn(ticket, moves, self.deadline)

    def _ask_slots(self, strict: bool) -> Phase[bool]:
        """GET /slots: is our slot (or, for slot=None, every slot) busy? Learns the slot count;
        `strict`: a slot the server lacks is ValueError and a malformed answer ProtocolError
        (the probe while waiting is only a courtesy: it fails quietly). Either way it ends
        by the wait deadline it serves. A router answers only for a model: the slots of the
        body's model, while it is loaded (`_slots_path`)."""
        core = self.core
        status, text = 0, ""
        for _ in range(2):  # a router's refusal of a /slots without a model, then the model's
            path = yield from self._slots_path(strict)
            if path is None:
                return False
            got = yield from self._get(path, strict)
            if got is None:
                return False
            status, text = got
            if core.router is None and status == 400 and server_message(text) == NEEDS_MODEL:
                core.router = True
                continue
            break
        if status != 200:  # /slots disabled (--no-slots answers 501): nothing to learn
            return False
        try:
            busy = read_slots(text)
        except ProtocolError:
            if strict:
                raise
            return False
        if core.props is not None and core.props.slots != len(busy):
            core.forget()  # another slot count: another server
        core.slot_count = len(busy)
        if self.slot is None:
            return bool(busy) and all(busy.values())
        check_slot(self.slot, len(busy))
        return busy[self.slot]

    def _get(self, path: str, strict: bool) -> Phase[tuple[int, str] | None]:
        """GET `path` by the wait deadline: under the rules of the first byte when `strict`,
        else once, None when that fails."""
        if strict:
            return (yield from self._small("GET", path, MAX_SLOTS_BODY, self.deadline))
        try:
            return (yield from self._fetch("GET", path, None, MAX_SLOTS_BODY, self.deadline))
        except (OSError, ProtocolError):
            return None

    def _slots_path(self, strict: bool) -> Phase[str | None]:
        """Where this request's slots are told: `/slots`, or on a router (which answers
        /slots only for a model, and loads the model it is asked for) `/slots?model=` of the
        body's model while /models says it is loaded; None when it is not (none of its slots
        is busy, and asking would load it) or the router does not list it."""
        core = self.core
        if not core.router:
            return "/slots"
        model = self.req.model if self.req.model is not None else core.cfg.infer.model
        got = yield from self._get("/models", strict)
        try:
            listed = read_models(got[1]) if got is not None and got[0] == 200 else None
        except ProtocolError:
            if strict:
                raise
            return None
        if listed is None:
            return None
        for info, aliases in listed:
            if model == info.id or model in aliases:
                if info.state != "loaded":
                    return None
                return f"/slots?model={quote(model, safe='')}"
        return None

    def _retry(self, err: BaseException) -> Phase[None]:
        """Count a failed attempt: Retrying and the back-off, or the final error."""
        core = self.core
        limits = self.limits
        self.attempt += 1
        core.forget()  # a refusal may be a restart: ask what the client knows again
        if self.attempt > limits.retries or _fatal(err):
            if isinstance(err, OSError):
                raise ConnectError(err, core.target.url) from err
            raise err
        after = backoff_ms(limits, self.attempt, core.rng)
        yield self._say(Retrying(self.attempt, after, describe(err)))
        yield Sleep(core.clock() + after / 1000)

    def _whole(
        self, exchange: Callable[[], Phase[tuple[int, list[bytes]]]]
    ) -> Phase[tuple[int, list[bytes]]]:
        """`exchange` (one request, its answer read whole) under the rules of the first byte: a
        failure before any byte of an answer (an OSError) is retried with back-off, a 503
        `Loading model` waited for, another 503 retried; any other answer is returned. What
        fails once the server has answered (ProtocolError, StalledError) is not sent again."""
        while True:
            try:
                status, parts = yield from exchange()
            except InferError:
                raise
            except OSError as err:
                yield from self._retry(err)
                continue
            if status == 503:
                text = text_of(parts)
                if is_loading(status, text):
                    yield from self._wait_loaded()
                else:
                    yield from self._retry(HttpError(status, text))
                continue
            return status, parts

    def _small(
        self,
        method: str,
        path: str,
        limit: int,
        until: float | None = None,
        body: bytes | None = None,
    ) -> Phase[tuple[int, str]]:
        """A small request under the rules of the first byte (`_whole`): (status, text) for
        any answer but a 503."""
        status, parts = yield from self._whole(
            lambda: self._exchange(method, path, body, limit, until=until)
        )
        return status, text_of(parts)

    def _fetch(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        limit: int = MAX_ERROR_BODY,
        until: float | None = None,
    ) -> Phase[tuple[int, str]]:
        """A small request, sent once (`_exchange`): (status, text)."""
        status, parts = yield from self._exchange(method, path, body, limit, until=until)
        return status, text_of(parts)

    def _exchange(
        self,
        method: str,
        path: str,
        body: bytes | None,
        limit: int,
        *,
        until: float | None = None,
        computed: bool = False,
    ) -> Phase[tuple[int, list[bytes]]]:
        """One request on its own connection, its answer read whole: (status, the body's
        pieces). A 200's body is the answer: more than `limit` bytes is ProtocolError. Any
        other status's body only explains it: its first MAX_ERROR_BODY bytes, whatever
        becomes of the rest.

        Small requests (control, /props, /health, ...) end, connecting included, within
        connect_timeout and by `until` (the deadline they serve). A `computed` answer (the
        server computes it whole before its first byte: embeddings, rerank) may take
        wait_timeout to start (WaitTimeoutError), then stall_timeout to finish.

        Before any byte of an answer, a failure is its OSError (TimeoutError when late):
        `_whole` retries it. After one, nothing is sent again: a connection that fails or
        ends inside the answer is ProtocolError, an answer that does not finish in time
        StalledError."""
        core = self.core
        limits = self.limits
        clock = core.clock
        what = f"{method} {core.target.prefix}{path}"
        start = clock()
        if computed:
            first_by = start + limits.wait_timeout
            connect_by = start + limits.connect_timeout
        else:
            first_by = start + limits.connect_timeout
            if until is not None:
                first_by = min(first_by, max(until, start))
            connect_by = first_by
        conn = yield Connect(core.request(method, path, body), connect_by)
        try:
            if not (yield from self._receive_until(conn, _answered, first_by, what)):
                if computed:
                    raise WaitTimeoutError(limits.wait_timeout)
                raise TimeoutError(f"{what} was not answered in time")
            seconds = limits.stall_timeout if computed else first_by - start
            rest_by = clock() + seconds if computed else first_by
            if not (yield from self._receive_until(conn, _head_done, rest_by, what)):
                raise StalledError(
                    seconds, f"the head of the answer to {what} did not finish within {seconds:g} s"
                )
            status = conn.parser.status
            if status == 200:
                parts: list[bytes] = []
                yield from self._read_body(conn, parts, limit, rest_by, what, seconds)
            else:
                parts = [(yield from self._courtesy_body(conn, rest_by, what, seconds))]
        except Exception:
            yield Close(conn)
            raise
        yield Close(conn)
        return status, parts

    def _check_head(self, conn: Any, what: str) -> None:
        """A connection that failed or ended before its answer's head was complete: before
        any byte of an answer, the OSError (a refusal: retried where the rules allow); after
        one, ProtocolError (the server answered: nothing is sent again)."""
        err = conn.error
        if err is None and not conn.eof:
            return
        if isinstance(err, HttpParseError):
            raise ProtocolError(f"the answer to {what} is not HTTP/1.1: {err}") from err
        if conn.received:
            how = "closed the connection" if err is None else f"failed ({err!r})"
            raise ProtocolError(f"the answer to {what} is not HTTP/1.1: it {how} inside its head")
        if isinstance(err, OSError):
            raise err
        raise ConnectionResetError("the server closed the connection before answering")

    def _read_body(
        self,
        conn: Any,
        parts: list[bytes],
        limit: int,
        until: float,
        what: str,
        seconds: float,
        cut: bool = False,
    ) -> Phase[None]:
        """The rest of an answer's body, into `parts` as the pieces came. More than `limit`
        bytes is ProtocolError, or with `cut` the first `limit` bytes (the rest unread). A
        connection that fails or ends inside it is ProtocolError; a body not done by `until`
        is StalledError(`seconds`)."""
        clock = self.core.clock
        parser = conn.parser
        size = 0
        while True:
            early = conn.early
            if early:
                conn.early = []
                parts += early
                size += sum(len(p) for p in early)
                if size > limit:
                    if cut:
                        parts[:] = [b"".join(parts)[:limit]]
                        return
                    raise ProtocolError(f"the answer to {what} is longer than {limit} bytes")
            if parser.done:
                return
            err = conn.error
            if isinstance(err, HttpParseError):
                raise ProtocolError(f"the answer to {what} is not HTTP/1.1: {err}") from err
            if err is not None:
                raise ProtocolError(f"the answer to {what} was cut: {err!r}") from err
            if conn.eof:
                try:
                    parser.eof()
                except (HttpParseError, TruncatedError) as cut_short:
                    raise ProtocolError(
                        f"the answer to {what} ended before its body did: {cut_short!r}"
                    ) from cut_short
                if conn.early:
                    continue
                return
            if clock() >= until:
                raise StalledError(
                    seconds, f"the answer to {what} did not finish within {seconds:g} s"
                )
            yield Receive(conn, until)

    def _wait_loaded(self) -> Phase[None]:
        """Waiting(slot_busy=False) once, then poll /health until it answers other than 503;
        the whole request waits for a load at most load_timeout from the first loading answer
        (a proxy may say 200 on /health while the chat still answers loading)."""
        core = self.core
        limits = self.limits
        clock = core.clock
        start = clock()
        if self.load_deadline is None:
            self.load_deadline = start + limits.load_timeout
            yield self._say(Waiting(slot_busy=False))
        for delay in poll_delays(limits):
            left = self.load_deadline - clock()
            if left <= 0:
                raise LoadTimeoutError(limits.load_timeout)
            yield Sleep(clock() + min(delay, left))
            try:
                status, _ = yield from self._fetch(
                    "GET", "/health", None, MAX_ERROR_BODY, self.load_deadline
                )
            except (OSError, ProtocolError):
                continue  # a server that is starting may not even listen yet
            if status != 503:
                break
        self.deadline += clock() - start  # loading is not waiting for the slot
        core.forget()  # a new model, maybe a new server: ask what the client knows again

    def _post(self) -> Phase[None]:
        """POST the chat until a 200 event-stream head (the stream may start)."""
        core = self.core
        limits = self.limits
        clock = core.clock
        what = f"POST {core.target.prefix}{CHAT_PATH}"
        request = core.request("POST", CHAT_PATH, self.body)
        while True:
            # A busy slot is silent on the wire: waiting for the first byte is waiting for
            # the slot, bounded by wait_timeout (WAIT).
            until = self.deadline
            check_at = until if self.probed else min(until, clock() + limits.slot_check_delay)
            conn = None
            try:
                conn = yield Connect(request, clock() + limits.connect_timeout)
                got = yield from self._receive_until(conn, _answered, check_at, what)
                while not got and clock() < until:
                    if not self.probed:
                        self.probed = True
                        busy = yield from self._ask_slots(strict=False)
                        if busy and not self.said_busy:
                            self.said_busy = True
                            yield self._say(Waiting(slot_busy=True))
                    got = yield from self._receive_until(conn, _answered, until, what)
            except OSError as err:  # refused, reset, timed out: before any byte of an answer
                if conn is not None:
                    yield Close(conn)
                yield from self._retry(err)
                continue
            except Exception:
                if conn is not None:
                    yield Close(conn)
                raise
            if not got:
                yield Close(conn)
                if self.load_deadline is not None and clock() >= self.load_deadline:
                    raise LoadTimeoutError(limits.load_timeout)
                raise WaitTimeoutError(limits.wait_timeout)
            # The first byte has come: the rest of the head, and an error answer's body,
            # within stall_timeout of it.
            rest = clock() + limits.stall_timeout
            try:
                if not (yield from self._receive_until(conn, _head_done, rest, what)):
                    stall = limits.stall_timeout
                    raise StalledError(
                        stall, f"the head of the answer to {what} did not finish within {stall:g} s"
                    )
                parser = conn.parser
                status = parser.status
                content_type = parser.headers.get("content-type", "")
                if status == 200 and content_type.startswith("text/event-stream"):
                    self.conn = conn
                    return
                body = yield from self._courtesy_body(conn, rest, what, limits.stall_timeout)
                text = body.decode("utf-8", "replace")
            except Exception:
                yield Close(conn)
                raise
            yield Close(conn)
            if status == 200:
                raise ProtocolError(
                    f"the server answered 200 with Content-Type {content_type!r}, not "
                    f"an event stream: {cut(text)}"
                )
            if is_loading(status, text):
                yield from self._wait_loaded()
                continue
            if status == 503:
                yield from self._retry(HttpError(status, text))
                continue
            refusal = http_error(status, text)
            props = core.props
            if isinstance(refusal, ContextOverflowError) and props is not None:
                if refusal.n_ctx is not None and refusal.n_ctx != props.n_ctx:
                    core.forget()  # another context size: another server
            raise refusal

    def _receive_until(
        self, conn: Any, ready: Callable[[Any], bool], until: float, what: str
    ) -> Phase[bool]:
        """Receive on `conn` until `ready(conn)` (True) or the clock reads `until` (False). A
        connection that fails or ends first: `_check_head`'s error (before any byte of an
        answer, the OSError, retried where the rules allow)."""
        clock = self.core.clock
        while not ready(conn):
            self._check_head(conn, what)
            if clock() >= until:
                return False
            yield Receive(conn, until)
        return True

    def _courtesy_body(self, conn: Any, until: float, what: str, seconds: float) -> Phase[bytes]:
        """An answer's body that only explains it (an error answer's): what came of its first
        MAX_ERROR_BODY bytes by `until`; a failure to read it is not the error."""
        parts: list[bytes] = []
        try:
            yield from self._read_body(conn, parts, MAX_ERROR_BODY, until, what, seconds, cut=True)
        except (OSError, ProtocolError):
            parts += conn.early
            conn.early = []
        return b"".join(parts)[:MAX_ERROR_BODY]

    # --- the stream ----------------------------------------------------------------------------

    def start_stream(self) -> Any:
        """The stream begins: the Sink that turns the body into events, for the driver to
        attach to the connection (with the body bytes that came with the head)."""
        self.sink = sink = self.core.sink(self.limits.max_line)
        return sink

    def next_events(self) -> list[ChatEvent] | None:
        """The events of the next item of the body; [] when the driver must wait for bytes
        (`conn.eof`, `error`, `stalled` are read here); None once the body has ended and the
        Completion is `completion`. The reader's failures are raised mapped (STREAM-ERRORS)."""
        sink = self.sink
        conn = self.conn
        try:
            events = sink.take()
            if events:
                return events
            if sink.done or conn.parser.done:
                self.completion = self.finish(sink.end())
                return None
            if conn.stalled:
                raise SseTimeoutError()
            err = conn.error
            if err is not None:
                if isinstance(err, OSError):
                    raise SseIoError(err) from err
                raise err
            if conn.eof:
                conn.parser.eof()
                self.completion = self.finish(sink.end())
                return None
            return events
        except (SseError, ValueError, InferError) as err:
            mapped = self.stream_error(err)
            if mapped is err:
                raise
            raise mapped from err

    def budget(self) -> Phase[None] | None:
        """After an item's events while `watch_budget`: None, or the commands to carry out
        now (the reasoning_end request and ThinkingCapped). Past the hard cap:
        ThinkingOverrunError."""
        chat = self.sink.assembler
        return self.budget_step(chat.in_reasoning, chat.reasoning_tokens, chat.id)

    def budget_step(self, in_reasoning: bool, tokens: int, cid: str | None) -> Phase[None] | None:
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
            status, text = yield from self._fetch("POST", CONTROL_PATH, payload)
        except InferError:
            raise
        except OSError as err:
            raise ConnectError(err, core.target.url) from err
        if control_accepted(status, text):
            self.capped = True
            yield self._say(ThinkingCapped(tokens))
        self._check_overrun(tokens)

    def stream_error(self, err: Exception) -> InferError:
        return map_stream_error(err, self.limits)

    def finish(self, completion: Completion) -> Completion:
        if self.capped:
            return dataclasses.replace(completion, thinking_capped=True)
        return completion


_NO_REQUEST = ChatRequest(None, ())


class ServerCall(RequestCore):
    """One of the client's calls that is not a chat (`props`, `count_tokens`, `models`,
    `load_model`, `unload_model`), under the rules of the first byte: retries with back-off, a
    503 `Loading model` waited for within load_timeout. An error answer is HttpError (a
    ContextOverflowError when it says so); an answer that is not what the call expects is
    ProtocolError."""

    def __init__(self, core: Core) -> None:
        super().__init__(core, _NO_REQUEST, b"")
        self.deadline = core.clock() + core.limits.wait_timeout

    def _ask(
        self, method: str, path: str, payload: Any = None, limit: int = MAX_SLOTS_BODY
    ) -> Phase[tuple[int, str]]:
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        return (yield from self._small(method, path, limit, None, body))

    def props(self) -> Phase[ServerProps]:
        """GET /props, cached in the client until `Core.forget`."""
        core = self.core
        if core.props is None:
            status, text = yield from self._ask("GET", "/props")
            if status != 200:
                raise http_error(status, text)
            core.props = read_props(text)
        return core.props

    def count_tokens(self, body: bytes, model: str | None = None) -> Phase[int]:
        """The prompt tokens of the chat `body`: POST input_tokens where the server has it (a
        404 is remembered), else the prompt from /apply-template tokenized as the chat is
        (`add_special`, `parse_special`). A request that names its `model`, on a router: the
        model is loaded first (`load_model`), so the count does not wait on a held request."""
        core = self.core
        if model is not None and model not in core.ready_models:
            status, text = yield from self._ask("GET", "/models")
            listed = read_models(text) if status == 200 else None
            if listed is not None and _model_entry(listed, model).state != "loaded":
                yield from self.load_model(model)
            core.ready_models.add(model)
        if core.input_tokens is not False:
            status, text = yield from self._small(
                "POST", INPUT_TOKENS_PATH, MAX_ERROR_BODY, None, body
            )
            if status == 200:
                count = _json_object(text, f"POST {INPUT_TOKENS_PATH}").get("input_tokens")
                if type(count) is not int:
                    raise ProtocolError(
                        f"POST {INPUT_TOKENS_PATH} answered no token count: {cut(text)}"
                    )
                core.input_tokens = True
                return count
            if status != 404:
                raise http_error(status, text)
            core.input_tokens = False
        status, text = yield from self._small("POST", "/apply-template", MAX_SLOTS_BODY, None, body)
        if status != 200:
            raise http_error(status, text)
        prompt = _json_object(text, "POST /apply-template").get("prompt")
        if not isinstance(prompt, str):
            raise ProtocolError(f"POST /apply-template answered no prompt: {cut(text)}")
        model = json.loads(body).get("model")  # a router routes /tokenize by it
        payload = {"model": model, "content": prompt, "add_special": True, "parse_special": True}
        status, text = yield from self._ask("POST", "/tokenize", payload)
        if status != 200:
            raise http_error(status, text)
        tokens = _json_object(text, "POST /tokenize").get("tokens")
        if not isinstance(tokens, list):
            raise ProtocolError(f"POST /tokenize answered no tokens: {cut(text)}")
        return len(tokens)

    def _list(self) -> Phase[tuple[tuple[ModelInfo, tuple[str, ...]], ...] | None]:
        status, text = yield from self._ask("GET", "/models")
        if status != 200:
            raise http_error(status, text)
        return read_models(text)

    def models(self) -> Phase[tuple[ModelInfo, ...]]:
        """GET /models: each model's id and state (a server that is not a router: its one
        model, "loaded")."""
        status, text = yield from self._ask("GET", "/models")
        if status != 200:
            raise http_error(status, text)
        data = _json_object(text, "GET /models").get("data")
        listed = read_models(text)
        if listed is None:  # not a router: its one model is loaded
            assert isinstance(data, list)
            return tuple(ModelInfo(m["id"], "loaded") for m in data)
        return tuple(info for info, _ in listed)

    def load_model(self, model: str) -> Phase[None]:
        """POST /models/load, then GET /models until the model is loaded, within load_timeout
        (LoadTimeoutError). An unknown model is ValueError naming it; one already loaded or
        loading is not an error."""
        _check_name(model)
        status, text = yield from self._ask("POST", "/models/load", {"model": model})
        if status != 200 and server_message(text) != "model is already running":
            yield from self._refused(model, status, text)
        yield from self._until_state(model, "loaded")
        self.core.ready_models.add(model)

    def unload_model(self, model: str) -> Phase[None]:
        """POST /models/unload, then GET /models until the model is unloaded, within
        load_timeout (LoadTimeoutError). A model that is not running is not an error, an
        unknown one is ValueError naming it."""
        _check_name(model)
        self.core.ready_models.discard(model)
        status, text = yield from self._ask("POST", "/models/unload", {"model": model})
        if status != 200 and server_message(text) != "model is not running":
            yield from self._refused(model, status, text)
        yield from self._until_state(model, "unloaded")

    def _refused(self, model: str, status: int, text: str) -> Phase[None]:
        """A router's refusal to load or unload `model`: when its model list lacks it,
        ValueError naming it (the router says "File Not Found" or "model is not found");
        otherwise the HttpError."""
        if status in (400, 404):
            listed = yield from self._list()
            if listed is not None:
                _model_entry(listed, model)
        raise http_error(status, text)

    def _until_state(self, model: str, state: str) -> Phase[None]:
        """GET /models until `model` is in `state`, polled as /health is while a model loads,
        at most load_timeout (LoadTimeoutError). Not a router: nothing to wait for."""
        limits = self.core.limits
        clock = self.core.clock
        until = clock() + limits.load_timeout
        for delay in poll_delays(limits):
            listed = yield from self._list()
            if listed is None or _model_entry(listed, model).state == state:
                return
            if clock() >= until:
                raise LoadTimeoutError(limits.load_timeout)
            yield Sleep(min(until, clock() + delay))


def _check_name(model: Any) -> None:
    if not isinstance(model, str) or not model:
        raise ValueError(f"a model id must be a non-empty string, not {cut(model)}")


# --- embeddings and rerank: one JSON request, its whole answer ------------------------------------


def _texts(texts: Any, what: str) -> list[str]:
    """`texts` as a list of str: a sequence of str, not one str, not empty."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of str, not one {type(texts).__name__}")
    try:
        items = list(texts)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of str, not {type(texts).__name__}") from None
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}] must be a str, not {type(text).__name__}")
    if not items:
        raise ValueError(f"{what} is empty: there is nothing to send")
    return items


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def text_of(parts: list[bytes]) -> str:
    return b"".join(parts).decode("utf-8", "replace")


def not_served(status: int, parts: list[bytes], flag: str, what: str) -> HttpError:
    """The error for a non-200 answer to an embeddings or rerank request; llama-server started
    without the flag that serves it answers 501 (an older one 404), and the error says so."""
    err = HttpError(status, text_of(parts))
    if status in (501, 404):
        said = err.message or cut(err.body)
        err.message = f"the server does not serve {what}: start llama-server with {flag} ({said})"
    return err


class EmbedPlan:
    """The requests of one `embed` call: the texts in batches of `embed_batch`, in order, each
    asking for base64 (`encoding_format`), and how many may run at once."""

    def __init__(self, core: Core, texts: Any, model: str | None, limits: Limits | None) -> None:
        items = _texts(texts, "texts")
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model must be a str or None, not {type(model).__name__}")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits or None, not {type(limits).__name__}")
        self.limits = core.limits if limits is None else limits
        self.model = core.cfg.infer.model if model is None else model
        self.texts = items
        self.n = len(items)
        size = self.limits.embed_batch
        self.batches = [(i, min(size, self.n - i)) for i in range(0, self.n, size)]

    def body(self, first: int, count: int) -> bytes:
        return _json(
            {
                "input": self.texts[first : first + count],
                "model": self.model,
                "encoding_format": "base64",
            }
        )

    def width(self, slots: int | None) -> int:
        """Requests at once: one per server slot (one when the slot count is unknown)."""
        return max(1, min(slots or 1, len(self.batches)))


def rerank_body(
    core: Core, query: Any, documents: Any, top_n: int | None, model: str | None
) -> tuple[bytes, int]:
    """The body of a rerank request and the number of documents."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    docs = _texts(documents, "documents")
    if top_n is not None and (type(top_n) is not int or top_n < 1):
        raise ValueError(f"top_n must be a positive int or None, not {top_n!r}")
    if model is not None and not isinstance(model, str):
        raise TypeError(f"model must be a str or None, not {type(model).__name__}")
    body: dict[str, Any] = {
        "model": core.cfg.infer.model if model is None else model,
        "query": query,
        "documents": docs,
    }
    if top_n is not None:
        body["top_n"] = top_n
    return _json(body), len(docs)


def read_ranked(text: bytes, count: int, top_n: int | None) -> tuple[Ranked, ...]:
    """The 200 answer of /rerank as Ranked, in the server's order. Each result needs an int
    `index` among the `count` documents, not repeated, and a finite number
    `relevance_score`; at most `top_n` of them (every document when it is None)."""
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise ProtocolError(f"the rerank answer is not valid JSON: {cut(text)}") from None
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise ProtocolError(f"the rerank answer has no `results` list of objects: {cut(text)}")
    want = count if top_n is None else min(top_n, count)
    if len(results) > want:
        raise ProtocolError(f"the rerank answer has {len(results)} results for {want} wanted")
    seen: set[int] = set()
    ranked = []
    for pos, r in enumerate(results):
        index = r.get("index")
        score = r.get("relevance_score")
        if type(index) is not int or not 0 <= index < count:
            raise ProtocolError(
                f"rerank result {pos} has index {cut(index)}: not one of the {count} documents"
            )
        if index in seen:
            raise ProtocolError(f"rerank result {pos} repeats document {index}")
        if type(score) not in (int, float) or not math.isfinite(score):
            raise ProtocolError(
                f"rerank result {pos} (document {index}) has a score that is not a finite "
                f"number: {cut(score)}"
            )
        seen.add(index)
        ranked.append(Ranked(index, float(score)))
    if top_n is None and len(ranked) < count:
        missing = min(set(range(count)) - seen)
        raise ProtocolError(f"the rerank answer has no result for document {missing}")
    return tuple(ranked)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class CallCore(RequestCore):
    """One request whose answer the server computes whole before it sends any (embeddings,
    rerank, a wait's /slots), read whole by the one exchange of every whole answer
    (`RequestCore._exchange`, computed) under the rules of the first byte (`_whole`)."""

    def __init__(
        self,
        core: Core,
        method: str,
        path: str,
        body: bytes | None,
        limit: int = MAX_VECTORS_BODY,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(core, _NO_REQUEST, b"", limits)
        self.method = method
        self.path = path
        self.payload = body
        self.limit = limit

    def phases(self) -> Phase[tuple[int, list[bytes]]]:  # type: ignore[override]
        """(status, the body's pieces) for any answer but a 503."""
        return (
            yield from self._whole(
                lambda: self._exchange(
                    self.method, self.path, self.payload, self.limit, computed=True
                )
            )
        )
