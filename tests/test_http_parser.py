# The rules the response parser reads HTTP/1.1 by, one test (or table) per rule, each run in both
# twins through the `http` fixture and each case fed whole, one byte at a time and split at
# random: a rule holds only if all three feeds give the same status, headers, body and error.
# Then the parser against every recorded answer, fed whole, a byte at a time and split at
# random: the head and the body (framing cut out) must not depend on the split; the Sink the
# body goes on to, the same in both twins; the consumer's pace.
"""How ResponseParser reads HTTP/1.1: interim answers, the status line, Content-Length,
Transfer-Encoding, chunk lines, the head's line ends and fields, faults after good bytes; the
recordings, chunked / Content-Length / until-close bodies and refusals; the Sink and Receiver."""

from __future__ import annotations

import functools
import gc
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _cuts import fill, pieces
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
)
from llamafast._engine import _twins
from llamafast._errors import HttpParseError


@pytest.fixture(params=["python", "cython"], ids=["py", "c"])
def http(request: pytest.FixtureRequest) -> Any:
    """One twin: its ResponseParser, Receiver, Sink."""
    if request.param == "cython":
        return _cython_or_skip(request.config)
    return _twins.PURE


def run(
    mod: Any, raw: bytes, cuts: list[int], size: int = 1 << 16, parser: Any = None
) -> dict[str, Any]:
    """Feed `raw` in the pieces `cuts` makes, then end it: everything the parser says (a new
    parser's, or `parser`'s)."""
    if parser is None:
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
        "surplus": parser.surplus,
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


@pytest.mark.parametrize("after", [b"", b"x", b"\r\n", b"HTTP/1.1 200 OK\r\n"])
def test_bytes_after_the_body_are_surplus(http: Any, after: bytes) -> None:
    # Bytes after a complete answer are not ours: the connection cannot carry another answer
    # (docs/client.md, rule KEEP-ALIVE), however the bytes are split.
    for raw in (FINAL + after, CHUNKED + b"5\r\nhello\r\n0\r\n\r\n" + after):
        got = outcome(http, raw)
        assert got["body"] == b"hello"
        assert got["done"]
        assert got["surplus"] is bool(after)


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
    """What a Receiver calls of its transport (the hooks `attach` sets), counted; with
    `abort_fails`, an abort fails the test (where nothing is a failure)."""

    def __init__(self, abort_fails: bool = False) -> None:
        self.abort_fails = abort_fails
        self.paused = 0
        self.aborted = 0

    def pause_reading(self) -> None:
        self.paused += 1

    def abort(self) -> None:
        if self.abort_fails:
            raise AssertionError("nothing here is a failure")
        self.aborted += 1

    def attach(self, receiver: Any) -> None:
        """Be `receiver`'s transport, as the asyncio connection is: its fault and backlog
        hooks."""
        receiver.on_fault = self.abort
        receiver.on_backlog = self.pause_reading


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
    receiver = http.Receiver(http.ResponseParser())
    transport = FakeTransport()
    transport.attach(receiver)
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


# --- every recording, whole, byte by byte and split at random ---------------------------------

PureParser = _twins.PURE.ResponseParser
CParser = None if _twins.CYTHON is None else _twins.CYTHON.ResponseParser  # None: not built

TWINS = [PureParser] if CParser is None else [PureParser, CParser]


@pytest.fixture
def twin(http: Any) -> type:
    """The `http` twin's ResponseParser."""
    return http.ResponseParser  # type: ignore[no-any-return]


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


def parsed(twin: Any, raw: bytes, cuts: list[int], size: int) -> tuple[Any, ...]:
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
    assert parsed(PureParser, raw, cuts, size) == parsed(CParser, raw, cuts, size)


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
    receiver = Receiver(ResponseParser())
    receiver.parser = None
    with pytest.raises(RuntimeError, match="has no ResponseParser"):
        receiver.buffer_updated(3)


# --- the consumer's pace (docs/client.md, rule BACKLOG): reading pauses, nothing is lost ---

from llamafast._limits import BACKLOG  # noqa: E402

RECEIVERS = [(_twins.PURE.Receiver, PureSink, PureParser)]
if _twins.CYTHON is not None:
    RECEIVERS.append((_twins.CYTHON.Receiver, CSink, CParser))


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
    receiver = receiver_type(parser_type())
    transport = FakeTransport(abort_fails=True)
    transport.attach(receiver)
    receiver.sink = sink = sink_type(1 << 20)
    receiver.deliver = lambda: None  # no task to wake
    sent = 0

    def arrive(data: bytes) -> None:
        view = receiver.get_buffer(-1)
        view[: len(data)] = data
        receiver.buffer_updated(len(data))

    arrive(head)
    while not transport.paused:  # nobody takes: the backlog grows until reading pauses
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


