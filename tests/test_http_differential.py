# Whole responses, generated (status lines, fields, Content-Length and Transfer-Encoding values,
# chunked framing, interim heads) and mutated from the recordings, fed to both twins'
# ResponseParser at random splits and buffer sizes, the body on to both twins' Sink. The twins
# must agree on everything, every error must be one of ours, and the parser's result must not
# depend on the split. fuzz/differential.py's `http` target runs these generators for longer.
"""Differential tests of ResponseParser and Sink: pure and Cython twins on whole responses."""

from __future__ import annotations

import importlib
import random
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamafast import LlamafastError, TruncatedError
from llamafast._engine._http_py import HttpParseError

HTTP = Path(__file__).resolve().parent.parent / "fixtures" / "http"
RECORDINGS = {p.stem: p.read_bytes() for p in sorted(HTTP.glob("*.http"))}


def twin(kind: str) -> types.SimpleNamespace:
    """One twin's ResponseParser and Sink. The Sink is taken from `_chat_*` once it lives there,
    else from `_http_*` (where it is today)."""
    http = importlib.import_module(f"llamafast._engine._http_{kind}")
    try:
        chat = importlib.import_module(f"llamafast._engine._chat_{kind}")
    except ImportError:
        chat = None
    sink = getattr(chat, "Sink", None) or http.Sink
    return types.SimpleNamespace(ResponseParser=http.ResponseParser, Sink=sink)


def twins() -> tuple[types.SimpleNamespace, types.SimpleNamespace] | None:
    try:
        return twin("py"), twin("c")
    except ImportError:
        return None


def _name(err: BaseException) -> tuple[str, str]:
    assert isinstance(err, HttpParseError | TruncatedError | LlamafastError), (
        f"a builtin error escaped: {err!r}"
    )
    return type(err).__name__, str(err)


def run(impl: Any, raw: bytes, cuts: list[int], size: int, max_line: int) -> dict[str, Any]:
    """`raw` written at `free()` in the pieces `cuts` makes, then the end of the connection, as
    a client reads it: the parser's view of it, and the events the body gives in a Sink."""
    parser = impl.ResponseParser(size)
    sink = impl.Sink(max_line)
    body = bytearray()
    events: list[Any] = []
    out: dict[str, Any] = {"error": None, "sink_error": None, "completion": None}

    def drain() -> None:
        if out["sink_error"] is not None:
            return
        try:
            while got := sink.take():
                events.append([repr(e) for e in got])
        except Exception as err:
            out["sink_error"] = _name(err)

    try:
        pos = 0
        for stop in [*sorted(set(cuts)), len(raw)]:
            while pos < stop:
                free = parser.free()
                n = min(len(free), stop - pos)
                free[:n] = raw[pos : pos + n]
                pos += n
                views = parser.filled(n)
                for view in views:
                    body += view
                if views:
                    sink.feed(views)  # now: the views are valid until the next free()
                    drain()
        parser.eof()
    except Exception as err:
        out["error"] = _name(err)
    if out["error"] is None and out["sink_error"] is None:
        try:
            out["completion"] = repr(sink.end())
        except Exception as err:
            out["sink_error"] = _name(err)
    out.update(
        status=parser.status,
        headers=parser.headers,
        keep_alive=parser.keep_alive,
        head_done=parser.head_done,
        done=parser.done,
        fault=None if parser.fault is None else _name(parser.fault),
        body=bytes(body),
        events=events,
        sink_done=sink.done,
    )
    return out


PARSER_KEYS = ("status", "headers", "keep_alive", "head_done", "done", "body", "error")


def assert_twins_agree(raw: bytes, cuts: list[int], size: int, max_line: int) -> None:
    found = twins()
    assert found is not None, "the Cython twin is not built"
    py, c = found
    want = run(py, raw, cuts, size, max_line)
    got = run(c, raw, cuts, size, max_line)
    assert got == want, (raw[:300], cuts, size)
    # however the bytes arrive: the parser gives the same
    whole = run(py, raw, [], size, max_line)
    same = {k: whole[k] for k in PARSER_KEYS} == {k: want[k] for k in PARSER_KEYS}
    assert same, ("split-dependent", raw[:300], cuts)


# --- generators ---------------------------------------------------------------------------

