# Strategy: the chat request's rules, on top of the exchange's (`Exchange`): its slot's line,
# the slot count and a busy slot, a router's model, the POST up to an event-stream head, then
# the stream itself: the events the connection's Sink decoded, the thinking budget, and the end
# or the fault, mapped (STREAM-ERRORS). The driver carries out the commands and reads the events.
"""`ChatExchange`: one chat request, from joining its slot's line to the end of its stream."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any
from urllib.parse import quote

from .._body import build_body
from .._config import Limits
from .._errors import (
    BusyError,
    ConnectError,
    ContextOverflowError,
    HttpError,
    InferError,
    LoadTimeoutError,
    ProtocolError,
    SseError,
    SseIoError,
    SseTimeoutError,
    ThinkingOverrunError,
    WaitTimeoutError,
    cut,
    http_error,
    server_message,
)
from .._values import ChatEvent, ChatRequest, Completion, Queued, ThinkingCapped, Waiting
from ._answers import (
    check_slot,
    control_accepted,
    map_stream_error,
    model_entry,
    read_models,
    read_slots,
    text_of,
)
from ._commands import Close, Emit, Phase, Release, WaitTurn
from ._connection import Arrival
from ._exchange import answered, log
from ._fleet import Fleet, conversation_key, locate
from ._lines import Ticket
from ._resume import Resumable
from ._session import CHAT_PATH, CONTROL_PATH, MAX_SLOTS_BODY, NEEDS_MODEL, Core

__all__ = ["ChatExchange", "server_budget"]


def server_budget(core: Core, req: ChatRequest, limits: Limits) -> ChatRequest:
    """`req` with the thinking budget as the server's own `reasoning_budget_tokens` (BUDGET),
    unless the request gives one or the server was seen not to honour it. The server counts
    the end of the reasoning it forces as one of the budget's tokens: budget + 1."""
    budget = limits.thinking_budget
    if budget and req.reasoning_budget_tokens is None and core.budget_honoured is not False:
        return dataclasses.replace(req, reasoning_budget_tokens=budget + 1)
    return req


