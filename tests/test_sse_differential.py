"""Differential tests of the SSE reader: the Cython twin against the pure one, and both against
a plain model of the rules.

Random streams (data lines, comments, other fields, every line ending, BOMs, multi-byte and
invalid UTF-8, over-long lines, small max_line) are split at random points and fed to both
twins' `SseDecoder`: every feed must return the same items or raise the same error (class and
args), and `close` must end the same way. `Events` is compared over a reader that gives one byte
per read. These are skipped when the Cython twin is not built (or not wanted).

Then (in the manner of yarl's tests/test_quoting_hypothesis.py) random event streams, split at
random points, through every entry point of each twin: the split never changes the result, the
result is that of a plain model of the rules, and the twins agree.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import itertools
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llamafast
from _sse_feed import Outcome, chunks_of, describe, outcomes
from _sse_feed import run_decoder as feed_decoder
from llamafast import DONE, LineTooLongError, NotUtf8Error
from llamafast._engine import _twins
from llamafast._errors import SseError, SseIoError, SseTimeoutError, TruncatedError

# The twin-against-twin tests need the Cython twin; the model tests at the end run each twin.
# (through the c_impl fixture: skipped when it is not built, a failure when
# LLAMAFAST_REQUIRE_EXTENSIONS says it must be).
needs_c = pytest.mark.usefixtures("c_impl")
sse_c: Any = _twins.CYTHON

TWINS = {"python": _twins.PURE, "cython": sse_c}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BOM = b"\xef\xbb\xbf"

# --- strategies ---------------------------------------------------------------------------

FIELDS = st.sampled_from(
    [
        b"data: ",
        b"data:",
        b"data",
        b"data:  ",
        b"data :",
        b"DATA: ",
        b"dat",
        b"database: ",
        b":",
        b": comment ",
        b"event: ",
        b"id: ",
        b"retry: 10",
        b"",
    ]
)
PIECES = st.one_of(
    st.sampled_from(
        [
            b"hello",
            b'{"choices":[]}',
            b"[DONE]",
            b" [DONE]",
            b"[DONE] ",
            "é€𝄞ñ".encode(),
            "\u07ff\u0800\uffff\U00010000\U0010ffff".encode(),
            b"\xff",  # never valid
            b"\xc0\xaf",  # overlong '/'
            b"\xc1\xbf",  # overlong
            b"\xe0\x80\x80",  # overlong NUL
            b"\xe0\x9f\xbf",  # overlong
            b"\xed\xa0\x80",  # surrogate D800
            b"\xed\xbf\xbf",  # surrogate DFFF
            b"\xed\x9f\xbf",  # U+D7FF, valid
            b"\xf0\x8f\xbf\xbf",  # overlong
            b"\xf4\x90\x80\x80",  # past U+10FFFF
            b"\xf5\x80\x80\x80",
            b"\xe2\x82",  # truncated sequence
            b"\xf0\x9f\x98",  # truncated sequence
            b"\x80",  # stray continuation byte
            BOM,  # not at the stream start: ordinary bytes
            b":",
            b" ",
            b"x" * 70,
        ]
    ),
    st.binary(max_size=6),
)
ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r", b"\n\n", b"\r\r\n", b"\n\r"])
LINE = st.builds(
    lambda f, ps, e: f + b"".join(ps) + e, FIELDS, st.lists(PIECES, max_size=4), ENDINGS
)
STREAM = st.builds(
    lambda head, lines, tail: head + b"".join(lines) + tail,
    st.sampled_from([b"", BOM, BOM[:1], BOM[:2], BOM + BOM, b"\xef\xbbx", b"\r", b"\n"]),
    st.lists(LINE, max_size=12),
    st.sampled_from([b"", b"", b"data: partial", b"\xef", b"\r", b"data: \xe2\x82"]),
)
# Raw bytes over a small alphabet that keeps hitting the interesting cases.
ALPHABET = [
    bytes([b]) for b in b"\r\n\r\ndata: x\xef\xbb\xbf\x80\xbf\xc3\xa9\xe2\xed\xa0\xf0\xf4\x90"
]
RAW = st.lists(st.sampled_from(ALPHABET), max_size=80).map(b"".join)
MAX_LINE = st.one_of(st.integers(1, 40), st.sampled_from([64, 100, 1 << 20]))


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """`data` cut at random points (possibly empty pieces)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=10)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# --- running a twin ------------------------------------------------------------------------


