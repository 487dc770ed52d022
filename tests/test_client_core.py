# The client's rules against the sans-I/O core alone: a fake clock and a scripted server carry
# out its commands, so every timing rule is checked exactly and at once (no sockets, no sleep).
"""ChatExchange: the line, the first byte, loads, retries, the thinking budget, errors."""

from __future__ import annotations

import dataclasses
import random
import socket
import ssl
from typing import Any

import pytest

from llamafast import (
    BusyError,
    ChatRequest,
    Config,
    ConnectError,
    HttpError,
    InferConfig,
    Limits,
    LoadTimeoutError,
    ProtocolError,
    Queued,
    Retrying,
    StalledError,
    ThinkingCapped,
    ThinkingOverrunError,
    User,
    Waiting,
    WaitTimeoutError,
)
from llamafast._core import (
    ChatExchange,
    Close,
    Connect,
    Core,
    Done,
    Emit,
    Receive,
    Release,
    Sleep,
    WaitTurn,
    read_slots,
    step,
)
from llamafast._engine._http_py import Receiver, ResponseParser
from llamafast._errors import HandshakeTimeout


@dataclasses.dataclass(frozen=True)
class Head:
    """The head of a scripted answer."""

    status: int
    content_type: str


SSE = Head(200, "text/event-stream")
LOADING = (503, '{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}')
BUSY = (503, '{"error":{"code":503,"message":"no slot available"}}')


def slots(*busy: bool) -> tuple[int, str]:
    body = ",".join(
        f'{{"id":{i},"is_processing":{"true" if b else "false"}}}' for i, b in enumerate(busy)
    )
    return 200, f"[{body}]"


def http(status: int, content_type: str, text: str) -> bytes:
    body = text.encode()
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
    if content_type.startswith("text/event-stream"):
        return head.encode() + b"\r\n" + body  # a stream: until close
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


class FakeConn(Receiver):
    """A connection whose answer (`data`) arrives whole at the clock's `at`, or one byte every
    `drip` seconds from then."""

    def __init__(self, data: bytes, at: float, drip: float = 0.0) -> None:
        super().__init__(ResponseParser())
        self.eof = self.stalled = self.reused = False
        self.data, self.at, self.drip = data, at, drip
        self.closed = False

    def arrive(self, until: float) -> float:
        """Deliver what has come by `until` (at least the next piece when it is due); the
        clock after it."""
        if not self.drip:
            data, self.data = self.data, b""
            self.eof = True
        else:
            data, self.data = self.data[:1], self.data[1:]
        while data:
            buf = self.get_buffer(-1)
            n = min(len(buf), len(data))
            buf[:n] = data[:n]
            self.buffer_updated(n)
            data = data[n:]
        now = self.at
        self.at += self.drip
        return now


