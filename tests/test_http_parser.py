# The rules the response parser reads HTTP/1.1 by, one test (or table) per rule, each run in both
# twins through the `http` fixture and each case fed whole, one byte at a time and split at
# random: a rule holds only if all three feeds give the same status, headers, body and error.
"""How ResponseParser reads HTTP/1.1: interim answers, the status line, Content-Length,
Transfer-Encoding, chunk lines, the head's line ends and fields, faults after good bytes."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest

from _cuts import fill
from _drivers import Driver, cfg
from _server import (
    Reply,
    chunked,
    dechunk,
    expected,
    load,
    split,
)
from conftest import _cython_or_skip
from llamafast import (
    ChatRequest,
    ProtocolError,
    TruncatedError,
    User,
    _twins,
)
from llamafast._errors import HttpParseError


@pytest.fixture(params=["python", "cython"], ids=["py", "c"])
def http(request: pytest.FixtureRequest) -> Any:
    """One twin: its ResponseParser, Receiver, Sink."""
    if request.param == "cython":
        return _cython_or_skip(request.config)
    return _twins.PURE


def run(mod: Any, raw: bytes, cuts: list[int], size: int = 1 << 16) -> dict[str, Any]:
    """Feed `raw` in the pieces `cuts` makes, then end it: everything the parser says."""
    parser = mod.ResponseParser(size)
    body = bytearray()
    error = None
    try:
        for views in fill(parser, raw, cuts):
            for view in views:
                body += view
        parser.eof()
    except Exception as err:
        error = (type(err), str(err))
        assert isinstance(err, HttpParseError | TruncatedError), f"a builtin error: {err!r}"
    return {
        "status": parser.status,
        "headers": parser.headers,
        "head_done": parser.head_done,
        "done": parser.done,
        "body": bytes(body),
        "error": error,
    }


def outcome(mod: Any, raw: bytes, size: int = 1 << 16) -> dict[str, Any]:
    """The outcome of `raw` fed whole, which feeding it a byte at a time and at random splits
    must equal."""
    whole = run(mod, raw, [], size)
    assert run(mod, raw, list(range(len(raw))), size) == whole, "a byte at a time differs"
    rng = random.Random(raw)
    for _ in range(3):
        cuts = [rng.randrange(len(raw) + 1) for _ in range(rng.randrange(1, 6))]
        assert run(mod, raw, cuts, size) == whole, f"split at {sorted(cuts)} differs"
    return whole


def refused(mod: Any, raw: bytes) -> str:
    """The HttpParseError's message for `raw` (it must be one)."""
    error = outcome(mod, raw)["error"]
    assert error is not None and error[0] is HttpParseError, error
    return error[1]  # type: ignore[no-any-return]


OK = b"HTTP/1.1 200 OK\r\n"
CHUNKED = OK + b"Transfer-Encoding: chunked\r\n\r\n"


# --- interim 1xx answers are skipped; 101 is refused ----------------------------------------------

FINAL = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"


@pytest.mark.parametrize(
    "interim",
    [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 102 Processing\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
        b"HTTP/1.1 199 \r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" * 3,
    ],
)
def test_interim_answers_are_skipped(http: Any, interim: bytes) -> None:
    got = outcome(http, interim + FINAL)
    assert got["status"] == 200 and got["body"] == b"hello" and got["done"]
    assert got["headers"] == {"content-type": "text/plain", "content-length": "5"}
    assert got["error"] is None


def test_after_an_interim_answer_the_head_is_not_done(http: Any) -> None:
    got = run(http, b"HTTP/1.1 100 Continue\r\nX: y\r\n\r\n", [])
    assert not got["head_done"] and got["status"] == 0 and got["headers"] == {}
    assert got["error"] == (HttpParseError, "the connection closed before a complete response head")


def test_switching_protocols_is_refused(http: Any) -> None:
    raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" + FINAL
    assert refused(http, raw) == (
        "the server switched protocols, which was not asked for: "
        "b'HTTP/1.1 101 Switching Protocols'"
    )


