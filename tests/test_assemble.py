"""The assembler's rules, as docs/assembler.md names them (events, the completion, malformed
chunks: strict JSON, the error payload, counts, ids, indices, messages). Every test runs
against each twin through the `impl` fixture.
"""

from __future__ import annotations

import json
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamafast import (
    Completion,
    Content,
    ContextOverflowError,
    FinishReason,
    HttpError,
    Progress,
    ProtocolError,
    Reasoning,
    StreamClosedEarlyError,
    Timings,
    ToolCall,
    ToolCallDelta,
)
from llamafast._errors import cut

ID = "chatcmpl-abc"


def chunk(
    delta: Any = None,
    finish: Any = None,
    *,
    id: Any = ID,
    timings: Any = None,
    progress: Any = None,
    choices: Any = None,
    **extra: Any,
) -> str:
    """One llama-server-shaped chunk; `...` leaves a field out."""
    payload: dict[str, Any] = {}
    if choices is None:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if delta is not ...:
            choice["delta"] = {} if delta is None else delta
        choices = [choice]
    if choices is not ...:
        payload["choices"] = choices
    if id is not ...:
        payload["id"] = id
    if timings is not None:
        payload["timings"] = timings
    if progress is not None:
        payload["prompt_progress"] = progress
    payload.update(extra)
    return json.dumps(payload, ensure_ascii=False)


def call(index: Any, id: Any = None, name: Any = None, arguments: Any = None, **f: Any) -> Any:
    """One tool_calls entry; None leaves a field out."""
    entry: dict[str, Any] = {"index": index}
    if id is not None:
        entry["id"] = id
        entry["type"] = "function"
    function = dict(f)
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        entry["function"] = function
    return entry


def timings(cache_n: int = 0, prompt_n: int = 0, predicted_n: int = 0) -> dict[str, Any]:
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": 2.5,
        "predicted_n": predicted_n,
        "predicted_ms": 1.25,
        "predicted_per_second": 812.3,
    }


def push_all(impl: types.SimpleNamespace, *payloads: str | bytes) -> tuple[Any, list[Any]]:
    asm = impl.Assembler()
    events: list[Any] = []
    for p in payloads:
        events += asm.push(p)
    return asm, events


def finished(impl: types.SimpleNamespace, *payloads: str | bytes) -> Completion:
    asm, _ = push_all(impl, *payloads, chunk(finish="stop"))
    result: Completion = asm.finish()
    return result


def protocol_error(impl: types.SimpleNamespace, payload: str | bytes, *before: str) -> str:
    """Push `before`, then `payload`, which must raise ProtocolError; its message."""
    asm, _ = push_all(impl, *before)
    with pytest.raises(ProtocolError) as info:
        asm.push(payload)
    return str(info.value)


# --- events per chunk, in order (docs/assembler.md, rules ORDER, NO-EMPTY and PIECE) --------------


def test_one_chunk_gives_progress_then_reasoning_content_and_tool_call_pieces(impl):
    payload = chunk(
        {
            "content": "It says",
            "tool_calls": [call(0, "c0", "read", "{"), call(1, "c1", "list")],
            "reasoning_content": "I should",
        },
        progress={"total": 312, "cache": 0, "processed": 278, "time_ms": 370},
    )
    assert impl.Assembler().push(payload) == [
        Progress(312, 0, 278),
        Reasoning("I should"),
        Content("It says"),
        ToolCallDelta(0, "c0", "read", "{"),
        ToolCallDelta(1, "c1", "list", ""),
    ]


def test_events_follow_the_choices_in_order(impl):
    payload = chunk(
        choices=[
            {"index": 0, "delta": {"content": "a", "reasoning_content": "r"}},
            {"index": 1, "delta": {"content": "b", "reasoning_content": "s"}},
        ]
    )
    assert impl.Assembler().push(payload) == [
        Reasoning("r"),
        Content("a"),
        Reasoning("s"),
        Content("b"),
    ]


@pytest.mark.parametrize(
    "delta",
    [
        {"role": "assistant", "content": None},
        {"content": ""},
        {"reasoning_content": ""},
        {"reasoning_content": None, "content": None, "tool_calls": None},
        {"tool_calls": []},
        {},
        None,
        ...,
    ],
)
def test_empty_or_null_text_gives_no_event(impl, delta):
    if delta is None:
        payload = chunk(choices=[{"index": 0, "delta": None}])
    else:
        payload = chunk(delta)
    assert impl.Assembler().push(payload) == []