class Fake:
    """A server and a clock for the core, speaking bytes. `answers[path]`: a list of
    (status, text) or an exception, consumed in order (the last one repeats); `chat`: per POST,
    (seconds until the answer, a Head, raw bytes or an exception, error body)."""

    def __init__(self, **limits: Any) -> None:
        base: dict[str, Any] = {"retry_base_ms": 100, "retry_max_ms": 1000}
        self.cfg = Config(InferConfig(url="http://h:1/pre"), Limits(**{**base, **limits}))
        self.now = 0.0
        self.core = Core(self.cfg, clock=lambda: self.now, rng=random.Random(0))
        self.answers: dict[str, list[Any]] = {"/health": [(200, '{"status":"ok"}')]}
        self.answers["/slots"] = [slots(False, False)]
        self.chat: list[tuple[float, Any, str]] = []
        self.log: list[str] = []
        self.drip: dict[str, float] = {}  # path: seconds between the bytes of its answers

    def answer(self, path: str) -> tuple[int, str]:
        queue = self.answers[path]
        got = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(got, BaseException):
            raise got
        return got  # type: ignore[no-any-return]

    def carry(self, cmd: Any) -> Any:
        if isinstance(cmd, Connect):
            line = cmd.request.split(b"\r\n", 1)[0].decode()
            method, path, _ = line.split(" ")
            short = path.removeprefix("/pre")
            self.log.append(f"{method} {short if short != '/v1/chat/completions' else path}")
            if short != "/v1/chat/completions":
                status, text = self.answer(short)
                raw = http(status, "application/json", text)
                return FakeConn(raw, self.now, self.drip.get(short, 0.0))
            after, head, body = self.chat.pop(0) if len(self.chat) > 1 else self.chat[0]
            if isinstance(head, BaseException):
                raise head
            raw = head if isinstance(head, bytes) else http(head.status, head.content_type, body)
            return FakeConn(raw, self.now + after, self.drip.get(short, 0.0))
        if isinstance(cmd, Receive):
            conn = cmd.conn
            if conn.data and conn.at <= cmd.until:
                self.now = max(self.now, conn.arrive(cmd.until))
            else:
                self.now = max(self.now, cmd.until)
            return None
        if isinstance(cmd, Sleep):
            self.log.append(f"sleep {cmd.until - self.now:.3f}")
            self.now = max(self.now, cmd.until)
            return None
        if isinstance(cmd, WaitTurn):
            self.log.append("wait turn")
            self.now = max(self.now, cmd.until)
            return None
        if isinstance(cmd, (Close, Release)):
            cmd.conn.closed = True
            return None
        raise AssertionError(cmd)

    def drive(self, gen: Any, events: list[Any]) -> Any:
        send: Any = None
        throw: BaseException | None = None
        while True:
            cmd = step(gen, send, throw)
            send = throw = None
            if isinstance(cmd, Done):
                return cmd.value
            if isinstance(cmd, Emit):
                events.append(cmd.event)
                continue
            try:
                send = self.carry(cmd)
            except OSError as err:
                throw = err

    def request(self, slot: int | None = 0) -> ChatExchange:
        return ChatExchange(self.core, ChatRequest(slot, [User("x")]), b"{}")

    def run(self, slot: int | None = 0) -> tuple[list[Any], BaseException | None]:
        rc = self.request(slot)
        rc.enter()
        events: list[Any] = []
        try:
            began = self.drive(rc.phases(), events)
            assert began is True
            return events, None
        except Exception as err:
            return events, err
        finally:
            rc.leave()


# --- the line ---------------------------------------------------------------------------------


def test_requests_on_one_slot_queue_in_order_and_say_how_many_are_ahead() -> None:
    fake = Fake()
    fake.chat = [(0.0, SSE, "")]
    a, b, c = fake.request(0), fake.request(0), fake.request(0)
    other = fake.request(1)
    for rc in (a, b, c, other):
        rc.enter()
    events: list[Any] = []
    gen = c.phases()
    assert gen.send(None) == Emit(Queued(2))
    assert isinstance(gen.send(None), WaitTurn)
    assert b.leave() == [c.ticket, b.ticket]  # c moved up; b itself is woken to see it left
    assert gen.send(None) == Emit(Queued(1))
    assert isinstance(gen.send(None), WaitTurn)
    a.leave()
    assert isinstance(gen.send(None), Connect)  # at the head: the slot count, then the chat
    assert fake.drive(other.phases(), events) is True and events == []


def test_waiting_in_line_past_wait_timeout() -> None:
    fake = Fake(wait_timeout=3.0)
    first, second = fake.request(0), fake.request(0)
    first.enter()
    second.enter()
    events: list[Any] = []
    with pytest.raises(WaitTimeoutError, match="3 s"):
        fake.drive(second.phases(), events)
    assert events == [Queued(1)] and fake.now == 3.0


def test_a_request_closed_while_in_line_ends_quietly() -> None:
    fake = Fake()
    first, second = fake.request(0), fake.request(0)
    first.enter()
    second.enter()
    gen = second.phases()
    assert gen.send(None) == Emit(Queued(1))
    assert isinstance(gen.send(None), WaitTurn)
    second.leave()
    with pytest.raises(StopIteration) as stop:
        gen.send(None)
    assert stop.value.value is False


def test_slot_none_is_not_ordered_and_asks_no_slot_count() -> None:
    fake = Fake()
    fake.chat = [(0.0, SSE, "")]
    held = fake.request(0)
    held.enter()
    for _ in range(3):
        events, err = fake.run(None)
        assert err is None and events == []
    assert fake.log == ["POST /pre/v1/chat/completions"] * 3