# --- the status line and Content-Length -----------------------------------------------------------


@pytest.mark.parametrize(
    "first", [b"SSH-2.0-OpenSSH_9.6\r\n", b"\x00\x01\xfe\xff garbage\r\n", b"HTTP/2 200\r\n"]
)
def test_a_first_line_that_is_no_status_line_is_refused_when_it_ends(
    http: Any, first: bytes
) -> None:
    # A server that says something else and then waits is refused at once, not when it closes
    # (the client then never waits for a head that will not come).
    for cut in range(1, len(first) + 1):
        parser = http.ResponseParser()
        with pytest.raises(HttpParseError) as err:
            for piece in (first[:cut], first[cut:]):
                free = parser.free()
                free[: len(piece)] = piece
                parser.filled(len(piece))
        assert str(err.value) == f"not an HTTP/1.1 status line: {first[:-2]!r}"


@pytest.mark.parametrize(
    ("line", "status"),
    [
        (b"HTTP/1.1 200 OK", 200),
        (b"HTTP/1.0 200 OK", 200),
        (b"HTTP/1.1 200", 200),
        (b"HTTP/1.1 200 ", 200),
        (b"HTTP/1.1 404 Not Found at all", 404),
        (b"HTTP/1.1 999 \xe9\x80", 999),  # obs-text in the reason, which is ignored
    ],
)
def test_good_status_lines(http: Any, line: bytes, status: int) -> None:
    got = outcome(http, line + b"\r\nContent-Length: 2\r\n\r\nhi")
    assert got["status"] == status and got["body"] == b"hi" and got["error"] is None


@pytest.mark.parametrize(
    "line",
    [
        b"HTTP/1.1 2147483648 OK",  # was OverflowError in the Cython twin
        b"HTTP/1.1 99999999999999999999999 OK",
        b"HTTP/1.1 20 OK",
        b"HTTP/1.1 2000 OK",
        b"HTTP/1.1 2000",
        b"HTTP/1.1 099 Low",
        b"HTTP/1.1 +20 OK",
        b"HTTP/1.1 -20 OK",
        b"HTTP/1.1 \xb200 OK",  # a superscript two in latin-1, which str.isdigit() accepts
        "HTTP/1.1 \uff12\uff10\uff10 OK".encode(),  # fullwidth digits
        b"HTTP/1.1 20\xb2 OK",
        b"HTTP/1.1  200 OK",
        b"HTTP/1.1\t200 OK",
        b"HTTP/1.1 200\tOK",
        b"HTTP/2 200 OK",
        b"HTTP/1.10 200 OK",
        b"HTTP/1.x 200 OK",
        b"http/1.1 200 OK",
        b"HTTP/1.1",
        b"HTTP/1.1 ",
        b"HTTP/1.1 200 O\rK",
        b"HTTP/1.1 200 O\x00K",
        b"SSH-2.0-OpenSSH_9.6",
        b"",
    ],
)
def test_bad_status_lines_are_refused_naming_the_line(http: Any, line: bytes) -> None:
    assert refused(http, line + b"\r\nContent-Length: 0\r\n\r\n") == (
        f"not an HTTP/1.1 status line: {line[:80]!r}"
    )


def test_a_long_bad_status_line_is_cut_in_the_message(http: Any) -> None:
    line = b"HTTP/1.1 2" + b"0" * 500 + b" OK"
    assert refused(http, line + b"\r\n\r\n") == f"not an HTTP/1.1 status line: {line[:80]!r}"


