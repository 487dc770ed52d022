"""Differential tests: the pure and the Cython Assembler / ChatStream give the same results.

Payload sequences (valid llama-server chunks, extra fields at every level, wrong types, strict-JSON
edge cases, malformed text, error payloads) go to both twins' Assembler, as str or as bytes: the
same events, the same state after every push, the same Completion, and for a fault the same error
class with the same message (a push is all or nothing in both, so the sequence goes on after a
fault). Then the whole recordings, and mutations of them, through both ChatStreams, split at
random. Skipped when the Cython twin is not built (the `c_impl` fixture).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import http.client
import io
import json
import pickle
import types
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llamafast as lf
from _recordings import open_recording, stream_recordings
from llamafast import Content, HttpError, Progress, Reasoning, TokenLogprob, ToolCallDelta

SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# --- outcomes -------------------------------------------------------------------------------


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """("ok", result) or ("error", class name, message, and HttpError's status and body)."""
    try:
        return ("ok", fn(*args))
    except Exception as err:  # the twins must agree on every error, whatever it is
        extra = (err.status, err.body) if isinstance(err, HttpError) else ()
        return ("error", (type(err).__name__, str(err), *extra))


def state(asm: Any) -> tuple[Any, ...]:
    return (asm.id, asm.reasoning_tokens, asm.in_reasoning, asm.is_finished)


def run_assembler(impl: types.SimpleNamespace, payloads: list[str | bytes]) -> list[Any]:
    asm = impl.Assembler()
    trace: list[Any] = []
    for payload in payloads:
        trace.append(outcome(asm.push, payload))
        trace.append(state(asm))
    trace.append(outcome(asm.finish))
    trace.append(outcome(asm.finish, True))
    return trace


def assert_same_assembly(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, payloads: list[str | bytes]
) -> None:
    expected = run_assembler(py_impl, payloads)
    got = run_assembler(c_impl, payloads)
    assert got == expected
    for a, b in zip(got, expected, strict=True):  # equal events are also of equal types
        if a[0] == "ok" and isinstance(a[1], list):
            assert [type(e) for e in a[1]] == [type(e) for e in b[1]]


# --- payload strategies ---------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# the counts and indices the rules read, with the edges of their ranges
counts = st.integers(0, 9).flatmap(
    lambda k: (
        st.integers(min_value=0, max_value=50)
        if k
        else st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1, -1, -(2**63), 1.0, True, None, "1"])
    )
)
indices = st.one_of(st.integers(min_value=-2, max_value=4), st.sampled_from([2**63, 2**64 - 1]))
texts = st.one_of(
    st.none(), st.just(""), st.text(max_size=12), st.sampled_from(["é", "😀", "\x00"])
)


@st.composite
def maybe(draw: st.DrawFn, strategy: st.SearchStrategy[Any]) -> Any:
    """A value from `strategy`, or now and then any JSON value (mostly a wrong type)."""
    return draw(json_values) if draw(st.integers(0, 15)) == 0 else draw(strategy)