# --- the slot count and a busy slot -----------------------------------------------------------


def test_slot_count_is_asked_once_per_client() -> None:
    fake = Fake()
    fake.chat = [(0.01, SSE, "")]
    for _ in range(3):
        assert fake.run(1) == ([], None)
    assert fake.log == ["GET /slots", *["POST /pre/v1/chat/completions"] * 3]
    _events, err = fake.run(2)
    assert isinstance(err, ValueError) and "2 slots" in str(err)
    assert fake.log[-1] == "POST /pre/v1/chat/completions"  # refused from the cached count


def test_slot_count_is_asked_again_after_a_refusal() -> None:
    fake = Fake(retries=1)
    fake.chat = [(0.0, ConnectionRefusedError(111, "refused"), ""), (0.0, SSE, "")]
    assert fake.run(0)[1] is None
    assert fake.run(0)[1] is None
    assert fake.log.count("GET /slots") == 2


def test_late_first_byte_asks_slots_once_and_says_busy() -> None:
    fake = Fake(slot_check_delay=0.25, wait_timeout=10.0)
    fake.core.slot_count = 2
    fake.answers["/slots"] = [slots(True, False)]
    fake.chat = [(4.0, SSE, "")]
    assert fake.run(0) == ([Waiting(slot_busy=True)], None)
    assert fake.log == ["POST /pre/v1/chat/completions", "GET /slots"]
    assert fake.now == 4.0


def test_late_first_byte_of_a_free_slot_says_nothing() -> None:
    fake = Fake(slot_check_delay=0.25)
    fake.core.slot_count = 2
    fake.chat = [(1.0, SSE, "")]
    assert fake.run(0) == ([], None)
    assert fake.log == ["POST /pre/v1/chat/completions", "GET /slots"]


def test_probe_failing_is_only_a_courtesy() -> None:
    fake = Fake(slot_check_delay=0.25)
    fake.core.slot_count = 2
    fake.answers["/slots"] = [ConnectionResetError()]
    fake.chat = [(1.0, SSE, "")]
    assert fake.run(0) == ([], None)


def test_busy_slot_first_byte_bounded_by_wait_timeout() -> None:
    fake = Fake(wait_timeout=2.0, stall_timeout=30.0)
    fake.answers["/slots"] = [slots(True, False)]
    fake.chat = [(100.0, SSE, "")]
    events, err = fake.run(0)
    assert isinstance(err, WaitTimeoutError) and events == [Waiting(slot_busy=True)]
    assert fake.now == 2.0
    assert fake.log == ["GET /slots", "POST /pre/v1/chat/completions"]


def test_the_first_byte_comes_within_wait_timeout_however_long_stall_timeout_is() -> None:
    fake = Fake(wait_timeout=2.0, stall_timeout=5.0)
    fake.chat = [(100.0, SSE, "")]
    _events, err = fake.run(0)
    assert isinstance(err, WaitTimeoutError) and fake.now == 2.0 and "2 s" in str(err)


def test_without_waiting_a_busy_slot_is_busy_error_before_sending() -> None:
    fake = Fake(wait_for_slot=False)
    fake.core.slot_count = 2
    fake.answers["/slots"] = [slots(False, True)]
    events, err = fake.run(1)
    assert isinstance(err, BusyError) and err.slot == 1 and events == []
    assert fake.log == ["GET /slots"]


def test_without_waiting_slot_none_is_busy_only_when_every_slot_is() -> None:
    fake = Fake(wait_for_slot=False)
    fake.chat = [(0.0, SSE, "")]
    fake.answers["/slots"] = [slots(True, False), slots(True, True)]
    assert fake.run(None) == ([], None)
    assert isinstance(fake.run(None)[1], BusyError)


def test_slots_answer_of_128_slots_in_the_real_shape() -> None:
    from _server import load, split

    one = split(load("get_slots"))[1].decode()
    import json

    template = json.loads(one)[0]
    many = json.dumps([dict(template, id=i, is_processing=i == 77) for i in range(128)])
    assert len(many) > 1 << 16
    busy = read_slots(many)
    assert len(busy) == 128 and busy[77] and not busy[76]


