"""The SSE reader's rules, as docs/sse.md names them.

Every case runs three ways (whole, one byte per read, split at random points drawn by
hypothesis) through every entry point (SseDecoder, Events over each kind of reader, iter_events,
aiter_events), with the same items and the same error (class and args) expected; see _sse_feed.
"""

from __future__ import annotations

import asyncio
import http.client
import re
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _sse_feed import (
    MODES,
    READERS,
    ChunkReader,
    Into1Reader,
    Outcome,
    assert_outcome,
    chunks_of,
    describe,
    run_events,
    run_sync,
)
from llamafast import (
    DONE,
    LineTooLongError,
    NotUtf8Error,
    SseError,
    SseIoError,
    SseTimeoutError,
    TruncatedError,
)
from llamafast._engine._sse_py import MAX_LINE

BOM = b"\xef\xbb\xbf"
M = 16  # the max_line of the length cases
RANDOM = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


class Case(NamedTuple):
    id: str
    stream: bytes
    items: list[Any]
    error: BaseException | None = None
    max_line: int = MAX_LINE

    @property
    def expected(self) -> Outcome:
        return self.items, describe(self.error)


X = b"x" * (M - 5)  # "data:" + X is a line of exactly M bytes
BAD = b"data: \xff"
LONG_BAD = b"data: " + b"\xff" * 100
LONG_PART = b"data: " + b"z" * 100

