# The HTTP/1.1 response parser against every recorded answer, fed whole, a byte at a time and
# split at random: the head and the body (framing cut out) must not depend on the split.
"""ResponseParser: heads, chunked / Content-Length / until-close bodies, and its refusals."""

from __future__ import annotations

import gc
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _cuts import fill, pieces
from _server import dechunk, split
from llamafast import TruncatedError, _twins
from llamafast._errors import HttpParseError

PureParser = _twins.PURE.ResponseParser
CParser = None if _twins.CYTHON is None else _twins.CYTHON.ResponseParser  # None: not built

TWINS = [PureParser] if CParser is None else [PureParser, CParser]


@pytest.fixture(params=TWINS, ids=lambda cls: cls.__module__.rsplit(".", 1)[-1])
def twin(request: pytest.FixtureRequest) -> type:
    return request.param  # type: ignore[no-any-return]


HTTP = Path(__file__).resolve().parent.parent / "fixtures" / "http"
NAMES = sorted(p.stem for p in HTTP.glob("*.http"))


def parse(
    raw: bytes, cuts: list[int], size: int = 1 << 16, twin: Any = PureParser
) -> tuple[Any, bytes]:
    parser = twin(size)
    body = bytearray()
    for views in fill(parser, raw, cuts):
        for piece in views:
            body += piece
    if parser.fault is not None:  # found after body bytes: raised by the next call
        raise parser.fault
    return parser, bytes(body)


def expected_body(raw: bytes) -> bytes:
    head, body = split(raw)
    if b"transfer-encoding: chunked" in head.lower():
        return b"".join(dechunk(body))
    return body


@pytest.mark.parametrize("name", NAMES)
def test_every_recording_whole_bytewise_and_split(twin: type, name: str) -> None:
    raw = (HTTP / f"{name}.http").read_bytes()
    want = expected_body(raw)
    rng = random.Random(name)
    for cuts in ([], list(range(len(raw))), rng.sample(range(len(raw)), min(30, len(raw)))):
        parser, body = parse(raw, cuts, twin=twin)
        assert body == want
        assert parser.status == int(raw.split(b" ", 2)[1])
        assert parser.headers["content-type"]
        parser.eof()  # complete: no error


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_chunked_bodies_of_any_shape(payloads: list[bytes], data: st.DataObject) -> None:
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in payloads if p) + b"0\r\n\r\n"
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"junk"
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=10))
    for twin in TWINS:
        parser, got = parse(raw, cuts, size=400, twin=twin)
        assert got == b"".join(payloads) and parser.done


def test_body_until_close(twin: type) -> None:
    parser, body = parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc", [20], twin=twin)
    assert body == b"abc" and not parser.done and not parser.keep_alive
    parser.eof()


def test_cut_bodies_are_truncated(twin: type) -> None:
    for raw in (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",
    ):
        parser, _ = parse(raw, [], twin=twin)
        with pytest.raises(TruncatedError):
            parser.eof()
    parser, _ = parse(b"HTTP/1.1 200 OK\r\nContent-", [], twin=twin)
    with pytest.raises(HttpParseError, match="before a complete response head"):
        parser.eof()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "without a colon"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "hexadecimal"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\n", "hexadecimal"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n", "hexadecimal"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 16 + b"\r\n",
            "hexadecimal",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "CRLF"),
    ],
)
def test_malformed_responses_are_refused(twin: type, raw: bytes, says: str) -> None:
    with pytest.raises(HttpParseError, match=says):
        parse(raw, [], twin=twin)


def test_a_head_longer_than_the_buffer(twin: type) -> None:
    raw = b"HTTP/1.1 200 OK\r\nX: " + b"a" * 100 + b"\r\n\r\n"
    with pytest.raises(HttpParseError, match="longer than 64 bytes"):
        parse(raw, [], size=64, twin=twin)


def test_views_stay_valid_while_held_and_the_buffer_never_resizes(twin: type) -> None:
    parser = twin(64)
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100
    held = []
    pos = 0
    while pos < len(raw):
        free = parser.free()  # compaction with views held: same size, so no BufferError
        n = min(len(free), len(raw) - pos, 7)
        free[:n] = raw[pos : pos + n]
        pos += n
        held.extend(parser.filled(n))
    assert parser.done