def test_a_tool_call_delta_carries_that_piece_only(impl):
    _, events = push_all(
        impl,
        chunk({"tool_calls": [call(0, "x", "read_file", '{"pa')]}),
        chunk({"tool_calls": [call(0, arguments='th"')]}),
        chunk({"tool_calls": [call(0)]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": None}}]}),
    )
    assert events == [
        ToolCallDelta(0, "x", "read_file", '{"pa'),
        ToolCallDelta(0, None, None, 'th"'),
        ToolCallDelta(0, None, None, ""),
        ToolCallDelta(0, None, None, ""),
    ]


def test_progress_alone_and_with_usage_chunk_choices_empty(impl):
    asm = impl.Assembler()
    progress = {"total": 10, "cache": 2, "processed": 5}
    assert asm.push(chunk(..., progress=progress)) == [Progress(10, 2, 5)]
    assert asm.push(chunk(choices=[], timings=timings(1, 2, 3), usage={"total_tokens": 7})) == []


# --- the completion's text and tool calls (docs/assembler.md, rules TEXT and CALLS) ---------------


def test_texts_are_concatenations_of_the_events(impl):
    c = finished(
        impl,
        chunk({"reasoning_content": "I "}),
        chunk({"reasoning_content": "think"}),
        chunk({"content": "It "}),
        chunk({"content": ""}),
        chunk({"content": "says"}),
    )
    assert (c.reasoning_content, c.content) == ("I think", "It says")


def test_texts_are_none_when_there_never_was_any(impl):
    c = finished(impl, chunk({"content": ""}), chunk({"role": "assistant", "content": None}))
    assert c.content is None
    assert c.reasoning_content is None
    assert c.tool_calls == ()


def test_tool_call_arguments_are_joined_and_id_and_name_come_from_the_first_that_has_them(impl):
    c = finished(
        impl,
        chunk({"tool_calls": [call(0, arguments="{")]}),
        chunk({"tool_calls": [call(0, "id-0", arguments='"a"')]}),
        chunk({"tool_calls": [call(0, "other", "read", arguments=":1")]}),
        chunk({"tool_calls": [call(0, name="write", arguments="}")]}),
        chunk({"tool_calls": [call(1, "id-1", "list")]}),
    )
    assert c.tool_calls == (
        ToolCall("id-0", "read", '{"a":1}'),
        ToolCall("id-1", "list", ""),
    )


def test_a_whole_completion(impl):
    c = impl.Assembler()
    c.push(chunk({"role": "assistant", "content": None}, timings=timings(3, 40, 0)))
    c.push(chunk({"reasoning_content": "hm"}, timings=timings(3, 40, 2)))
    c.push(chunk({"content": "ok"}, timings=timings(3, 40, 5)))
    c.push(chunk(finish="length"))
    assert c.finish() == Completion(
        id=ID,
        content="ok",
        reasoning_content="hm",
        tool_calls=(),
        finish_reason=FinishReason.LENGTH,
        timings=Timings(3, 40, 5, 2.5, 1.25),
        reasoning_tokens=2,
        thinking_capped=False,
    )
    assert c.finish(thinking_capped=True).thinking_capped is True


# --- timings (docs/assembler.md, rule TIMINGS) ----------------------------------------------------


def test_timings_are_the_latest_object_seen(impl):
    asm, _ = push_all(
        impl,
        chunk(timings=timings(1, 2, 3)),
        chunk(timings=timings(4, 5, 6)),
        chunk(),  # no timings: the previous ones stay
        chunk(finish="stop"),
    )
    assert asm.finish().timings == Timings(4, 5, 6, 2.5, 1.25)


def test_timings_missing_counts_are_zero_and_replace_the_old(impl):
    asm, _ = push_all(
        impl,
        chunk(timings=timings(7, 8, 9)),
        chunk(timings={"predicted_n": 11, "predicted_ms": 3.5}),
        chunk(finish="stop"),
    )
    assert asm.finish().timings == Timings(0, 0, 11, 0.0, 3.5)


def test_timings_before_any_chunk_are_zero(impl):
    assert finished(impl).timings == Timings(0, 0, 0)


def test_timings_times_are_numbers_an_integer_taken_as_a_float(impl):
    got = finished(impl, chunk(timings={"prompt_ms": 7, "predicted_ms": 0})).timings
    assert got == Timings(0, 0, 0, 7.0, 0.0)
    assert type(got.prompt_ms) is float and type(got.predicted_ms) is float


@pytest.mark.parametrize("field", ["prompt_ms", "predicted_ms"])
@pytest.mark.parametrize("bad", [-1, -0.5, True, "3", None, [1], {}])
def test_a_timings_time_must_be_a_number_of_at_least_0(impl, field, bad):
    protocol_error(impl, chunk(timings={**timings(1, 2, 3), field: bad}))


# --- reasoning_tokens and in_reasoning ------------------------------------------------------------
# docs/assembler.md, rules REASONING-TOKENS and IN-REASONING.


def test_reasoning_tokens_follow_predicted_n_while_reasoning(impl):
    asm = impl.Assembler()
    assert (asm.reasoning_tokens, asm.in_reasoning) == (0, False)
    asm.push(chunk({"reasoning_content": "a"}, timings=timings(predicted_n=3)))
    assert (asm.reasoning_tokens, asm.in_reasoning) == (3, True)
    asm.push(chunk(timings=timings(predicted_n=4)))  # no reasoning text: unchanged
    assert (asm.reasoning_tokens, asm.in_reasoning) == (3, True)
    asm.push(chunk({"reasoning_content": "b"}))  # no timings: the latest ones (4)
    assert asm.reasoning_tokens == 4
    asm.push(chunk({"content": "x"}, timings=timings(predicted_n=9)))
    assert (asm.reasoning_tokens, asm.in_reasoning) == (4, False)
    asm.push(chunk({"content": "y"}, timings=timings(predicted_n=12)))
    asm.push(chunk(finish="stop"))
    assert asm.finish().reasoning_tokens == 4


def test_timings_are_updated_before_reasoning_tokens(impl):
    asm = impl.Assembler()
    asm.push(chunk(timings=timings(predicted_n=1)))
    asm.push(chunk({"reasoning_content": "a"}, timings=timings(predicted_n=2)))
    assert asm.reasoning_tokens == 2


def test_empty_reasoning_text_does_not_count(impl):
    asm = impl.Assembler()
    asm.push(chunk({"reasoning_content": ""}, timings=timings(predicted_n=5)))
    assert (asm.reasoning_tokens, asm.in_reasoning) == (0, False)


def test_in_reasoning_ends_with_a_tool_call_piece(impl):
    asm = impl.Assembler()
    asm.push(chunk({"reasoning_content": "a"}))
    asm.push(chunk({"tool_calls": []}))  # no piece: still reasoning
    assert asm.in_reasoning is True
    asm.push(chunk({"content": ""}))  # no answer text
    assert asm.in_reasoning is True
    asm.push(chunk({"tool_calls": [call(0, "i", "n")]}))
    assert asm.in_reasoning is False
    asm.push(chunk({"reasoning_content": "b"}))
    assert asm.in_reasoning is True


def test_in_reasoning_within_one_chunk_is_decided_by_the_last_text(impl):
    asm = impl.Assembler()
    asm.push(chunk({"reasoning_content": "a", "content": "b"}))
    assert asm.in_reasoning is False
    asm.push(
        chunk(
            choices=[
                {"delta": {"content": "c"}},
                {"delta": {"reasoning_content": "d"}},
            ]
        )
    )
    assert asm.in_reasoning is True


# --- finish (docs/assembler.md, rule FINISH) ------------------------------------------------------


def test_finish_without_finish_reason_is_stream_closed_early(impl):
    asm, _ = push_all(impl, chunk({"content": "cut"}))
    assert asm.is_finished is False
    with pytest.raises(StreamClosedEarlyError):
        asm.finish()
    with pytest.raises(StreamClosedEarlyError):
        impl.Assembler().finish()


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("stop", FinishReason.STOP), ("tool_calls", FinishReason.TOOL_CALLS),
     ("length", FinishReason.LENGTH)],
)  # fmt: skip
def test_the_three_finish_reasons(impl, reason, expected):
    asm = impl.Assembler()
    asm.push(chunk({"content": "x"}))
    assert asm.is_finished is False
    asm.push(chunk(finish=reason))
    assert asm.is_finished is True
    assert asm.finish().finish_reason is expected