CASES = [
    # The example stream of docs/sse.md.
    Case(
        "example-stream",
        b'data: {"a":1}\n\n: a comment line\ndata: {"b":2}\r\n\r\ndata: [DONE]\n\n',
        ['{"a":1}', '{"b":2}', DONE],
    ),
    Case("one-item-per-data-line", b"data: a\ndata: b\n\n", ["a", "b"]),
    # Multi-byte text decoded once the whole line is there, split inside characters or not
    # (docs/sse.md, rules SPLIT and UTF8).
    Case("multibyte", "data: héllo € 𝄞 日本\n".encode(), ["héllo € 𝄞 日本"]),
    Case("multibyte-crlf", "data: ü\r\ndata: 😀\r\n".encode(), ["ü", "😀"]),
    # docs/sse.md, rule SPACE: exactly one leading space is dropped after "data:".
    Case("one-space-dropped", b"data: x\n", ["x"]),
    Case("only-one-space-dropped", b"data:  x\n", [" x"]),
    Case("no-space", b"data:x\n", ["x"]),
    Case("tab-is-not-a-space", b"data:\tx\n", ["\tx"]),
    Case("trailing-space-kept", b"data: x \n", ["x "]),
    Case("empty-value", b"data:\ndata: \n", ["", ""]),
    Case("colon-in-value", b"data: a: b:c\n", ["a: b:c"]),
    # docs/sse.md, rule FIELD: a bare "data" line (no colon) is data "".
    Case("bare-data", b"data\ndata\r\ndata\r", ["", "", ""]),
    # docs/sse.md, rule FIELD: the field name must be exactly "data".
    Case("field-database", b"database: x\n", []),
    Case("field-Data", b"Data: x\nDATA: y\n", []),
    Case("field-data-space", b"data : x\n data: y\n", []),
    Case("field-prefix", b"dat: x\ndatum\ndat\n", []),
    Case("field-data-dash", b"data-x: y\n", []),
    # docs/sse.md, rule SKIP: other fields are skipped.
    Case("other-fields", b"event: message\nid: 7\nretry: 10\ndata: x\nfoo\n", ["x"]),
    # docs/sse.md, rule SKIP: comments and blank lines are skipped.
    Case("comments", b":\n:ping\n: x\n\n\n\r\n\r", []),
    Case("comment-holding-data", b": data: x\n", []),
    # docs/sse.md, rule DONE: "data: [DONE]" is DONE, exactly.
    Case("done", b"data: [DONE]\n", [DONE]),
    Case("done-no-space", b"data:[DONE]\n", [DONE]),
    Case("done-two-spaces", b"data:  [DONE]\n", [" [DONE]"]),
    Case("done-trailing-space", b"data: [DONE] \n", ["[DONE] "]),
    Case("done-lowercase", b"data: [done]\n", ["[done]"]),
    Case("done-other-field", b"event: [DONE]\n: [DONE]\n", []),
    Case("items-after-done", b"data: [DONE]\ndata: after\n", [DONE, "after"]),
    # docs/sse.md, rules LINES and CR: a lone "\r" ends a line; "\r\n" is one line end.
    Case("lone-cr", b"data: a\rdata: b\r", ["a", "b"]),
    Case("crlf", b"data: a\r\ndata: b\r\n", ["a", "b"]),
    Case("mixed-endings", b"data: a\r\ndata: b\ndata: c\r\rdata: d\n\r\n", ["a", "b", "c", "d"]),
    Case("cr-lf-cr", b"data: a\r\n\rdata: b\n", ["a", "b"]),
    Case("ends-after-cr", b"data: a\r", ["a"]),
    # docs/sse.md, rule BOM: a BOM at the very start is dropped, and the first event is not lost.
    Case("bom", BOM + b"data: a\n", ["a"]),
    Case("bom-crlf", BOM + b"data: a\r\ndata: b\r\n", ["a", "b"]),
    Case("bom-alone", BOM, []),
    Case("bom-then-blank", BOM + b"\r\n", []),
    Case("second-bom-is-bytes", BOM + BOM + b"data: a\n", []),
    Case("bom-later-is-bytes", b"data: a\n" + BOM + b"data: b\n", ["a"]),
    Case("bom-in-value", b"data: " + BOM + b"x\n", ["\ufeffx"]),
    Case("bom-prefix-then-end", b"\xef\xbb", [], TruncatedError(b"\xef\xbb")),
    Case("bom-first-byte-then-end", b"\xef", [], TruncatedError(b"\xef")),
    Case("bom-prefix-too-long", b"\xef\xbb", [], LineTooLongError(1), 1),
    Case("bom-prefix-fits", b"\xef\xbb", [], TruncatedError(b"\xef\xbb"), 2),
    Case("not-a-bom", b"\xef\xbbdata: a\n", [], NotUtf8Error(b"\xef\xbbdata: a")),
    Case("bom-not-in-partial", BOM + b"data: ab", [], TruncatedError(b"data: ab")),
    # The BOM does not count toward the length, even while it is still undecided.
    Case("bom-not-counted", BOM + b"data:" + X + b"\n", [X.decode()], max_line=M),
    Case("bom-not-counted-max-1", BOM + b":\n", [], max_line=1),
    Case("bom-partial-not-counted", BOM + b"data:" + X, [], TruncatedError(b"data:" + X), M),
    # docs/sse.md, rule MAX-LINE: too long, whole or partial; exactly max_line is fine; ending
    # excluded.
    Case("exactly-max-line", b"data:" + X + b"\n", [X.decode()], max_line=M),
    Case("exactly-max-line-crlf", b"data:" + X + b"\r\n", [X.decode()], max_line=M),
    Case("exactly-max-line-cr", b"data:" + X + b"\r", [X.decode()], max_line=M),
    Case("one-over", b"data:" + X + b"x\n", [], LineTooLongError(M), M),
    Case("one-over-crlf", b"data:" + X + b"x\r\n", [], LineTooLongError(M), M),
    Case("over-after-items", b"data: a\ndata:" + X + b"x\n", ["a"], LineTooLongError(M), M),
    Case("over-then-items-lost", b"data:" + X + b"x\ndata: b\n", [], LineTooLongError(M), M),
    Case("partial-over", b"data: a\ndata:" + X + b"x", ["a"], LineTooLongError(M), M),
    Case("partial-far-over", b"data: a\n" + b"y" * (4 * M), ["a"], LineTooLongError(M), M),
    Case("partial-exactly", b"data:" + X, [], TruncatedError(b"data:" + X), M),
    Case("comment-over", b":" + b"y" * M + b"\n", [], LineTooLongError(M), M),
    Case("other-field-over", b"event:" + b"y" * M + b"\n", [], LineTooLongError(M), M),
    Case("max-line-1", b"\n:\nd\n", [], max_line=1),
    Case("max-line-4-bare-data", b"data\n", [""], max_line=4),
    Case("max-line-3-bare-data", b"data\n", [], LineTooLongError(3), 3),
    Case("max-line-multibyte", "data:€€\n".encode(), ["€€"], max_line=11),
    Case("max-line-counts-bytes", "data:€€\n".encode(), [], LineTooLongError(10), 10),
    # docs/sse.md, rule LENGTH-FIRST: the length is checked before UTF-8 validity.
    Case("over-and-not-utf8", b"data:" + b"\xff" * M + b"\n", [], LineTooLongError(M), M),
    Case("partial-over-and-not-utf8", b"data:" + b"\xff" * M, [], LineTooLongError(M), M),
    # docs/sse.md, rule UTF8: every line must be strictly valid UTF-8: NotUtf8Error(line[:64]).
    Case("not-utf8", b"data: \xff\n", [], NotUtf8Error(b"data: \xff")),
    Case("not-utf8-crlf", b"data: \xff\r\n", [], NotUtf8Error(b"data: \xff")),
    Case("not-utf8-after-items", b"data: a\n" + BAD + b"\ndata: c\n", ["a"], NotUtf8Error(BAD)),
    Case("not-utf8-comment", b": \xff\ndata: a\n", [], NotUtf8Error(b": \xff")),
    Case("not-utf8-comment-cut-64", LONG_BAD[4:] + b"\n", [], NotUtf8Error(LONG_BAD[4:68])),
    Case("not-utf8-other-field", b"data: a\nevent: \xc3\n", ["a"], NotUtf8Error(b"event: \xc3")),
    Case("not-utf8-field-name", b"\xffdata: a\n", [], NotUtf8Error(b"\xffdata: a")),
    Case("not-utf8-bare", b"\x80\n", [], NotUtf8Error(b"\x80")),
    Case("not-utf8-surrogate", b"data: \xed\xa0\x80\n", [], NotUtf8Error(b"data: \xed\xa0\x80")),
    Case("not-utf8-overlong-2", b"data: \xc0\xaf\n", [], NotUtf8Error(b"data: \xc0\xaf")),
    Case("not-utf8-overlong-3", b"data: \xe0\x80\xaf\n", [], NotUtf8Error(b"data: \xe0\x80\xaf")),
    Case("not-utf8-above-max", b"data: \xf4\x90\x80\x80\n", [], NotUtf8Error(b"data: \xf4\x90\x80\x80")),  # noqa: E501
    Case("not-utf8-cut-char", b"data: \xe2\x82\n", [], NotUtf8Error(b"data: \xe2\x82")),
    Case("not-utf8-across-crlf", b"data: \xe2\x82\r\n\xac\n", [], NotUtf8Error(b"data: \xe2\x82")),
    Case("not-utf8-cut-64", LONG_BAD + b"\n", [], NotUtf8Error(LONG_BAD[:64])),
    Case("not-utf8-done-like", b"data: [DONE]\xff\n", [], NotUtf8Error(b"data: [DONE]\xff")),
    # A line's UTF-8 error only when it is complete: ending inside it is truncation
    # (docs/sse.md, rules UTF8 and END).
    Case("not-utf8-partial", b"data: a\ndata: \xff", ["a"], TruncatedError(b"data: \xff")),
    # docs/sse.md, rule END: the end of input.
    Case("empty", b"", []),
    Case("clean-end", b"data: a\n", ["a"]),
    Case("truncated", b"data: a", [], TruncatedError(b"data: a")),
    Case("truncated-after-items", b"data: a\ndata: b", ["a"], TruncatedError(b"data: b")),
    Case("truncated-comment", b": no end", [], TruncatedError(b": no end")),
    Case("truncated-cut-64", LONG_PART, [], TruncatedError(LONG_PART[:64])),
]  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule(impl: types.SimpleNamespace, case: Case, mode: str) -> None:
    assert_outcome(impl, chunks_of(case.stream, mode), case.max_line, case.expected)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@RANDOM