@st.composite
def with_extras(draw: st.DrawFn, fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with some left out and some unknown fields added (07: ignored at every level)."""
    out = {k: v for k, v in fields.items() if draw(st.integers(0, 9))}
    for key in draw(st.lists(st.text(max_size=6), max_size=2)):
        out.setdefault(key, draw(json_values))
    return out


@st.composite
def tool_call_entries(draw: st.DrawFn) -> Any:
    function = draw(with_extras({"name": draw(maybe(texts)), "arguments": draw(maybe(texts))}))
    entry = {
        "index": draw(maybe(indices)),
        "id": draw(maybe(texts)),
        "type": "function",
        "function": draw(maybe(st.just(function))),
    }
    return draw(maybe(with_extras(entry)))


# a token's log probability: mostly a float, now and then an integer or an edge
logprob_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, max_value=0.0),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from([0, -0.0, -1e308, 2**63, 2**64 - 1, -(2**63)]),
)


@st.composite
def token_logprobs(draw: st.DrawFn, top: bool) -> Any:
    entry = {
        "id": 7,
        "token": draw(maybe(st.text(max_size=4))),
        "bytes": [97],
        "logprob": draw(maybe(logprob_values)),
    }
    if top:
        alternatives = st.lists(maybe(token_logprobs(False)), max_size=3)
        entry["top_logprobs"] = draw(maybe(st.one_of(alternatives, st.none())))
    return draw(maybe(with_extras(entry)))


@st.composite
def logprobs_objects(draw: st.DrawFn) -> Any:
    """A choice's logprobs, as llama-server sends them: {"content": [{token, logprob,
    top_logprobs: [{token, logprob}]}]} (id and bytes beside them), or null."""
    content = st.one_of(st.lists(token_logprobs(True), max_size=3), st.none())
    return draw(maybe(st.one_of(with_extras({"content": draw(maybe(content))}), st.none())))


@st.composite
def usages(draw: st.DrawFn) -> Any:
    details = draw(maybe(st.one_of(with_extras({"cached_tokens": draw(counts)}), st.none())))
    usage = {
        "completion_tokens": draw(counts),
        "prompt_tokens": draw(counts),
        "total_tokens": 5,
        "prompt_tokens_details": details,
    }
    return draw(maybe(st.one_of(with_extras(usage), st.none())))


@st.composite
def chunks(draw: st.DrawFn) -> Any:
    delta = draw(
        with_extras(
            {
                "role": "assistant",
                "content": draw(maybe(texts)),
                "reasoning_content": draw(maybe(texts)),
                "tool_calls": draw(maybe(st.lists(tool_call_entries(), max_size=3))),
            }
        )
    )
    choice = draw(
        with_extras(
            {
                "index": 0,
                "delta": draw(maybe(st.one_of(st.just(delta), st.none()))),
                "finish_reason": draw(
                    maybe(st.sampled_from([None, "stop", "tool_calls", "length", "eos", "STOP"]))
                ),
                "logprobs": draw(logprobs_objects()),
            }
        )
    )
    timings = draw(
        with_extras(
            {
                "cache_n": draw(counts),
                "prompt_n": draw(counts),
                "predicted_n": draw(counts),
                "prompt_ms": 1.5,
            }
        )
    )
    progress = draw(
        with_extras({"total": draw(counts), "cache": draw(counts), "processed": draw(counts)})
    )
    chunk = {
        "choices": draw(maybe(st.lists(maybe(st.just(choice)), max_size=3))),
        "created": 1,
        "id": draw(maybe(st.sampled_from(["chatcmpl-a", "chatcmpl-b", ""]))),
        "model": draw(maybe(st.sampled_from(["tiny.gguf", "other.gguf", ""]))),
        "object": "chat.completion.chunk",
        "timings": draw(maybe(st.just(timings))),
    }
    if draw(st.integers(0, 3)) == 0:
        chunk["usage"] = draw(usages())
    if draw(st.integers(0, 3)) == 0:
        chunk["prompt_progress"] = draw(maybe(st.just(progress)))
    chunk = draw(with_extras(chunk))
    if draw(st.integers(0, 19)) == 0:  # the server's mid-stream failure
        chunk = {"error": draw(maybe(with_extras({"code": draw(maybe(counts)), "message": "x"})))}
    return draw(maybe(st.just(chunk)))


# Strict-JSON edge cases (simdjson 3.12.3 in pysimdjson 7.0.2 against json.loads with the pure
# twin's checks): each is spliced into a chunk as a value, a key or at the end.
EDGE_VALUES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "1.7976931348623157e308",
    "1.7976931348623159e308",
    "1.797693134862315807e308",
    "1e308",
    "0e9999",
    "1e-99999",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "1234567890123456789.5",
    "-0",
    "-0.0",
    "01",
    "1.",
    ".5",
    "+1",
    "1e",
    "1E+2",
    "-",
    "0x10",
    '"\\ud800"',
    '"\\udc00"',
    '"\\ud800\\ud800"',
    '"\\udc00\\ud800"',
    '"\\ud83d\\ude00"',
    '"\\ud800x"',
    '"\\uD800\\uDC00"',
    '"\\\\ud800"',
    '"\\u0000"',
    '"\\x"',
    '"\\u00"',
    '"\\U0041"',
    '"\t"',
    '"\x01"',
    '"\x7f"',
    "true",
    "tru",
    "True",
    "null",
    "nul",
    "[1,]",
    "{}",
    "[]",
    "[" * 255 + "]" * 255,
    "[" * 256 + "]" * 256,
    "[" * 600 + "]" * 600,
]
EDGE_TEXT = [
    "",
    " ",
    "\t\n\r ",
    "{}",
    " {} ",
    '{"choices":[]}\x00',
    '{"choices":[]} x',
    '{"choices":[]}{}',
    "\ufeff{}",
    '\ufeff{"choices":[]}',
    '\x0c{"choices":[]}',
    '{"choices":[]',
    "[1]",
    '"s"',
    "1",
    "null",
    '{"choices":[],}',
    "{'choices':[]}",
    '{"choices":[]}//',
]
EDGE_BYTES = [
    b'{"choices":[],"x":"\xff"}', b'{"choices":[],"x":"\xc0\x80"}',
    b'{"choices":[],"x":"\xed\xa0\x80"}', b'{"choices":[],"x":"\xf4\x90\x80\x80"}',
    b'{"choices":[]}\xff', b'\xef\xbb\xbf{"choices":[]}', b'\xef\xbb{"choices":[]}',
    '{"choices":[]}'.encode("utf-16-le"), b'{"choices":[],"x":"\xe2\x82"}',
]  # fmt: skip


def edge_payloads() -> list[str | bytes]:
    out: list[str | bytes] = []
    for v in EDGE_VALUES:
        out.append(f'{{"choices":[],"id":"a","x":{v}}}')
        out.append(f'{{"choices":[{{"delta":{{"content":{v}}}}}]}}')
        out.append(f'{{{v}:1,"choices":[]}}')
        out.append(v)
    for text in EDGE_TEXT:
        out.append(text)
        out.append(text.encode("utf-8"))
    out.extend(EDGE_BYTES)
    out.append('{"choices":[],"x":"\ud800"}')  # a str with a raw lone surrogate
    return out


@pytest.mark.parametrize("payload", edge_payloads(), ids=repr)
def test_strict_json_edges_agree(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, payload: str | bytes
) -> None:
    assert_same_assembly(py_impl, c_impl, [payload])


def test_the_strict_json_edges_are_rejected(c_impl: types.SimpleNamespace) -> None:
    """The edges that must be faults are faults (a guard against both twins going lax)."""
    bad = [
        "NaN", "1e400", "18446744073709551616", "-9223372036854775809", '"\\ud800"', '"\\udc00"',
        "[" * 256 + "]" * 256,
    ]  # fmt: skip
    for v in bad:
        with pytest.raises(Exception, match="not valid JSON"):
            c_impl.Assembler().push(f'{{"choices":[],"x":{v}}}')
    ok = ["1e-400", "18446744073709551615", "-9223372036854775808", "[" * 255 + "]" * 255]
    for v in ok:
        assert c_impl.Assembler().push(f'{{"choices":[],"x":{v}}}') == []


def serialize(draw: st.DrawFn, value: Any) -> str | bytes:
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    if draw(st.integers(0, 9)) == 0:  # malformed: cut, or an edge case spliced in
        if draw(st.booleans()) and text:
            text = text[: draw(st.integers(0, len(text) - 1))]
        else:
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(EDGE_VALUES)) + text[at:]
    return text.encode("utf-8") if draw(st.booleans()) else text


@st.composite
def payload_sequences(draw: st.DrawFn) -> list[str | bytes]:
    return [serialize(draw, c) for c in draw(st.lists(chunks(), min_size=1, max_size=6))]


@SETTINGS
@given(payloads=payload_sequences())
def test_assemblers_agree(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, payloads: list[str | bytes]
) -> None:
    assert_same_assembly(py_impl, c_impl, payloads)


@st.composite
def well_formed_streams(draw: st.DrawFn) -> list[str | bytes]:
    """Mostly valid streams (the path a real server takes): text, tool calls, then a finish."""
    out: list[Any] = []
    ncalls = 0
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["reasoning_content", "content", "tool_calls", "progress"]))
        chunk: dict[str, Any] = {"choices": [], "id": "chatcmpl-x"}
        if kind == "progress":
            chunk["prompt_progress"] = {"total": 9, "cache": 1, "processed": draw(counts)}
        elif kind == "tool_calls":
            index = draw(st.integers(0, ncalls))
            ncalls = max(ncalls, index + 1)
            piece: dict[str, Any] = {"index": index, "function": {"arguments": draw(texts)}}
            if draw(st.booleans()):
                piece["id"] = draw(texts)
                piece["function"]["name"] = draw(texts)
            chunk["choices"] = [{"delta": {"tool_calls": [piece]}, "finish_reason": None}]
        else:
            chunk["choices"] = [{"delta": {kind: draw(texts)}, "finish_reason": None}]
        if kind != "progress" and draw(st.booleans()):  # asked for: on every token's chunk
            lp = {"token": draw(texts), "logprob": draw(logprob_values)}
            alternatives = draw(st.lists(st.just(lp), max_size=2))
            chunk["choices"][0]["logprobs"] = {"content": [{**lp, "top_logprobs": alternatives}]}
        if draw(st.booleans()):
            chunk["model"] = draw(st.sampled_from(["tiny.gguf", "other.gguf"]))
        if draw(st.booleans()):
            chunk["timings"] = {"cache_n": 1, "prompt_n": 2, "predicted_n": draw(counts)}
        out.append(chunk)
    if draw(st.booleans()):
        finish = draw(st.sampled_from(["stop", "tool_calls", "length"]))
        out.append({"choices": [{"delta": {}, "finish_reason": finish}], "id": "chatcmpl-y"})
        if draw(st.booleans()):  # the usage chunk
            usage = {"completion_tokens": draw(counts), "prompt_tokens": draw(counts)}
            usage["prompt_tokens_details"] = {"cached_tokens": draw(counts)}
            out.append({"choices": [], "id": "chatcmpl-y", "usage": usage})
    return [serialize(draw, c) if draw(st.integers(0, 9)) == 0 else json.dumps(c) for c in out]


@SETTINGS
@given(payloads=well_formed_streams())
def test_assemblers_agree_on_well_formed_streams(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, payloads: list[str | bytes]
) -> None:
    assert_same_assembly(py_impl, c_impl, payloads)


def test_push_type_errors_agree(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace
) -> None:
    for value in (None, 1, bytearray(b"{}"), memoryview(b"{}"), ["{}"]):
        a = outcome(py_impl.Assembler().push, value)
        b = outcome(c_impl.Assembler().push, value)
        assert a == b and a[1][0] == "TypeError"


# --- the event objects the Cython twin builds without __init__ -----------------------------


EVENTS = [
    (Content, ("x", ())),
    (Content, ("é😀\x00", ())),
    (Content, ("x", (TokenLogprob("x", -0.5, (("x", -0.5), ("y", -2.0))),))),
    (Reasoning, ("think",)),
    (Progress, (10, 2, 5)),
    (Progress, (2**63 - 1, 0, 0)),
    (ToolCallDelta, (0, "id", "name", "{")),
    (ToolCallDelta, (3, None, None, "")),
    (lf.Timings, (1, 2, 3, 4.5, 6.0)),
    (
        lf.Completion,
        (
            *("id", "c", None, (lf.ToolCall("i", "n", "{}"),), lf.FinishReason.STOP, lf.Timings()),
            *(2, False, "m", lf.Usage(1, 2, 0), (TokenLogprob("c", -0.5),)),
        ),
    ),
    (
        lf.Completion,
        ("id", None, "r", (), lf.FinishReason.LENGTH, lf.Timings(), 0, True, None, None, ()),
    ),
]


@pytest.mark.parametrize(("cls", "args"), EVENTS)
def test_fast_built_events_are_the_same_objects(
    c_impl: types.SimpleNamespace, cls: type, args: tuple[Any, ...]
) -> None:
    from llamafast._engine import _assemble_c  # its internals: the fast event constructors

    assert all(_assemble_c.FAST_EVENTS)  # the fast path is in use (events, Timings, Completion)
    fast = _assemble_c._build_event(cls, args)
    slow = cls(*args)
    assert type(fast) is cls
    assert fast == slow and slow == fast
    assert hash(fast) == hash(slow)
    assert repr(fast) == repr(slow)
    assert dataclasses.astuple(fast) == dataclasses.astuple(slow)
    assert dataclasses.replace(fast) == slow
    assert pickle.loads(pickle.dumps(fast)) == slow
    assert gc.is_tracked(fast) == gc.is_tracked(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, cls.__match_args__[0], "y")
    assert tuple(getattr(fast, name) for name in cls.__match_args__) == args  # match by position


def test_events_from_push_are_fast_built_and_equal(c_impl: types.SimpleNamespace) -> None:
    events = c_impl.Assembler().push(
        '{"choices":[{"delta":{"reasoning_content":"r","content":"c","tool_calls":'
        '[{"index":0,"id":"i","function":{"name":"n","arguments":"a"}}]}}],'
        '"prompt_progress":{"total":3,"cache":1,"processed":2}}'
    )
    assert events == [
        Progress(3, 1, 2),
        Reasoning("r"),
        Content("c"),
        ToolCallDelta(0, "i", "n", "a"),
    ]
    assert [hash(e) for e in events] == [
        hash(Progress(3, 1, 2)),
        hash(Reasoning("r")),
        hash(Content("c")),
        hash(ToolCallDelta(0, "i", "n", "a")),
    ]


# --- whole responses through both ChatStreams ----------------------------------------------


class Pieces(io.RawIOBase):
    """A reader handing out `data` in pieces of the given sizes (cycled), via readinto."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data = memoryview(data)
        self._sizes = sizes or [65536]
        self._at = 0
        self._turn = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), self._sizes[self._turn % len(self._sizes)])
        self._turn += 1
        piece = self._data[self._at : self._at + size]
        buffer[: len(piece)] = piece
        self._at += len(piece)
        return len(piece)