def outcome(twin: Any, raw: bytes, cuts: list[int], size: int) -> tuple[Any, ...]:
    try:
        parser, body = parse(raw, cuts, size=size, twin=twin)
    except (HttpParseError, TruncatedError) as err:
        return ("error", type(err), str(err))
    try:
        parser.eof()
        end = "ok"
    except (HttpParseError, TruncatedError) as err:
        end = f"{type(err).__name__}: {err}"
    return (parser.status, parser.headers, parser.done, body, end)


@pytest.mark.skipif(CParser is None, reason="the Cython twin is not built")
@given(
    st.lists(
        st.sampled_from(
            [b"1", b"a", b"F", b"0", b";x=1", b" ", b"\t", b"\r", b"\n", b"\r\n", b"z", b"ab"]
        ),
        max_size=40,
    ),
    st.lists(st.integers(0, 300), max_size=6),
    st.sampled_from([32, 64, 1 << 16]),
)
def test_twins_agree_on_any_chunked_bytes(parts: list[bytes], cuts: list[int], size: int) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(parts)
    cuts = [c for c in cuts if c <= len(raw)]
    assert outcome(PureParser, raw, cuts, size) == outcome(CParser, raw, cuts, size)


# --- Sink: the body's bytes to events, the same in both twins ---------------------------------

PureSink = _twins.PURE.Sink
CSink = None if _twins.CYTHON is None else _twins.CYTHON.Sink  # None: not built