@given(data=st.data())
def test_rule_split_at_random(impl: types.SimpleNamespace, case: Case, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(1, max(1, len(case.stream) - 1)), max_size=12))
    assert_outcome(impl, chunks_of(case.stream, cuts), case.max_line, case.expected)


def three_ways(test: Any) -> Any:
    """Parametrize a test over the three ways bytes arrive (see `draw_chunks`)."""
    return pytest.mark.parametrize("mode", [*MODES, "random"])(test)


def draw_chunks(mode: str, stream: bytes, data: st.DataObject) -> list[bytes]:
    """`stream` whole, one byte per read, or split at cut points drawn by hypothesis."""
    if mode != "random":
        return chunks_of(stream, mode)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=12))
    return chunks_of(stream, cuts)


# --- SseDecoder: the items before a fault, and the latch -----------------------------------


@three_ways
@RANDOM
@given(data=st.data())
def test_feed_returns_the_items_before_a_fault_and_raises_it_next(
    impl: types.SimpleNamespace, mode: str, data: st.DataObject
) -> None:
    # docs/sse.md, rule LATCH: feed returns every item before the fault; the next feed or close
    # raises it, and every call after that.
    head = b"data: a\ndata: b\n"
    bad = b"data: \xff\n"
    chunks = draw_chunks(mode, head + bad, data)
    decoder = impl.SseDecoder()
    items = []
    for chunk in chunks:
        items += decoder.feed(chunk)  # never raises: the fault is found by the last one
    assert items == ["a", "b"]
    for _ in range(2):
        with pytest.raises(NotUtf8Error) as raised:
            decoder.feed(b"data: c\n")
        assert raised.value.args == (b"data: \xff",)
        with pytest.raises(NotUtf8Error):
            decoder.close()
        with pytest.raises(NotUtf8Error):
            decoder.feed(b"")