def run_chat(impl: types.SimpleNamespace, reader: Any, max_line: int = 1 << 20) -> list[Any]:
    trace: list[Any] = []
    stream = impl.ChatStream(reader, max_line)
    while True:
        step = outcome(next, stream, None)
        trace.append(step)
        trace.append(state(stream))
        if step[0] == "error" or step[1] is None:
            break
    trace.append(outcome(next, stream, None))  # latched, or the end again
    trace.append(outcome(lambda: stream.completion))
    return trace


def run_async_chat(impl: types.SimpleNamespace, pieces: list[bytes], max_line: int) -> list[Any]:
    async def source() -> Any:
        for piece in pieces:
            yield piece

    async def main() -> list[Any]:
        trace: list[Any] = []
        stream = impl.aiter_chat(source(), max_line)
        while True:
            try:
                trace.append(("ok", await stream.__anext__()))
            except StopAsyncIteration:
                break
            except Exception as err:
                trace.append(("error", (type(err).__name__, str(err))))
                break
        trace.append(state(stream))
        trace.append(outcome(lambda: stream.completion))
        return trace

    return asyncio.run(main())


def body_of(name: str) -> bytes:
    response = open_recording(name)
    try:
        return response.read()
    except http.client.IncompleteRead as err:
        return err.partial
    finally:
        response.close()