GOOD_STATUS = st.sampled_from(
    [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200",
        b"HTTP/1.0 200 OK",
        b"HTTP/1.1 404 Not Found",
        b"HTTP/1.1 500 Internal Server Error",
        b"HTTP/1.1 204 No Content",
        b"HTTP/1.1 304 N",
    ]
)
ANY_STATUS = st.builds(
    lambda version, sep, code, reason: version + sep + code + reason,
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.9", b"HTTP/2", b"http/1.1", b"HTTP/1.10"]),
    st.sampled_from([b" ", b" ", b"  ", b"\t", b""]),
    st.one_of(
        st.integers(100, 999).map(lambda n: b"%d" % n),
        st.sampled_from(
            [
                b"101",
                b"2147483648",
                b"99999999999999999999",
                b"20",
                b"2000",
                b"099",
                b"-20",
                b"+20",
                b"\xb200",
                "\uff12\uff10\uff10".encode(),
                b"2\xb20",
                b"",
            ]
        ),
        st.binary(max_size=4),
    ),
    st.one_of(
        st.sampled_from([b"", b" OK", b" ", b"\tOK", b" O\rK", b" \x00", b" \xe9"]),
        st.binary(max_size=8).map(lambda b: b" " + b),
    ),
)
STATUS_LINE = st.one_of(GOOD_STATUS, GOOD_STATUS, ANY_STATUS)

CONTENT_LENGTH = st.one_of(
    st.integers(0, 400).map(str),
    st.sampled_from(
        [
            "",
            ",",
            "x",
            "-1",
            "+5",
            "5 5",
            "0x10",
            "005",
            "\xb2",
            "\u0665",
            "9223372036854775807",
            "9223372036854775808",
            "1" * 40,
            "0" * 30 + "7",
            " 7 ",
            "7;q=1",
        ]
    ),
    st.lists(st.integers(0, 40), min_size=1, max_size=3).map(lambda v: ", ".join(map(str, v))),
    st.integers(0, 40).map(lambda n: f"{n}, {n}"),
)
TRANSFER_ENCODING = st.sampled_from(
    [
        "chunked",
        "chunked",
        "Chunked",
        " chunked",
        ", chunked,",
        "gzip, chunked",
        "chunked, gzip",
        "gzip",
        "identity",
        "",
        "chunked, chunked",
        "chunked;x=1",
    ]
)
FIELD = st.one_of(
    CONTENT_LENGTH.map(lambda v: b"Content-Length: " + v.encode("utf-8")),
    TRANSFER_ENCODING.map(lambda v: b"Transfer-Encoding: " + v.encode()),
    st.sampled_from(
        [
            b"Content-Type: text/event-stream",
            b"Connection: close",
            b"Connection: keep-alive",
            b"Server: llama.cpp",
            b"X-A: b",
            b"x-a:  c ",
            b"bad line",
            b"N : v",
            b": v",
            b" folded",
            b"\tfolded too",
            b"X: a\rb",
            b"X: a\x00b",
            b"N\xe9: v",
            b"Empty:",
        ]
    ),
    st.binary(max_size=20),
)
EOL = st.sampled_from([b"\r\n"] * 12 + [b"\n", b"\r", b"\r\r\n", b""])
INTERIM = st.sampled_from(
    [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
        b"HTTP/1.1 102 Processing\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 199\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 100 Continue\n\n",
    ]
)


def _event_lines() -> list[bytes]:
    lines: list[bytes] = []
    for raw in RECORDINGS.values():
        for line in raw.split(b"\n"):
            if line.startswith(b"data: ") and len(lines) < 400:
                lines.append(line + b"\n\n")
    return lines


PAYLOAD = st.one_of(
    st.sampled_from(_event_lines()),
    st.sampled_from([b"data: [DONE]\n\n", b": ping\n\n", b"\n", b"data: x"]),
    st.binary(max_size=40),
)


@st.composite
def chunk(draw: st.DrawFn) -> bytes:
    """One chunk: its size line (right, off by one, in another spelling, or wrong), its data,
    and what follows the data (mostly CRLF)."""
    data = draw(PAYLOAD)
    n = len(data) + draw(st.sampled_from([0] * 8 + [-1, 1]))
    size = draw(
        st.sampled_from(
            [
                b"%x" % max(n, 0),
                b"%X" % max(n, 0),
                b"000%x" % max(n, 0),
                b"-%x" % n,
                b"zz",
                b"f" * 16,
                b" %x" % max(n, 0),
                b"0x%x" % max(n, 0),
            ]
        )
        if draw(st.integers(0, 5)) == 0
        else st.just(b"%x" % max(n, 0))
    )
    ext = draw(st.sampled_from([b""] * 4 + [b";a=b", b" ;x", b'\t; q="s;"', b";\r"]))
    return size + ext + draw(EOL) + data + draw(EOL)