@pytest.mark.parametrize("fault", [b"data:" + b"x" * 20, b"data:" + b"x" * 20 + b"\n"])
def test_too_long_is_found_by_the_feed_that_brings_it(
    impl: types.SimpleNamespace, fault: bytes
) -> None:
    # docs/sse.md, rule MAX-LINE: as soon as the partial line exceeds max_line, not at its end.
    decoder = impl.SseDecoder(16)
    assert decoder.feed(b"data: a\n" + fault[:16]) == ["a"]
    assert decoder.feed(fault[16:]) == []
    with pytest.raises(LineTooLongError) as raised:
        decoder.feed(b"\n")
    assert raised.value.args == (16,)
    assert raised.value.limit == 16


def test_truncated_is_latched(impl: types.SimpleNamespace) -> None:
    decoder = impl.SseDecoder()
    assert decoder.feed(b"data: a\ndata: b") == ["a"]
    for _ in range(2):
        with pytest.raises(TruncatedError) as raised:
            decoder.close()
        assert raised.value.args == (b"data: b",)
        with pytest.raises(TruncatedError):
            decoder.feed(b"\n")


@pytest.mark.parametrize("mode", MODES)
def test_close_is_clean_again(impl: types.SimpleNamespace, mode: str) -> None:
    decoder = impl.SseDecoder()
    for chunk in chunks_of(b"data: a\r", mode):
        decoder.feed(chunk)
    decoder.close()
    decoder.close()


@pytest.mark.parametrize("mode", MODES)
def test_cr_ends_the_line_when_it_arrives(impl: types.SimpleNamespace, mode: str) -> None:
    # docs/sse.md, rule CR: a line ending in "\r" is complete as soon as the "\r" arrives.
    decoder = impl.SseDecoder()
    items = []
    for chunk in chunks_of(b"data: a\r", mode):
        items += decoder.feed(chunk)
    assert items == ["a"]
    assert decoder.feed(b"\ndata: b\r") == ["b"]  # that "\n" ended no second line
    assert decoder.feed(b"\n") == []


