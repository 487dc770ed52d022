# Strategy: a hostile server (tests/_hostile.py) and one test per rule. Each scripted fault runs
# through every way of reading a stream (Client iterated, AsyncClient iterated, and
# AsyncClient.complete) of both packages (`llamafast` and `llamafast.pure`), all six at once,
# each against its own server, so a rule holds for all of them and all of them agree on the
# error (class and message). A run that does not end in time has its server stopped, which
# ends it: a broken rule fails the test, it never hangs it.
"""No server can hang a client, fool it, or make it send a request twice."""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llamafast
import llamafast.pure
from _drivers import AsyncDriver, CompleteDriver, Outcome, SyncDriver, cfg
from _hostile import (
    CHAT,
    CONTROL,
    HEALTH,
    NOT_HTTP,
    SLOTS,
    HostileServer,
    Script,
    Send,
    answer,
    drip,
    padded_json,
    pieces,
    silent,
)
from _server import (
    dechunk,
    expected,
    load,
    raw_response,
    split,
)
from llamafast import (
    ChatRequest,
    Config,
    ConnectError,
    HttpError,
    LlamafastError,
    ProtocolError,
    Queued,
    Retrying,
    StreamClosedEarlyError,
    ThinkingCapped,
    User,
    Waiting,
    WaitTimeoutError,
)

TWINS: dict[str, ModuleType] = {"llamafast": llamafast, "pure": llamafast.pure}
DRIVERS = {"sync": SyncDriver, "async": AsyncDriver, "complete": CompleteDriver}

# Short deadlines, one retry, a back-off of a millisecond or two.
TIGHT: dict[str, Any] = {
    "connect_timeout": 0.5,
    "wait_timeout": 1.0,
    "stall_timeout": 1.0,
    "load_timeout": 1.0,
    "retries": 1,
    "retry_base_ms": 1,
    "retry_max_ms": 2,
}
# Added to every time bound: more than a loaded machine adds, far less than a hang takes (a
# dripped answer takes an hour, a wrong timeout 60 s); a healthy run never waits for it.
SLACK = 30.0
HANG = SLACK + 10  # how long a run may take before it is stopped and called hung
DRIP = 0.05  # seconds between the bytes of a drip
BIG = 1 << 16  # a dripped answer this long would take nearly an hour


config = functools.partial(cfg, base=TIGHT)


def chat(slot: int | None = None, thinking: bool = False) -> ChatRequest:
    return ChatRequest(slot, [User("hi")], thinking=thinking)


def stream_events(out: Outcome) -> list[object]:
    """The events that came from the body (not Queued/Waiting/Retrying/ThinkingCapped)."""
    return [
        e for e in out.events if not isinstance(e, Queued | Waiting | Retrying | ThinkingCapped)
    ]


# --- the answers ----------------------------------------------------------------------------


CONTENT = load("content_only")
HEAD, BODY = split(CONTENT)
TEXT = b"".join(dechunk(BODY))  # the event stream itself
CUT = TEXT.index(b"\n\n", TEXT.index(b"\n\n", TEXT.index(b"\n\n") + 2) + 2) + 2
GOOD = b"%x\r\n%s\r\n" % (CUT, TEXT[:CUT])  # one whole chunk: the first three events


def events_of(text: bytes) -> list[object]:
    """The events an assembler gives for the `data:` payloads of `text`."""
    assembler = llamafast.pure.Assembler()
    out: list[object] = []
    for line in text.split(b"\n"):
        if line.startswith(b"data: "):
            out += assembler.push(line[6:].decode())
    return out


GOOD_EVENTS = events_of(TEXT[:CUT])


def head_with(*lines: bytes, status: bytes = b"HTTP/1.1 200 OK") -> bytes:
    return b"\r\n".join([status, *lines]) + b"\r\n\r\n"


EVENT_STREAM = b"Content-Type: text/event-stream"
CHUNKED = b"Transfer-Encoding: chunked"


def length_head(value: bytes, *more: bytes) -> bytes:
    """An event-stream head framed by `Content-Length: value`, then the stream itself."""
    return head_with(EVENT_STREAM, b"Content-Length: " + value, *more) + TEXT