def test_slots_answer_that_is_not_a_list_is_protocol_error() -> None:
    fake = Fake()
    fake.answers["/slots"] = [(200, '{"oops":1}')]
    _events, err = fake.run(0)
    assert isinstance(err, ProtocolError) and "not a list of slots" in str(err)


# --- a model that is loading -----------------------------------------------------------------


def test_loading_waits_once_and_polls_health_with_back_off() -> None:
    fake = Fake(load_timeout=60.0)
    fake.answers["/health"] = [LOADING, LOADING, LOADING, (200, "{}")]
    fake.chat = [(0.0, Head(503, "application/json"), LOADING[1]), (0.0, SSE, "")]
    fake.core.slot_count = 2
    events, err = fake.run(0)
    assert err is None and events == [Waiting(slot_busy=False)]
    sleeps = [line for line in fake.log if line.startswith("sleep")]
    assert sleeps == ["sleep 0.100", "sleep 0.200", "sleep 0.400", "sleep 0.800"]


def test_load_timeout_holds_when_health_says_ok_but_the_chat_says_loading() -> None:
    # A proxy or a router answers /health itself: the load deadline is the request's, not
    # one per loading answer, so the request ends.
    fake = Fake(load_timeout=5.0)
    fake.core.slot_count = 2
    fake.chat = [(0.0, Head(503, "application/json"), LOADING[1])]
    events, err = fake.run(0)
    assert isinstance(err, LoadTimeoutError) and events == [Waiting(slot_busy=False)]
    assert fake.now == pytest.approx(5.0)


def test_load_time_does_not_count_as_waiting_for_the_slot() -> None:
    fake = Fake(load_timeout=60.0, wait_timeout=1.0, stall_timeout=0.5)
    fake.core.slot_count = 2
    fake.answers["/health"] = [LOADING] * 5 + [(200, "{}")]
    fake.chat = [(0.0, Head(503, "application/json"), LOADING[1]), (0.9, SSE, "")]
    assert fake.run(0) == ([Waiting(slot_busy=False)], None)


# --- retries -----------------------------------------------------------------------------------


def test_refused_is_retried_with_back_off_then_connect_error() -> None:
    fake = Fake(retries=3, retry_base_ms=100, retry_max_ms=250)
    fake.core.slot_count = 2
    refused = ConnectionRefusedError(111, "Connection refused")
    fake.chat = [(0.0, refused, "")]
    events, err = fake.run(0)
    assert isinstance(err, ConnectError) and err.error is refused and "http://h:1/pre" in str(err)
    assert [e.attempt for e in events] == [1, 2, 3]
    for event, ceiling in zip(events, [100, 200, 250], strict=True):
        assert isinstance(event, Retrying) and ceiling / 2 <= event.after_ms <= ceiling
        assert "ConnectionRefusedError" in event.error
    sleeps = [float(line.split()[1]) for line in fake.log if line.startswith("sleep")]
    assert sleeps == pytest.approx([e.after_ms / 1000 for e in events])


def test_other_503_is_retried_then_http_error_and_400_is_not() -> None:
    fake = Fake(retries=1)
    fake.core.slot_count = 2
    fake.chat = [(0.0, Head(503, "application/json"), BUSY[1])]
    events, err = fake.run(0)
    assert isinstance(err, HttpError) and err.status == 503 and len(events) == 1
    fake.chat = [(0.0, Head(400, "application/json"), '{"error":{"message":"bad"}}')]
    events, err = fake.run(0)
    assert isinstance(err, HttpError) and err.status == 400 and events == []


def test_not_http_is_protocol_error_naming_the_path_and_is_not_sent_again() -> None:
    fake = Fake()
    fake.core.slot_count = 2
    fake.chat = [(0.0, b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "")]
    events, err = fake.run(0)
    assert isinstance(err, ProtocolError) and events == []
    assert str(err).startswith("the answer to POST /pre/v1/chat/completions is not HTTP/1.1: ")
    assert "SSH-2.0" in str(err)
    assert fake.log == ["POST /pre/v1/chat/completions"]


