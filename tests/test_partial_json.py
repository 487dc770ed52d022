"""Tool-call arguments parsed while they stream, and parsed whole.

`partial_arguments(index)` (the assemblers, the chat streams) must give, for every prefix of the
arguments, what an independent reference gives for that prefix: `reference` below, a plain
recursive-descent completer that reparses the prefix from the start and leans on `json.loads`
for each string and number. The rules it encodes: a string being read is kept as far as it
goes (an escape not yet whole is left out), a number or a word being read is left out, a member
appears once its key is whole and its value has begun (string, container) or ended (number,
word), a container that has begun is there. The final value equals `parse_arguments()` and
`json.loads`; a text the assembler's strict parse refuses is refused at the same time, with
the position of the fault.
"""

from __future__ import annotations

import json
import random
import re
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _recordings import load_expected, open_recording
from llamafast import ProtocolError, ToolCall
from llamafast._engine._assemble_py import _parse
from llamafast._partial_json import JsonFault, PartialJson, locate

# --- the reference: a simple, non-incremental completer --------------------------------------

ABSENT: Any = object()


class Incomplete(Exception):
    """The prefix ended inside a value; `partial` is what that value is worth so far."""

    def __init__(self, partial: Any) -> None:
        super().__init__()
        self.partial = partial


_TOKEN = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|[^\\]", re.S)
_HIGH = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_NUM_CHARS = re.compile(r"[-+0-9.eE]+")
_WS = " \t\n\r"


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _partial_string(raw: str) -> str:
    """What the raw content of a string cut short is worth: whole escapes only, and no high
    surrogate waiting for its low half."""
    cut = re.search(r"\\u[0-9a-fA-F]{0,3}$", raw)  # a \u escape not yet whole
    if cut and (cut.start() - len(raw[: cut.start()].rstrip("\\"))) % 2 == 0:
        raw = raw[: cut.start()]
    if (len(raw) - len(raw.rstrip("\\"))) % 2:  # a lone backslash at the end
        raw = raw[:-1]
    tokens = _TOKEN.findall(raw)
    if tokens and _HIGH.fullmatch(tokens[-1]):
        tokens.pop()
    return json.loads('"' + "".join(tokens) + '"')


def _string(s: str, i: int) -> tuple[str, int]:
    j = i + 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == '"':
            return json.loads(s[i : j + 1]), j + 1
        j += 1
    raise Incomplete(_partial_string(s[i + 1 :]))


def _value(s: str, i: int) -> tuple[Any, int]:
    i = _ws(s, i)
    if i == len(s):
        raise Incomplete(ABSENT)
    c = s[i]
    if c == '"':
        return _string(s, i)
    if c == "{":
        obj: dict[str, Any] = {}
        i = _ws(s, i + 1)
        if i == len(s):
            raise Incomplete(obj)
        if s[i] == "}":
            return obj, i + 1
        while True:
            try:
                key, i = _string(s, _ws(s, i))
            except Incomplete:
                raise Incomplete(obj) from None
            i = _ws(s, i)
            if i == len(s):
                raise Incomplete(obj)
            assert s[i] == ":"
            try:
                obj[key], i = _value(s, i + 1)
            except Incomplete as inc:
                if inc.partial is not ABSENT:
                    obj[key] = inc.partial
                raise Incomplete(obj) from None
            i = _ws(s, i)
            if i == len(s):
                raise Incomplete(obj)
            if s[i] == "}":
                return obj, i + 1
            assert s[i] == ","
            i = _ws(s, i + 1)
            if i == len(s):
                raise Incomplete(obj)
    if c == "[":
        arr: list[Any] = []
        i = _ws(s, i + 1)
        if i == len(s):
            raise Incomplete(arr)
        if s[i] == "]":
            return arr, i + 1
        while True:
            try:
                item, i = _value(s, i)
            except Incomplete as inc:
                if inc.partial is not ABSENT:
                    arr.append(inc.partial)
                raise Incomplete(arr) from None
            arr.append(item)
            i = _ws(s, i)
            if i == len(s):
                raise Incomplete(arr)
            if s[i] == "]":
                return arr, i + 1
            assert s[i] == ","
            i += 1
    for word, value in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, i):
            return value, i + len(word)
        if word.startswith(s[i:]):
            raise Incomplete(ABSENT)
    m = _NUM_CHARS.match(s, i)
    assert m is not None, s[i:]
    if m.end() == len(s):  # it may grow
        raise Incomplete(ABSENT)
    return json.loads(m.group()), m.end()