class ChatExchange(Resumable):
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

    Once the stream has started (`next_events`, `budget_step`): nothing is sent again; a
    broken connection is resumed where the server allows (`Resumable`, rule RESUME); the
    thinking budget asks the server once to end the reasoning (`ThinkingCapped`); reasoning
    past the hard cap is ThinkingOverrunError; the reader's errors map to the table of
    `map_stream_error`.
    """

    def __init__(
        self, core: Core, req: ChatRequest, body: bytes, limits: Limits | None = None
    ) -> None:
        super().__init__(core, limits)
        self.req = req
        self.body = body
        self.slot = req.slot
        self.ticket: Ticket | None = None if req.slot is None else Ticket(req.slot)
        self.left = False  # the line, once left
        self.closed = False
        self.capped = False
        self.said_busy = False
        self.probed = False
        self.conn: Any = None  # the chat's connection, once the stream may start
        self.sink: Any = None
        self.completion: Completion | None = None  # once next_events has seen the end
        limits = self.limits
        self.soft = limits.thinking_budget
        self.hard_cap = limits.thinking_hard_cap
        self.asked = False  # reasoning_end was sent (once)
        # The budget went as the server's own `reasoning_budget_tokens` (`server_budget`).
        self.server_budget = bool(self.soft) and req.reasoning_budget_tokens == self.soft + 1
        self.watch_budget = bool(self.soft or self.hard_cap)
        self.start_resumable()

    # --- the line ------------------------------------------------------------------------------

    def enter(self) -> None:
        """Join the slot's line and start the wait_timeout clock (when the stream is entered,
        so `with client.stream(...)` order is the order across threads and tasks)."""
        self.deadline = self.core.clock() + self.limits.wait_timeout
        if self.ticket is not None:
            self.core.lines.enter(self.ticket)

    def leave(self) -> list[Ticket]:
        """Leave the line (idempotent); the tickets that moved up, for the driver to wake.
        The server's busy count (rule FLEET) is given back, once."""
        routed, self.routed = self.routed, None
        if routed is not None:
            self.core.fleet.done(routed)
        ticket = self.ticket
        if ticket is None or self.left:
            return []
        moved = self.core.lines.leave(ticket)  # holds the ticket itself once it has left
        self.left = bool(moved)  # a second leave (the stream's end, then its close): nothing
        return moved

    # --- before the first byte -----------------------------------------------------------------

    def phases(self) -> Phase[bool]:
        """Up to a 200 event-stream head (`conn` is then the open answer); False if the
        stream was closed while in line."""
        yield from self._route()
        core = self.core
        if log.isEnabledFor(logging.DEBUG):
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

    # --- several servers (docs/client.md, rule FLEET) --------------------------------------------

    def _route(self) -> Phase[None]:
        """The server this request goes to, its busy count taken: for `slot=None`, the one its
        conversation key picks (a server's slot count is learnt on its first request, quietly,
        so its free slots are known); for a numbered slot, the server that holds it."""
        fleet = self.core.fleet
        if fleet is None:
            return
        if self.slot is not None:
            if fleet.several:
                yield from self._place(fleet)
            self.pinned = True
            self.routed = self.core.index
            fleet.take(self.routed)
        else:
            if fleet.several:
                self.route_key = conversation_key(self.req)
            self.routed = fleet.pick(self.route_key, self.core.clock())
            self.core = fleet.cores[self.routed]
            if fleet.several and self.core.slot_count is None:
                yield from self._ask_slots(strict=False)
        if fleet.several:
            self._budget_for_server()

    def _budget_for_server(self) -> None:
        """BUDGET is learnt per server: the body carries the server's own budget as the server
        routed to was seen to honour it (the driver built it by the first server's)."""
        if not self.soft or (
            self.req.reasoning_budget_tokens is not None and not self.server_budget
        ):
            return  # no budget, or the request's own, sent as given
        bare = dataclasses.replace(self.req, reasoning_budget_tokens=None)
        req = server_budget(self.core, bare, self.limits)
        if req.reasoning_budget_tokens != self.req.reasoning_budget_tokens:
            self.req = req
            self.server_budget = not self.server_budget
            self._build_body()

    def _build_body(self) -> None:
        """The body again, for the server routed to: its own slot number, its budget field."""
        cfg = dataclasses.replace(self.core.cfg, limits=self.limits)
        req = dataclasses.replace(self.req, slot=self.slot)
        self.body = build_body(cfg, req).encode("utf-8")

    def _place(self, fleet: Fleet) -> Phase[None]:
        """A numbered slot among the servers, counted in the order of urls: their slot counts
        learnt (GET /slots, once each, in order) until it is found; past the total,
        ValueError naming it (`locate`), before the chat is sent. The body then names the
        server's own slot."""
        slot = self.slot
        assert slot is not None
        while (place := locate(slot, [c.slot_count for c in fleet.cores])) is None:
            self.core = next(c for c in fleet.cores if c.slot_count is None)
            self.slot = None  # only the count is asked
            yield from self._ask_slots(strict=True)
            self.slot = slot
            if self.core.slot_count is None:
                raise ValueError(
                    f"slot {slot}: the server {self.core.server} does not tell its slot count "
                    "(GET /slots), so numbered slots cannot be counted across infer.urls"
                )
        index, self.slot = place
        self.core = fleet.cores[index]
        if self.slot != slot:
            self._build_body()

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
        info = model_entry(models, model)
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

    def _post(self) -> Phase[None]:
        """POST the chat under the rules of the first byte until a 200 event-stream head (the
        stream may start); any other answer is its HttpError."""
        try:
            status, parts = yield from self.first_byte_rules(self._post_once)
        except (ConnectError, ProtocolError):
            # It never reached the server, or what answered is no llama-server: nothing to stop
            self.posted = False
            raise
        if status == 200:
            return
        self.posted = False  # the server answered the request: it generates nothing
        core = self.core
        refusal = self.refusal(status, text_of(parts))
        props = core.props
        if isinstance(refusal, ContextOverflowError) and props is not None:
            if refusal.n_ctx is not None and refusal.n_ctx != props.n_ctx:
                core.forget()  # another context size: another server
        raise refusal

    def _post_once(self) -> Phase[tuple[int, list[bytes]]]:
        """One POST of the chat: (200, []) with `conn` the open event stream, or (status, the
        error answer's courtesy body). The first byte is waited for by the slot's deadline
        (`_first_byte`); the rest of the head, and an error answer's body, within
        stall_timeout of it."""
        core = self.core
        limits = self.limits
        clock = core.clock
        what = f"POST {core.target.prefix}{CHAT_PATH}"
        request = self.post_request(self.body)
        connect_by = clock() + limits.connect_timeout
        conn, began = yield from self.send(
            request, connect_by, self.deadline, lambda c: self._first_byte(c, what)
        )
        try:
            if not began:
                if self.load_deadline is not None and clock() >= self.load_deadline:
                    raise LoadTimeoutError(limits.load_timeout)
                raise WaitTimeoutError(limits.wait_timeout)
            stall = limits.stall_timeout
            rest = clock() + stall
            status = yield from self._read_head(conn, rest, what, (stall, "stall_timeout"))
            content_type = conn.parser.headers.get("content-type", "")
            if status == 200 and content_type.startswith("text/event-stream"):
                self.conn = conn
                return status, []
            body = yield from self._courtesy_body(conn, rest, what, (stall, "stall_timeout"))
        except Exception:
            yield Close(conn)
            raise
        yield Release(conn)
        self.last_request = what
        if status == 200:
            raise ProtocolError(
                f"the server answered 200 with Content-Type {content_type!r}, not "
                f"an event stream: {cut(body.decode('utf-8', 'replace'))}"
            )
        return status, [body]

    def _first_byte(self, conn: Arrival, what: str) -> Phase[bool]:
        """Wait for the answer's first byte by the slot's deadline: a busy slot is silent on
        the wire, so waiting for it is waiting for the slot, bounded by wait_timeout (WAIT).
        A first byte late past `slot_check_delay` asks /slots once (quietly) whether the slot
        is busy: `Waiting(slot_busy=True)`. False when the deadline passed first."""
        clock = self.core.clock
        until = self.deadline
        check_at = until if self.probed else min(until, clock() + self.limits.slot_check_delay)
        got = yield from self._receive_until(conn, answered, check_at, what)
        while not got and clock() < until:
            if not self.probed:
                self.probed = True
                busy = yield from self._ask_slots(strict=False)
                if busy and not self.said_busy:
                    self.said_busy = True
                    yield self._say(Waiting(slot_busy=True))
            got = yield from self._receive_until(conn, answered, until, what)
        return got

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
            events: list[ChatEvent] = sink.take()
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
            self.check_break(err)  # Resume, when the stream may go on (rule RESUME)
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
            if self.server_budget and tokens == self.soft and not self.capped:
                # Ended at the budget sent as the server's own: the server ended it (BUDGET).
                self.core.budget_honoured = True
                self.capped = True
                return self._said(ThinkingCapped(tokens))
            return None
        if self.soft and not self.asked and tokens > self.soft and cid:
            if self.server_budget:  # past the budget sent as its own: it does not end it
                self.core.budget_honoured = False
            self.asked = True
            return self._end_reasoning(cid, tokens)
        self._check_overrun(tokens)
        return None

    def _said(self, event: ChatEvent) -> Phase[None]:
        yield self._say(event)

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
        if status != 200:
            raise self.refusal(status, text)
        if control_accepted(status, text):
            self.capped = True
            yield self._say(ThinkingCapped(tokens))
        self._check_overrun(tokens)

    def stream_error(self, err: Exception) -> InferError:
        mapped = map_stream_error(err, self.limits)
        if isinstance(mapped, HttpError) and not mapped.request:
            # An error payload mid-stream: the same HttpError, naming the chat request.
            what = f"POST {self.core.target.prefix}{CHAT_PATH}"
            return http_error(mapped.status, mapped.body, what, self.core.target.url)
        return mapped

    def finish(self, completion: Completion) -> Completion:
        self.read_to_its_end()
        if self.capped:
            return dataclasses.replace(completion, thinking_capped=True)
        return completion