@pytest.mark.parametrize("raw", [b"HTTP/1.1 200 OK\r\nContent-Ty", b"HTTP/1.1 200 OK\n\n"])
def test_an_answer_cut_or_misframed_in_its_head_is_never_sent_again(raw: bytes) -> None:
    # Bytes of an answer came: the server may have acted on the request.
    fake = Fake(retries=3)
    fake.core.slot_count = 2
    fake.chat = [(0.0, raw, "")]
    events, err = fake.run(0)
    assert isinstance(err, ProtocolError) and "is not HTTP/1.1" in str(err) and events == []
    assert fake.log == ["POST /pre/v1/chat/completions"]


def test_200_that_is_not_an_event_stream_is_protocol_error() -> None:
    fake = Fake()
    fake.core.slot_count = 2
    fake.chat = [(0.0, Head(200, "application/json"), '{"choices":[]}')]
    err = fake.run(0)[1]
    assert isinstance(err, ProtocolError) and "application/json" in str(err)


# --- the thinking budget ----------------------------------------------------------------------


def budget_run(fake: Fake, steps: list[tuple[bool, int]]) -> tuple[list[Any], ChatExchange]:
    rc = fake.request(0)
    events: list[Any] = []
    for in_reasoning, tokens in steps:
        step = rc.budget_step(in_reasoning, tokens, "chatcmpl-1")
        if step is not None:
            fake.drive(step, events)
    return events, rc


def test_budget_asks_once_and_caps_when_accepted() -> None:
    fake = Fake(thinking_budget=10)
    fake.answers["/v1/chat/completions/control"] = [(200, '{"success":true}')]
    events, rc = budget_run(fake, [(True, 5), (True, 11), (True, 12), (False, 30)])
    assert events == [ThinkingCapped(11)] and rc.capped
    assert fake.log == ["POST /v1/chat/completions/control"]


def test_budget_refused_by_an_ended_completion_is_not_capped() -> None:
    fake = Fake(thinking_budget=10)
    fake.answers["/v1/chat/completions/control"] = [(200, '{"success":false}')]
    events, rc = budget_run(fake, [(True, 11)])
    assert events == [] and not rc.capped


def test_hard_cap_is_overrun_error_and_content_is_not_counted() -> None:
    fake = Fake(thinking_hard_cap=20)
    assert budget_run(fake, [(True, 20), (False, 50)])[0] == []
    with pytest.raises(ThinkingOverrunError) as err:
        budget_run(fake, [(True, 21)])
    assert (err.value.tokens, err.value.hard_cap) == (21, 20)
    assert fake.log == []


def test_control_connection_failure_is_connect_error() -> None:
    fake = Fake(thinking_budget=1)
    fake.answers["/v1/chat/completions/control"] = [ConnectionResetError()]
    with pytest.raises(ConnectError):
        budget_run(fake, [(True, 2)])


# --- the key -----------------------------------------------------------------------------------


def test_the_api_key_is_a_bearer_header_and_never_shown() -> None:
    cfg = Config(InferConfig(api_key="sekrit-123"))
    core = Core(cfg)
    assert core.headers == {"Authorization": "Bearer sekrit-123"}
    assert "sekrit" not in repr(core) + repr(cfg)
    assert Core(Config()).headers == {}


# --- the deadline of each request -------------------------------------------------------------

DRIP = 0.5  # a server that sends one byte every half second


def test_a_dripping_slots_answer_ends_within_connect_timeout_and_is_not_sent_again() -> None:
    # the server answered (ONCE): the whole answer is bounded, and nothing is sent again
    fake = Fake(connect_timeout=3.0, retries=1)
    fake.answers["/slots"] = [(200, "[" + ",".join(['{"id":0}'] * 5000) + "]")]
    fake.drip["/slots"] = DRIP
    events, err = fake.run(0)
    assert isinstance(err, StalledError)
    assert "the answer to GET /pre/slots did not finish within 3 s" in str(err)
    assert events == []
    assert fake.now == pytest.approx(3.0)
    assert fake.log.count("GET /slots") == 1


def test_a_dripping_slots_answer_is_bounded_by_the_wait_it_serves() -> None:
    fake = Fake(connect_timeout=30.0, wait_timeout=2.0, retries=0)
    fake.answers["/slots"] = [(200, "[" + ",".join(['{"id":0}'] * 5000) + "]")]
    fake.drip["/slots"] = DRIP
    _events, err = fake.run(0)
    assert isinstance(err, StalledError) and fake.now == pytest.approx(2.0)
    assert "did not finish within 2 s" in str(err)