def test_finish_without_an_id_is_a_protocol_error(impl):
    asm, _ = push_all(impl, chunk({"content": "x"}, id=...), chunk(finish="stop", id=...))
    with pytest.raises(ProtocolError):
        asm.finish()


@pytest.mark.parametrize(
    "pieces",
    [
        [call(0, name="read", arguments="{}")],  # never an id
        [call(0, "id-0", arguments="{}")],  # never a name
        [call(0, "id-0", "read"), call(1, "id-1")],  # the second never a name
    ],
)
def test_finish_with_an_incomplete_tool_call_is_a_protocol_error(impl, pieces):
    asm, _ = push_all(
        impl, *(chunk({"tool_calls": [p]}) for p in pieces), chunk(finish="tool_calls")
    )
    with pytest.raises(ProtocolError):
        asm.finish()


# --- the shape of a chunk (docs/assembler.md, rules SHAPE, INDEX and UNKNOWN-FIELDS) --------------


@pytest.mark.parametrize(
    "payload",
    [
        "[]",
        '"text"',
        "42",
        "null",
        "true",
        '{"id":"x"}',  # no choices
        '{"choices":null}',
        '{"choices":{}}',
        '{"choices":"[]"}',
        '{"choices":[1]}',
        '{"choices":[null]}',
        '{"choices":[[]]}',
        '{"choices":[{"delta":"text"}]}',
        '{"choices":[{"delta":[]}]}',
        '{"choices":[{"delta":1}]}',
        '{"choices":[{"delta":{"content":5}}]}',
        '{"choices":[{"delta":{"content":0}}]}',
        '{"choices":[{"delta":{"content":false}}]}',
        '{"choices":[{"delta":{"content":[]}}]}',
        '{"choices":[{"delta":{"content":{}}}]}',
        '{"choices":[{"delta":{"reasoning_content":0}}]}',
        '{"choices":[{"delta":{"reasoning_content":["a"]}}]}',
        '{"choices":[{"delta":{"tool_calls":{}}}]}',
        '{"choices":[{"delta":{"tool_calls":"x"}}]}',
        '{"choices":[{"delta":{"tool_calls":[1]}}]}',
        '{"choices":[{"delta":{"tool_calls":[null]}}]}',
        '{"choices":[{"delta":{"tool_calls":[{}]}}]}',  # no index
        '{"choices":[{"delta":{"tool_calls":[{"index":0,"id":5}]}}]}',
        '{"choices":[{"delta":{"tool_calls":[{"index":0,"function":"f"}]}}]}',
        '{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":1}}]}}]}',
        '{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{}}}]}}]}',
        '{"choices":[{"finish_reason":"eos"}]}',
        '{"choices":[{"finish_reason":"STOP"}]}',
        '{"choices":[{"finish_reason":""}]}',
        '{"choices":[{"finish_reason":1}]}',
        '{"choices":[{"finish_reason":["stop"]}]}',
        '{"choices":[{"finish_reason":{"stop":1}}]}',
        '{"choices":[{"finish_reason":false}]}',
    ],
)
def test_a_chunk_of_the_wrong_shape_is_a_protocol_error(impl, payload):
    message = protocol_error(impl, payload)
    assert cut(payload) in message