def outcome(err: BaseException) -> tuple[str, tuple[Any, ...]]:
    return (type(err).__name__, err.args)


def run_decoder(module: Any, chunks: list[bytes], max_line: int) -> list[Any]:
    """Every feed's result (or error), then close's; after an error, one more call (latched)."""
    dec = module.SseDecoder(max_line)
    trace: list[Any] = []
    for chunk in chunks:
        try:
            trace.append(dec.feed(chunk))
        except SseError as err:
            trace.append(outcome(err))
            with pytest.raises(type(err)) as again:
                dec.close()
            assert again.value.args == err.args
            return trace
    try:
        trace.append(dec.close())
    except SseError as err:
        trace.append(outcome(err))
        with pytest.raises(type(err)):
            dec.feed(b"data: more\n")
    return trace


def flat(trace: list[Any]) -> tuple[list[Any], Any]:
    """The items of a trace in order, and how it ended (None or the error's outcome)."""
    items: list[Any] = []
    for step in trace:
        if isinstance(step, list):
            items.extend(step)
    return items, trace[-1]


def check_both(chunks: list[bytes], max_line: int) -> None:
    traces = {name: run_decoder(mod, chunks, max_line) for name, mod in TWINS.items()}
    assert traces["cython"] == traces["python"]
    # And the Cython twin alone does not depend on the split (docs/sse.md, rule SPLIT).
    whole = run_decoder(sse_c, [b"".join(chunks)], max_line)
    assert flat(traces["cython"]) == flat(whole)


@needs_c
@SETTINGS
@given(data=st.data(), stream=STREAM, max_line=MAX_LINE)
def test_decoders_agree_on_sse_shaped_streams(
    data: st.DataObject, stream: bytes, max_line: int
) -> None:
    check_both(data.draw(splits(stream)), max_line)


@needs_c
@SETTINGS
@given(data=st.data(), stream=RAW, max_line=MAX_LINE)
def test_decoders_agree_on_raw_bytes(data: st.DataObject, stream: bytes, max_line: int) -> None:
    check_both(data.draw(splits(stream)), max_line)


@needs_c
@SETTINGS
@given(stream=STREAM, max_line=MAX_LINE)
def test_decoders_agree_byte_by_byte(stream: bytes, max_line: int) -> None:
    check_both([stream[i : i + 1] for i in range(len(stream))], max_line)


@needs_c
@pytest.mark.parametrize(
    "chunks",
    [
        [b"\xef", b"\xbb", b"\xbf", b"data: a\n"],  # a BOM split over three reads
        [b"\xef\xbb"],  # a BOM prefix, then the end: a cut line
        [b"\xef\xbb", b"data: a\n"],  # not a BOM after all: "\xef\xbbdata" is no data field
        [b"data: a\r", b"\ndata: b\r", b"data: c\r\n"],  # "\r\n" split; lone "\r"
        [b"data: a\r", b"", b"\ndata: b\n"],
        [b"data: " + b"x" * 30, b"\n"],  # too long while arriving
        [b"data: x" + b"\xff" * 40 + b"\n"],  # too long and not UTF-8: too long wins
        [b"data: ok\n", b"data: \xed\xa0\x80\n", b"data: after\n"],  # a surrogate
        [b"data: ok\ndata: \xe2\x82"],  # cut inside a character, then the end
        [b"data: ok\ndata: \xe2\x82\n"],  # a line cut inside a character
    ],
)
@pytest.mark.parametrize("max_line", [1, 8, 32, 1 << 20])
def test_decoders_agree_on_edge_cases(chunks: list[bytes], max_line: int) -> None:
    check_both(chunks, max_line)