def reference(prefix: str) -> Any:
    """What a prefix of a valid JSON text is worth (None: nothing yet)."""
    try:
        value, _ = _value(prefix, 0)
    except Incomplete as inc:
        return None if inc.partial is ABSENT else inc.partial
    return value


def test_the_reference_itself() -> None:
    doc = '{"a": [1, 22, {"b": "h\\u00e9\\ud83d\\ude00"}], "c": true, "d": -1.5e3}'
    assert [reference(doc[:n]) for n in (0, 1, 4, 8, 9, 12, 13)] == [
        None, {}, {}, {"a": []}, {"a": [1]}, {"a": [1]}, {"a": [1, 22]},
    ]  # fmt: skip
    assert reference('{"s": "ab\\') == {"s": "ab"}
    assert reference('{"s": "ab\\u00') == {"s": "ab"}
    assert reference('{"s": "ab\\ud83d\\ude') == {"s": "ab"}
    assert reference('{"s": "ab\\\\') == {"s": "ab\\"}
    assert reference('{"k": tr') == {}
    assert reference(doc) == json.loads(doc)


# --- the rules, one by one -------------------------------------------------------------------


def value_of(text: str, final: bool = False) -> Any:
    parser = PartialJson()
    parser.feed(text)
    return parser.value(final)


@pytest.mark.parametrize(
    ("prefix", "value"),
    [
        ("", None),
        ("  ", None),
        ("{", {}),
        ('{"pa', {}),  # a key being read is left out
        ('{"path"', {}),
        ('{"path":', {}),  # a key waiting for its value too
        ('{"path": "/tm', {"path": "/tm"}),  # a string is kept as far as it goes
        ('{"path": "a\\', {"path": "a"}),  # an escape not yet whole is left out
        ('{"path": "a\\u00e', {"path": "a"}),
        ('{"path": "a\\u00e9', {"path": "aé"}),
        ('{"path": "a\\ud83d', {"path": "a"}),  # half a surrogate pair
        ('{"path": "a\\ud83d\\ude00', {"path": "a😀"}),
        ('{"n": 12', {}),  # a number may still grow
        ('{"n": 12,', {"n": 12}),
        ('{"n": 1.5}', {"n": 1.5}),
        ('{"b": tru', {}),  # a word is not a value until whole
        ('{"b": true', {"b": True}),
        ('{"b": null', {"b": None}),
        ('{"a": [1, 2', {"a": [1]}),
        ('{"a": [1, 2,', {"a": [1, 2]}),
        ('{"a": [{"x": "y', {"a": [{"x": "y"}]}),  # containers that have begun are there
        ('{"a": {', {"a": {}}),
        ("[", []),
        ('"top', "top"),
        ("12", None),  # a top-level number being read
        ("true", True),
        ('{"a": 1, "a": "x', {"a": "x"}),  # the last of duplicate keys, as json.loads
        ('{"a": 1, "a": 2', {"a": 1}),
    ],
)
def test_what_a_prefix_is_worth(prefix: str, value: Any) -> None:
    assert value_of(prefix) == value
    assert reference(prefix) == value


def test_final_ends_a_number_and_refuses_a_text_cut_short() -> None:
    assert value_of("12", final=True) == 12
    assert value_of(" -0.5e1 ", final=True) == -5.0
    with pytest.raises(JsonFault, match="ends before the JSON value does at position 7"):
        value_of('{"a": 1', final=True)
    with pytest.raises(JsonFault, match="at position 0"):
        value_of("", final=True)