@pytest.mark.parametrize(
    ("index", "before"),
    [
        (1, 0),  # skips ahead: 1 when no call exists
        (3, 2),  # calls 0 and 1 exist: 2 would start the next one, 3 skips ahead
        (5, 2),  # index 5 when only 0 and 1 exist (docs/assembler.md, rule INDEX)
        (-1, 0),
        (-1, 1),
        (2**31, 1),
        (2**63 - 1, 1),
        (2**63, 1),  # an uint64 for simdjson
        (2**64 - 1, 1),
        (True, 1),  # a boolean is not an index, though Python says True == 1
        (False, 1),
        (0.0, 1),
        (1.0, 1),
        ("0", 1),
        (None, 1),
        ([0], 1),
    ],
)
def test_a_bad_tool_call_index_is_a_protocol_error_never_an_index_error(impl, index, before):
    first = [chunk({"tool_calls": [call(i, f"id-{i}", "f")]}) for i in range(before)]
    payload = chunk({"tool_calls": [{"index": index, "function": {"arguments": "x"}}]})
    message = protocol_error(impl, payload, *first)
    assert cut(payload) in message


def test_index_equal_to_the_count_starts_a_call_even_within_one_chunk(impl):
    asm = impl.Assembler()
    events = asm.push(chunk({"tool_calls": [call(0, "a", "f"), call(1, "b", "g"), call(0)]}))
    assert [e.index for e in events] == [0, 1, 0]
    with pytest.raises(ProtocolError):
        asm.push(chunk({"tool_calls": [call(2, "c", "h"), call(4, "d", "i")]}))


def test_a_missing_tool_call_index_is_a_protocol_error(impl):
    payload = chunk({"tool_calls": [{"id": "a", "function": {"name": "f"}}]})
    protocol_error(impl, payload)


def test_null_tool_call_fields_are_absent_ones(impl):
    payload = chunk({"tool_calls": [{"index": 0, "id": None, "function": None}]})
    assert impl.Assembler().push(payload) == [ToolCallDelta(0, None, None, "")]
    payload = chunk({"tool_calls": [{"index": 0, "function": {"name": None, "arguments": None}}]})
    assert impl.Assembler().push(payload) == [ToolCallDelta(0, None, None, "")]


def test_unknown_fields_are_ignored_at_every_level(impl):
    delta = {"reasoning_content": "r", "content": "c", "tool_calls": [call(0, "i", "f", "{")]}
    logprobs = {"content": [{"token": "r", "logprob": -0.5}]}
    plain = [
        chunk(
            choices=[{"index": 0, "finish_reason": None, "delta": delta, "logprobs": logprobs}],
            timings=timings(1, 2, 3),
            progress={"total": 9, "cache": 1, "processed": 4},
            model="tiny.gguf",
            usage={"completion_tokens": 3},
        ),
        chunk(finish="tool_calls"),
    ]
    noisy = [
        json.dumps(
            {
                "id": ID,
                "object": "chat.completion.chunk",
                "created": 1796213995,
                "model": "tiny.gguf",
                "system_fingerprint": "b0-unknown",
                "usage": {"completion_tokens": 3, "x": [1, {"y": None}]},
                "new_feature": {"nested": [[{"deep": True}]], "n": 1.5e300},
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": None,
                        "logprobs": {
                            "content": [
                                {"id": 7, "token": "r", "bytes": [114], "logprob": -0.5, "x": 1}
                            ],
                            "refusal": None,
                        },
                        "delta": {
                            "role": "assistant",
                            "reasoning_content": "r",
                            "content": "c",
                            "refusal": None,
                            "audio": {"id": "a"},
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "i",
                                    "type": "function",
                                    "extra": [1, 2],
                                    "function": {"name": "f", "arguments": "{", "strict": True},
                                }
                            ],
                        },
                    }
                ],
                "timings": {**timings(1, 2, 3), "draft_n": 5, "future": {"a": 1}},
                "prompt_progress": {"total": 9, "cache": 1, "processed": 4, "time_ms": 7},
            }
        ),
        json.dumps(
            {
                "id": ID,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls", "z": 1}],
                "unknown": None,
            }
        ),
    ]
    a, events_a = push_all(impl, *plain)
    b, events_b = push_all(impl, *noisy)
    assert events_b == events_a
    assert len(events_a) == 4
    assert b.finish() == a.finish()


# --- bytes and str, the error payload, messages ---------------------------------------------------
# docs/assembler.md, rules INPUT, SERVER-ERROR and MESSAGE.