def status_head(status: bytes) -> bytes:
    """The recording under the status line `status`."""
    return head_with(EVENT_STREAM, CHUNKED, status=status) + BODY


# Heads no HTTP/1.1 server sends: a status that is not three digits, a Content-Length that is
# not a number an int64 holds (or not a number), two Content-Lengths that disagree.
HOSTILE_HEADS = {
    "status 2^31": status_head(b"HTTP/1.1 2147483648 OK"),
    "status 2^32": status_head(b"HTTP/1.1 4294967296 OK"),
    "status 2^64": status_head(b"HTTP/1.1 18446744073709551616 OK"),
    "status of 100 digits": status_head(b"HTTP/1.1 " + b"9" * 100 + b" OK"),
    "status with a superscript digit": status_head(b"HTTP/1.1 2\xb200 OK"),
    "Content-Length 2^63": length_head(b"9223372036854775808"),
    "Content-Length 2^64": length_head(b"18446744073709551616"),
    "Content-Length of 100 digits": length_head(b"9" * 100),
    "Content-Length \xb2 (latin-1)": length_head(b"\xb2"),
    "Content-Length \xb2 (utf-8)": length_head("²".encode()),
    "Content-Length negative": length_head(b"-1"),
    "Content-Length non-numeric": length_head(b"abc"),
    "Content-Length with a sign": length_head(b"+%d" % len(TEXT)),
    "two different Content-Lengths": length_head(
        b"%d" % len(TEXT), b"Content-Length: %d" % (len(TEXT) + 1)
    ),
}

GARBAGE = b"\x00\x01\xfe\xffSSH-2.0-OpenSSH_9.6\r\n\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"

# What is not an HTTP answer at all (the POST was received: it must not be sent again).
NOT_HTTP_SCRIPTS = {
    "bare LF line ends, then close": answer(CONTENT.replace(b"\r\n", b"\n")),
    "bare LF line ends, held open": answer(CONTENT.replace(b"\r\n", b"\n"), end="hold"),
    "a partial head, then close": answer(HEAD[:40]),
    "garbage, then close": answer(GARBAGE),
    "garbage, held open": answer(GARBAGE, end="hold"),
}

# Bad chunk framing after one good chunk.
BAD_FRAMING = {
    "non-hex size": b"zz\r\n",
    "negative size": b"-5\r\n",
    "size of 2^64": b"1" + b"0" * 16 + b"\r\n",
    "data without its CRLF": b"3\r\nabcXY\r\n",
}

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n"


# --- running one request everywhere ---------------------------------------------------------


@dataclass
class Run:
    """One request through one driver of one package, against its own server."""

    twin: str
    driver: str
    server: HostileServer = field(repr=False)
    out: Outcome
    hung: bool = False

    @property
    def name(self) -> str:
        return f"{self.twin}/{self.driver}"

    def verdict(self) -> tuple[object, ...]:
        """What the caller saw: the error's class and message (the port made neutral), or
        the stream's events and Completion."""
        err = self.out.error
        if err is None:
            return ("ok", stream_events(self.out), self.out.completion)
        return (type(err).__name__, str(err).replace(f":{self.server.port}", ":PORT"))


def everywhere(
    scripts: Callable[[], dict[str, Script | list[Script]]],
    request: ChatRequest,
    limit: float,
    url: Callable[[HostileServer], str] = lambda s: s.url,
    **limits: Any,
) -> list[Run]:
    """`request` through the three drivers of both packages at once, each against its own
    HostileServer answering by `scripts()`. A run still going after `limit` seconds has its
    server stopped (which ends it) and is marked `hung`."""
    runs: list[Run] = []
    threads = []
    for twin, module in TWINS.items():
        for kind, driver_cls in DRIVERS.items():
            server = HostileServer(scripts(), lifetime=limit + 30).start()
            run = Run(twin, kind, server, Outcome([], error=AssertionError("never ended")))
            cfg = config(url(server), **limits)

            driver = driver_cls(module)

            def go(run: Run = run, driver: Any = driver, cfg: Config = cfg) -> None:
                run.out = driver.run(cfg, request)

            runs.append(run)
            threads.append(threading.Thread(target=go, daemon=True))
    start = time.monotonic()
    for t in threads:
        t.start()
    for run, t in zip(runs, threads, strict=True):
        t.join(max(0.0, start + limit - time.monotonic()))
        if t.is_alive():
            run.hung = True
            run.server.stop()
    for run, t in zip(runs, threads, strict=True):
        t.join(10)
        run.server.stop()
        if t.is_alive():
            run.out.elapsed = time.monotonic() - start
    return runs


