"""Random event streams, split at random points (in the manner of yarl's
tests/test_quoting_hypothesis.py): the split never changes the result, the result is that of a
plain model of the rules, and (once it is built) the Cython twin agrees with the pure one.
"""

from __future__ import annotations

import re
import types
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _sse_feed import Outcome, chunks_of, describe, outcomes, run_decoder
from llamafast import DONE, LineTooLongError, NotUtf8Error, TruncatedError

SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
BOM = b"\xef\xbb\xbf"
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
TEXT = st.text(
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
    text = draw(TEXT).encode()
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
        line += draw(TEXT).encode()
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


@SETTINGS
@given(stream=streams())
def test_whole_stream_follows_the_model(impl: types.SimpleNamespace, stream: Any) -> None:
    data, max_line = stream
    assert run_decoder(impl, chunks_of(data, "whole"), max_line) == model(data, max_line)


@SETTINGS
@given(stream=streams(), data=st.data())
def test_split_stream_gives_the_same_result(
    impl: types.SimpleNamespace, stream: Any, data: st.DataObject
) -> None:
    raw, max_line = stream
    whole = run_decoder(impl, chunks_of(raw, "whole"), max_line)
    cuts = data.draw(split_points(raw))
    for via, got in outcomes(impl, chunks_of(raw, cuts), max_line).items():
        assert got == whole, via


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(stream=streams())
def test_one_byte_per_read_gives_the_same_result(impl: types.SimpleNamespace, stream: Any) -> None:
    raw, max_line = stream
    whole = run_decoder(impl, chunks_of(raw, "whole"), max_line)
    for via, got in outcomes(impl, chunks_of(raw, "bytes"), max_line).items():
        assert got == whole, via


@SETTINGS
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