def test_feed_takes_bytearray_and_memoryview_and_keeps_a_copy(
    impl: types.SimpleNamespace,
) -> None:
    decoder = impl.SseDecoder()
    buffer = bytearray(b"data: ab\ndata: cd")
    assert decoder.feed(buffer) == ["ab"]
    buffer[:] = b"XXXXXXXXXXXXXXXXX"  # Events reuses its read buffer: the decoder copied
    view = memoryview(bytearray(b"e\ndata: f\n"))
    assert decoder.feed(view[:2]) == ["cde"]
    assert decoder.feed(view[2:]) == ["f"]
    assert decoder.feed(b"") == []
    decoder.close()


def test_done_is_the_one_instance(impl: types.SimpleNamespace) -> None:
    (item,) = impl.SseDecoder().feed(b"data: [DONE]\n")
    assert item is DONE


@pytest.mark.parametrize("mode", ["whole", "lines", "random"])
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_default_max_line_is_one_mib(
    impl: types.SimpleNamespace, mode: str, data: st.DataObject
) -> None:
    assert MAX_LINE == 1 << 20
    fits = b"data:" + b"x" * (MAX_LINE - 5) + b"\n"
    over = b"data:" + b"x" * (MAX_LINE - 4) + b"\n"
    stream = fits + over
    if mode == "lines":  # one byte per read would be a million feeds: 4 KiB pieces instead
        chunks = [stream[i : i + 4096] for i in range(0, len(stream), 4096)]
    else:
        chunks = draw_chunks(mode, stream, data)
    decoder = impl.SseDecoder()
    items = []
    with pytest.raises(LineTooLongError) as raised:
        for chunk in chunks:
            items += decoder.feed(chunk)
        decoder.close()
    assert raised.value.limit == MAX_LINE
    assert items == [fits[5:-1].decode()]


BAD_MAX_LINES = [0, -1, True, False, 1.5, "8", None, 2.0]


@pytest.mark.parametrize("bad", BAD_MAX_LINES, ids=repr)
def test_max_line_must_be_a_positive_int(impl: types.SimpleNamespace, bad: object) -> None:
    # docs/sse.md, rule MAX-LINE: an int >= 1, not a bool, else ValueError naming the value;
    # checked at once.
    async def source() -> AsyncIterator[bytes]:
        yield b""

    named = re.escape(repr(bad))
    with pytest.raises(ValueError, match=named):
        impl.SseDecoder(bad)
    with pytest.raises(ValueError, match=named):
        impl.Events(Into1Reader([]), bad)
    with pytest.raises(ValueError, match=named):
        impl.iter_events([], bad)
    with pytest.raises(ValueError, match=named):
        impl.aiter_events(source(), bad)


def test_max_line_1_is_allowed(impl: types.SimpleNamespace) -> None:
    decoder = impl.SseDecoder(max_line=1)
    assert decoder.feed(b"\n:\n") == []
    assert decoder.feed(b"ab") == []
    with pytest.raises(LineTooLongError):
        decoder.close()


# --- O(n) buffering --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_long_line_one_byte_at_a_time(impl: types.SimpleNamespace, mode: str) -> None:
    # That this costs O(n) in total (the search remembers how far it got) is measured by
    # bench/test_bench_sse.py::test_sse_long_line_in_small_pieces, not timed here.
    line = "data: " + "é" * 30_000 + "\n"
    items: list[Any] = []
    decoder = impl.SseDecoder()
    for chunk in chunks_of(line.encode(), mode):
        items += decoder.feed(chunk)
    decoder.close()
    assert items == [line[6:-1]]