@pytest.mark.parametrize(
    ("value", "length"),
    [
        (b"0", 0),
        (b"5", 5),
        (b"005", 5),
        (b"5, 5", 5),
        (b"5,5,05", 5),
        (b" 5 ,, 5\t", 5),
        (b"9223372036854775807", 2**63 - 1),
    ],
)
def test_good_content_lengths(http: Any, value: bytes, length: int) -> None:
    raw = OK + b"Content-Length: " + value + b"\r\n\r\n" + b"x" * min(length, 5)
    got = outcome(http, raw)
    assert got["body"] == b"x" * min(length, 5)
    if length <= 5:
        assert got["done"] and got["error"] is None
    else:
        assert got["error"] == (TruncatedError, str(TruncatedError()))


def test_repeated_content_length_fields_are_one_list(http: Any) -> None:
    got = outcome(http, OK + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabcdef")
    assert got["body"] == b"abc" and got["done"] and got["headers"]["content-length"] == "3, 3"
    message = refused(http, OK + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcdef")
    assert message == "Content-Length has differing values: '3, 4'"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (b"", "is not a number"),
        (b",", "is not a number"),
        (b"x", "is not a number"),
        (b"-1", "is not a number"),
        (b"+5", "is not a number"),
        (b"5 5", "is not a number"),
        (b"0x10", "is not a number"),
        (b"5;q=1", "is not a number"),
        (b"\xb2", "is not a number"),  # was ValueError: str.isdigit() accepts it, int() does not
        ("\uff15".encode(), "is not a number"),  # a fullwidth five
        (b"5, x", "is not a number"),
        (b"5, 6", "has differing values"),
        (b"9223372036854775808", "is larger than 2**63-1"),  # was OverflowError in Cython
        (b"1" * 5000, "is larger than 2**63-1"),  # int() of 5000 digits is a ValueError
        (b"0" * 5000 + b"1", None),
    ],
)
def test_bad_content_lengths_are_refused_naming_the_value(
    http: Any, value: bytes, says: str | None
) -> None:
    raw = OK + b"Content-Length: " + value + b"\r\n\r\nx"
    if says is None:  # leading zeros are not a number's size
        assert outcome(http, raw)["body"] == b"x"
        return
    text = value.decode("latin-1").strip(" \t")
    assert refused(http, raw) == f"Content-Length {says}: {text[:40]!r}"


# --- Transfer-Encoding ----------------------------------------------------------------------------


def test_chunked_wins_over_content_length(http: Any) -> None:
    for te in (b"chunked", b"Chunked", b" chunked ", b", chunked,"):
        raw = OK + b"Content-Length: 2\r\nTransfer-Encoding: " + te + b"\r\n\r\n"
        got = outcome(http, raw + b"5\r\nhello\r\n0\r\n\r\n")
        assert got["body"] == b"hello" and got["done"] and got["error"] is None, te


@pytest.mark.parametrize(
    "value",
    [b"gzip, chunked", b"chunked, gzip", b"gzip", b"identity", b"chunked, chunked", b"", b","],
)
def test_codings_not_asked_for_are_refused(http: Any, value: bytes) -> None:
    # We send no TE and no Accept-Encoding: chunked is the only coding a server may use, and a
    # final coding other than chunked (a body until close that we could not decode) is refused.
    raw = OK + b"Transfer-Encoding: " + value + b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    assert refused(http, raw) == (
        f"a Transfer-Encoding other than chunked, which was not asked for: {value.decode()!r}"
    )


def test_repeated_transfer_encoding_fields_are_one_list(http: Any) -> None:
    raw = OK + b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert "'gzip, chunked'" in refused(http, raw)


