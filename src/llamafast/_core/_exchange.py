# Strategy: the rules every request to the server shares, once, in a base class its calls extend
# (the chat request and each whole-answer call): the rules of the first byte (`first_byte_rules`:
# a failure before any byte of an answer is retried with back-off, a 503 `Loading model` is
# waited for, another 503 retried; once a byte has come, nothing is sent again), the wait for a
# load, and the reading of one answer from a connection (its head, then its body: the answer, or
# an error answer's courtesy text), with every deadline and fault of those steps.
"""`Exchange`: the rules of the first byte, waiting for a load, and reading an answer."""

from __future__ import annotations

import functools
import logging
import random
import socket
import ssl
from collections.abc import Callable, Iterator, Sequence

from .._config import Limits
from .._errors import (
    ConnectError,
    HandshakeClosed,
    HandshakeTimeout,
    HttpError,
    HttpParseError,
    InferError,
    LoadTimeoutError,
    ProtocolError,
    StalledError,
    TruncatedError,
    WaitTimeoutError,
    http_error,
)
from .._values import ChatEvent, Queued, Retrying, ThinkingCapped, Waiting
from ._answers import describe, is_loading, text_of
from ._commands import Close, Connect, Emit, Phase, Receive, Release, Sleep
from ._connection import Arrival
from ._fleet import refused
from ._session import MAX_ERROR_BODY, POLL_MAX_S, Core

__all__ = ["Answer", "Exchange", "Piece", "backoff_ms", "log", "poll_delays"]

# One DEBUG line per request, wait, retry and thinking cap (docs/client.md, rule LOG): the
# URL with its password as ***, counts and ids; never a header (the API key) or message text.
log = logging.getLogger("llamafast")

# An answer read whole: its status and its body, one piece (a 200's whole body, a memoryview:
# rule WHOLE-BODY; another status's courtesy text).
Piece = bytes | memoryview
Answer = tuple[int, Sequence[Piece]]
Bound = tuple[float, str]  # a deadline's seconds and the Limits field they come from


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


def _fatal(err: BaseException) -> bool:
    """A failure that fails the same way every time, so it is not retried (rule ONCE): a name
    that does not resolve, a refused TLS handshake (no TLS on that port, a certificate not
    accepted), a handshake that never finishes or that the server closes (a plain-HTTP port
    does, once its wait for a request head ends). An EOF outside the handshake may be a server
    restarting and is retried."""
    if isinstance(err, socket.gaierror):
        return True
    if isinstance(err, ssl.SSLError):
        return not isinstance(err, ssl.SSLEOFError)
    return isinstance(err, (HandshakeTimeout, HandshakeClosed))


def answered(conn: Arrival) -> bool:
    """Some byte of an answer has come."""
    return bool(conn.received)


def _head_done(conn: Arrival) -> bool:
    return bool(conn.parser.head_done)