def assert_same(runs: list[Run]) -> None:
    """One fault, one error: every run saw the same outcome."""
    first = runs[0].verdict()
    for run in runs[1:]:
        assert run.verdict() == first, f"{run.name} saw {run.verdict()}, {runs[0].name} {first}"


def assert_within(runs: list[Run], bound: float, what: str) -> None:
    for run in runs:
        assert not run.hung and run.out.elapsed <= bound + SLACK, (
            f"{run.name} took {run.out.elapsed:.1f} s{' (stopped)' if run.hung else ''}, past "
            f"its bound {what} = {bound:g} s (+ {SLACK:g} s slack); it ended with "
            f"{run.out.error!r}"
        )


def assert_error(runs: list[Run], cls: type[BaseException]) -> None:
    for run in runs:
        assert isinstance(run.out.error, cls), (
            f"{run.name}: expected {cls.__name__}, got {run.out.error!r}"
        )


def assert_posted_once(runs: list[Run]) -> None:
    for run in runs:
        n = run.server.count("POST", CHAT)
        assert n == 1, f"{run.name}: the server saw {n} POSTs of the chat, not 1"


# --- 1. deadlines per request ---------------------------------------------------------------


def reasoning_then_hold() -> Script:
    """reasoning_then_content up to its fifth reasoning event, then nothing, held open."""
    raw = load("reasoning_then_content")
    at = 0
    for _ in range(5):
        at = raw.index(b'"reasoning_content":"', at) + 1
    return answer(raw[: raw.index(b"\n\n", at) + 2], end="hold")


ERROR_BODY = b'{"error":{"code":500,"message":"the server broke","type":"server_error"}}'
ERROR_ANSWER = raw_response(500, "Internal Server Error", ERROR_BODY + b" " * BIG)
LONG_HEAD = HEAD[:-2] + b"X-Padding: " + b"a" * 30_000 + b"\r\n\r\n" + BODY

T = TIGHT
DEADLINES: dict[
    str, tuple[Callable[[], dict[str, Any]], ChatRequest, dict[str, Any], float, str]
] = {
    "/slots dripped": (
        lambda: {SLOTS: drip(padded_json(load("get_slots"), BIG), DRIP)},
        chat(slot=0),
        {},
        (T["retries"] + 1) * T["connect_timeout"] + T["retries"] * T["retry_max_ms"] / 1000,
        "(retries + 1) x connect_timeout (+ back-off): each /slots request",
    ),
    "/health dripped while the model loads": (
        lambda: {
            CHAT: answer(load("chat_while_loading")),
            HEALTH: drip(padded_json(load("get_health"), BIG), DRIP),
        },
        chat(),
        {},
        T["load_timeout"] + T["connect_timeout"],
        "load_timeout + connect_timeout (the /health poll in flight)",
    ),
    "the control answer dripped": (
        lambda: {
            CHAT: reasoning_then_hold(),
            CONTROL: drip(padded_json(load("control_reasoning_end"), BIG), DRIP),
        },
        chat(thinking=True),
        {"thinking_budget": 1},
        T["connect_timeout"] + T["stall_timeout"],
        "connect_timeout (the control request) + stall_timeout (the stream)",
    ),
    "an error answer's body dripped": (
        lambda: {CHAT: drip(ERROR_ANSWER, DRIP, whole_head=True)},
        chat(),
        {},
        T["stall_timeout"],
        "stall_timeout: an error answer's body is read whole within it",
    ),
    "the chat's head dripped": (
        lambda: {CHAT: drip(LONG_HEAD, DRIP)},
        chat(),
        {},
        T["wait_timeout"] + T["stall_timeout"],
        "wait_timeout + stall_timeout",
    ),
}