def test_containers_are_fresh_each_call_and_finished_values_are_shared() -> None:
    parser = PartialJson()
    parser.feed('{"done": [1], "s": "ab')
    first = parser.value()
    parser.feed("c")
    second = parser.value()
    assert first == {"done": [1], "s": "ab"} and second == {"done": [1], "s": "abc"}
    assert first is not second
    assert first["done"] is second["done"]  # finished: shared, not copied


# --- strictness: the same texts as the assembler's parse -------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "reason"),
    [
        ("NaN", 0, "NaN and Infinity are not JSON"),
        ('{"a": Infinity}', 6, "NaN and Infinity are not JSON"),
        ("[1,]", 3, "expecting a value"),
        ('{"a":1,}', 7, "expecting a property name"),
        ("01", 0, "not a number"),
        ("[-]", 1, "not a number"),
        ('"\\ud800"', 1, "a lone surrogate escape"),
        ('"\\ude00"', 1, "a lone surrogate escape"),
        ('"\\ud800\\u0041"', 1, "a lone surrogate escape"),
        ('"x\ud800"', 2, "a lone surrogate inside a string"),
        ('"\\x"', 1, "an invalid escape"),
        ('"\\u12g4"', 1, "an invalid \\u escape"),
        ("1e400", 0, "out of range"),
        ("18446744073709551616", 0, "out of range"),
        ("-9223372036854775809", 0, "out of range"),
        ("[1 2]", 3, "expecting ',' or ']'"),
        ('{"a" 1}', 5, "expecting ':'"),
        ('"a\x01"', 2, "a control character inside a string"),
        ("1 x", 2, "extra data"),
        ("[" * 257 + "]" * 257, 256, "nested deeper than 256"),
        ("\ufeff{}", 0, "expecting a value"),
    ],
)
def test_a_fault_is_refused_with_its_position(text: str, position: int, reason: str) -> None:
    fault = locate(text)
    assert fault is not None and fault.position == position and reason in fault.reason, fault
    with pytest.raises(ProtocolError, match=f"at position {position}: "):
        ToolCall("c", "f", text).parse_arguments()


def test_the_limits_themselves_are_accepted() -> None:
    for text in ["18446744073709551615", "-9223372036854775808", "1e308", "[" * 256 + "]" * 256]:
        assert locate(text) is None, text
        assert value_of(text, final=True) == _parse(text, text.encode())


def test_a_fault_is_raised_as_soon_as_it_arrives_and_again_after() -> None:
    parser = PartialJson()
    parser.feed('{"a": [1, ')
    with pytest.raises(JsonFault, match="position 10"):
        parser.feed("]")
    with pytest.raises(JsonFault, match="position 10"):
        parser.feed("2]}")
    with pytest.raises(JsonFault, match="position 10"):
        parser.value()


JSON_ALPHABET = st.sampled_from([*'{}[]:,"\\ u0dD8e9E.+-1tfnrlsaNI\t\n\x01', "true", "null"])


@settings(max_examples=600)
@given(st.lists(JSON_ALPHABET, max_size=14).map("".join))
def test_accepts_and_refuses_exactly_what_the_assembler_does(text: str) -> None:
    try:
        want = _parse(text, text.encode("utf-8"))
    except (ValueError, RecursionError):
        assert locate(text) is not None, text
        return
    assert locate(text) is None, text
    got = value_of(text, final=True)
    assert got == want and type(got) is type(want)


def outcome(pieces: list[str]) -> Any:
    """The final value of the text fed as `pieces`, or its fault as (position, reason)."""
    parser = PartialJson()
    try:
        for piece in pieces:
            parser.feed(piece)
        return ("value", parser.value(final=True))
    except JsonFault as fault:
        return ("fault", fault.position, fault.reason)