def test_transfer_encoding_in_http_1_0_is_refused(http: Any) -> None:
    raw = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert refused(http, raw) == "an HTTP/1.0 response with a Transfer-Encoding: 'chunked'"


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_no_body_whatever_the_fields_say(http: Any, status: bytes) -> None:
    for fields in (b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n", b""):
        got = outcome(http, b"HTTP/1.1 " + status + b"\r\n" + fields + b"\r\nhello")
        assert got["body"] == b"" and got["done"] and got["error"] is None


def test_keep_alive(http: Any) -> None:
    def keep(raw: bytes) -> bool:
        parser = http.ResponseParser()
        parser.free()[: len(raw)] = raw
        parser.filled(len(raw))
        return parser.keep_alive  # type: ignore[no-any-return]

    assert keep(OK + b"\r\n")
    assert not keep(OK + b"Connection: keep-alive, Close\r\n\r\n")
    assert not keep(b"HTTP/1.0 200 OK\r\n\r\n")
    assert keep(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n")


# --- chunk lines, the head's line ends, its fields ------------------------------------------------


@pytest.mark.parametrize(
    "size_line",
    [b"5", b"05", b"5;ext", b"5 ;a=b;c", b'5\t; a = "q;\\""', b"000000000000005", b"5 \t"],
)
def test_good_chunk_size_lines(http: Any, size_line: bytes) -> None:
    got = outcome(http, CHUNKED + size_line + b"\r\nhello\r\n0;end\r\n\r\n")
    assert got["body"] == b"hello" and got["done"] and got["error"] is None


@pytest.mark.parametrize(
    ("size_line", "says"),
    [
        (b"zz", "a chunk size is not a hexadecimal number: b'zz'"),
        (b"", "a chunk size is not a hexadecimal number: b''"),
        (b";ext", "a chunk size is not a hexadecimal number: b';ext'"),
        (b" 5", "a chunk size is not a hexadecimal number: b' 5'"),
        (b"5 5", "a chunk size is not a hexadecimal number: b'5 5'"),
        (b"0x5", "a chunk size is not a hexadecimal number: b'0x5'"),
        (b"-5", "a chunk size is not a hexadecimal number: b'-5'"),
        (b"\xb2", "a chunk size is not a hexadecimal number: b'\\xb2'"),
        (b"1" + b"0" * 15, "a chunk size is not a hexadecimal number: b'1000000000000000'"),
        (b"5\r", "a chunk-size line does not end with CRLF: b'5\\r'"),
        (b"5;a\rb", "a chunk-size line does not end with CRLF: b'5;a\\rb'"),
    ],
)
def test_bad_chunk_size_lines_are_refused(http: Any, size_line: bytes, says: str) -> None:
    assert refused(http, CHUNKED + size_line + b"\r\nhello\r\n0\r\n\r\n") == says


def test_a_chunk_size_line_ending_in_a_bare_lf_is_refused(http: Any) -> None:
    message = refused(http, CHUNKED + b"5\nhello\r\n0\r\n\r\n")
    assert message == "a chunk-size line does not end with CRLF: b'5'"


@pytest.mark.parametrize("after", [b"\n0\r\n\r\n", b"xx0\r\n\r\n", b"\r0\r\n\r\n", b"\n\r\n"])
def test_chunk_data_not_followed_by_crlf_is_refused(http: Any, after: bytes) -> None:
    got = outcome(http, CHUNKED + b"5\r\nhello" + after)
    assert got["body"] == b"hello"
    assert got["error"] == (HttpParseError, f"a chunk does not end with CRLF: {after[:2]!r}")


def test_trailers_are_skipped(http: Any) -> None:
    raw = CHUNKED + b"5\r\nhello\r\n0\r\nX-Checksum: 1\r\nX-More: 2\r\n\r\nafter"
    got = outcome(http, raw)
    assert got["body"] == b"hello" and got["done"] and got["error"] is None
    assert "x-checksum" not in got["headers"]
    got = outcome(http, CHUNKED + b"5\r\nhello\r\n0\r\nX-Checksum: 1\n\r\n")
    assert got["error"] == (
        HttpParseError,
        "a trailer line does not end with CRLF: b'X-Checksum: 1'",
    )


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        (b"HTTP/1.1 200 OK\n", b"HTTP/1.1 200 OK"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\n", b"Content-Length: 0"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n", b""),
        (b"\n", b""),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\n", b"HTTP/1.1 200 OK"),
    ],
)
def test_a_bare_lf_in_the_head_is_refused_at_once(http: Any, raw: bytes, line: bytes) -> None:
    # at once: as soon as the LF is there, without waiting for a blank line that never comes
    parser = http.ResponseParser()
    parser.free()[: len(raw)] = raw
    with pytest.raises(HttpParseError) as caught:
        parser.filled(len(raw))
    assert str(caught.value) == f"a line of the response head ends in LF without CR: {line!r}"
    assert refused(http, raw + b"\r\n\r\n") == str(caught.value)


