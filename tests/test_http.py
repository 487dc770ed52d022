# The HTTP/1.1 response parser against every recorded answer, fed whole, a byte at a time and
# split at random: the head and the body (framing cut out) must not depend on the split.
"""ResponseParser: heads, chunked / Content-Length / until-close bodies, and its refusals."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _server import dechunk, split
from llamafast import TruncatedError
from llamafast._http_py import HttpParseError, ResponseParser

HTTP = Path(__file__).resolve().parent.parent / "fixtures" / "http"
NAMES = sorted(p.stem for p in HTTP.glob("*.http"))


def parse(raw: bytes, cuts: list[int], size: int = 1 << 16) -> tuple[ResponseParser, bytes]:
    parser = ResponseParser(size)
    body = bytearray()
    pos = 0
    for end in [*sorted(set(cuts)), len(raw)]:
        while pos < end:
            free = parser.free()
            n = min(len(free), end - pos)
            free[:n] = raw[pos : pos + n]
            pos += n
            for piece in parser.filled(n):
                body += piece
    return parser, bytes(body)


def expected_body(raw: bytes) -> bytes:
    head, body = split(raw)
    if b"transfer-encoding: chunked" in head.lower():
        return b"".join(dechunk(body))
    return body


@pytest.mark.parametrize("name", NAMES)
def test_every_recording_whole_bytewise_and_split(name: str) -> None:
    raw = (HTTP / f"{name}.http").read_bytes()
    want = expected_body(raw)
    rng = random.Random(name)
    for cuts in ([], list(range(len(raw))), rng.sample(range(len(raw)), min(30, len(raw)))):
        parser, body = parse(raw, cuts)
        assert body == want
        assert parser.status == int(raw.split(b" ", 2)[1])
        assert parser.headers["content-type"]
        parser.eof()  # complete: no error


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_chunked_bodies_of_any_shape(payloads: list[bytes], data: st.DataObject) -> None:
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in payloads if p) + b"0\r\n\r\n"
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"junk"
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=10))
    parser, got = parse(raw, cuts, size=400)
    assert got == b"".join(payloads) and parser.done


def test_body_until_close() -> None:
    parser, body = parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc", [20])
    assert body == b"abc" and not parser.done and not parser.keep_alive
    parser.eof()


def test_cut_bodies_are_truncated() -> None:
    for raw in (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",
    ):
        parser, _ = parse(raw, [])
        with pytest.raises(TruncatedError):
            parser.eof()
    parser, _ = parse(b"HTTP/1.1 200 OK\r\nContent-", [])
    with pytest.raises(HttpParseError, match="before a complete response head"):
        parser.eof()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "without a colon"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "hexadecimal"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "CRLF"),
    ],
)
def test_malformed_responses_are_refused(raw: bytes, says: str) -> None:
    with pytest.raises(HttpParseError, match=says):
        parse(raw, [])


def test_a_head_longer_than_the_buffer() -> None:
    raw = b"HTTP/1.1 200 OK\r\nX: " + b"a" * 100 + b"\r\n\r\n"
    with pytest.raises(HttpParseError, match="longer than 64 bytes"):
        parse(raw, [], size=64)


def test_views_stay_valid_while_held_and_the_buffer_never_resizes() -> None:
    parser = ResponseParser(64)
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