STREAM = [
    chunk(
        {"role": "assistant", "content": None}, progress={"total": 5, "cache": 0, "processed": 5}
    ),
    chunk({"reasoning_content": "Ünïcödé 思考 🤔"}, timings=timings(1, 5, 2)),
    chunk({"content": '\u0001 ctl \ufffd \\ " é'}, timings=timings(1, 5, 3)),
    chunk({"tool_calls": [call(0, "k", "read_file", '{"p":"é"}')]}),
    chunk(finish="tool_calls", timings=timings(1, 5, 4)),
]


def test_bytes_and_str_give_the_same_events_and_completion(impl):
    a, events_a = push_all(impl, *STREAM)
    b, events_b = push_all(impl, *(p.encode() for p in STREAM))
    assert events_b == events_a
    assert len(events_a) == 4
    assert b.finish() == a.finish()
    assert isinstance(a.finish().content, str)


def test_escaped_text_is_decoded(impl):
    payload = '{"id":"x","choices":[{"delta":{"content":"a\\u00e9\\n\\ud83e\\udd14\\"\\\\"}}]}'
    assert impl.Assembler().push(payload) == [Content('aé\n🤔"\\')]
    assert impl.Assembler().push(payload.encode()) == [Content('aé\n🤔"\\')]


@pytest.mark.parametrize("data", [None, 5, 1.5, bytearray(b"{}"), memoryview(b"{}"), ["{}"], {}])
def test_push_takes_only_str_or_bytes(impl, data):
    with pytest.raises(TypeError):
        impl.Assembler().push(data)


ERROR_PAYLOAD = (
    '{"error":{"code":500,"message":"The model produced output that does not match the '
    'expected peg-native format","type":"server_error"}}'
)


@pytest.mark.parametrize("as_bytes", [False, True])
def test_an_error_payload_raises_http_error_with_the_server_code_and_message(impl, as_bytes):
    asm, _ = push_all(impl, chunk({"content": "x"}))
    with pytest.raises(HttpError) as info:
        asm.push(ERROR_PAYLOAD.encode() if as_bytes else ERROR_PAYLOAD)
    err = info.value
    assert err.status == 500
    assert err.body == ERROR_PAYLOAD
    assert isinstance(err.body, str)
    assert err.message == (
        "The model produced output that does not match the expected peg-native format"
    )
    assert err.message in str(err)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"code": 503, "message": "Loading model"}, 503),
        ({"code": 400}, 400),
        ({"message": "no code"}, 500),
        ({"code": "503", "message": "a string code"}, 500),
        ({"code": 503.0}, 500),
        ({"code": True}, 500),
        ({"code": None}, 500),
        ({}, 500),
    ],
)
def test_the_error_payloads_status_is_its_integer_code_else_500(impl, error, status):
    payload = json.dumps({"error": error})
    with pytest.raises(HttpError) as info:
        impl.Assembler().push(payload)
    assert info.value.status == status
    assert info.value.body == payload


@pytest.mark.parametrize("as_bytes", [False, True])
def test_an_overflow_payload_is_context_overflow(impl, as_bytes):
    # the payload llama-server sends when a prompt exceeds the context (docs/client.md, rule
    # OVERFLOW), mid-stream as before it
    payload = (
        '{"error":{"code":400,"message":"request (9 tokens) exceeds the available context size '
        '(8 tokens)","type":"exceed_context_size_error","n_prompt_tokens":9,"n_ctx":8}}'
    )
    with pytest.raises(ContextOverflowError) as info:
        impl.Assembler().push(payload.encode() if as_bytes else payload)
    assert (info.value.status, info.value.n_prompt_tokens, info.value.n_ctx) == (400, 9, 8)
    assert info.value.body == payload


def test_an_error_object_wins_over_choices(impl):
    payload = json.dumps({"choices": [{"delta": {"content": "x"}}], "error": {"code": 502}})
    with pytest.raises(HttpError):
        impl.Assembler().push(payload)


@pytest.mark.parametrize("error", ['"boom"', "500", "null", "[]", "true"])
def test_an_error_field_that_is_not_an_object_is_not_a_server_error(impl, error):
    protocol_error(impl, '{"error":' + error + "}")
    # with choices it is an unknown field like any other
    assert impl.Assembler().push('{"error":' + error + ',"choices":[]}') == []


def test_a_protocol_errors_message_shows_a_cut_of_the_payload(impl):
    long = '{"choices":[{"finish_reason":"eos","delta":{"content":"' + "x" * 100_000 + '"}}]}'
    message = protocol_error(impl, long)
    assert "finish_reason" in message
    assert cut(long) in message
    assert len(message) < 500
    message = protocol_error(impl, long.encode())
    assert '{"choices":[{"finish_reason":"eos"' in message
    assert len(message) < 500


@pytest.mark.parametrize(
    ("payload", "what"),
    [
        ('{"choices":[{"finish_reason":"eos"}]}', "eos"),
        ('{"choices":{}}', "choices"),
        ('{"id":5,"choices":[]}', "id"),
        ('{"choices":[],"timings":{"cache_n":-1}}', "cache_n"),
        ("[1,2]", "object"),
    ],
)
def test_a_protocol_errors_message_says_what_was_wrong(impl, payload, what):
    assert what in protocol_error(impl, payload).split(": {")[0].split(": [")[0]