class Exchange:
    """One request's exchanges with the server under the rules of the first byte.

    Every answer is read from a connection of its own while it is read (a kept-alive one
    when the driver has one: rule KEEP-ALIVE): the head by its deadline (else StalledError
    naming the head), then the body. Before any byte of an answer a failure is the OSError,
    retried (`first_byte_rules`); after one, nothing is sent again. `slot` names the request
    in its DEBUG lines; `deadline` bounds waiting for the slot and is pushed back by the time
    spent waiting for a load."""

    slot: int | None = None
    # Several servers (rule FLEET): the chat's conversation key, the server whose busy count
    # it holds, and whether a numbered slot pins it to that server.
    route_key: str | None = None
    routed: int | None = None
    pinned = False

    def __init__(self, core: Core, limits: Limits | None = None) -> None:
        self.core = core
        # This request's bounds: the client's, or those the call gave (LIMITS).
        self.limits = core.limits if limits is None else limits
        self.attempt = 0
        self.deadline = 0.0  # of waiting for the slot (line and first byte)
        self.load_deadline: float | None = None
        # The method and path of the request whose answer was read last: an error answer's
        # HttpError names it (rule HTTP-ERRORS).
        self.last_request = ""

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

    # --- the rules of the first byte -----------------------------------------------------------

    def first_byte_rules(self, exchange: Callable[[], Phase[Answer]]) -> Phase[Answer]:
        """`exchange` (one request, its answer read) under the rules of the first byte: a
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
            fleet = self.core.fleet
            if fleet is not None:
                fleet.answered(self.core.index)  # it is up (rule FLEET)
            if status == 503:
                text = text_of(parts)
                if is_loading(status, text):
                    yield from self._wait_loaded()
                else:
                    yield from self._retry(self.refusal(status, text))
                continue
            return status, parts

    def refusal(self, status: int, text: str) -> HttpError:
        """The HttpError for an error answer (`status`, its body's `text`) to the request whose
        answer was read last, naming it and the client's url (rule HTTP-ERRORS)."""
        return http_error(status, text, self.last_request, self.core.target.url)

    def _retry(self, err: BaseException) -> Phase[None]:
        """Count a failed attempt: Retrying and the back-off, or the final error."""
        core = self.core
        limits = self.limits
        core.forget()  # a refusal may be a restart: ask what the client knows again
        if core.fleet is not None and refused(err) and self._move(core):
            return  # another server takes it, at once (rule FLEET)
        self.attempt += 1
        if self.attempt > limits.retries or _fatal(err):
            if isinstance(err, OSError):
                raise ConnectError(err, core.target.url) from err
            raise err
        after = backoff_ms(limits, self.attempt, core.rng)
        yield self._say(Retrying(self.attempt, after, describe(err)))
        yield Sleep(core.clock() + after / 1000)

    def _move(self, core: Core) -> bool:
        """`core`'s server refused: it is skipped for a while (rule FLEET); True when the next
        attempt goes to another server (never for a numbered slot: it is that server's)."""
        fleet = core.fleet
        now = core.clock()
        fleet.refused(core.index, now)
        if not fleet.several or self.pinned:
            return False
        if self.routed is None:
            moved = fleet.any_up(now)
        else:
            self.routed = fleet.pick(self.route_key, now, leaving=self.routed)
            moved = fleet.cores[self.routed]
        self.core = moved
        return moved is not core

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

    # --- small requests ------------------------------------------------------------------------

    def _small(
        self,
        method: str,
        path: str,
        limit: int,
        until: float | None = None,
        body: bytes | None = None,
    ) -> Phase[tuple[int, str]]:
        """A small request under the rules of the first byte: (status, text) for any answer
        but a 503."""
        status, parts = yield from self.first_byte_rules(
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
    ) -> Phase[Answer]:
        """One request, its answer read whole: (status, the body's pieces). A 200's body is
        the answer: more than `limit` bytes is ProtocolError. Any other status's body only
        explains it: its first MAX_ERROR_BODY bytes, whatever becomes of the rest.

        Small requests (control, /props, /health, ...) end, connecting included, within
        connect_timeout and by `until` (the deadline they serve). A `computed` answer (the
        server computes it whole before its first byte: embeddings, rerank) may take
        wait_timeout to start (WaitTimeoutError), then stall_timeout to finish.

        Before any byte of an answer, a failure is its OSError (TimeoutError when late):
        `first_byte_rules` retries it. After one, nothing is sent again: a connection that
        fails or ends inside the answer is ProtocolError, an answer that does not finish in
        time StalledError."""
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
        first = functools.partial(self._receive_until, ready=answered, until=first_by, what=what)
        request = core.request(method, path, body)
        conn, began = yield from self.send(request, connect_by, first_by, first)
        try:
            if not began:
                if computed:
                    raise WaitTimeoutError(limits.wait_timeout)
                raise TimeoutError(_unanswered(what, start, first_by, limits.connect_timeout))
            seconds = limits.stall_timeout if computed else first_by - start
            rest_by = clock() + seconds if computed else first_by
            # The limit a StalledError names: the one to raise for more time.
            bound = (seconds, "stall_timeout" if computed else "connect_timeout")
            status = yield from self._read_head(conn, rest_by, what, bound)
            if status == 200:
                whole = yield from self._read_whole(conn, limit, rest_by, what, bound)
                parts: list[Piece] = [whole]
            else:
                parts = [(yield from self._courtesy_body(conn, rest_by, what, bound))]
        except Exception:
            yield Close(conn)
            raise
        yield Release(conn)
        self.last_request = what
        return status, parts

    def send(
        self,
        request: bytes,
        connect_by: float,
        queue_until: float,
        first_byte: Callable[[Arrival], Phase[bool]],
    ) -> Phase[tuple[Arrival, bool]]:
        """Send `request` and wait for its answer to begin (`first_byte(conn)`): the
        connection, and whether a byte came. A kept-alive connection that ends before any
        byte of the answer had been closed by the server while it was idle (rule KEEP-ALIVE):
        the request goes once more, on a fresh connection, at once, not counted as an attempt.
        Any other failure closes the connection and is raised."""
        server = self.core.index
        conn = yield Connect(request, connect_by, queue_until, server=server)
        try:
            return conn, (yield from first_byte(conn))
        except Exception as err:
            if not (isinstance(err, OSError) and conn.reused and not conn.received):
                yield Close(conn)
                raise
        conn = yield Connect(request, connect_by, queue_until, stale=conn, server=server)
        try:
            return conn, (yield from first_byte(conn))
        except Exception:
            yield Close(conn)
            raise

    # --- reading an answer ---------------------------------------------------------------------

    def _receive_until(
        self, conn: Arrival, ready: Callable[[Arrival], bool], until: float, what: str
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

    def _read_head(self, conn: Arrival, until: float, what: str, bound: Bound) -> Phase[int]:
        """The rest of the answer's head, by `until` (else StalledError of `bound`, its seconds
        and the limit they come from): its status."""
        if not (yield from self._receive_until(conn, _head_done, until, what)):
            seconds, limit = bound
            raise StalledError(
                seconds,
                f"the head of the answer to {what} did not finish within {seconds:g} s",
                limit,
            )
        return conn.parser.status

    def _check_head(self, conn: Arrival, what: str) -> None:
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
        conn: Arrival,
        parts: list[bytes],
        limit: int,
        until: float,
        what: str,
        bound: Bound,
    ) -> Phase[None]:
        """The first `limit` bytes of the rest of an answer's body (the rest unread), into
        `parts` as the pieces came. A connection that fails or ends inside it is ProtocolError;
        a body not done by `until` is StalledError of `bound`."""
        parser = conn.parser
        size = 0
        while True:
            early = conn.early
            if early:
                conn.early = []
                parts += early
                size += sum(len(p) for p in early)
                if size > limit:
                    parts[:] = [b"".join(parts)[:limit]]
                    return
            if parser.done:
                return
            ended = yield from self._more_body(conn, until, what, bound)
            if ended and not conn.early:
                return

    def _read_whole(
        self, conn: Arrival, limit: int, until: float, what: str, bound: Bound
    ) -> Phase[memoryview]:
        """The rest of an answer's body into one buffer (docs/client.md, rule WHOLE-BODY):
        the buffer of its Content-Length, the bytes that came with the head first, the rest
        received straight into it; or one grown as a chunked body comes. A declared length
        past `limit` is ProtocolError at once (nothing allocated, nothing more read), as is a
        body that grows past it; the failures of `_read_body` otherwise."""
        parser = conn.parser
        early, conn.early = conn.early, []
        if not parser.whole(limit, early):
            raise _longer(what, limit)
        while not parser.overflow:
            if parser.done or (yield from self._more_body(conn, until, what, bound)):
                return parser.take_body()
        raise _longer(what, limit)

    def _more_body(self, conn: Arrival, until: float, what: str, bound: Bound) -> Phase[bool]:
        """One wait for more of a body: True when the connection's end ended it (a body until
        close); a connection that fails or ends inside it is ProtocolError; a body not done by
        `until` is StalledError of `bound`."""
        parser = conn.parser
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
            return True
        if self.core.clock() >= until:
            seconds, name = bound
            raise StalledError(
                seconds, f"the answer to {what} did not finish within {seconds:g} s", name
            )
        yield Receive(conn, until)
        return False

    def _courtesy_body(self, conn: Arrival, until: float, what: str, bound: Bound) -> Phase[bytes]:
        """An answer's body that only explains it (an error answer's): what came of its first
        MAX_ERROR_BODY bytes by `until`; a failure to read it is not the error."""
        parts: list[bytes] = []
        try:
            yield from self._read_body(conn, parts, MAX_ERROR_BODY, until, what, bound)
        except (OSError, ProtocolError):
            parts += conn.early
            conn.early = []
        return b"".join(parts)[:MAX_ERROR_BODY]


def _longer(what: str, limit: int) -> ProtocolError:
    return ProtocolError(f"the answer to {what} is longer than {limit} bytes")


def _unanswered(what: str, start: float, first_by: float, connect_timeout: float) -> str:
    """Why a small request failed late, naming the limit to raise: connect_timeout, unless the
    deadline of the request it serves came first. The deadlines themselves are compared:
    `first_by - start` may round below connect_timeout when the clock reads a large value."""
    if first_by < start + connect_timeout:
        return f"{what} was not answered before the deadline of the request it serves"
    return (
        f"{what} was not answered within connect_timeout ({connect_timeout:g} s); to wait "
        "longer, raise connect_timeout (Limits.connect_timeout, or connect_timeout in [limits])"
    )