DRIPPED = {
    "/slots dripped": SLOTS,
    "/health dripped while the model loads": HEALTH,
    "the control answer dripped": CONTROL,
    "an error answer's body dripped": CHAT,
    "the chat's head dripped": CHAT,
}


@pytest.mark.parametrize("case", DEADLINES)
def test_a_dripping_server_cannot_stretch_a_request_past_its_deadline(case: str) -> None:
    """Deadlines per request: every request the client makes (/slots, /health, the control
    request, the chat's head, an error answer's body) has a deadline of its own, not a
    timeout per read, so a server sending one byte every 50 ms (never idle long enough for a
    per-read timeout) still gets a LlamafastError within the bound."""
    scripts, request, limits, bound, what = DEADLINES[case]
    runs = everywhere(scripts, request, bound + SLACK + 1, **limits)
    for run in runs:  # the dripped answer is what the client waited on
        assert run.server.count(path=DRIPPED[case]), f"{run.name} never asked {DRIPPED[case]}"
    assert_within(runs, bound, what)
    assert_error(runs, LlamafastError)
    if case == "an error answer's body dripped":  # what arrived, and only the class compared
        for run in runs:
            err = run.out.error
            assert isinstance(err, HttpError) and err.status == 500, f"{run.name}: {err!r}"
            sent = ERROR_ANSWER.split(b"\r\n\r\n", 1)[1].decode()
            assert err.body and sent.startswith(err.body), f"{run.name}: {err.body[:80]!r}"
        assert len({type(r.out.error) for r in runs}) == 1
    else:
        assert_same(runs)


def test_the_first_byte_is_bounded_by_wait_timeout_not_stall_timeout() -> None:
    """WAIT: the first byte of the answer comes within wait_timeout, even when stall_timeout is
    longer: a silent server is WaitTimeoutError well before stall_timeout."""
    limits = {"wait_timeout": 1.0, "stall_timeout": 3 * SLACK}
    runs = everywhere(lambda: {CHAT: silent()}, chat(), HANG, **limits)
    for run in runs:
        assert not run.hung and run.out.elapsed < 1.0 + SLACK, (
            f"{run.name} took {run.out.elapsed:.1f} s: past wait_timeout=1 s (+ {SLACK:g} s "
            f"slack), toward stall_timeout={3 * SLACK:g} s; it ended with {run.out.error!r}"
        )
    assert_error(runs, WaitTimeoutError)
    assert_same(runs)


# --- 2. never send twice what the server may have acted on --------------------------------


@pytest.mark.parametrize("case", NOT_HTTP_SCRIPTS)
def test_an_answer_that_is_not_http_is_a_protocol_error_and_never_resent(case: str) -> None:
    """Once any byte of an answer to the chat POST has arrived, the server has the request:
    nothing is sent again. An answer that is not HTTP is a ProtocolError (not a ConnectError
    after retries), at once, the same from every client."""
    runs = everywhere(lambda: {CHAT: NOT_HTTP_SCRIPTS[case]}, chat(), HANG, retries=2)
    assert_posted_once(runs)
    assert_error(runs, ProtocolError)
    assert_within(runs, TIGHT["stall_timeout"], "stall_timeout")
    assert_same(runs)