def test_a_dripping_health_answer_ends_by_the_load_deadline() -> None:
    fake = Fake(load_timeout=4.0, connect_timeout=30.0)
    fake.core.slot_count = 2
    fake.answers["/health"] = [(200, "{" + " " * 100_000 + "}")]
    fake.drip["/health"] = DRIP
    fake.chat = [(0.0, Head(503, "application/json"), LOADING[1])]
    events, err = fake.run(0)
    assert isinstance(err, LoadTimeoutError) and events == [Waiting(slot_busy=False)]
    assert fake.now == pytest.approx(4.0)


def test_a_dripping_control_answer_ends_within_connect_timeout() -> None:
    fake = Fake(thinking_budget=1, connect_timeout=3.0)
    fake.answers["/v1/chat/completions/control"] = [(200, '{"success":true' + " " * 10_000 + "}")]
    fake.drip["/v1/chat/completions/control"] = DRIP
    with pytest.raises(StalledError, match="control did not finish within 3 s"):
        budget_run(fake, [(True, 2)])
    assert fake.now == pytest.approx(3.0)


def test_an_error_body_is_read_within_stall_timeout_of_the_first_byte() -> None:
    fake = Fake(stall_timeout=60.0, wait_timeout=100.0)
    fake.core.slot_count = 2
    fake.chat = [(1.0, Head(500, "application/json"), "x" * 60_000)]
    fake.drip["/v1/chat/completions"] = DRIP
    _events, err = fake.run(0)
    assert isinstance(err, HttpError) and err.status == 500
    assert fake.now == pytest.approx(1.0 + 60.0)  # the first byte at 1 s, then stall_timeout
    assert 0 < len(err.body) < 60_000 and set(err.body) == {"x"}


def test_the_head_must_finish_within_stall_timeout_of_its_first_byte() -> None:
    fake = Fake(stall_timeout=2.0, wait_timeout=100.0)
    fake.core.slot_count = 2
    fake.chat = [(1.0, b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * 10_000 + b"\r\n\r\n", "")]
    fake.drip["/v1/chat/completions"] = DRIP
    _events, err = fake.run(0)
    assert isinstance(err, StalledError) and isinstance(err, TimeoutError)
    assert "did not finish within 2 s" in str(err) and fake.now == pytest.approx(3.0)
    assert fake.log.count("POST /pre/v1/chat/completions") == 1  # it answered: not sent again


# --- failures that are not retried -----------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        ssl.SSLCertVerificationError(1, "certificate verify failed"),
        ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
        HandshakeTimeout("the TLS handshake did not finish"),
    ],
    ids=["name does not resolve", "certificate", "TLS to a plain port", "handshake timeout"],
)
def test_failures_that_fail_the_same_way_every_time_are_not_retried(error: OSError) -> None:
    fake = Fake(retries=3)
    fake.core.slot_count = 2
    fake.chat = [(0.0, error, "")]
    events, err = fake.run(0)
    assert isinstance(err, ConnectError) and err.error is error and events == []
    assert fake.log == ["POST /pre/v1/chat/completions"]


def test_a_tls_eof_may_be_a_restart_and_is_retried() -> None:
    fake = Fake(retries=2)
    fake.core.slot_count = 2
    fake.chat = [(0.0, ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), "")]
    events, err = fake.run(0)
    assert isinstance(err, ConnectError) and [type(e) for e in events] == [Retrying, Retrying]


def test_a_small_request_names_connect_timeout_whatever_the_clock_reads() -> None:
    # On a clock that reads tens of thousands of seconds, (start + 0.2) - start rounds below
    # 0.2: the deadlines themselves decide which limit ran out, not their difference.
    from llamafast._core._exchange import _unanswered

    start = 33465.366105313
    assert (start + 0.2) - start < 0.2
    assert "within connect_timeout (0.2 s)" in _unanswered("GET /props", start, start + 0.2, 0.2)
    served = _unanswered("GET /props", start, start + 0.1, 0.2)
    assert served == "GET /props was not answered before the deadline of the request it serves"