@needs_c
def test_utf8_validation_matches_bytes_decode_exhaustively() -> None:
    """Every 1- and 2-byte sequence, and every 3- and 4-byte sequence over the byte values that
    sit on a boundary of the UTF-8 tables, as the payload of one line: the Cython twin accepts
    exactly what `bytes.decode("utf-8")` accepts (the pure twin uses that very function)."""
    edges = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF]
    edges += [0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
    seqs = [bytes([a]) for a in range(256)]
    seqs += [bytes([a, b]) for a in range(256) for b in range(256)]
    seqs += [bytes([a, b, c]) for a in edges for b in edges for c in edges]
    seqs += [bytes([a, b, c, d]) for a in edges[19:] for b in edges for c in edges for d in edges]
    for seq in seqs:
        if b"\n" in seq or b"\r" in seq:
            continue
        dec = sse_c.SseDecoder()
        got = dec.feed(b"data: " + seq + b"\n")
        try:
            want = [seq.decode("utf-8")]
        except UnicodeDecodeError:
            assert got == [], seq
            with pytest.raises(llamafast.NotUtf8Error):
                dec.close()
        else:
            assert got == want, seq


# --- the Cython twin's own str builder: exact, canonical strs ------------------------------
#
# The Cython twin does not call bytes.decode: the validator counts each line's continuation
# bytes and keeps its largest byte, and the str is allocated at that length and kind and filled
# in one pass (ASCII runs 16 bytes at a time). These tests hold it to bytes.decode("utf-8") on
# text from every plane, in long and short runs (so the 16- and 32-byte blocks see sequences at
# every offset and across block edges), split at random points.

# Characters of each width, and ASCII runs long enough to cross whole blocks.
WIDE_CHARS = st.one_of(
    st.characters(max_codepoint=0x7F, blacklist_characters="\r\n"),
    st.characters(min_codepoint=0x80, max_codepoint=0xFF),
    st.characters(min_codepoint=0x100, max_codepoint=0x7FF),
    st.characters(min_codepoint=0x800, max_codepoint=0xFFFF, blacklist_categories=("Cs",)),
    st.characters(min_codepoint=0x10000),
)
BLOCK_EDGES = st.sampled_from([15, 16, 17, 31, 32, 33, 63, 64, 65])
ASCII_RUN = st.one_of(st.integers(0, 70), BLOCK_EDGES).map(lambda n: "a" * n)
TEXT = st.lists(st.one_of(WIDE_CHARS, ASCII_RUN, st.text(max_size=8)), max_size=24).map(
    lambda parts: "".join(parts).replace("\r", "").replace("\n", "")
)


def assert_same_str(got: Any, want: str) -> None:
    """`got` is `want` as a canonical compact str, built right by the Cython twin.

    Each check reads what CPython itself relies on, never the cached size: sys.getsizeof grows
    once a str's UTF-8 form has been asked for (and one-character Latin-1 strs are shared, so
    that happens behind the test's back), which made a size comparison flaky. str equality
    compares the kind (bytes per character) before the characters, so two equal strs have the
    same kind; str.isascii() reads the ASCII flag that CPython's fast paths trust; the hash and
    the length are read from the object; a str with a wrong kind or flag would fail the
    round trip through UTF-8."""
    assert type(got) is str
    assert len(got) == len(want)
    assert got == want  # same length, same kind, same characters
    assert got.isascii() == want.isascii() == all(c < "\x80" for c in want)
    assert hash(got) == hash(want)
    assert got == got.encode("utf-8").decode("utf-8")
    assert got.encode("utf-8") == want.encode("utf-8")


@needs_c
@SETTINGS
@given(data=st.data(), texts=st.lists(TEXT, min_size=1, max_size=6))
def test_item_str_is_exactly_bytes_decode(data: st.DataObject, texts: list[str]) -> None:
    body = b"".join(b"data: " + t.encode("utf-8") + b"\n\n" for t in texts)
    want = [t.encode("utf-8").decode("utf-8") for t in texts]
    chunks = data.draw(splits(body))
    # feed: the bytes scanned where they lie, and lines completed in the buffer across splits
    dec = sse_c.SseDecoder()
    got = [item for chunk in chunks for item in dec.feed(chunk)]
    dec.close()
    # Events: read into the buffer, one byte per read and 64 KiB at a time
    got_events = list(sse_c.Events(OneByte(body)))
    got_whole = list(sse_c.Events(io.BytesIO(body)))
    for items in (got, got_events, got_whole):
        assert len(items) == len(want)
        for g, w in zip(items, want, strict=True):
            assert_same_str(g, w)


@needs_c
@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "é",
        "ÿ" * 40,
        "a" * 31 + "é" + "a" * 33,
        "a" * 15 + "Ā" + "a" * 16,
        "\u07ff\u0800\uffff",
        "x" * 100 + "😀",
        "😀" + "x" * 100,
        "日本語" * 20 + "a" * 17 + "\U0010ffff",
        "\x00\x7f\x80\xff",
    ],
)
def test_item_str_of_each_kind(text: str) -> None:
    for chunks in ([b"data: " + text.encode() + b"\n"], [b"data: ", text.encode(), b"\r\n"]):
        dec = sse_c.SseDecoder()
        (got,) = [item for chunk in chunks for item in dec.feed(chunk)]
        assert_same_str(got, text)