def test_https_to_a_plain_server_is_one_attempt_and_fast() -> None:
    """https:// to a plain HTTP server (it answers the TLS hello with a plain 400): a
    ConnectError after one connection, with no Retrying, and fast: the handshake's failure is
    seen at once, connect_timeout (10 s by default) is not waited out."""
    runs = everywhere(
        lambda: {NOT_HTTP: answer(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")},
        chat(),
        HANG,
        url=lambda s: s.url.replace("http://", "https://"),
        connect_timeout=3 * SLACK,
        retries=3,
    )
    for run in runs:
        n = len(run.server.connections)
        assert n == 1, f"{run.name}: {n} connections, not 1"
        assert not [e for e in run.out.events if isinstance(e, Retrying)], run.name
    assert_error(runs, ConnectError)
    for run in runs:
        took = run.out.elapsed
        assert took < SLACK, f"{run.name} took {took:.1f} s: connect_timeout was waited out"
    assert_same(runs)


def test_a_name_that_does_not_resolve_is_one_attempt() -> None:
    """A host name that does not resolve will not resolve on a retry: ConnectError at once,
    with no Retrying."""
    runs = everywhere(dict, chat(), HANG, url=lambda s: "http://nonexistent.invalid:1", retries=3)
    for run in runs:
        retried = [e for e in run.out.events if isinstance(e, Retrying)]
        assert not retried, f"{run.name} retried: {retried}"
    assert_error(runs, ConnectError)
    assert_within(runs, TIGHT["connect_timeout"], "connect_timeout (one attempt)")
    assert_same(runs)


# --- 3. no builtin exception escapes --------------------------------------------------------


@pytest.mark.parametrize("case", HOSTILE_HEADS)
def test_a_hostile_head_is_a_protocol_error(case: str) -> None:
    """A head no HTTP/1.1 server sends (a status that is not three digits, a Content-Length
    that is not a plain number an int64 holds, two that disagree) is a ProtocolError, never a
    builtin exception (OverflowError, ValueError) nor a stream read on a guess; the same from
    every client, and the POST is not sent again."""
    runs = everywhere(lambda: {CHAT: answer(HOSTILE_HEADS[case])}, chat(), HANG, retries=2)
    for run in runs:
        err = run.out.error
        assert isinstance(err, LlamafastError) or err is None, f"{run.name} raised {err!r}"
    assert_error(runs, ProtocolError)
    assert_posted_once(runs)
    assert_same(runs)


DEEP = b"[" * 5000 + b"]" * 5000  # json would recurse 5,000 times: a RecursionError once


def deep_answer(doc: bytes) -> Script:
    """A 200 whose JSON body is `doc` (a member of it nested 5,000 deep)."""
    return answer(raw_response(200, "OK", doc))


def test_a_deep_slots_answer_before_sending_is_a_protocol_error() -> None:
    """wait_for_slot = false asks /slots before the chat: an answer nested 5,000 deep is
    ProtocolError naming /slots (docs/client.md, rule WHOLE), the chat never sent."""
    runs = everywhere(
        lambda: {SLOTS: deep_answer(b'[{"id":0,"is_processing":false,"x":%s}]' % DEEP)},
        chat(slot=0),
        HANG,
        wait_for_slot=False,
    )
    assert_error(runs, ProtocolError)
    for run in runs:
        assert str(run.out.error).startswith(
            "GET /slots answered something that is not JSON (nested deeper than 256)"
        ), f"{run.name}: {run.out.error}"
        assert run.server.count("POST", CHAT) == 0
    assert_same(runs)


def test_a_deep_slots_answer_to_the_late_first_byte_probe_is_ignored() -> None:
    """The probe of a late first byte only says whether to emit Waiting: an answer nested
    5,000 deep tells nothing, and the chat goes on to its end."""
    runs = everywhere(
        lambda: {
            CHAT: Script((Send(CONTENT, after=0.3),)),
            SLOTS: deep_answer(b'{"x":%s}' % DEEP),
        },
        chat(),  # slot=None: no /slots before sending, only the probe
        HANG,
        slot_check_delay=0.05,
    )
    for run in runs:
        assert run.out.error is None, f"{run.name} raised {run.out.error!r}"
        assert run.server.count("GET", SLOTS) >= 1, f"{run.name} never asked /slots"
    assert_same(runs)


def test_a_deep_control_answer_is_a_protocol_error() -> None:
    """The thinking budget's control answer nested 5,000 deep: ProtocolError naming the
    control endpoint, the same from every client."""
    runs = everywhere(
        lambda: {CHAT: reasoning_then_hold(), CONTROL: deep_answer(b'{"success":%s}' % DEEP)},
        chat(thinking=True),
        HANG,
        thinking_budget=1,
    )
    assert_error(runs, ProtocolError)
    for run in runs:
        assert str(run.out.error).startswith(
            "the control endpoint answered something that is not JSON (nested deeper than 256)"
        ), f"{run.name}: {run.out.error}"
    assert_same(runs)


# --- 4. interim answers ---------------------------------------------------------------------


INTERIM = {
    "100 Continue": answer(CONTINUE + CONTENT),
    "103 Early Hints": answer(EARLY_HINTS + CONTENT),
    "100 then 103, apart": pieces(CONTINUE, EARLY_HINTS, CONTENT, gap=0.05),
}


@pytest.mark.parametrize("case", INTERIM)
def test_interim_answers_before_the_200_are_skipped(case: str) -> None:
    """Interim (1xx) answers before the final one are skipped: the stream's events and
    Completion are the recording's."""
    runs = everywhere(lambda: {CHAT: INTERIM[case]}, chat(), HANG)
    events, completion = expected("content_only")
    for run in runs:
        assert run.out.error is None, f"{run.name}: {run.out.error!r}"
        assert stream_events(run.out) == events, run.name
        assert run.out.completion == completion, run.name
    assert_posted_once(runs)


# --- 5. results that do not depend on how bytes arrive ---------------------------------------


@pytest.mark.parametrize("fault", BAD_FRAMING)
def test_bad_framing_after_a_good_chunk_gives_its_events_then_the_error(fault: str) -> None:
    """However the bytes arrive: a good chunk then a bad chunk framing gives the good chunk's
    events, then the same ProtocolError, whether the two come in one send, in two, or with
    the head; and the error is a LlamafastError, never a builtin exception."""
    bad = BAD_FRAMING[fault]
    ways = {
        "all in one send": pieces(HEAD + GOOD + bad, end="hold"),
        "good and bad in one send": pieces(HEAD, GOOD + bad, gap=0.05, end="hold"),
        "in two sends": pieces(HEAD, GOOD, bad, gap=0.1, end="hold"),
    }
    seen: dict[str, list[Run]] = {}
    for way, script in ways.items():
        seen[way] = everywhere(lambda script=script: {CHAT: script}, chat(), HANG)
    runs = [run for group in seen.values() for run in group]
    for run in runs:
        err = run.out.error
        assert isinstance(err, LlamafastError), f"{run.name} raised {err!r}"
    for way, group in seen.items():
        for run in group:
            assert stream_events(run.out) == GOOD_EVENTS, f"{way}, {run.name}: {run.out.events}"
    assert_error(runs, ProtocolError)
    assert_same(runs)


# --- 6. one fault, one error: a fuzz over the wire ------------------------------------------


RECORDINGS = ["content_only", "reasoning_then_content", "tool_call", "midstream_error"]
STREAMS = {name: b"".join(dechunk(split(load(name))[1])) for name in RECORDINGS}


def _status_lines() -> st.SearchStrategy[bytes]:
    versions = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"http/1.1", b"ICY"])
    codes = st.one_of(
        st.sampled_from([b"200", b"100", b"103", b"204", b"404", b"500", b"503"]),
        st.integers(0, 2**70).map(lambda n: b"%d" % n),
        st.sampled_from([b"-200", b"2\xb200", b"20", b"0200", b"+200", b"", b"2 00"]),
    )
    reasons = st.sampled_from([b"OK", b"", b"Continue", b"\xff\xfe"])
    return st.tuples(versions, codes, reasons).map(lambda t: b" ".join(t))


