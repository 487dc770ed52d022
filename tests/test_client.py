# Every rule of docs/client.md, against a real loopback server replaying the recordings, run
# through both clients: the `drive` fixture is the sync Client or the AsyncClient (asyncio.run
# per request), so each test states the rule once and holds both to it.
"""Client and AsyncClient against tests/_server.py: the rules of docs/client.md, and the basics."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import random
import threading
import time
from collections.abc import Callable

import pytest

from _drivers import FAST, AsyncDriver, Driver, Outcome, SyncDriver, cfg, req
from _server import (
    ReplayServer,
    Reply,
    capped_reply,
    chunked,
    dechunk,
    event_offset,
    expected,
    load,
    raw_response,
    split,
)
from llamafast import (
    AsyncClient,
    BusyError,
    ChatRequest,
    Client,
    Config,
    ConnectError,
    Content,
    HttpError,
    InferConfig,
    Limits,
    LineTooLongError,
    LoadTimeoutError,
    NotUtf8Error,
    Progress,
    ProtocolError,
    Queued,
    Reasoning,
    Retrying,
    SseIoError,
    SseTimeoutError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingCapped,
    ThinkingOverrunError,
    ToolCallDelta,
    TruncatedError,
    User,
    Waiting,
    WaitTimeoutError,
    build_body,
)
from llamafast._core import backoff_ms, poll_delays

CHAT = "/v1/chat/completions"
STREAMS = ["content_only", "reasoning_then_content", "tool_call", "length"]
STREAMS += ["long_prompt_progress", "usage_chunk"]

SENT = ("whole", "pieces")  # every test taking `server` runs with both (conftest.py)


def stream_events(out: Outcome) -> list[object]:
    """The events that came from the body (not Queued/Waiting/Retrying/ThinkingCapped)."""
    return [
        e for e in out.events if not isinstance(e, Queued | Waiting | Retrying | ThinkingCapped)
    ]


# --- the basics -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STREAMS)
def test_replays_each_recording_to_its_expected_events_and_completion(
    drive: Driver, server: ReplayServer, name: str
) -> None:
    server.script = [Reply(name)]
    out = drive.run(cfg(server), req())
    events, completion = expected(name)
    assert out.events == events
    assert out.ok() == completion


def test_the_stream_gives_tool_arguments_parsed_so_far(server: ReplayServer) -> None:
    # A client stream hands out its assembler's partial arguments, as ChatStream does.
    def check(stream: object, seen: list[object]) -> None:
        call = stream.completion.tool_calls[0]  # type: ignore[attr-defined]
        assert len(seen) > 3 and seen[-1] == call.parse_arguments() == json.loads(call.arguments)
        assert seen[0] != seen[-1]  # it grew as the pieces came

    server.script = [Reply("tool_call")]
    seen: list[object] = []
    with Client(cfg(server)).stream(req()) as stream:
        with pytest.raises(IndexError):
            stream.partial_arguments(0)
        for ev in stream:
            if isinstance(ev, ToolCallDelta):
                seen.append(stream.partial_arguments(ev.index))
    check(stream, seen)

    async def run() -> None:
        server.script = [Reply("tool_call")]
        seen.clear()
        async with AsyncClient(cfg(server)) as client, client.stream(req()) as astream:
            async for ev in astream:
                if isinstance(ev, ToolCallDelta):
                    seen.append(astream.partial_arguments(ev.index))
        check(astream, seen)

    asyncio.run(run())


def test_sends_the_built_body_after_asking_slots(drive: Driver, server: ReplayServer) -> None:
    config = cfg(server, thinking_budget=0, sse_ping_interval=2.0)
    request = ChatRequest(1, [User("héllo ✓")], thinking=True)
    drive.run(config, request).ok()
    assert server.paths() == ["/slots", "/v1/chat/completions"]
    sent = server.requests[1].body
    assert sent == build_body(config, request).encode("utf-8")
    body = json.loads(sent)
    assert body["reasoning_control"] is True and body["sse_ping_interval"] == 2.0


def test_a_bad_request_fails_before_anything_is_sent(drive: Driver, server: ReplayServer) -> None:
    out = drive.run(cfg(server), req(slot=-1))
    assert isinstance(out.error, ValueError) and "slot" in str(out.error)
    assert server.requests == []


def test_completion_before_the_end_raises_and_errors_are_latched(server: ReplayServer) -> None:
    server.script = [Reply("midstream_error")]
    with Client(cfg(server)).stream(req()) as stream:
        with pytest.raises(RuntimeError, match="not ended yet"):
            _ = stream.completion
        with pytest.raises(HttpError) as first:
            list(stream)
        with pytest.raises(HttpError) as again:
            next(stream)
        assert again.value is first.value
        with pytest.raises(HttpError):
            _ = stream.completion


def test_stream_state_follows_the_body(server: ReplayServer) -> None:
    server.script = [Reply("reasoning_then_content")]
    seen = []
    with Client(cfg(server)).stream(req()) as stream:
        assert (stream.id, stream.reasoning_tokens, stream.in_reasoning) == (None, 0, False)
        for event in stream:
            seen.append((type(event), stream.in_reasoning, stream.is_finished))
        assert stream.id == expected("reasoning_then_content")[1].id  # type: ignore[union-attr]
        assert stream.reasoning_tokens == 41 and stream.is_finished
    assert (Reasoning, True, False) in seen and (Content, False, False) in seen


# --- one request per slot at a time, in order (docs/client.md, rule QUEUE) --------------------


def slow(name: str = "content_only", seconds: float = 0.15) -> Reply:
    raw = load(name)
    return Reply(name, pause_at=event_offset(raw, 2), pause_s=seconds)


def test_same_slot_requests_run_one_at_a_time_in_order(drive: Driver, server: ReplayServer) -> None:
    server.script = lambda body: slow()
    reqs = [req(0, f"r{i}") for i in range(4)]
    outs = drive.run_many(cfg(server), reqs)
    for i, out in enumerate(outs):
        assert out.ok() == expected("content_only")[1]
        queued = [e for e in out.events if isinstance(e, Queued)]
        assert queued == [Queued(n) for n in range(i, 0, -1)]  # again whenever it shrinks
        assert not isinstance(out.events[-1], Queued)
    logs = server.chat_logs()
    assert [log.body["messages"][0]["content"] for log in logs] == ["r0", "r1", "r2", "r3"]
    for before, after in itertools.pairwise(logs):
        assert after.arrived >= before.ended - 0.01  # never two at once on the slot


HANG_GUARD = 20.0
"""Seconds an end-to-end test allows for what takes milliseconds: only a hang passes it, however
loaded the machine. How long each rule's wait is, is checked against a fake clock
(tests/test_client_core.py); these tests check that the drivers carry the rule out."""


def released_by(hold: threading.Event, index: int) -> Callable[[int, Outcome], None]:
    """An `on_done` for run_many that lets `hold` go once request `index` has ended (and a
    timer that lets it go after HANG_GUARD, so that a broken rule fails instead of hanging)."""
    guard = threading.Timer(HANG_GUARD, hold.set)
    guard.daemon = True
    guard.start()

    def on_done(i: int, out: Outcome) -> None:
        if i == index:
            hold.set()
            guard.cancel()

    return on_done


def test_other_slots_do_not_wait(drive: Driver, server: ReplayServer) -> None:
    # "long" pauses after two events until "short" has ended: were short to wait for slot 0,
    # it would end only after the hang guard let long go, and after it.
    hold = threading.Event()
    paused = Reply(pause_at=event_offset(load("content_only"), 2), pause_until=hold)
    server.script = lambda body: paused if body["messages"][0]["content"] == "long" else Reply()
    reqs = [req(0, "long"), req(1, "short")]
    outs = drive.run_many(cfg(server, stall_timeout=60.0), reqs, released_by(hold, 1))
    assert all(o.ok() for o in outs)
    assert not any(isinstance(e, Queued) for o in outs for e in o.events)
    long, short = sorted(server.chat_logs(), key=lambda log: log.body["messages"][0]["content"])
    # (ended: noted after the last write, which the client may read first: 0.0 until then)
    assert short.arrived < (long.ended or math.inf) and outs[1].elapsed < HANG_GUARD


def test_waiting_in_the_queue_past_wait_timeout(drive: Driver, server: ReplayServer) -> None:
    # "first" holds the slot until the second has ended: only its wait_timeout can end it.
    hold = threading.Event()
    paused = Reply(pause_at=event_offset(load("content_only"), 2), pause_until=hold)
    server.script = lambda body: paused if body["messages"][0]["content"] == "first" else Reply()
    # wait_timeout: room for the first's first byte to come on a loaded machine too
    limits = cfg(server, wait_timeout=2.0, stall_timeout=60.0)
    first, second = drive.run_many(limits, [req(0, "first"), req(0, "2")], released_by(hold, 1))
    assert first.ok()
    err = second.raised(WaitTimeoutError)
    assert str(err) == (
        "gave up waiting for the slot and the answer's first byte after 2 s; to wait longer, "
        "raise wait_timeout (Limits.wait_timeout, or wait_timeout in [limits])"
    )
    assert second.events == [Queued(1)]
    assert second.elapsed < HANG_GUARD  # entered before it was timed: no lower bound
    assert [log.body["messages"][0]["content"] for log in server.chat_logs()] == ["first"]


# --- a model that is loading (docs/client.md, rule LOAD) --------------------------------------


def test_loading_model_waits_then_streams(drive: Driver, server: ReplayServer) -> None:
    server.load_until(server.until_asked("/health"))  # loading until the client polls
    out = drive.run(cfg(server), req())
    assert out.events[0] == Waiting(slot_busy=False)
    assert out.events.count(Waiting(slot_busy=False)) == 1
    assert out.events[1:] == expected("content_only")[0]
    assert out.ok() == expected("content_only")[1]
    paths = server.paths()
    assert paths[0] == "/slots" and "/health" in paths and paths[-1] == "/v1/chat/completions"


def test_loading_answer_to_the_chat_itself(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply("chat_while_loading"), Reply()]
    out = drive.run(cfg(server), req())
    assert out.events[0] == Waiting(slot_busy=False)
    assert out.ok() == expected("content_only")[1]
    assert server.paths().count("/v1/chat/completions") == 2
    assert "/health" in server.paths()


def test_loading_longer_than_load_timeout(drive: Driver, server: ReplayServer) -> None:
    server.load_for(30)
    out = drive.run(cfg(server, load_timeout=0.3), req())
    err = out.raised(LoadTimeoutError)
    assert str(err) == (
        "gave up waiting for the server to load its model after 0.3 s; to wait longer, raise "
        "load_timeout (Limits.load_timeout, or load_timeout in [limits])"
    )
    assert out.events == [Waiting(slot_busy=False)]
    assert 0.3 <= out.elapsed < HANG_GUARD  # the model loads for 30 s
    assert "/v1/chat/completions" not in server.paths()


def test_poll_delays_back_off_and_stay_bounded() -> None:
    delays = poll_delays(Limits(retry_base_ms=100, retry_max_ms=10_000))
    assert [next(delays) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    delays = poll_delays(Limits(retry_base_ms=10, retry_max_ms=30))
    assert [next(delays) for _ in range(3)] == [0.01, 0.02, 0.03]


# --- a busy slot, slots it lacks (docs/client.md, rules SLOTS and WAIT) -----------------------


def test_busy_slot_waits_until_free(drive: Driver, server: ReplayServer) -> None:
    # The first request of a client asks /slots (for the slot count): a busy slot is said at
    # once, and the chat is sent at once too (the server holds it until the slot is free).
    # The slot is busy until the chat has arrived (so /slots said busy before), then free.
    freed: list[float] = []

    def chat_arrived() -> bool:
        if CHAT in server.paths():
            freed.append(time.monotonic())
        return bool(freed)

    holder = server.busy_until(0, chat_arrived)
    out = drive.run(cfg(server), req(0))
    holder.join()
    assert out.events[0] == Waiting(slot_busy=True)
    assert out.events.count(Waiting(slot_busy=True)) == 1
    assert out.ok() == expected("content_only")[1]
    assert server.chat_logs()[0].started >= freed[0]  # answered only once the slot was free
    assert server.paths() == ["/slots", "/v1/chat/completions"]  # no polling


def test_busy_slot_later_is_found_when_the_first_byte_is_late(server: ReplayServer) -> None:
    # The slot count is cached: the next request goes straight to the chat, and asks /slots
    # only when no byte came for slot_check_delay; then Waiting(slot_busy=True), once.
    client = Client(cfg(server, slot_check_delay=0.1))
    assert SyncDriver.run_on(client, req(0)).ok()
    assert server.paths() == ["/slots", "/v1/chat/completions"]
    holder = server.busy_until(0, lambda: server.slots_answered >= 2)  # until the probe's answer
    out = SyncDriver.run_on(client, req(0))
    holder.join()
    assert out.ok() == expected("content_only")[1]
    assert out.events[0] == Waiting(slot_busy=True)
    assert out.events.count(Waiting(slot_busy=True)) == 1
    assert server.paths()[2:] == ["/v1/chat/completions", "/slots"]
    # a free slot: no /slots at all
    assert SyncDriver.run_on(client, req(0)).ok()
    assert server.paths()[4:] == ["/v1/chat/completions"]


def test_busy_slot_later_async(server: ReplayServer) -> None:
    async def main() -> tuple[Outcome, Outcome]:
        async with AsyncClient(cfg(server, slot_check_delay=0.1)) as client:
            first = await AsyncDriver.run_on(client, req(0))
            holder = server.busy_until(0, lambda: server.slots_answered >= 2)
            second = await AsyncDriver.run_on(client, req(0))
            holder.join()
            return first, second

    first, second = asyncio.run(main())
    assert first.ok() and second.ok() == expected("content_only")[1]
    assert second.events[0] == Waiting(slot_busy=True)
    assert server.paths() == ["/slots", CHAT, CHAT, "/slots"]


def test_busy_slot_without_waiting_is_busy_error(drive: Driver, server: ReplayServer) -> None:
    with server.hold_busy(1):
        out = drive.run(cfg(server, wait_for_slot=False), req(1))
    err = out.raised(BusyError)
    assert err.slot == 1 and "slot 1" in str(err)
    assert out.events == []  # at once: a wait would have been Waiting, then WaitTimeoutError
    assert "/v1/chat/completions" not in server.paths()


def test_busy_slot_longer_than_wait_timeout(drive: Driver, server: ReplayServer) -> None:
    with server.hold_busy(0):
        out = drive.run(cfg(server, wait_timeout=0.3), req(0))
    err = out.raised(WaitTimeoutError)
    assert "after 0.3 s; to wait longer, raise wait_timeout (Limits.wait_timeout" in str(err)
    assert out.events == [Waiting(slot_busy=True)]
    assert 0.3 <= out.elapsed < HANG_GUARD  # the slot stays busy until the client gave up
    # (and maybe the stop of the request left queued on the server: docs/client.md, RESUME)
    assert [p for p in server.paths() if p != "/v1/stream"] == ["/slots", CHAT]


def test_busy_slot_of_another_slot_does_not_matter(drive: Driver, server: ReplayServer) -> None:
    with server.hold_busy(0):
        out = drive.run(cfg(server, wait_for_slot=False), req(1))
    assert out.ok() and out.events == expected("content_only")[0]


def test_slot_the_server_does_not_have_is_refused_before_sending(
    drive: Driver, server: ReplayServer
) -> None:
    out = drive.run(cfg(server), req(2))  # 2 slots: 0 and 1; llama-server would wrap 2 to 0
    err = out.raised(ValueError)
    assert "slot 2" in str(err) and "2 slots" in str(err)
    assert server.paths() == ["/slots"]


def test_slot_count_comes_from_the_server(drive: Driver) -> None:
    with ReplayServer(n_slots=4) as srv:
        assert drive.run(cfg(srv), req(3)).ok()
        assert "4 slots" in str(drive.run(cfg(srv), req(4)).raised(ValueError))


@pytest.mark.parametrize("n_slots", [52, 128])
def test_slots_answer_over_64_kib(drive: Driver, n_slots: int) -> None:
    # About 1.3 KB a slot in llama-server's shape: 52 slots pass 64 KiB.
    with ReplayServer(n_slots=n_slots) as srv:
        assert len(split(srv._slots())[1]) > 1 << 16
        assert drive.run(cfg(srv), req(n_slots - 1)).ok()
        err = drive.run(cfg(srv), req(n_slots)).raised(ValueError)
        assert f"{n_slots} slots" in str(err)


def test_slots_answer_arriving_in_pieces(drive: Driver) -> None:
    with ReplayServer(n_slots=4, pieces=1000, gap=0.02) as srv:
        assert len(split(srv._slots())[1]) > 3000
        assert drive.run(cfg(srv), req(3)).ok()
        assert "4 slots" in str(drive.run(cfg(srv), req(4)).raised(ValueError))


def test_error_body_arriving_in_pieces_is_read_whole(drive: Driver) -> None:
    with ReplayServer(pieces=64, gap=0.01) as srv:
        srv.script = [Reply("error_context_exceeded")]
        err = drive.run(cfg(srv), req()).raised(HttpError)
        assert err.body == split(load("error_context_exceeded"))[1].decode()


def test_silent_busy_slot_is_bounded_by_wait_timeout(drive: Driver, server: ReplayServer) -> None:
    # Busy after /slots said free (another client got there first): no byte at all.
    hold = threading.Event()
    server.script = [Reply(hold=hold)]
    try:
        # wait_timeout: room for the courtesy /slots to be answered on a loaded machine too
        out = drive.run(
            cfg(server, wait_timeout=2.0, stall_timeout=0.1, slot_check_delay=0.05), req(0)
        )
    finally:
        hold.set()
    out.raised(WaitTimeoutError)
    # /slots said free; the late first byte made the client ask again: now it is processing
    assert out.events == [Waiting(slot_busy=True)] and 2.0 <= out.elapsed < HANG_GUARD
    assert [p for p in server.paths() if p != "/v1/stream"] == ["/slots", CHAT, "/slots"]


def test_busy_slot_recording_replayed_at_its_pace(drive: Driver, server: ReplayServer) -> None:
    # busy_slot_second: no byte for 149 ms (the slot was busy), then the whole answer.
    server.script = [Reply("busy_slot_second", pace=1.0)]
    out = drive.run(cfg(server, stall_timeout=0.1), req(0))
    assert out.ok() == expected("busy_slot_second")[1]
    assert out.elapsed >= 0.14


# --- retries before the first byte (docs/client.md, rules RETRIES and BACKOFF) ----------------


def test_refused_connection_is_retried(drive: Driver, server: ReplayServer) -> None:
    server.refuse_for(0.2)
    out = drive.run(cfg(server, retries=20, retry_base_ms=20, retry_max_ms=50), req())
    assert out.ok() == expected("content_only")[1]
    retries = [e for e in out.events if isinstance(e, Retrying)]
    assert retries and [r.attempt for r in retries] == list(range(1, len(retries) + 1))
    assert all("ConnectionRefusedError" in r.error for r in retries)
    assert all(10 <= r.after_ms <= 50 for r in retries)
    assert stream_events(out) == expected("content_only")[0]


def test_refused_connection_past_retries_is_connect_error(
    drive: Driver, server: ReplayServer
) -> None:
    server.refuse()
    out = drive.run(cfg(server, retries=2), req())
    err = out.raised(ConnectError)
    assert isinstance(err.error, ConnectionRefusedError) and err.__cause__ is not None
    assert [(e.attempt, type(e)) for e in out.events] == [(1, Retrying), (2, Retrying)]
    assert server.url in str(err)


def test_no_retries_means_one_attempt(drive: Driver, server: ReplayServer) -> None:
    server.refuse()
    out = drive.run(cfg(server, retries=0), req())
    out.raised(ConnectError)
    assert out.events == []


def test_reset_before_the_first_byte_is_retried(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply(raw=b"", rst=True), Reply()]
    out = drive.run(cfg(server), req())
    assert out.ok() == expected("content_only")[1]
    assert [type(e) for e in out.events[:1]] == [Retrying]
    assert len(server.chat_logs()) == 2


def test_reset_of_slots_request_is_retried(drive: Driver, server: ReplayServer) -> None:
    server.reset_next = 2
    out = drive.run(cfg(server), req())
    assert out.ok()
    assert [e.attempt for e in out.events if isinstance(e, Retrying)] == [1, 2]


BUSY_503 = raw_response(
    503, "Service Unavailable", b'{"error":{"code":503,"message":"no slot available"}}'
)


def test_other_503_is_retried_then_http_error(drive: Driver, server: ReplayServer) -> None:
    server.script = lambda body: Reply(raw=BUSY_503)
    out = drive.run(cfg(server, retries=2), req())
    err = out.raised(HttpError)
    assert err.status == 503 and "no slot available" in str(err)
    assert [e.attempt for e in out.events] == [1, 2]
    assert all("no slot available" in e.error for e in out.events)  # type: ignore[union-attr]
    assert len(server.chat_logs()) == 3


def test_503_then_success(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply(raw=BUSY_503), Reply("reasoning_then_content")]
    out = drive.run(cfg(server), req())
    assert out.ok() == expected("reasoning_then_content")[1]


def test_nothing_is_retried_once_the_stream_started(drive: Driver, server: ReplayServer) -> None:
    raw = load("content_only")
    server.script = [Reply(cut_at=event_offset(raw, 3) + 3, rst=True), Reply()]
    out = drive.run(cfg(server), req())
    out.raised(StreamClosedEarlyError)
    assert len(server.chat_logs()) == 1
    assert not any(isinstance(e, Retrying) for e in out.events)
    assert out.events == expected("content_only")[0][:3]


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    limits = Limits(retry_base_ms=100, retry_max_ms=1000)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (30, 1000)]:
        got = [backoff_ms(limits, attempt, rng) for _ in range(200)]
        assert all(ceiling / 2 <= g <= ceiling for g in got)
        assert len(set(got)) > 20  # jittered
    assert backoff_ms(Limits(retry_base_ms=1, retry_max_ms=1), 1, rng) == 1


# --- HTTP errors (docs/client.md, rule HTTP-ERRORS) -------------------------------------------


@pytest.mark.parametrize(
    ("name", "status", "says"),
    [
        ("error_bad_json", 400, "parse error"),
        ("error_context_exceeded", 400, "context"),
        ("error_wrong_type", 400, ""),
        ("error_no_messages", 400, ""),
        ("error_grammar_with_tools", 400, ""),
        ("midstream_error_nonstream", 500, "peg-native"),
        ("get_unknown_path", 404, "File Not Found"),
    ],
)
def test_other_non_200_is_http_error_with_the_servers_message(
    drive: Driver, server: ReplayServer, name: str, status: int, says: str
) -> None:
    server.script = [Reply(name)]
    out = drive.run(cfg(server), req())
    err = out.raised(HttpError)
    body = split(load(name))[1].decode()
    assert (err.status, err.body) == (status, body)
    message = json.loads(body)["error"]["message"]
    assert says in message
    # HTTP-ERRORS: the status, the request it answered, the server's message
    assert str(err) == f"the server answered {status} to POST {CHAT}: {message}"
    assert out.events == [] and len(server.chat_logs()) == 1  # not retried


def test_error_payload_mid_stream_is_http_error(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply("midstream_error")]
    out = drive.run(cfg(server), req())
    err = out.raised(HttpError)
    assert err.status == 500 and "does not match the expected peg-native format" in str(err)
    assert str(err).startswith(f"the server answered 500 to POST {CHAT}: ")
    assert out.events == expected("midstream_error")[0]


def test_200_that_is_not_an_event_stream(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply(raw=raw_response(200, "OK", b'{"choices":[]}'))]
    err = drive.run(cfg(server), req()).raised(ProtocolError)
    assert "application/json" in str(err)


def test_a_url_holding_the_api_path_says_url_is_the_servers_root(
    drive: Driver, server: ReplayServer
) -> None:
    # The chat path already in `url`: every request repeats it, and the server's 404 says so.
    out = drive.run(cfg(server.url + CHAT), req())
    err = out.raised(HttpError)
    assert err.status == 404 and err.body == split(load("get_unknown_path"))[1].decode()
    root = server.url
    assert str(err) == (
        f"the server answered 404 to POST {CHAT}{CHAT}: File Not Found; the URL's path repeats "
        f"an API path: url should be the server's root, such as {root} (it is {root}{CHAT})"
    )
    assert server.paths("POST") == [CHAT + CHAT]  # not retried


# What a web server that is not llama-server answers a POST (python -m http.server's page).
NOT_LLAMA = (
    b'<!DOCTYPE HTML>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
    b"<title>Error response</title>\n</head>\n<body>\n<h1>Error response</h1>\n"
    b"<p>Error code: 501</p>\n<p>Message: Unsupported method ('POST').</p>\n</body>\n</html>\n"
)


def test_an_html_answer_is_not_dumped_and_says_url_should_be_a_llama_server(
    drive: Driver, server: ReplayServer
) -> None:
    server.script = [Reply(raw=raw_response(501, "Unsupported method", NOT_LLAMA, "text/html"))]
    err = drive.run(cfg(server), req()).raised(HttpError)
    assert (err.status, err.body) == (501, NOT_LLAMA.decode())  # kept whole for a program
    assert str(err) == (
        f"the server answered 501 to POST {CHAT}: an HTML page ('Error response'); no "
        "llama-server answers an HTML page: url should be a llama-server's root, such as "
        f"http://127.0.0.1:8080 (it is {server.url})"
    )


TIMEOUTS = ["wait_timeout", "load_timeout", "stall_timeout", "connect_timeout", "slot_check_delay"]


@pytest.mark.parametrize("name", TIMEOUTS)
def test_a_timeout_of_one_day_is_honoured(drive: Driver, server: ReplayServer, name: str) -> None:
    # TIMEOUT-BOUND: the bound itself works in both clients (no overflow on the way to the OS).
    out = drive.run(cfg(server, **{name: 86_400.0}), req())
    assert out.ok() == expected("content_only")[1]


@pytest.mark.parametrize("name", TIMEOUTS)
@pytest.mark.parametrize("value", [86_400.5, 1e12, 1e300])
def test_a_timeout_past_one_day_is_refused_before_anything_is_sent(
    drive: Driver, server: ReplayServer, name: str, value: float
) -> None:
    # The sync client once raised a raw OverflowError for connect_timeout=1e12.
    with pytest.raises(ValueError, match=f"limits\\.{name} must be .* at most 86400 seconds"):
        drive.run(cfg(server, **{name: value}), req())
    assert server.requests == []


# --- stalls and cuts (docs/client.md, rules STALL and STREAM-ERRORS) --------------------------


def test_no_byte_for_stall_timeout_is_stalled(drive: Driver, server: ReplayServer) -> None:
    raw = load("content_only")
    # the server's pause ends when the client closes: only the stall can end the request
    server.script = [Reply(pause_at=event_offset(raw, 3), pause_s=60.0)]
    out = drive.run(cfg(server, stall_timeout=0.25, resume=False), req())  # (RESUME: test_resume)
    err = out.raised(StalledError)
    assert isinstance(err.__cause__, SseTimeoutError)
    assert str(err) == (
        "the stream stalled: no byte arrived for 0.25 s; to wait longer, raise stall_timeout "
        "(Limits.stall_timeout, or stall_timeout in [limits])"
    )
    assert out.events == expected("content_only")[0][:3]
    assert 0.25 <= out.elapsed < HANG_GUARD


def test_ping_comments_keep_a_slow_prompt_alive(drive: Driver, server: ReplayServer) -> None:
    # sse_ping at 2.5x: a ping every 0.8 s, the first data after 2.04 s; each ping comes
    # 0.8 s before the stall would (room for a loaded machine), the data 0.44 s after it.
    server.script = [Reply("sse_ping", pace=2.5)]
    out = drive.run(cfg(server, stall_timeout=1.6), req())
    assert out.ok() == expected("sse_ping")[1]
    assert out.elapsed >= 2.0


def test_the_same_silence_without_pings_is_a_stall(drive: Driver, server: ReplayServer) -> None:
    raw = load("sse_ping")
    head = len(split(raw)[0])
    server.script = [Reply("sse_ping", drop_pings=True, pause_at=head, pause_s=0.6)]
    out = drive.run(cfg(server, stall_timeout=0.4), req())
    out.raised(StalledError)
    assert out.events == []


def test_body_cut_mid_line_is_closed_early(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply(cut_line=4)]  # a clean chunked end inside the 4th data line
    out = drive.run(cfg(server, resume=False), req())  # today's error (RESUME: test_resume)
    err = out.raised(StreamClosedEarlyError)
    assert isinstance(err.__cause__, TruncatedError)
    assert out.events == expected("content_only")[0][:3]


def test_chunked_encoding_cut_is_closed_early(drive: Driver, server: ReplayServer) -> None:
    raw = load("content_only")
    server.script = [Reply(cut_at=event_offset(raw, 3) + 10)]
    out = drive.run(cfg(server, resume=False), req())  # today's error (RESUME: test_resume)
    err = out.raised(StreamClosedEarlyError)
    assert isinstance(err.__cause__, TruncatedError | SseIoError)
    assert out.events == expected("content_only")[0][:3]


def test_connection_reset_mid_stream_is_closed_early(drive: Driver, server: ReplayServer) -> None:
    raw = load("content_only")
    server.script = [
        Reply(pause_at=event_offset(raw, 3), pause_s=0.1, cut_at=event_offset(raw, 3), rst=True)
    ]
    out = drive.run(cfg(server, resume=False), req())  # today's error (RESUME: test_resume)
    err = out.raised(StreamClosedEarlyError)
    assert isinstance(err.__cause__, SseIoError | TruncatedError)


def test_body_without_done_or_finish_reason_is_closed_early(
    drive: Driver, server: ReplayServer
) -> None:
    head, body = split(load("content_only"))
    server.script = [Reply(raw=head + chunked(dechunk(body)[:5]))]
    out = drive.run(cfg(server), req())
    out.raised(StreamClosedEarlyError)
    assert out.events == expected("content_only")[0][:5]


def test_line_too_long_is_protocol_error(drive: Driver, server: ReplayServer) -> None:
    out = drive.run(cfg(server, max_line=300), req())
    err = out.raised(ProtocolError)
    assert isinstance(err.__cause__, LineTooLongError) and "300" in str(err)


def test_line_not_utf8_is_protocol_error(drive: Driver, server: ReplayServer) -> None:
    head, body = split(load("content_only"))
    payloads = dechunk(body)
    payloads.insert(2, b": ping \xff\xfe\n\n")
    server.script = [Reply(raw=head + chunked(payloads))]
    out = drive.run(cfg(server), req())
    err = out.raised(ProtocolError)
    assert isinstance(err.__cause__, NotUtf8Error)
    assert out.events == expected("content_only")[0][:2]


# --- the thinking budget (docs/client.md, rules BUDGET and HARD-CAP) --------------------------


def test_thinking_budget_ends_reasoning_once(drive: Driver, server: ReplayServer) -> None:
    server.script = [capped_reply()]
    out = drive.run(cfg(server, thinking_budget=20), req(thinking=True))
    events, completion = expected("thinking_capped")
    assert completion is not None
    assert out.ok() == dataclasses.replace(completion, thinking_capped=True)
    capped = [(i, e) for i, e in enumerate(out.events) if isinstance(e, ThinkingCapped)]
    assert len(capped) == 1
    at, event = capped[0]
    assert event.tokens > 20 and isinstance(out.events[at - 1], Reasoning)
    assert stream_events(out) == events
    assert server.controls == [{"id": completion.id, "action": "reasoning_end"}]
    assert server.paths("POST").count("/v1/chat/completions/control") == 1


def test_budget_not_passed_sends_nothing(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply("reasoning_then_content")]  # 41 reasoning tokens
    out = drive.run(cfg(server, thinking_budget=42), req())
    assert out.ok().thinking_capped is False
    assert server.controls == [] and not any(isinstance(e, ThinkingCapped) for e in out.events)


def test_the_budget_goes_as_the_servers_own(drive: Driver, server: ReplayServer) -> None:
    # The server counts the end of reasoning it forces as one of the budget's tokens; a
    # request's own reasoning_budget_tokens is sent as given.
    server.script = [Reply("reasoning_then_content")] * 3
    own = dataclasses.replace(req(), reasoning_budget_tokens=7)
    outs = drive.run_in_turn(cfg(server, thinking_budget=42), [req(), own])
    assert all(o.ok().thinking_capped is False for o in outs)
    drive.run(cfg(server), req()).ok()
    bodies = [c.body for c in server.chats]
    assert [b.get("reasoning_budget_tokens") for b in bodies] == [43, 7, None]


def test_reasoning_ended_at_the_budget_was_capped_by_the_server(
    drive: Driver, server: ReplayServer
) -> None:
    # As a server that honours reasoning_budget_tokens ends the reasoning: at the budget. The
    # client sends no control request, and says ThinkingCapped as the reasoning ends.
    server.script = [Reply("reasoning_then_content")]  # 41 reasoning tokens
    out = drive.run(cfg(server, thinking_budget=41), req())
    assert out.ok().thinking_capped is True and server.controls == []
    at = [i for i, e in enumerate(out.events) if isinstance(e, ThinkingCapped)]
    assert [out.events[i] for i in at] == [ThinkingCapped(41)]
    assert isinstance(out.events[at[0] - 1], Content)
    assert isinstance(out.events[at[0] - 2], Reasoning)  # (the one event with content)
    events = expected("reasoning_then_content")[0]
    assert stream_events(out) == events


def test_a_server_seen_past_its_budget_gets_the_control_request(
    drive: Driver, server: ReplayServer
) -> None:
    # A server that ignores reasoning_budget_tokens reasons past it: the client asks it to end
    # the reasoning, as it always did, and from then on sends no budget of the server's own
    # (nor takes a reasoning that ends at the budget for the server's cap).
    server.script = [capped_reply(), capped_reply(), Reply("reasoning_then_content")]
    outs = drive.run_in_turn(cfg(server, thinking_budget=41), [req(), req(), req()])
    assert [o.ok().thinking_capped for o in outs] == [True, True, False]  # the last: 41 tokens
    assert len(server.controls) == 2
    assert [c.body.get("reasoning_budget_tokens") for c in server.chats] == [42, None, None]


def test_completion_already_gone_is_not_capped(drive: Driver, server: ReplayServer) -> None:
    server.control_reply = "reasoning_control_unknown_id"
    server.script = [capped_reply()]
    out = drive.run(cfg(server, thinking_budget=20), req())
    assert out.ok().thinking_capped is False
    assert len(server.controls) == 1 and not any(isinstance(e, ThinkingCapped) for e in out.events)


def test_control_endpoint_refused_is_http_error(drive: Driver, server: ReplayServer) -> None:
    server.control_reply = "get_unknown_path"
    server.script = [capped_reply()]
    err = drive.run(cfg(server, thinking_budget=20), req()).raised(HttpError)
    assert err.status == 404


def test_reasoning_past_the_hard_cap_closes_the_stream(drive: Driver, server: ReplayServer) -> None:
    raw = load("thinking_capped")
    server.script = [Reply("thinking_capped", pause_at=event_offset(raw, 60), pause_s=60.0)]
    out = drive.run(cfg(server, thinking_budget=20, thinking_hard_cap=40), req())
    err = out.raised(ThinkingOverrunError)
    assert err.tokens > 40 and err.hard_cap == 40 and "40" in str(err)
    assert sum(isinstance(e, ThinkingCapped) for e in out.events) == 1
    assert out.elapsed < HANG_GUARD  # not the server's 60 s pause: the client closed
    assert closed_by_client(server)


def test_hard_cap_alone(drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply("thinking_capped")]
    out = drive.run(cfg(server, thinking_hard_cap=30), req())
    assert out.raised(ThinkingOverrunError).tokens > 30
    assert server.controls == []
    reasoning = [e for e in out.events if isinstance(e, Reasoning)]
    assert reasoning and not any(isinstance(e, Content) for e in out.events)


# --- leaving early closes the connection at once (docs/client.md, rule CLOSE) -----------------


def closed_by_client(server: ReplayServer, within: float = HANG_GUARD) -> bool:
    """Whether the server saw the client close the first chat's connection (it looks every
    50 ms while it pauses)."""
    deadline = time.monotonic() + within
    while not server.chat_logs()[0].closed_by_client and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.chat_logs()[0].closed_by_client


def test_leaving_early_closes_the_connection(drive: Driver, server: ReplayServer) -> None:
    raw = load("content_only")
    server.script = [Reply(pause_at=event_offset(raw, 3), pause_s=60.0), Reply()]
    out = drive.run(cfg(server), req(), stop_after=2)
    assert out.error is None and out.completion is None and out.elapsed < HANG_GUARD
    assert closed_by_client(server)  # within the server's pause of 60 s
    log = server.chat_logs()[0]
    assert log.closed_at - log.started < HANG_GUARD
    # still alive: the close did not wait for the GC (complete's stream is its own)
    assert out.stream is not None or drive.kind == "complete"
    # the slot is free again at once, on the server and in a new client
    second = drive.run(cfg(server), req())
    assert second.ok() and second.elapsed < HANG_GUARD


def test_close_from_another_thread_unblocks_the_reader(server: ReplayServer) -> None:
    raw = load("content_only")
    server.script = [Reply(pause_at=event_offset(raw, 3), pause_s=60.0)]
    stream = Client(cfg(server, stall_timeout=60)).stream(req())
    got: list[object] = []
    paused = threading.Event()

    def read() -> None:
        try:
            for event in stream:
                got.append(event)
                if len(got) == 3:  # the server pauses after these
                    paused.set()
        except Exception as err:
            got.append(err)

    reader = threading.Thread(target=read)
    reader.start()
    assert paused.wait(HANG_GUARD)
    stream.close()
    reader.join(HANG_GUARD)  # the server's pause (60 s) and the stall (60 s) are longer
    assert not reader.is_alive()
    assert got == expected("content_only")[0][:3]  # it just stops, no error
    assert closed_by_client(server)


def test_leaving_frees_the_clients_queue(server: ReplayServer) -> None:
    client = Client(cfg(server))
    first = client.stream(req(0)).__enter__()
    second = client.stream(req(0)).__enter__()
    assert next(second) == Queued(1)
    first.close()  # never iterated: leaving still hands the slot on
    assert isinstance(next(second), Progress)
    second.close()


def test_http_client_not_left_open(server: ReplayServer) -> None:
    # The sync client's connection is closed after a normal end too (no leak per request).
    client = Client(cfg(server))
    with client.stream(req()) as stream:
        list(stream)
    assert stream._conns == []
    assert stream._conn.sock.fileno() == -1  # closed, not left for the GC


# --- API keys, slot=None, a router that says ok while the model loads ----------------------


def test_the_api_key_goes_with_every_request(drive: Driver, server: ReplayServer) -> None:
    server.api_key = "k-123"
    server.load_until(server.until_asked("/health"))  # the client polls /health
    server.script = [capped_reply()]  # and asks the control endpoint
    limits = Limits(**{**FAST, "thinking_budget": 20})  # type: ignore[arg-type]
    config = Config(InferConfig(url=server.url, api_key="k-123"), limits)
    out = drive.run(config, req(thinking=True))
    assert out.ok().thinking_capped
    assert {"/slots", "/health", CHAT, CHAT + "/control"} <= set(server.paths())
    assert [r.headers.get("authorization") for r in server.requests] == ["Bearer k-123"] * len(
        server.requests
    )


def test_a_wrong_key_is_http_401_and_the_key_is_never_shown(
    drive: Driver, server: ReplayServer
) -> None:
    server.api_key = "right"
    config = Config(InferConfig(url=server.url, api_key="wrong-sekrit"), Limits(**FAST))  # type: ignore[arg-type]
    out = drive.run(config, req())
    err = out.raised(HttpError)
    assert err.status == 401 and "Invalid API Key" in str(err)
    shown = str(err) + repr(err) + repr(config) + repr(Client(config)) + repr(out.stream)
    assert "wrong-sekrit" not in shown


def test_without_a_key_nothing_is_sent(drive: Driver, server: ReplayServer) -> None:
    assert drive.run(cfg(server), req()).ok()
    assert all("authorization" not in r.headers for r in server.requests)


def _body_takes_slot_none() -> bool:
    try:
        build_body(Config(), ChatRequest(None, [User("x")]))
    except ValueError:
        return False
    return True


@pytest.mark.skipif(not _body_takes_slot_none(), reason="build_body does not take slot=None yet")
def test_slot_none_requests_are_not_ordered_and_run_at_once(
    drive: Driver, server: ReplayServer
) -> None:
    server.script = lambda body: slow(seconds=0.4)
    reqs = [ChatRequest(None, [User("a")]), ChatRequest(None, [User("b")])]
    outs = drive.run_many(cfg(server), reqs)
    for out in outs:
        assert out.ok() == expected("content_only")[1]
        assert out.events == expected("content_only")[0]  # no Queued
    first, second = sorted(server.chat_logs(), key=lambda log: log.started)
    # Side by side, on the two slots. The server notes a request's end after its last write,
    # which the client may have read before the note (ended 0.0 then: not ended yet).
    assert second.started < (first.ended or math.inf)
    assert {first.slot, second.slot} == {0, 1}
    assert "id_slot" not in first.body and "/slots" not in server.paths()


def test_load_timeout_when_health_is_ok_but_the_chat_still_loads(
    drive: Driver, server: ReplayServer
) -> None:
    server.chat_loading = True  # a proxy or a router in front of llama-server
    out = drive.run(cfg(server, load_timeout=0.3), req())
    err = out.raised(LoadTimeoutError)
    assert "0.3" in str(err) and out.events == [Waiting(slot_busy=False)]
    assert 0.3 <= out.elapsed < HANG_GUARD  # the chat says loading for ever
    assert server.paths().count(CHAT) >= 2 and "/health" in server.paths()


# --- the transport: HTTPS, a path prefix, keep-alive answers --------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = str(where / "cert.pem"), str(where / "key.pem")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https(drive: Driver, tls_files: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    import llamafast._client._transport

    cert, key = tls_files
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=cert)
    monkeypatch.setattr(llamafast._client._transport, "_SSL", trusted)
    with ReplayServer(tls=served) as srv:
        srv.script = [Reply("reasoning_then_content")]
        assert srv.url.startswith("https://")
        out = drive.run(cfg(srv), req())
        assert out.ok() == expected("reasoning_then_content")[1]
        assert out.events == expected("reasoning_then_content")[0]
        assert srv.paths() == ["/slots", CHAT]
    # a certificate the client does not trust is a ConnectError, not a silent plain request
    monkeypatch.setattr(llamafast._client._transport, "_SSL", ssl.create_default_context())
    with ReplayServer(tls=served) as srv:
        out = drive.run(cfg(srv, retries=0), req())
        assert isinstance(out.raised(ConnectError).error, ssl.SSLError)


def test_a_path_prefix_is_kept_on_every_request(drive: Driver) -> None:
    with ReplayServer(prefix="/llm/v1x") as srv:
        srv.load_until(srv.until_asked("/health"))
        out = drive.run(cfg(srv), req())
        assert out.ok() == expected("content_only")[1]
        assert all(r.path.startswith("/llm/v1x/") for r in srv.requests)
        assert {"/llm/v1x" + p for p in ("/slots", "/health", CHAT)} <= set(srv.paths())


def test_a_keep_alive_answer_ends_by_its_framing(drive: Driver, server: ReplayServer) -> None:
    head, body = split(load("content_only"))
    keep = head.replace(b"Connection: close", b"Connection: keep-alive")
    server.script = [Reply(raw=keep + body, linger=60.0)]
    out = drive.run(cfg(server), req())
    assert out.ok() == expected("content_only")[1]
    assert out.elapsed < HANG_GUARD  # the server kept the connection open: the client did not wait