# --- Events: reading --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", READERS)
def test_events_reads_with_the_best_method(impl: types.SimpleNamespace, kind: str) -> None:
    # docs/sse.md, rule READER: readinto1, else read1, else readinto, else read; 65536 bytes.
    reader = READERS[kind]([b"data: a\n", b"data: b\n"])
    assert list(impl.Events(reader)) == ["a", "b"]
    assert {name for name, _ in reader.calls} == {kind}
    assert {size for _, size in reader.calls} == {65536}


def test_events_reads_at_most_65536_at_a_time(impl: types.SimpleNamespace) -> None:
    line = b"data: " + b"y" * 1000 + b"\n"
    big = line * 200  # 200 KiB in one "chunk": handed out 65536 bytes per read
    for kind, cls in READERS.items():
        reader = cls([big])
        assert list(impl.Events(reader)) == [line[6:-1].decode()] * 200, kind
        assert len(reader.calls) == len(big) // 65536 + 2, kind  # the pieces, the rest, the end


@three_ways
@RANDOM
@given(data=st.data())
def test_events_ends_with_none_again_and_again(
    impl: types.SimpleNamespace, mode: str, data: st.DataObject
) -> None:
    # docs/sse.md, rule END: None, and None again if asked again (without reading past the end).
    reader = Into1Reader(draw_chunks(mode, b"data: a\n\n", data))
    events = impl.Events(reader)
    assert events.next_item() == "a"
    for _ in range(3):
        assert events.next_item() is None  # ChunkReader raises if read after its end
    assert list(events) == []


@pytest.mark.parametrize("kind", READERS)
@three_ways
@RANDOM
@given(data=st.data())
def test_events_raises_a_fault_without_reading_on(
    impl: types.SimpleNamespace, kind: str, mode: str, data: st.DataObject
) -> None:
    # The fault is known once its line (or too much of it) is in: a live stream that sends
    # nothing more must not keep Events (nor iter_events / aiter_events) waiting.
    stop = AssertionError("read on after the fault was known")
    for stream, error in [
        (b"data: a\n: \xff\n", NotUtf8Error(b": \xff")),
        (b"data: a\n" + b"z" * 17, LineTooLongError(16)),
    ]:
        chunks = draw_chunks(mode, stream, data)
        reader = READERS[kind](chunks, end=stop)
        assert run_events(impl, chunks, 16, reader) == (["a"], describe(error))

        def source(chunks: list[bytes] = chunks) -> Iterator[bytes]:
            yield from chunks
            raise stop

        items: list[Any] = []
        with pytest.raises(type(error)):
            items.extend(impl.iter_events(source(), 16))
        assert items == ["a"]

        async def asource(chunks: list[bytes] = chunks) -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk
            raise stop

        assert run_sync(acollect(impl.aiter_events(asource(), 16))) == (["a"], describe(error))


@three_ways
@RANDOM
@given(data=st.data())
def test_events_hands_out_a_cr_line_at_once(
    impl: types.SimpleNamespace, mode: str, data: st.DataObject
) -> None:
    chunks = draw_chunks(mode, b"data: a\rdata: b\r", data)
    reader = Into1Reader(chunks, end=AssertionError("waited for the byte after the \\r"))
    events = impl.Events(reader)
    assert [events.next_item(), events.next_item()] == ["a", "b"]


async def acollect(events: AsyncIterator[Any]) -> Outcome:
    items = []
    try:
        async for item in events:
            items.append(item)
    except SseError as error:
        return items, describe(error)
    return items, None


# --- Events: the reader's exceptions (docs/sse.md, rule READ-ERRORS) -------------------------


def _io_errors() -> list[tuple[BaseException, type[SseError]]]:
    return [
        (TimeoutError("timed out"), SseTimeoutError),
        (http.client.IncompleteRead(b""), TruncatedError),
        (http.client.IncompleteRead(b"partial", 10), TruncatedError),
        (ConnectionResetError(104, "Connection reset by peer"), SseIoError),
        (BrokenPipeError(32, "Broken pipe"), SseIoError),
        (OSError(5, "Input/output error"), SseIoError),
    ]