def _lengths() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.integers(-5, 2**70).map(lambda n: b"%d" % n),
        st.sampled_from([b"\xb2", "²".encode(), b"1,1", b" 5", b"0x10", b"", b"1e3"]),
    )


@st.composite
def wire_answers(draw: st.DrawFn) -> bytes:
    """An answer to the chat: a head of generated lines over a recorded stream, framed by
    generated chunk sizes or Content-Length (or neither); sometimes a recording itself; then
    byte mutations."""
    name = draw(st.sampled_from(RECORDINGS))
    if draw(st.booleans()):
        raw = load(name)
    else:
        text = STREAMS[name]
        lines = [draw(_status_lines())]
        lines.append(b"Content-Type: " + draw(st.sampled_from([b"text/event-stream", b""])))
        framing = draw(st.sampled_from(["chunked", "length", "two lengths", "close"]))
        if framing == "chunked":
            te = [b"chunked", b"gzip, chunked", b"chunked, gzip", b"CHUNKED", b"identity"]
            lines.append(b"Transfer-Encoding: " + draw(st.sampled_from(te)))
            cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
            parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
            sizes = [
                draw(st.one_of(st.just(b"%x" % len(p)), st.sampled_from([b"zz", b"-1", b""])))
                if draw(st.integers(0, 9)) == 0
                else b"%x" % len(p)
                for p in parts
            ]
            body = b"".join(s + b"\r\n" + p + b"\r\n" for s, p in zip(sizes, parts, strict=True))
            body += draw(st.sampled_from([b"0\r\n\r\n", b"", b"0\r\n"]))
        else:
            if framing != "close":
                lines.append(b"Content-Length: " + draw(_lengths()))
            if framing == "two lengths":
                lines.append(b"Content-Length: " + draw(_lengths()))
            body = text
        lines += draw(st.lists(st.sampled_from([b"X-A: b", b"no colon", b": empty"]), max_size=2))
        raw = b"\r\n".join(lines) + b"\r\n\r\n" + body
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(raw)))
        kind = draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip" and at < len(raw):
            raw = raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1 :]
        elif kind == "cut":
            raw = raw[:at] + raw[at + draw(st.integers(1, 64)) :]
        else:
            raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    return raw