# --- strict JSON (docs/assembler.md, rules STRICT-JSON and INPUT) ---------------------------------


def wrap(value: str) -> str:
    """`value` placed in an unknown field of an otherwise valid chunk."""
    return '{"id":"x","choices":[],"unknown":' + value + "}"


@pytest.mark.parametrize(
    "payload",
    [
        "",
        " ",
        "{",
        '{"choices":[]',
        '{"choices":[],}',
        '{"choices":[1,]}',
        "{'choices':[]}",
        "{choices:[]}",
        '{"choices":[]} {}',
        '{"choices":[]}x',
        "\ufeff" + '{"choices":[]}',  # a byte order mark is not JSON text (RFC 8259)
        '{"choices":[],"c":"a\tb"}',  # a raw control character in a string
        '{"choices":[],"c":"a\nb"}',
        '{"choices":[],"c":"\\x41"}',
        '{"choices":[],"c":"\\u12"}',
        wrap("NaN"),
        wrap("Infinity"),
        wrap("-Infinity"),
        wrap("[NaN]"),
        wrap("1e400"),
        wrap("-1e400"),
        wrap("1.8e308"),
        wrap("1.7976931348623159e308"),
        wrap("1000e306"),
        wrap("1E+309"),
        wrap("1" + "0" * 400 + ".0"),
        wrap("1" + "0" * 400),
        wrap(str(2**64)),  # beyond uint64
        wrap(str(-(2**63) - 1)),  # beyond int64
        wrap("1" * 5000),  # beyond Python's int-from-string limit too
        wrap("01"),
        wrap("1."),
        wrap(".5"),
        wrap("+1"),
        wrap("0x10"),
        wrap("True"),
        wrap("None"),
        wrap('"\\ud800"'),  # lone surrogate escapes
        wrap('"\\uDC00"'),
        wrap('"a\\ud83e"'),
        wrap('"\\ud83e\\u0041"'),
        wrap('"\\udd14\\ud83e"'),
        wrap('{"\\ud800":1}'),  # in a key
        wrap('["ok", ["\\uDBFF"]]'),
        '{"choices":[{"delta":{"content":"\\ud800"}}]}',
    ],
)
def test_text_that_is_not_strict_json_is_a_protocol_error(impl, payload):
    protocol_error(impl, payload)
    protocol_error(impl, payload.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize(
    "data",
    [
        b'{"choices":[],"c":"\xff"}',
        b'{"choices":[],"c":"\xc3"}',  # cut in the middle of a character
        b'{"choices":[],"c":"\xc0\x80"}',  # an overlong NUL
        b'{"choices":[],"c":"\xed\xa0\x80"}',  # an encoded surrogate
        b'{"choices":[],"c":"\xf4\x90\x80\x80"}',  # beyond U+10FFFF
        b'\xff{"choices":[]}',
        b'{"choices":[]}\x80',
        b'{"choices":[{"delta":{"content":"\x80"}}]}',
    ],
)
def test_bytes_that_are_not_utf8_are_a_protocol_error(impl, data):
    protocol_error(impl, data)


def test_a_str_holding_a_lone_surrogate_is_a_protocol_error(impl):
    protocol_error(impl, '{"choices":[],"c":"\ud800"}')


@pytest.mark.parametrize(
    "value",
    [
        "1e308",
        "1.7976931348623157e308",
        "-1.7976931348623157e308",
        "1e-400",  # underflow is fine
        "1E-0005",
        "0." + "0" * 400 + "1",
        "123456789.123456789012345678901234567890",
        str(2**64 - 1),  # uint64
        str(-(2**63)),  # int64
        "18446744073709551615.5",
        '"12345678901234567890123456789 e400 E+999"',  # digits in a string are text
        '"\\\\ud800"',  # an escaped backslash, then the letters ud800
        '"\\ud83e\\udd14"',  # a valid pair
        '"\\uD83E\\uDD14"',
        '"\\udbff\\udfff"',
        '"\\ud7ff\\ue000"',
        '{"\\ud83e\\udd14": ["\\u0000", "\\u001f", "\\u007f"]}',
        '"\u0085 \u2028 \ufeff"',  # not JSON white space, but fine inside a string
        '"\U0001f914"',
        " \t\r\n 1 \t\r\n ",
        "-0",
        "-0.0e-0",
        "[]",
        "{}",
        '{"a":{"a":{"a":[[[null,true,false]]]}}}',
    ],
)
def test_strict_json_that_is_valid_is_accepted(impl, value):
    payload = wrap(value)
    assert impl.Assembler().push(payload) == []
    assert impl.Assembler().push(payload.encode()) == []


def test_white_space_around_the_payload_is_allowed(impl):
    payload = ' \t\r\n{"id":"x","choices":[{"delta":{"content":"a"}}]} \n'
    assert impl.Assembler().push(payload) == [Content("a")]


def test_text_with_digit_runs_and_surrogate_looking_escapes_is_content(impl):
    text = "12345678901234567890123 1e400 \\ud800 E-999"
    payload = chunk({"content": text})
    assert impl.Assembler().push(payload) == [Content(text)]
    assert impl.Assembler().push(payload.encode()) == [Content(text)]


def test_duplicate_keys_the_last_wins(impl):
    payload = '{"id":"a","choices":[{"delta":{"content":"x","content":"y"}}],"id":"b"}'
    asm = impl.Assembler()
    assert asm.push(payload) == [Content("y")]
    assert asm.id == "b"


def nested(depth: int) -> str:
    """A chunk whose objects and arrays nest `depth` deep (its own object is 1)."""
    inner = depth - 1
    return '{"id":"x","choices":[],"deep":' + "[" * inner + "]" * inner + "}"


def test_nesting_up_to_256_is_accepted(impl):
    assert impl.Assembler().push(nested(256)) == []
    mixed = '{"choices":[],"d":' + '{"a":[' * 127 + "1" + "]}" * 127 + "}"  # depth 255
    assert impl.Assembler().push(mixed) == []


@pytest.mark.parametrize("depth", [257, 300, 1000, 100_000])
def test_nesting_deeper_than_256_is_a_protocol_error(impl, depth):
    protocol_error(impl, nested(depth))
    protocol_error(impl, nested(depth).encode())


# --- ids, counts, progress, atomic pushes ---------------------------------------------------------
# docs/assembler.md, rules ID, COUNTS, ALL-OR-NOTHING and FINISHED.


def test_the_first_id_wins(impl):
    asm = impl.Assembler()
    assert asm.id is None
    asm.push(chunk(id=...))
    assert asm.id is None
    asm.push(chunk(id="first"))
    asm.push(chunk(id="second"))
    asm.push(chunk(id=..., finish="stop"))
    assert asm.id == "first"
    assert asm.finish().id == "first"


@pytest.mark.parametrize("bad", [None, 5, True, ["a"], {"a": 1}])
def test_an_id_that_is_not_a_string_is_a_protocol_error(impl, bad):
    protocol_error(impl, chunk(id=bad))
    protocol_error(impl, chunk(id=bad), chunk(id="already"))  # also once an id is set


@pytest.mark.parametrize("field", ["cache_n", "prompt_n", "predicted_n"])
@pytest.mark.parametrize("bad", [-1, True, False, 1.0, 0.5, "3", None, [1], {}, 2**63, 2**64 - 1])
def test_a_timings_count_must_be_an_integer_in_range(impl, field, bad):
    protocol_error(impl, chunk(timings={**timings(1, 2, 3), field: bad}))


@pytest.mark.parametrize("field", ["total", "cache", "processed"])
@pytest.mark.parametrize("bad", [-1, True, 1.0, "3", None, 2**63, ...])
def test_a_progress_count_must_be_present_and_an_integer_in_range(impl, field, bad):
    progress = {"total": 10, "cache": 1, "processed": 2}
    if bad is ...:
        del progress[field]
    else:
        progress[field] = bad
    protocol_error(impl, chunk(progress=progress))


def test_counts_up_to_2_63_minus_1_are_accepted(impl):
    big = 2**63 - 1
    asm = impl.Assembler()
    events = asm.push(
        chunk(
            {"reasoning_content": "r"},
            timings=timings(big, big, big),
            progress={"total": big, "cache": 0, "processed": big},
        )
    )
    assert events == [Progress(big, 0, big), Reasoning("r")]
    assert asm.reasoning_tokens == big
    asm.push(chunk(finish="stop"))
    assert asm.finish().timings == Timings(big, big, big, 2.5, 1.25)


@pytest.mark.parametrize("bad", ["null", "[]", "1", '"t"', "true"])
@pytest.mark.parametrize("field", ["timings", "prompt_progress"])
def test_timings_and_progress_must_be_objects(impl, field, bad):
    protocol_error(impl, '{"id":"x","choices":[],"' + field + '":' + bad + "}")


@pytest.mark.parametrize(
    "bad",
    [
        chunk(choices=[{"delta": {"content": "ok"}}, {"delta": {"content": 5}}]),
        chunk(
            {"content": "ok", "tool_calls": [call(0, "i", "f"), call(2, "j", "g")]},
            id="new",
            timings=timings(9, 9, 9),
        ),
        chunk({"reasoning_content": "ok"}, "eos", id="new", timings=timings(9, 9, 9)),
        chunk(
            {"reasoning_content": "ok"},
            "stop",
            id="new",
            timings=timings(9, 9, 9),
            progress={"total": 1},
        ),
    ],
)
def test_a_push_that_fails_changes_nothing(impl, bad):
    """A chunk is checked whole before it is folded in, so an error leaves the state as it was
    (the same in both twins whatever the fault's position)."""
    asm = impl.Assembler()
    asm.push(chunk({"content": "a"}, id=..., timings=timings(1, 1, 1)))
    before = (asm.id, asm.reasoning_tokens, asm.in_reasoning, asm.is_finished)
    with pytest.raises(ProtocolError):
        asm.push(bad)
    assert (asm.id, asm.reasoning_tokens, asm.in_reasoning, asm.is_finished) == before
    asm.push(chunk({"content": "b"}, "stop", id="id"))
    c = asm.finish()
    assert (c.content, c.reasoning_content, c.tool_calls, c.timings) == (
        "ab",
        None,
        (),
        Timings(1, 1, 1, 2.5, 1.25),
    )


def test_a_choice_without_a_delta_may_still_finish(impl):
    asm = impl.Assembler()
    assert asm.push(chunk(..., finish="stop")) == []
    assert asm.is_finished


def test_a_later_finish_reason_of_null_does_not_unfinish(impl):
    asm, _ = push_all(impl, chunk(finish="length"), chunk(choices=[], usage={}), chunk())
    assert asm.is_finished
    assert asm.finish().finish_reason is FinishReason.LENGTH


def test_initial_state(impl):
    asm = impl.Assembler()
    assert (asm.id, asm.reasoning_tokens, asm.in_reasoning, asm.is_finished) == (
        None,
        0,
        False,
        False,
    )


# --- any input: a list of events, a ProtocolError or an HttpError, nothing else -------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=4,
)
ANY = JSON_VALUES | st.sampled_from(["stop", "length", "tool_calls", "", "x"])