def sink_outcome(sink_type: Any, body: bytes, cuts: list[int], max_line: int) -> list[Any]:
    """Everything a Sink gives for `body` fed in the pieces `cuts` makes: each take()'s events
    (as repr) between feeds, then the completion or the error (type and message). `backlog` is
    left out: each twin counts the bytes it holds its own way (see the pause test)."""
    sink = sink_type(max_line)
    seen: list[Any] = []
    try:
        for cut in pieces(body, cuts, empty=True):
            piece = memoryview(bytearray(cut))
            sink.feed([piece[: len(piece) // 2], piece[len(piece) // 2 :]])
            while events := sink.take():
                seen.append([repr(e) for e in events])
            seen.append(("done", sink.done))
        seen.append(repr(sink.end()))
    except Exception as err:
        seen.append((type(err).__name__, str(err)))
    return seen


@pytest.mark.skipif(CSink is None, reason="the Cython twin is not built")
@pytest.mark.parametrize("name", NAMES)
def test_sink_twins_agree_on_every_recording(name: str) -> None:
    raw = (HTTP / f"{name}.http").read_bytes()
    body = expected_body(raw)
    rng = random.Random(name)
    for _ in range(5):
        cuts = rng.sample(range(len(body) + 1), min(8, len(body) + 1))
        want = sink_outcome(PureSink, body, cuts, 1 << 20)
        assert sink_outcome(CSink, body, cuts, 1 << 20) == want
        assert want[-1] != [], "the outcome records something"


@pytest.mark.skipif(CSink is None, reason="the Cython twin is not built")
@given(st.data())
def test_sink_twins_agree_on_mutated_streams(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    body = bytearray(expected_body((HTTP / f"{name}.http").read_bytes()))
    for _ in range(data.draw(st.integers(0, 3))):
        if body:
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=6))
    max_line = data.draw(st.sampled_from([64, 1 << 20]))
    want = sink_outcome(PureSink, bytes(body), cuts, max_line)
    assert sink_outcome(CSink, bytes(body), cuts, max_line) == want


def sink_scheduled(
    sink_type: Any, body: bytes, cuts: list[int], takes: list[int], bad_at: int, max_line: int
) -> list[Any]:
    """Everything a Sink gives when `body` is fed in the pieces `cuts` makes (each as two views
    of a buffer that is overwritten right after the feed) with `takes[i]` takes after the i-th
    (the consumer falling behind or catching up: the bytes wait in the Sink), the i-th feed
    carrying a piece that is not bytes-like when i is `bad_at`; then take to the end and end().
    Each take's events (as repr) come with the assembler's state after it and `done`; then the
    completion or the error (type and message)."""
    sink = sink_type(max_line)
    seen: list[Any] = []

    def take() -> list[Any]:
        events = sink.take()
        chat = sink.assembler
        state = (chat.id, chat.in_reasoning, chat.reasoning_tokens, chat.is_finished)
        seen.append(([repr(e) for e in events], state, sink.done))
        return events

    try:
        for i, cut in enumerate(pieces(body, cuts, empty=True)):
            buffer = bytearray(cut)
            view = memoryview(buffer)
            fed: list[Any] = [view[: len(view) // 2], view[len(view) // 2 :]]
            if i == bad_at:
                fed.insert(1, 5)
            sink.feed(fed)
            buffer[:] = b"\xff" * len(buffer)  # the transport reuses its buffer at once
            for _ in range(takes[i % len(takes)]):
                take()
        while take():
            pass
        seen.append(repr(sink.end()))
    except Exception as err:
        seen.append((type(err).__name__, str(err)))
    return seen


def handed_out(seen: list[Any]) -> list[Any]:
    """What a consumer sees of a `sink_scheduled` outcome, whatever the schedule: the takes
    that gave events (with the state after each), then the end."""
    return [s for s in seen[:-1] if s[0]] + seen[-1:]


@pytest.mark.skipif(CSink is None, reason="the Cython twin is not built")
@given(st.data())
def test_sink_twins_agree_on_any_split_and_any_take_schedule(data: st.DataObject) -> None:
    """Both twins decode at the same moment (in take) and raise each error after the same
    events, for any split of the bytes, any pace of the consumer, a piece that is not
    bytes-like anywhere; and within a twin, the split and the pace change nothing the consumer
    sees (the whole body fed at once and taken to the end gives the same)."""
    name = data.draw(st.sampled_from(NAMES))
    body = bytearray(expected_body((HTTP / f"{name}.http").read_bytes()))
    for _ in range(data.draw(st.integers(0, 2))):
        if body:
            at = data.draw(st.integers(0, len(body) - 1))
            body[at:at] = data.draw(st.sampled_from([b"\xff", b"\n", b"data: [DONE]\n", b"\r"]))
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=8))
    takes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    bad_at = data.draw(st.sampled_from([-1, -1, 0, 1, 2]))
    max_line = data.draw(st.sampled_from([64, 1 << 20]))
    want = sink_scheduled(PureSink, bytes(body), cuts, takes, bad_at, max_line)
    assert sink_scheduled(CSink, bytes(body), cuts, takes, bad_at, max_line) == want
    if bad_at < 0:
        for sink_type in (PureSink, CSink):
            whole = sink_scheduled(sink_type, bytes(body), [], [0], -1, max_line)
            assert handed_out(want) == handed_out(whole)


# --- legal misuse: refused with an error, never a read outside the buffer -----------------------


@pytest.mark.parametrize("n", [65, -1, 1 << 40])
def test_filling_more_than_was_free_is_refused(twin: type, n: int) -> None:
    parser = twin(64)
    parser.free()
    with pytest.raises(ValueError, match=rf"filled\({n}\) with 64 bytes free"):
        parser.filled(n)
    view = parser.free()  # the parser is unchanged and goes on
    view[:19] = b"HTTP/1.1 200 OK\r\n\r\n"
    assert parser.filled(19) == [] and parser.status == 200


@pytest.mark.skipif(CSink is None, reason="the Cython twin is not built")
def test_cython_objects_made_without_init_raise_instead_of_crashing() -> None:
    assert _twins.CYTHON is not None
    Receiver, ResponseParser = _twins.CYTHON.Receiver, _twins.CYTHON.ResponseParser
    parser = ResponseParser.__new__(ResponseParser)
    with pytest.raises(HttpParseError, match="longer than 0 bytes"):
        parser.free()
    with pytest.raises(ValueError, match="with 0 bytes free"):
        parser.filled(3)
    sink = CSink.__new__(CSink)
    assert sink.take() == [] and sink.backlog == 0
    with pytest.raises(RuntimeError, match="never initialised"):
        sink.end()
    sink.feed([b"data: x\n\n"])
    with pytest.raises(RuntimeError, match="never initialised"):  # latched, as a decoder's
        sink.take()
    receiver = Receiver.__new__(Receiver)
    for call in (lambda: receiver.get_buffer(-1), lambda: receiver.buffer_updated(3)):
        with pytest.raises(RuntimeError, match="has no ResponseParser"):
            call()
    receiver = Receiver(None, ResponseParser())
    receiver.parser = None
    with pytest.raises(RuntimeError, match="has no ResponseParser"):
        receiver.buffer_updated(3)


# --- the consumer's pace (docs/client.md, rule BACKLOG): reading pauses, nothing is lost ---

from llamafast._limits import BACKLOG  # noqa: E402

RECEIVERS = [(_twins.PURE.Receiver, PureSink, PureParser)]
if _twins.CYTHON is not None:
    RECEIVERS.append((_twins.CYTHON.Receiver, CSink, CParser))


class FakeTransport:
    def __init__(self) -> None:
        self.paused = 0

    def pause_reading(self) -> None:
        self.paused += 1

    def abort(self) -> None:
        raise AssertionError("nothing here is a failure")


CHUNK = (
    b'{"choices":[{"index":0,"delta":{"content":"%05d"},"finish_reason":null}],'
    b'"id":"c","object":"chat.completion.chunk","created":1,"model":"m"}'
)


def event_line(i: int) -> bytes:
    return b"data: " + CHUNK % i + b"\n\n"


@pytest.mark.parametrize(
    "receiver_type,sink_type,parser_type",
    RECEIVERS,
    ids=[r[0].__module__.rsplit(".", 1)[-1] for r in RECEIVERS],
)
def test_reading_pauses_for_a_slow_consumer_and_loses_nothing(
    receiver_type: Any, sink_type: Any, parser_type: Any
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    receiver = receiver_type(None, parser_type())
    receiver.transport = transport = FakeTransport()
    receiver.sink = sink = sink_type(1 << 20)
    receiver.deliver = lambda: None  # no task to wake
    sent = 0

    def arrive(data: bytes) -> None:
        view = receiver.get_buffer(-1)
        view[: len(data)] = data
        receiver.buffer_updated(len(data))

    arrive(head)
    while not receiver.paused:  # nobody takes: the backlog grows until reading pauses
        arrive(b"".join(event_line(sent + i) for i in range(64)))
        sent += 64
        assert sent < 100_000, "reading never paused"
    assert transport.paused == 1
    # at the first arrival that takes the untaken body past BACKLOG bytes (2 MiB), not before
    assert BACKLOG < sent * len(event_line(0)) <= BACKLOG + 64 * len(event_line(0))
    got = []
    while events := sink.take():
        got += [e.text for e in events]
    assert got == [f"{i:05d}" for i in range(sent)]  # in order, none lost
    assert sink.backlog == 0


@pytest.mark.parametrize("sink_type", [PureSink, *([CSink] if CSink else [])])
def test_lines_fed_and_never_taken_count_at_the_end(sink_type: Any) -> None:
    sink = sink_type(1 << 20)
    finish = CHUNK.replace(b'"finish_reason":null', b'"finish_reason":"stop"') % 2
    sink.feed([event_line(0) + event_line(1) + b"data: " + finish + b"\n\n"])
    assert sink.end().content == "000000000100002"


@pytest.mark.skipif(CSink is None, reason="the Cython twin is not built")
@pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="3.12+ runs the gc between bytecodes, never inside take()"
)
def test_a_finalizer_feeding_the_sink_inside_take_is_refused_not_a_crash() -> None:
    sink = CSink(1 << 20)
    sink.feed([b"".join(event_line(i) for i in range(200))])

    class FeedsOnCollect:
        def __del__(self) -> None:  # a comment line, big enough to move the buffer
            sink.feed([b": " + b"x" * 100_000 + b"\n"])

    gc.collect()
    old = gc.get_threshold()
    gc.set_threshold(1)
    try:
        with pytest.raises(RuntimeError, match=r"Sink.feed\(\) was called while this Sink"):
            for _ in range(50):
                cycle = FeedsOnCollect()
                cycle.me = cycle  # type: ignore[attr-defined]  # only the gc frees it
                del cycle
                while sink.take():
                    pass
    finally:
        gc.set_threshold(*old)