# --- reset: the next answer on a kept connection, in the same buffer ----------------------------

_BEFORE_RESET = {
    "a stream read to its end": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\n\r\n6\r\ndata: \r\n0\r\n\r\n",
    "an answer cut inside its body": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
    "an answer cut inside its head": b"HTTP/1.1 200 OK\r\nContent-Le",
    "a fault": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "bytes after the body": b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1",
    "an interim answer": b"HTTP/1.1 100 Continue\r\n\r\n",
}
_AFTER_RESET = [
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\nuntil close",
]


@pytest.mark.parametrize("before", list(_BEFORE_RESET.values()), ids=list(_BEFORE_RESET))
def test_a_reset_parser_reads_the_next_answer_as_a_new_one_would_in_the_same_buffer(
    http: Any, before: bytes
) -> None:
    # A kept connection's next answer (rule KEEP-ALIVE): whatever the last one left (its
    # state, a fault, a partial line, bytes after its end), the reset parser reads the next
    # exactly as a new parser does, into the buffer it already has.
    for after in _AFTER_RESET:
        parser = http.ResponseParser(256)
        buffer = parser.free().obj
        try:
            for _ in fill(parser, before, [len(before) // 2]):
                pass
        except HttpParseError:
            pass
        parser.reset()
        assert (parser.status, parser.headers, parser.head_done) == (0, {}, False)
        assert (parser.done, parser.surplus, parser.keep_alive, parser.fault) == (
            False,
            False,
            True,
            None,
        )
        cuts = [len(after) // 3]
        assert run(http, after, cuts, parser=parser) == run(http, after, cuts, 256)
        assert parser.free().obj is buffer, "reset made a new buffer"


def test_a_head_read_again_is_read_alike_and_its_headers_are_the_callers_own() -> None:
    # parse_head keeps the heads it read last (a kept connection's answers repeat theirs): the
    # same result every time, a headers dict of each caller's own, heads that differ in one
    # byte told apart, and the cache bounded.
    from llamafast._engine import _http_head

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
    first = _http_head.parse_head(head)
    first[1]["content-type"] = "changed by the caller"
    again = _http_head.parse_head(bytes(head))
    assert again == _http_head._parse_head(head)
    assert again[1]["content-type"] == "text/event-stream"
    assert again[1] is not _http_head.parse_head(head)[1]
    assert _http_head.parse_head(bytearray(head)) == again
    other = _http_head.parse_head(head.replace(b"chunked", b"chunkeD"))
    assert other[1]["transfer-encoding"] == "chunkeD"
    for n in range(3 * _http_head.MAX_HEADS_READ):
        assert _http_head.parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: %d" % n)[4] == n
    assert len(_http_head._READ) <= _http_head.MAX_HEADS_READ
    with pytest.raises(HttpParseError):
        _http_head.parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x")
    for line in (
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 503 Busy",
        bytearray(b"HTTP/1.1 204"),
    ):
        assert _http_head.status_line(line) == int(line[9:12])
    for _ in range(2):  # a refused line is refused every time
        with pytest.raises(HttpParseError):
            _http_head.status_line(b"HTTP/1.1 20 OK")


@pytest.mark.parametrize("length", [True, False], ids=["length", "chunked"])
def test_a_reset_parser_after_a_whole_body_reads_the_next_answer_as_views(
    http: Any, length: bool
) -> None:
    # A kept connection whose last answer was read whole (rule WHOLE-BODY) gives its next
    # answer's body as views again, as a new parser would, whether or not the last body was
    # taken; a body taken before the reset stays its taker's.
    head = OK + (b"Content-Length: 10\r\n\r\n" if length else b"Transfer-Encoding: chunked\r\n\r\n")
    body = b"0123456789" if length else b"a\r\n0123456789\r\n0\r\n\r\n"
    for take in (True, False):
        parser = http.ResponseParser(256)
        early = [bytes(v) for views in fill(parser, head, []) for v in views]
        assert parser.head_done
        assert parser.whole(1000, early)
        assert parser.collecting
        assert [v for views in fill(parser, body, [3]) for v in views] == []
        assert parser.done
        taken = bytes(parser.take_body()) if take else None
        parser.reset()
        assert not parser.collecting and not parser.overflow and parser.body_left == 0
        assert run(http, FINAL, [7], parser=parser) == run(http, FINAL, [7], 256)
        assert taken in (None, b"0123456789")