@pytest.mark.parametrize("twin", TWINS)
def test_fuzzed_answers_give_only_llamafast_errors_the_same_from_both_clients(twin: str) -> None:
    """No builtin exception escapes, and one fault is one error: generated answers (status
    lines, headers, Content-Length and Transfer-Encoding values, chunk framing, byte mutations
    of recordings), sent in random pieces, give a Completion or a LlamafastError, and the sync
    and async clients give the same (events, then the same Completion or class and message)."""
    module = TWINS[twin]
    sync, async_ = SyncDriver(module), AsyncDriver(module)
    with HostileServer(lifetime=600) as server:
        cfg = config(server.url, load_timeout=0.5)

        @settings(max_examples=60)  # about 1 s a package: each example opens sockets
        @given(raw=wire_answers(), splits=st.lists(st.floats(0, 1), max_size=5))
        def check(raw: bytes, splits: list[float]) -> None:
            cuts = sorted({int(f * len(raw)) for f in splits} - {0, len(raw)})
            parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
            server.scripts[CHAT] = pieces(*parts, gap=0.002)
            outs = [sync.run(cfg, chat()), async_.run(cfg, chat())]
            runs = [Run(twin, k, server, o) for k, o in zip(["sync", "async"], outs, strict=True)]
            for run in runs:
                err = run.out.error
                assert err is None or isinstance(err, LlamafastError), f"{run.name} raised {err!r}"
            assert_same(runs)

        check()


# --- 7. a dropped stream gives back its slot ------------------------------------------------


def first_held_then_content() -> dict[str, Script | list[Script]]:
    """The first chat gets three events and then nothing (held open); the next ones the
    recording."""
    return {CHAT: [pieces(HEAD, GOOD, end="hold"), answer(CONTENT)]}


def assert_let_go(server: HostileServer, dropped: float, second: Outcome) -> None:
    assert second.error is None, f"the slot was not given back: {second.error!r}"
    first = server.connections_to(CHAT)[0]
    assert first.client_closed is not None, "the dropped stream's connection was never closed"
    late = first.client_closed - dropped
    # the first is held open for ever: only the drop closes it (SLACK: a hang guard)
    assert late < SLACK, f"the dropped stream's connection was closed {late:.1f} s after the drop"


@pytest.mark.parametrize("twin", TWINS)
def test_a_dropped_sync_stream_gives_back_its_slot(twin: str) -> None:
    """A stream dropped without `with` or close() (its iteration broken off, the last reference
    gone), with the cyclic GC off: its connection is closed at once and its slot's turn given
    back, so the next request to that slot runs."""
    with HostileServer(first_held_then_content()) as server:
        client = TWINS[twin].Client(config(server.url, wait_timeout=SLACK))
        gc.disable()
        try:
            for _ in client.stream(chat(slot=0)):
                break
            dropped = time.monotonic()
            second = SyncDriver.run_on(client, chat(slot=0))
        finally:
            gc.enable()
            gc.collect()
        assert_let_go(server, dropped, second)