@pytest.mark.parametrize(("raised", "expected"), _io_errors(), ids=lambda v: type(v).__name__)
@three_ways
@RANDOM
@given(data=st.data())
def test_reader_exceptions_are_mapped(
    impl: types.SimpleNamespace,
    raised: BaseException,
    expected: type[SseError],
    mode: str,
    data: st.DataObject,
) -> None:
    for kind, cls in READERS.items():
        reader = cls(draw_chunks(mode, b"data: a\ndata: b\n: part", data), end=raised)
        events = impl.Events(reader)
        assert [events.next_item(), events.next_item()] == ["a", "b"], kind
        with pytest.raises(expected) as caught:
            events.next_item()
        error = caught.value
        assert error.__cause__ is raised
        if expected is SseIoError:
            assert error.args == (raised,)
            assert error.error is raised  # type: ignore[attr-defined]
        elif expected is SseTimeoutError:
            assert isinstance(error, TimeoutError)
            assert error.args == ()
        else:  # the HTTP body was cut: TruncatedError() (its partial line is not known here)
            assert error.args == (b"",)
        reads = len(reader.calls)
        with pytest.raises(expected):  # latched, without reading again
            events.next_item()
        assert len(reader.calls) == reads


class _Flaky(Into1Reader):
    """Raises InterruptedError before every chunk."""

    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__(chunks)
        self.interrupt = True

    def readinto1(self, buffer: Any) -> int:
        self.interrupt = not self.interrupt
        if not self.interrupt:
            self.calls.append(("interrupted", 0))
            raise InterruptedError(4, "Interrupted system call")
        return super().readinto1(buffer)


@three_ways
@RANDOM
@given(data=st.data())
def test_interrupted_reads_are_retried(
    impl: types.SimpleNamespace, mode: str, data: st.DataObject
) -> None:
    chunks = draw_chunks(mode, b"data: a\r\ndata: b\n", data)
    reader = _Flaky(chunks)
    assert run_events(impl, chunks, MAX_LINE, reader) == (["a", "b"], None)
    assert ("interrupted", 0) in reader.calls


@pytest.mark.parametrize("mode", MODES)
def test_other_exceptions_propagate_unchanged(impl: types.SimpleNamespace, mode: str) -> None:
    boom = ValueError("not an OSError")
    events = impl.Events(ChunkReader(chunks_of(b"data: a\n", mode), end=boom))
    assert events.next_item() == "a"
    with pytest.raises(ValueError) as caught:
        events.next_item()
    assert caught.value is boom


# --- iteration ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_events_iterates_until_the_end(impl: types.SimpleNamespace, mode: str) -> None:
    stream = b"data: a\n\ndata: [DONE]\n\n"
    assert list(impl.Events(Into1Reader(chunks_of(stream, mode)))) == ["a", DONE]
    assert [*impl.iter_events(chunks_of(stream, mode))] == ["a", DONE]


@pytest.mark.parametrize("mode", MODES)
def test_aiter_events_under_asyncio(impl: types.SimpleNamespace, mode: str) -> None:
    stream = "data: a\n: ping\ndata: é\r\ndata: [DONE]\n".encode()

    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks_of(stream, mode):
            await asyncio.sleep(0)
            yield chunk

    async def main() -> list[Any]:
        return [item async for item in impl.aiter_events(source())]

    assert asyncio.run(main()) == ["a", "é", DONE]


def test_aiter_events_raises_after_the_items(impl: types.SimpleNamespace) -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"data: a\ndata: b"

    async def main() -> list[Any]:
        items = []
        with pytest.raises(TruncatedError):
            async for item in impl.aiter_events(source(), 64):
                items.append(item)
        return items

    assert asyncio.run(main()) == ["a"]


@pytest.mark.parametrize("bad", [5, "data: x\n", None])
def test_feed_refuses_what_is_not_a_byte_buffer(impl: types.SimpleNamespace, bad: Any) -> None:
    with pytest.raises(TypeError):
        impl.SseDecoder().feed(bad)