@settings(max_examples=600)
@given(st.lists(JSON_ALPHABET, max_size=16).map("".join), st.randoms(use_true_random=False))
def test_any_split_gives_the_same_value_or_the_same_fault(text: str, rnd: random.Random) -> None:
    cuts = sorted(rnd.sample(range(len(text) + 1), min(len(text) + 1, rnd.randint(0, 6))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert outcome(pieces) == outcome([text]) == outcome(list(text)), pieces


# --- every prefix, against the reference -----------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def documents(draw: st.DrawFn) -> str:
    value = draw(JSON_VALUES)
    ascii_only = draw(st.booleans())
    indent = draw(st.sampled_from([None, 1]))
    return json.dumps(value, ensure_ascii=ascii_only, indent=indent)


@settings(max_examples=300)
@given(documents(), st.randoms(use_true_random=False))
def test_every_prefix_of_random_documents_matches_the_reference(
    doc: str, rnd: random.Random
) -> None:
    for n in range(len(doc) + 1):
        assert value_of(doc[:n]) == reference(doc[:n]), doc[:n]
    # the same document fed in random pieces, asked after each
    parser = PartialJson()
    at = 0
    while at < len(doc):
        step = rnd.randint(1, 8)
        parser.feed(doc[at : at + step])
        at = min(len(doc), at + step)
        assert parser.value() == reference(doc[:at]), doc[:at]
    final = parser.value(final=True)
    assert final == json.loads(doc)
    assert final == ToolCall("c", "f", doc).parse_arguments()


def test_a_long_string_is_read_once_not_rescanned() -> None:
    """Each piece is scanned once: what the parser keeps between pieces never grows with the
    text (only a token not yet whole is carried over), so asking after every piece is O(n)."""
    content = ("lorem ipsum \\n \\u00e9 \\ud83d\\ude00 dolor " * 3000)[:100_000]
    doc = '{"path": "a.txt", "content": "' + content + '"}'
    parser = PartialJson()
    size = len(doc) // 3000 + 1
    for at in range(0, len(doc), size):
        parser.feed(doc[at : at + size])
        parser.value()
        assert len(parser._buf) <= size + 12  # the piece and at most an escape from before
    assert parser.value(final=True) == json.loads(doc)


# --- the assemblers and the chat streams -----------------------------------------------------


def tool_chunk(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> str:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    entry: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        entry["id"] = call_id
    return json.dumps({"id": "c-1", "choices": [{"delta": {"tool_calls": [entry]}}]})


FINISH = '{"choices":[{"finish_reason":"tool_calls"}]}'


def test_partial_arguments_of_each_call_as_pieces_arrive(impl: types.SimpleNamespace) -> None:
    asm = impl.Assembler()
    asm.push(tool_chunk(0, '{"path": "/tm', "call_0", "read_file"))
    assert asm.partial_arguments(0) == {"path": "/tm"}
    asm.push(tool_chunk(1, '{"n": 4', "call_1", "count"))
    asm.push(tool_chunk(0, 'p/a.txt", "limit": 1'))
    assert asm.partial_arguments(0) == {"path": "/tmp/a.txt"}
    assert asm.partial_arguments(1) == {}
    asm.push(tool_chunk(1, "2}"))
    asm.push(tool_chunk(0, "0}"))
    assert asm.partial_arguments(0) == {"path": "/tmp/a.txt", "limit": 10}
    asm.push(FINISH)
    calls = asm.finish().tool_calls
    assert [asm.partial_arguments(i) for i in (0, 1)] == [c.parse_arguments() for c in calls]


def test_a_top_level_number_is_whole_once_the_stream_finished(
    impl: types.SimpleNamespace,
) -> None:
    asm = impl.Assembler()
    asm.push(tool_chunk(0, "42", "c", "f"))
    assert asm.partial_arguments(0) is None
    asm.push(FINISH)
    assert asm.partial_arguments(0) == 42 == asm.finish().tool_calls[0].parse_arguments()


def test_partial_arguments_of_no_such_call_is_an_index_error(impl: types.SimpleNamespace) -> None:
    asm = impl.Assembler()
    with pytest.raises(IndexError, match="there is no tool call 0: 0 so far"):
        asm.partial_arguments(0)
    asm.push(tool_chunk(0, "{", "c", "f"))
    for bad in (1, -1, True, "0"):
        with pytest.raises(IndexError, match="there is no tool call"):
            asm.partial_arguments(bad)


def test_arguments_that_are_not_json_are_a_protocol_error_naming_the_call(
    impl: types.SimpleNamespace,
) -> None:
    asm = impl.Assembler()
    asm.push(tool_chunk(0, '{"a": [1,', "call_9", "read_file"))
    asm.push(tool_chunk(0, "]}"))
    with pytest.raises(ProtocolError) as err:
        asm.partial_arguments(0)
    assert str(err.value) == (
        "tool call 0 (id 'call_9', name 'read_file') has arguments that are not valid JSON "
        "at position 9: expecting a value"
    )
    with pytest.raises(ProtocolError):  # and again
        asm.partial_arguments(0)


def recorded_pieces(name: str) -> list[list[str]]:
    """The argument pieces of each tool call of a recording, as the server streamed them."""
    calls: list[list[str]] = []
    for event in load_expected(name)["events"]:
        if event["type"] == "tool_call_delta":
            if event["index"] == len(calls):
                calls.append([])
            calls[event["index"]].append(event["arguments"])
    return calls


def test_the_recording_has_tool_calls() -> None:
    assert recorded_pieces("tool_call")


@pytest.mark.parametrize("name", ["tool_call"])
def test_every_prefix_of_a_recorded_tool_call(impl: types.SimpleNamespace, name: str) -> None:
    with impl.ChatStream(open_recording(name)) as stream:
        seen: dict[int, str] = {}
        for event in stream:
            if type(event).__name__ == "ToolCallDelta":
                seen[event.index] = seen.get(event.index, "") + event.arguments
                assert stream.partial_arguments(event.index) == reference(seen[event.index])
        completion = stream.completion
    for i, call in enumerate(completion.tool_calls):
        assert stream.partial_arguments(i) == call.parse_arguments()
        text = call.arguments
        for n in range(len(text) + 1):
            assert value_of(text[:n]) == reference(text[:n]), text[:n]


def test_async_chat_stream_exposes_partial_arguments(impl: types.SimpleNamespace) -> None:
    import asyncio

    body = b"".join(
        b"data: " + p.encode() + b"\n\n"
        for p in (tool_chunk(0, '{"q": "ll', "c", "search"), tool_chunk(0, 'ama"}'), FINISH)
    )

    async def source() -> Any:
        yield body

    async def main() -> list[Any]:
        stream = impl.aiter_chat(source())
        got = []
        async for _ in stream:
            got.append(stream.partial_arguments(0))
        return got

    assert asyncio.run(main()) == [{"q": "ll"}, {"q": "llama"}]


# --- ToolCall.parse_arguments -----------------------------------------------------------------


def test_parse_arguments_is_json_loads_of_the_arguments() -> None:
    assert ToolCall("c", "f", ' {"a": [1, 2.5, "é"]} ').parse_arguments() == {"a": [1, 2.5, "é"]}


@pytest.mark.parametrize(
    ("arguments", "position"),
    [
        ('{"a": 1,}', 8),
        ("", 0),
        ('{"a": NaN}', 6),
        ('{"a": 99999999999999999999}', 6),
        ('{"a": "\\udc00"}', 7),
        ('{"a": "x\ud800"}', 8),
    ],
)
def test_parse_arguments_refuses_what_the_assembler_refuses_naming_call_and_position(
    arguments: str, position: int
) -> None:
    with pytest.raises(ProtocolError) as err:
        ToolCall("call_7", "read_file", arguments).parse_arguments()
    message = str(err.value)
    assert message.startswith(
        f"tool call 'call_7' (read_file) has arguments that are not valid JSON at position "
        f"{position}: "
    ), message