@pytest.mark.parametrize(
    ("field", "says"),
    [
        (b"No colon here", "a header line without a colon: b'No colon here'"),
        (b"Name : v", "a header name is not a token: b'Name : v'"),
        (b"Name\t: v", "a header name is not a token: b'Name\\t: v'"),
        (b": v", "a header name is not a token: b': v'"),
        (b"N\xe9: v", "a header name is not a token: b'N\\xe9: v'"),
        (b"N(x): v", "a header name is not a token: b'N(x): v'"),
        (b"X: a\rb", "a header value holds a CR or NUL: b'X: a\\rb'"),
        (b"X: a\x00b", "a header value holds a CR or NUL: b'X: a\\x00b'"),
    ],
)
def test_bad_header_lines_are_refused(http: Any, field: bytes, says: str) -> None:
    assert refused(http, OK + field + b"\r\nContent-Length: 0\r\n\r\n") == says


def test_folded_lines_are_joined_with_a_space(http: Any) -> None:
    # a user agent replaces each obs-fold (OWS CRLF RWS) with one SP
    raw = OK + b"X-A: one \r\n  two\r\n\tthree\r\nX-B: b\r\nContent-Length: 0\r\n\r\n"
    assert outcome(http, raw)["headers"] == {
        "x-a": "one two three",
        "x-b": "b",
        "content-length": "0",
    }
    message = refused(http, OK + b" X-A: one\r\nContent-Length: 0\r\n\r\n")
    assert message == "a folded header line with no header before it: b' X-A: one'"


def test_field_names_are_lower_case_values_trimmed_repeats_joined(http: Any) -> None:
    raw = OK + b"X-Thing:\t a b \t\r\nx-thing: c\r\nEmpty:\r\nContent-Length: 0\r\n\r\n"
    got = outcome(http, raw)
    assert got["headers"] == {"x-thing": "a b, c", "empty": "", "content-length": "0"}


# --- faults after good bytes ----------------------------------------------------------------------

GOOD_THEN_BAD = CHUNKED + b"5\r\nhello\r\n3\r\nabcXY\r\n"


def test_a_fault_after_good_bytes_comes_after_them_however_split(http: Any) -> None:
    want = (HttpParseError, "a chunk does not end with CRLF: b'XY'")
    got = outcome(http, GOOD_THEN_BAD)
    assert got["body"] == b"helloabc" and got["error"] == want
    # one filled(): the views before the fault, the fault latched
    parser = http.ResponseParser()
    assert parser.fault is None
    parser.free()[: len(GOOD_THEN_BAD)] = GOOD_THEN_BAD
    views = parser.filled(len(GOOD_THEN_BAD))
    assert b"".join(views) == b"helloabc"
    fault = parser.fault
    assert isinstance(fault, HttpParseError) and str(fault) == want[1]
    for call in (parser.free, lambda: parser.filled(0), parser.eof):
        with pytest.raises(HttpParseError) as caught:
            call()
        assert caught.value is fault
    with pytest.raises(AttributeError):
        parser.fault = None
    # two filled(): the same views, then the same error
    parser = http.ResponseParser()
    cut = GOOD_THEN_BAD.index(b"XY")
    parser.free()[:cut] = GOOD_THEN_BAD[:cut]
    assert b"".join(parser.filled(cut)) == b"helloabc" and parser.fault is None
    parser.free()[:2] = b"XY"
    with pytest.raises(HttpParseError, match="b'XY'"):
        parser.filled(2)
    assert str(parser.fault) == want[1]