# Invalid UTF-8 between long ASCII runs: a truncated sequence must not be "completed" by a
# continuation byte that comes after a run of ASCII bytes, whatever the block boundaries.
BROKEN = st.sampled_from(
    [
        *(b"\xe2\x82", b"\xe2", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xc3"),  # cut short
        *(b"\x80", b"\xac", b"\xbf\xbf"),  # stray continuation bytes
        *(b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\xc1\xbf", b"\xff"),
        "é€😀".encode(),  # valid
        "\u0800".encode(),
    ]
)
BROKEN_LINE = st.builds(
    lambda parts, end: b"data: " + b"".join(parts) + end,
    st.lists(st.one_of(BROKEN, ASCII_RUN.map(str.encode)), max_size=8),
    ENDINGS,
)


@needs_c
@SETTINGS
@given(data=st.data(), lines=st.lists(BROKEN_LINE, min_size=1, max_size=5))
def test_decoders_agree_on_broken_sequences_between_long_runs(
    data: st.DataObject, lines: list[bytes]
) -> None:
    check_both(data.draw(splits(b"".join(lines))), 1 << 20)


@needs_c
@pytest.mark.parametrize("before", range(0, 40, 3))
@pytest.mark.parametrize("run", [15, 16, 17, 31, 32, 33, 48])
def test_a_cut_sequence_is_not_completed_after_an_ascii_run(before: int, run: int) -> None:
    line = b"data: " + b"a" * before + b"\xe2\x82" + b"b" * run + b"\xac\n"
    check_both([line], 1 << 20)
    dec = sse_c.SseDecoder()
    assert dec.feed(line) == []
    with pytest.raises(llamafast.NotUtf8Error):
        dec.close()


@needs_c
def test_feed_keeps_its_own_copy_of_the_unfinished_line() -> None:
    """feed scans a bytes-like argument where it lies and copies only the unfinished tail: the
    caller may reuse its buffer at once."""
    for twin in TWINS.values():
        dec = twin.SseDecoder()
        buf = bytearray(b"data: 1\ndata: ab\xc3")
        assert dec.feed(buf) == ["1"]
        buf[:] = b"XXXXXXXXXXXXXXXXXXX"
        assert dec.feed(memoryview(bytearray(b"\xa9c\n"))) == ["abéc"]
        assert dec.feed(memoryview(b"..data: z\n")[2:]) == ["z"]
        dec.close()


# --- Events over a reader that gives one byte per read -----------------------------------


class OneByte(io.RawIOBase):
    """A reader that hands out one byte per read, then raises `fail` (if any) at the end."""

    def __init__(self, data: bytes, fail: BaseException | None = None) -> None:
        self._data = data
        self._pos = 0
        self._fail = fail

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._pos >= len(self._data):
            if self._fail is not None:
                raise self._fail
            return 0
        buffer[0] = self._data[self._pos]
        self._pos += 1
        return 1


class OneByteRead:
    """The same with only read(n), to take the other path."""

    def __init__(self, data: bytes, fail: BaseException | None = None) -> None:
        self._inner = OneByte(data, fail)

    def read(self, n: int) -> bytes:
        buf = bytearray(1)
        return bytes(buf[: self._inner.readinto(buf)])


def run_events(module: Any, reader: Any, max_line: int) -> tuple[list[Any], Any]:
    events = module.Events(reader, max_line)
    items: list[Any] = []
    while True:
        try:
            item = events.next_item()
        except SseError as err:
            with pytest.raises(type(err)):  # latched
                events.next_item()
            cause = err.__cause__
            return items, (*outcome(err), None if cause is None else outcome(cause))
        if item is None:
            assert events.next_item() is None  # again if asked again
            return items, None
        items.append(item)


READERS: dict[str, Callable[..., Any]] = {"readinto": OneByte, "read": OneByteRead}


@needs_c
@SETTINGS
@given(stream=STREAM, max_line=MAX_LINE, kind=st.sampled_from(sorted(READERS)))
def test_events_agree_one_byte_per_read(stream: bytes, max_line: int, kind: str) -> None:
    got = {name: run_events(mod, READERS[kind](stream), max_line) for name, mod in TWINS.items()}
    assert got["cython"] == got["python"]
    items, end = got["cython"]
    assert (items, end and end[:2]) == flat(run_decoder(sse_c, [stream], max_line))


@needs_c
@pytest.mark.parametrize(
    ("fail", "error"),
    [
        (TimeoutError("timed out"), SseTimeoutError),
        (http.client.IncompleteRead(b"da", 10), TruncatedError),
        (ConnectionResetError(104, "reset"), SseIoError),
    ],
)
@pytest.mark.parametrize("kind", sorted(READERS))
def test_events_agree_on_reader_errors(
    fail: BaseException, error: type[SseError], kind: str
) -> None:
    stream = b"data: a\ndata: \xc3\xa9\r\ndata: partial"
    got = {name: run_events(mod, READERS[kind](stream, fail), 64) for name, mod in TWINS.items()}
    assert got["cython"] == got["python"]
    assert got["cython"][0] == ["a", "é"]
    assert got["cython"][1][0] == error.__name__


@needs_c
def test_events_propagate_other_exceptions_unchanged() -> None:
    for mod in TWINS.values():
        events = mod.Events(OneByte(b"data: a\ndata: b", KeyError("x")))
        assert events.next_item() == "a"
        with pytest.raises(KeyError):
            events.next_item()


# --- iter_events / aiter_events ------------------------------------------------------------


def run_iter(make: Callable[[], Iterator[Any]]) -> tuple[list[Any], Any]:
    items: list[Any] = []
    try:
        for item in make():
            items.append(item)
    except SseError as err:
        return items, outcome(err)
    return items, None


async def arun(module: Any, chunks: list[bytes], max_line: int) -> tuple[list[Any], Any]:
    async def source() -> Any:
        for chunk in chunks:
            yield chunk

    items: list[Any] = []
    try:
        async for item in module.aiter_events(source(), max_line):
            items.append(item)
    except SseError as err:
        return items, outcome(err)
    return items, None


@needs_c
@settings(max_examples=100, deadline=None)
@given(data=st.data(), stream=STREAM, max_line=MAX_LINE)
def test_iter_and_aiter_events_agree(data: st.DataObject, stream: bytes, max_line: int) -> None:
    chunks = data.draw(splits(stream))
    sync = {
        name: run_iter(lambda mod=mod: mod.iter_events(iter(chunks), max_line))
        for name, mod in TWINS.items()
    }
    assert sync["cython"] == sync["python"]
    asy = {name: asyncio.run(arun(mod, chunks, max_line)) for name, mod in TWINS.items()}
    assert asy["cython"] == asy["python"] == sync["python"]


@needs_c
@pytest.mark.parametrize("bad", [0, -1, True, False, 1.0, "8", None])
def test_max_line_is_checked_the_same(bad: object) -> None:
    messages = []
    for mod in TWINS.values():
        for make in (
            lambda m: m.SseDecoder(bad),
            lambda m: m.Events(io.BytesIO(b""), bad),
            lambda m: m.iter_events([], bad),
            lambda m: m.aiter_events(None, bad),
        ):
            with pytest.raises(ValueError, match="max_line") as err:
                make(mod)
            messages.append(str(err.value))
    assert len(set(messages)) == 1


# --- each twin against a plain model of the rules, split at random ------------------------------

MODEL_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
LINE_END = re.compile(rb"\r\n|\r|\n")


def model(stream: bytes, max_line: int) -> Outcome:
    """The rules applied to the whole stream at once, as plainly as they can be written."""
    if stream.startswith(BOM):
        stream = stream[3:]
    items: list[Any] = []
    pos = 0
    while (end := LINE_END.search(stream, pos)) is not None:
        line = stream[pos : end.start()]
        pos = end.end()
        if len(line) > max_line:
            return items, describe(LineTooLongError(max_line))
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            return items, describe(NotUtf8Error(line[:64]))
        name, _, value = text.partition(":")
        if name == "data":
            value = value.removeprefix(" ")
            items.append(DONE if value == "[DONE]" else value)
    rest = stream[pos:]
    if len(rest) > max_line:
        return items, describe(LineTooLongError(max_line))
    if rest:
        return items, describe(TruncatedError(rest[:64]))
    return items, None


# The grammar: lines of these kinds, each with one of the three endings.
LINE_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12
)
INVALID = st.sampled_from(
    [b"\xff", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\xc3"]
)
FIELD = st.sampled_from(["event", "id", "retry", "database", "Data", "data ", " data", "x", ""])


@st.composite
def lines(draw: st.DrawFn, max_line: int) -> bytes:
    kind = draw(
        st.sampled_from(["data"] * 6 + ["done", "bare", "comment", "field", "blank", "bad", "long"])
    )
    text = draw(LINE_TEXT).encode()
    if kind == "data":
        line = b"data:" + draw(st.sampled_from([b"", b" ", b"  "])) + text
    elif kind == "done":
        line = draw(st.sampled_from([b"data: [DONE]", b"data:[DONE]", b"data:  [DONE]"]))
    elif kind == "bare":
        line = b"data"
    elif kind == "comment":
        line = b":" + text
    elif kind == "field":
        line = draw(FIELD).encode() + b":" + text
    elif kind == "blank":
        line = b""
    elif kind == "bad":
        line = draw(st.sampled_from([b"data: ", b": ", b"event: ", b""])) + text + draw(INVALID)
        line += draw(LINE_TEXT).encode()
    else:  # around max_line, the boundary included
        line = b"data:" + b"y" * draw(st.integers(max(0, max_line - 7), max_line + 2))
    return line + draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, int]:
    small = draw(st.integers(0, 9)) == 0  # now and then a max_line that most lines exceed
    max_line = draw(st.integers(1, 12) if small else st.integers(30, 90))
    parts = draw(st.lists(lines(max_line), max_size=12))
    if draw(st.booleans()):
        parts.insert(0, BOM)
    if draw(st.integers(0, 4)) == 0:  # now and then a stream cut inside a line
        parts.append(draw(st.sampled_from([b"data: cut", b"\xef\xbb", b": \xff", b"y" * 95])))
    if draw(st.integers(0, 4)) == 0:  # and arbitrary bytes somewhere
        parts.insert(draw(st.integers(0, len(parts))), draw(st.binary(max_size=8)))
    return b"".join(parts), max_line


def split_points(stream: bytes) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=max(1, len(stream) // 3))


@MODEL_SETTINGS
@given(stream=streams())
def test_whole_stream_follows_the_model(impl: types.SimpleNamespace, stream: Any) -> None:
    data, max_line = stream
    assert feed_decoder(impl, chunks_of(data, "whole"), max_line) == model(data, max_line)


@MODEL_SETTINGS
@given(stream=streams(), data=st.data())
def test_split_stream_gives_the_same_result(
    impl: types.SimpleNamespace, stream: Any, data: st.DataObject
) -> None:
    raw, max_line = stream
    whole = feed_decoder(impl, chunks_of(raw, "whole"), max_line)
    cuts = data.draw(split_points(raw))
    for via, got in outcomes(impl, chunks_of(raw, cuts), max_line).items():
        assert got == whole, via


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(stream=streams())
def test_one_byte_per_read_gives_the_same_result(impl: types.SimpleNamespace, stream: Any) -> None:
    raw, max_line = stream
    whole = feed_decoder(impl, chunks_of(raw, "whole"), max_line)
    for via, got in outcomes(impl, chunks_of(raw, "bytes"), max_line).items():
        assert got == whole, via


@MODEL_SETTINGS
@given(stream=streams(), data=st.data())
def test_python_and_cython_agree(
    py_impl: types.SimpleNamespace,
    c_impl: types.SimpleNamespace,
    stream: Any,
    data: st.DataObject,
) -> None:
    raw, max_line = stream
    chunks = chunks_of(raw, data.draw(split_points(raw)))
    assert outcomes(c_impl, chunks, max_line) == outcomes(py_impl, chunks, max_line)