@pytest.mark.parametrize("twin", TWINS)
def test_a_dropped_async_stream_gives_back_its_slot(twin: str) -> None:
    """The same for an AsyncClient stream left by `break` out of `async for`, never closed."""
    with HostileServer(first_held_then_content()) as server:
        client = TWINS[twin].AsyncClient(config(server.url, wait_timeout=SLACK))

        async def main() -> tuple[float, Outcome]:
            async for _ in client.stream(chat(slot=0)):
                break
            dropped = time.monotonic()
            return dropped, await AsyncDriver.run_on(client, chat(slot=0))

        gc.disable()
        try:
            dropped, second = asyncio.run(main())
        finally:
            gc.enable()
            gc.collect()
        assert_let_go(server, dropped, second)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("twin", TWINS)
def test_a_stream_made_and_never_iterated_holds_nothing(twin: str, kind: str) -> None:
    """A stream made and dropped without being iterated sends nothing and holds no turn: the
    next request to its slot runs at once."""
    with HostileServer() as server:
        cfg = config(server.url, wait_timeout=SLACK)
        gc.disable()
        try:
            if kind == "sync":
                client = TWINS[twin].Client(cfg)
                client.stream(chat(slot=0))
                second = SyncDriver.run_on(client, chat(slot=0))
            else:

                async def main() -> Outcome:
                    aclient = TWINS[twin].AsyncClient(cfg)
                    aclient.stream(chat(slot=0))
                    return await AsyncDriver.run_on(aclient, chat(slot=0))

                second = asyncio.run(main())
        finally:
            gc.enable()
            gc.collect()
        assert second.error is None, f"{second.error!r}"
        assert server.count("POST", CHAT) == 1


# --- 8. `completion` after an early close ---------------------------------------------------


CLOSED_BEFORE_END = "closed before it ended"  # ChatStream's wording


@pytest.mark.parametrize("when", ["after one event", "before any"])
@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("twin", TWINS)
def test_completion_after_an_early_close_says_the_stream_was_closed(
    twin: str, kind: str, when: str
) -> None:
    """`.completion` of a stream closed before its end says it was closed before it ended (as
    ChatStream does), not "iterate it to the end first": there is no end left to iterate to."""
    with HostileServer() as server:
        cfg = config(server.url)
        if kind == "sync":
            with TWINS[twin].Client(cfg).stream(chat()) as stream:
                if when == "after one event":
                    for _ in stream:
                        break
        else:

            async def main() -> Any:
                async with TWINS[twin].AsyncClient(cfg).stream(chat()) as astream:
                    if when == "after one event":
                        async for _ in astream:
                            break
                return astream

            stream = asyncio.run(main())
        with pytest.raises((RuntimeError, StreamClosedEarlyError)) as info:
            _ = stream.completion
    message = str(info.value)
    assert CLOSED_BEFORE_END in message and "iterate it" not in message, message


def test_the_hostile_server_answers_by_its_scripts() -> None:
    """The server itself: it records each request and connection, answers by script per path
    (a list used in order, its last entry kept), and a hold ends when the client closes."""
    scripts: dict[str, Script | list[Script]] = {
        CHAT: [answer(b"first"), Script((Send(b"a"), Send(b"b", after=0.01)))],
    }
    with HostileServer(scripts) as server:
        got = []
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
                data = b""
                while part := sock.recv(100):
                    data += part
                got.append(data)
        assert got == [b"first", b"ab", b"ab"]
        assert server.count("POST", CHAT) == 3 and len(server.connections) == 3
        server.scripts[CHAT] = silent()
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n\r\n")
            while server.count("POST", CHAT) < 4:
                time.sleep(0.01)
        deadline = time.monotonic() + SLACK
        while server.connections[-1].client_closed is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.connections[-1].client_closed is not None
    assert json.loads(split(padded_json(load("get_health"), 100))[1]) == {"status": "ok"}