def test_a_fault_in_the_head_is_latched_too(http: Any) -> None:
    parser = http.ResponseParser()
    raw = b"HTTP/1.1 2000 OK\r\n\r\n"
    parser.free()[: len(raw)] = raw
    with pytest.raises(HttpParseError) as caught:
        parser.filled(len(raw))
    assert parser.fault is caught.value
    with pytest.raises(HttpParseError) as again:
        parser.free()
    assert again.value is caught.value


def test_a_head_longer_than_the_buffer_is_latched(http: Any) -> None:
    parser = http.ResponseParser(32)
    parser.free()[:32] = b"HTTP/1.1 200 OK\r\nX: " + b"a" * 12
    assert parser.filled(32) == []
    with pytest.raises(HttpParseError, match="head is longer than 32 bytes") as caught:
        parser.free()
    assert parser.fault is caught.value
    with pytest.raises(HttpParseError) as again:
        parser.eof()
    assert again.value is caught.value


class FakeTransport:
    def __init__(self) -> None:
        self.aborted = 0

    def pause_reading(self) -> None:
        pass

    def abort(self) -> None:
        self.aborted += 1


EVENT = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],'
    b'"id":"c","object":"chat.completion.chunk","created":1,"model":"m"}\n\n'
)


@pytest.mark.parametrize("attached", [True, False], ids=["sink", "early"])
@pytest.mark.parametrize("arrivals", [1, 2])
def test_the_receiver_hands_out_what_came_before_a_fault(
    http: Any, attached: bool, arrivals: int
) -> None:
    raw = CHUNKED + b"%x\r\n%s\r\nzz\r\n" % (len(EVENT), EVENT)
    receiver = http.Receiver(None, http.ResponseParser())
    receiver.transport = transport = FakeTransport()
    if attached:
        receiver.sink = http.Sink(1 << 20)
    receiver.deliver = lambda: None
    cut = len(raw) if arrivals == 1 else raw.index(b"zz")
    for piece in (raw[:cut], raw[cut:]):
        if piece:
            view = receiver.get_buffer(-1)
            view[: len(piece)] = piece
            receiver.buffer_updated(len(piece))
    assert isinstance(receiver.error, HttpParseError) and "b'zz'" in str(receiver.error)
    assert transport.aborted == 1
    if attached:
        assert [e.text for e in receiver.sink.take()] == ["hi"]
    else:
        assert b"".join(receiver.early) == EVENT


# --- never outside the buffer ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [17, -1, 1 << 40])
def test_filled_never_reads_past_the_buffer(http: Any, n: int) -> None:
    parser = http.ResponseParser(16)
    parser.free()
    with pytest.raises(ValueError, match="bytes free"):
        parser.filled(n)


# --- the callers: both clients, the events before a fault, then the fault -------------------------


SENT = ("whole", "pieces")  # every test taking `server` runs with both (conftest.py)
config = functools.partial(
    cfg, base={"wait_timeout": 5.0, "stall_timeout": 2.0, "connect_timeout": 2.0, "retries": 0}
)


def test_clients_give_the_events_before_a_framing_fault(drive: Driver, server: Any) -> None:
    head, body = split(load("content_only"))
    server.script = [Reply(raw=head + chunked(dechunk(body)[:5], end=False) + b"zz\r\n")]
    out = drive.run(config(server), ChatRequest(0, [User("hi")]))
    err = out.raised(ProtocolError)
    assert isinstance(err.__cause__, HttpParseError) and "b'zz'" in str(err)
    assert out.events == expected("content_only")[0][:5]


def test_clients_skip_an_interim_answer(drive: Driver, server: Any) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
    server.script = [Reply(raw=interim + load("content_only"))]
    out = drive.run(config(server), ChatRequest(0, [User("hi")]))
    events, completion = expected("content_only")
    assert out.events == events and out.ok() == completion