def _same(value: Any) -> Any:
    return value


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good`, or now and then any JSON value instead (wrapped, so one_of does not flatten it
    into as many branches as it has kinds)."""
    return st.one_of(good.map(_same), good.map(_same), good.map(_same), ANY.map(_same))


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with any subset of `fields`."""
    return st.fixed_dictionaries({}, optional=fields)


TEXT = mostly(st.text(max_size=3) | st.none())
COUNT = mostly(st.integers(0, 9) | st.integers(min_value=-1, max_value=2**63))
TOOL_CALL = mostly(
    st.fixed_dictionaries(
        {"index": mostly(st.integers(0, 2))},
        optional={"id": TEXT, "function": mostly(obj(name=TEXT, arguments=TEXT))},
    )
)
CHOICE = mostly(
    obj(
        delta=mostly(
            obj(
                content=TEXT,
                reasoning_content=TEXT,
                tool_calls=mostly(st.lists(TOOL_CALL, max_size=2)),
            )
        ),
        finish_reason=mostly(st.none() | st.sampled_from(["stop", "length", "tool_calls"])),
    )
)
COUNTS = {"total": COUNT, "cache": COUNT, "processed": COUNT}
FIELDS = {
    "id": mostly(st.text(max_size=3)),
    "timings": mostly(obj(cache_n=COUNT, prompt_n=COUNT, predicted_n=COUNT)),
    "prompt_progress": mostly(st.fixed_dictionaries(COUNTS) | obj(**COUNTS)),
}
CHUNK = mostly(  # the usual shape with any of its parts wrong, or anything
    st.fixed_dictionaries({"choices": st.lists(CHOICE, max_size=2)}, optional=FIELDS)
) | obj(**FIELDS, choices=ANY, error=mostly(obj(code=ANY, message=ANY)))


@settings(max_examples=150, deadline=None)
@given(chunks=st.lists(CHUNK, min_size=1, max_size=4), as_bytes=st.booleans())
def test_any_chunks_give_events_or_a_documented_error(impl, chunks, as_bytes):
    asm = impl.Assembler()
    for c in chunks:
        text = json.dumps(c, ensure_ascii=False)
        payload = text.encode("utf-8", "surrogatepass") if as_bytes else text
        try:
            events = asm.push(payload)
        except (ProtocolError, HttpError):
            continue
        assert isinstance(events, list)
    try:
        completion = asm.finish()
    except (ProtocolError, StreamClosedEarlyError):
        return
    assert isinstance(completion, Completion)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=40) | st.text(max_size=40))
def test_any_text_gives_events_or_a_protocol_error(impl, data):
    try:
        events = impl.Assembler().push(data)
    except (ProtocolError, HttpError):
        return
    assert isinstance(events, list)


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(
        st.tuples(
            st.integers(-3, 5) | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, -(2**63)]),
            st.none() | st.text(max_size=2),
            st.none() | st.text(max_size=2),
            st.none() | st.text(max_size=2),
        ),
        max_size=8,
    )
)
def test_any_tool_call_indices_never_escape_as_another_error(impl, pieces):
    asm = impl.Assembler()
    calls: list[list[Any]] = []  # a model of the rules: [id, name, arguments]
    for index, id_, name, arguments in pieces:
        payload = chunk({"tool_calls": [call(index, id_, name, arguments)]})
        if 0 <= index <= len(calls):
            assert asm.push(payload) == [ToolCallDelta(index, id_, name, arguments or "")]
            if index == len(calls):
                calls.append([id_, name, ""])
            calls[index][0] = calls[index][0] if calls[index][0] is not None else id_
            calls[index][1] = calls[index][1] if calls[index][1] is not None else name
            calls[index][2] += arguments or ""
        else:
            with pytest.raises(ProtocolError):
                asm.push(payload)
    asm.push(chunk(finish="tool_calls"))
    if all(i is not None and n is not None for i, n, _ in calls):
        assert asm.finish().tool_calls == tuple(ToolCall(*c) for c in calls)
    else:
        with pytest.raises(ProtocolError):
            asm.finish()