@st.composite
def response(draw: st.DrawFn) -> bytes:
    interim = b"".join(draw(st.lists(INTERIM, max_size=2)))
    head = draw(STATUS_LINE) + draw(EOL)
    for field in draw(st.lists(FIELD, max_size=5)):
        head += field + draw(EOL)
    framing = draw(st.sampled_from(["chunked", "length", "close", "none"]))
    if framing == "chunked":
        head += b"Transfer-Encoding: chunked\r\n"
    head += draw(EOL)
    chunks = draw(st.lists(chunk(), max_size=6))
    if framing == "chunked":
        body = b"".join(chunks)
        if draw(st.integers(0, 3)):  # the last chunk, extensions, trailers
            body += b"0" + draw(st.sampled_from([b"", b";end"])) + draw(EOL)
            for trailer in draw(st.lists(st.sampled_from([b"X-T: 1", b"bad"]), max_size=2)):
                body += trailer + draw(EOL)
            body += draw(EOL)
    else:
        data = b"".join(draw(st.lists(PAYLOAD, max_size=6)))
        if framing == "length":
            head = head[: -len(b"\r\n")] if head.endswith(b"\r\n\r\n") else head
            n = len(data) + draw(st.sampled_from([0, 0, 0, -3, 5]))
            head += b"Content-Length: %d\r\n\r\n" % max(n, 0)
        body = data
    return interim + head + body + draw(st.sampled_from([b"", b"", b"HTTP/1.1 200 OK\r\n\r\n"]))


INTERESTING = [
    b"\r", b"\n", b"\r\n", b"\r\n\r\n", b"0", b"f", b";", b":", b" ", b"\t", b"\xb2", b"\x00",
    b"HTTP/1.1 100 Continue\r\n\r\n", b"Transfer-Encoding: chunked\r\n", b"Content-Length: 9\r\n",
]  # fmt: skip


@st.composite
def mutated_recording(draw: st.DrawFn) -> bytes:
    """A recording (its first bytes, now and then), with a few byte edits."""
    raw = RECORDINGS[draw(st.sampled_from(sorted(RECORDINGS)))]
    if draw(st.booleans()):
        raw = raw[: draw(st.integers(0, 6000))]
    out = bytearray(raw)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(out)))
        kind = draw(st.integers(0, 3))
        if kind == 0 and at < len(out):
            out[at] = draw(st.integers(0, 255))
        elif kind == 1:
            out[at:at] = draw(st.sampled_from(INTERESTING))
        elif kind == 2:
            del out[at : at + draw(st.integers(1, 16))]
        else:
            del out[at:]
    return bytes(out)


SIZES = st.sampled_from([24, 64, 257, 4096, 1 << 16])
MAX_LINES = st.sampled_from([64, 1 << 20])


@st.composite
def cuts_for(draw: st.DrawFn, raw: bytes) -> list[int]:
    if draw(st.integers(0, 9)) == 0:  # a byte at a time, now and then (short inputs only)
        return list(range(min(len(raw), 600)))
    return draw(st.lists(st.integers(0, len(raw)), max_size=8))


needs_c = pytest.mark.skipif(twins() is None, reason="the Cython twin is not built")


@needs_c
@settings(max_examples=300)
@given(raw=response(), data=st.data(), size=SIZES, max_line=MAX_LINES)
def test_twins_agree_on_generated_responses(
    raw: bytes, data: st.DataObject, size: int, max_line: int
) -> None:
    assert_twins_agree(raw, data.draw(cuts_for(raw)), size, max_line)


@needs_c
@settings(max_examples=150)
@given(raw=mutated_recording(), data=st.data(), size=SIZES, max_line=MAX_LINES)
def test_twins_agree_on_mutated_recordings(
    raw: bytes, data: st.DataObject, size: int, max_line: int
) -> None:
    assert_twins_agree(raw, data.draw(cuts_for(raw)), size, max_line)


@needs_c
@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_twins_agree_on_every_recording(name: str) -> None:
    raw = RECORDINGS[name]
    rng = random.Random(name)
    for size in (64, 1 << 16):
        assert_twins_agree(raw, sorted(rng.sample(range(len(raw)), 20)), size, 1 << 20)