RECORDINGS = stream_recordings()
BODIES = {name: body_of(name) for name in RECORDINGS}


@pytest.mark.parametrize("name", RECORDINGS)
def test_recordings_through_both_chat_streams(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, name: str
) -> None:
    """The whole recording as the client reads it (http.client, readinto1), both twins."""
    expected = run_chat(py_impl, open_recording(name))
    assert run_chat(c_impl, open_recording(name)) == expected
    assert expected[-1][0] == "ok" or expected[-1][1][0] in ("HttpError", "StreamClosedEarlyError")


def mutate(draw: st.DrawFn, body: bytes) -> bytes:
    """The body with a few of its lines replaced (a bad payload, an edge case, a cut)."""
    lines = body.split(b"\n")
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.integers(0, 3))
        if kind == 0:
            lines[at] = b"data: " + draw(st.sampled_from(EDGE_VALUES + EDGE_TEXT)).encode()
        elif kind == 1:
            lines[at] = lines[at][: draw(st.integers(0, len(lines[at])))]
        elif kind == 2:
            lines.insert(at, b'data: {"error":{"code":503,"message":"busy"}}')
        else:
            lines[at] = b"data: [DONE]"
    return b"\n".join(lines)


@st.composite
def chat_inputs(draw: st.DrawFn) -> tuple[bytes, list[int], int]:
    body = BODIES[draw(st.sampled_from(RECORDINGS))]
    if draw(st.booleans()):
        body = mutate(draw, body)
    sizes = draw(st.lists(st.integers(1, 700), max_size=5))
    max_line = draw(st.sampled_from([1 << 20, 600, 64]))
    return body, sizes, max_line


@SETTINGS
@given(case=chat_inputs())
def test_chat_streams_agree_split_at_random(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, case: Any
) -> None:
    body, sizes, max_line = case
    expected = run_chat(py_impl, Pieces(body, sizes), max_line)
    assert run_chat(c_impl, Pieces(body, sizes), max_line) == expected
    reader = Pieces(body, sizes)
    pieces = [bytes(p) for p in iter(lambda: reader.read(65536), b"")]
    expected = run_async_chat(py_impl, pieces, max_line)
    assert run_async_chat(c_impl, pieces, max_line) == expected
