"""The values and errors: one definition, immutable, equal by value, match-able."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

import llamafast
from llamafast import (
    DONE,
    Assistant,
    Audio,
    ChatRequest,
    Completion,
    ConnectError,
    Content,
    Done,
    FinishReason,
    HttpError,
    Image,
    LineTooLongError,
    NotUtf8Error,
    Progress,
    ProtocolError,
    Queued,
    Reasoning,
    Retrying,
    SseIoError,
    StalledError,
    System,
    Text,
    ThinkingCapped,
    Timings,
    TokenLogprob,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolSchema,
    TruncatedError,
    Usage,
    User,
    Waiting,
)

EXAMPLES: list[Any] = [
    ToolCall("id", "name", "{}"),
    System("s"),
    User("u"),
    User([Text("t"), Image(b"\x89PNG", "image/png"), Image(url="https://x/y.png")]),
    System([Text("s"), Audio(b"RIFF", "wav")]),
    Text("t"),
    Image(b"\x89PNG", "image/png"),
    Image(url="https://x/y.png"),
    Audio(b"RIFF", "wav"),
    Assistant("a", "r", (ToolCall("i", "n", "{}"),)),
    Assistant([Text("a"), Text("b")], None, (), "bot"),
    System("s", "rules"),
    User([Text("u")], "ann"),
    Tool("id", "c"),
    Timings(1, 2, 3),
    Usage(10, 5, 2),
    Queued(2),
    Waiting(True),
    Progress(10, 2, 5),
    Reasoning("r"),
    Content("c"),
    Content("c", (TokenLogprob("c", -0.5, (("c", -0.5), ("d", -1.5))),)),
    TokenLogprob("t", -0.25),
    ToolCallDelta(0, "id", "n", "{"),
    ThinkingCapped(100),
    Retrying(1, 250, "refused"),
    Completion(
        "id", "c", None, (), FinishReason.STOP, Timings(), reasoning_tokens=0, thinking_capped=False
    ),
    Completion(
        "id",
        "c",
        None,
        (),
        FinishReason.STOP,
        Timings(),
        0,
        False,
        "m",
        Usage(3, 1, 2),
        (TokenLogprob("c", -0.5),),
    ),
]


@pytest.mark.parametrize("value", EXAMPLES, ids=lambda v: type(v).__name__)
def test_values_are_frozen_slotted_equal_by_value_and_hashable(value: Any) -> None:
    assert not hasattr(value, "__dict__")
    field = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, None)
    # Not a field either: the same error (3.11's own slotted dataclasses raise a TypeError).
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.not_a_field = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(value, field)
    copy = dataclasses.replace(value)
    assert copy == value and copy is not value
    assert hash(copy) == hash(value)
    assert pickle.loads(pickle.dumps(value)) == value


@pytest.mark.parametrize("value", EXAMPLES, ids=lambda v: type(v).__name__)
def test_values_match_positionally_in_field_order(value: Any) -> None:
    names = [f.name for f in dataclasses.fields(value)]
    assert type(value).__match_args__ == tuple(names)


def test_match_on_events_reads_naturally() -> None:
    def describe(event: Any) -> str:
        match event:
            case Content(text):
                return f"content {text}"
            case Progress(total, cache, processed):
                return f"{processed}/{total} ({cache} cached)"
            case ToolCallDelta(index, _, name, arguments):
                return f"call {index} {name} {arguments}"
        return "other"

    assert describe(Content("hi")) == "content hi"
    assert describe(Progress(10, 2, 5)) == "5/10 (2 cached)"
    assert describe(ToolCallDelta(1, None, "f", "{")) == "call 1 f {"


def test_defaults_of_assistant_timings_and_chat_request() -> None:
    assert Assistant() == Assistant(None, None, ())
    assert Timings() == Timings(0, 0, 0)
    req = ChatRequest(slot=0, messages=[User("x")])
    assert req.tools == () and req.thinking is False


def test_usage_fields_in_order_and_cached_tokens_defaults_to_zero() -> None:
    assert Usage(10, 5) == Usage(prompt_tokens=10, completion_tokens=5, cached_tokens=0)
    match Usage(10, 5, 2):
        case Usage(prompt, completion, cached):
            assert (prompt, completion, cached) == (10, 5, 2)


def test_what_the_server_reports_defaults_to_nothing_reported() -> None:
    # A Completion, a Content and a TokenLogprob made without the server's reports: no model,
    # no usage, no logprobs (docs/assembler.md, rules MODEL, USAGE and LOGPROBS).
    c = Completion("id", "c", None, (), FinishReason.STOP, Timings(), 0, False)
    assert (c.model, c.usage, c.logprobs) == (None, None, ())
    assert Content("c").logprobs == () and TokenLogprob("t", -1.0).top == ()
    match Content("c", (TokenLogprob("c", -0.5, (("c", -0.5),)),)):
        case Content(text, (TokenLogprob(token, logprob, top),)):
            assert (text, token, logprob, top) == ("c", "c", -0.5, (("c", -0.5),))


def test_timings_fields_in_order_and_the_times_default_to_float_zero() -> None:
    assert Timings() == Timings(0, 0, 0, 0.0, 0.0)
    assert type(Timings().prompt_ms) is float and type(Timings().predicted_ms) is float
    match Timings(1, 2, 3, 4.5, 6.5):
        case Timings(cache, prompt, predicted, prompt_ms, predicted_ms):
            assert (cache, prompt, predicted, prompt_ms, predicted_ms) == (1, 2, 3, 4.5, 6.5)


def test_chat_request_keyword_fields_default_to_unset_and_slot_may_be_none() -> None:
    req = ChatRequest(None, [User("x")])
    assert req.slot is None
    unset = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "tool_choice")
    assert all(getattr(req, f) is None for f in unset)
    assert (req.stop, req.response_format, req.grammar, req.extra) == ((), None, None, None)
    with pytest.raises(TypeError):
        ChatRequest(0, [User("x")], (), False, 5)  # type: ignore[misc]  # keyword only


def test_chat_request_reasoning_fields_default_to_unset() -> None:
    req = ChatRequest(None, [User("x")], reasoning_effort="low", reasoning_budget_tokens=0)
    assert (req.reasoning_effort, req.reasoning_budget_tokens) == ("low", 0)
    unset = ChatRequest(None, [User("x")])
    assert (unset.reasoning_effort, unset.reasoning_budget_tokens) == (None, None)


def test_a_message_s_name_is_kept_and_none_by_default() -> None:
    assert (System("s").name, User("u").name, Assistant("a").name) == (None, None, None)
    assert System("s", "rules").name == "rules"
    assert User([Text("u")], name="ann") == User((Text("u"),), "ann")
    assert Assistant("a", name="bot").name == "bot"


@pytest.mark.parametrize("cls", [System, User, Assistant])
def test_a_name_that_is_not_a_non_empty_string_is_refused_naming_it(cls: Any) -> None:
    with pytest.raises(TypeError, match=rf"^{cls.__name__}\.name must be a string or None, not 5$"):
        cls("x", name=5)
    with pytest.raises(ValueError, match=rf"^{cls.__name__}\.name is empty"):
        cls("x", name="")


def test_assistant_content_takes_text_parts_as_a_tuple() -> None:
    msg = Assistant([Text("a"), Text("b")])
    assert msg.content == (Text("a"), Text("b")) and isinstance(msg.content, tuple)
    assert hash(msg) == hash(Assistant((Text("a"), Text("b"))))
    with pytest.raises(TypeError, match=r"Assistant\.content\[1\] must be Text, not Image"):
        Assistant([Text("a"), Image(url="https://x/y.png")])
    with pytest.raises(ValueError, match=r"Assistant\.content is an empty sequence"):
        Assistant([])
    with pytest.raises(TypeError, match=r"Assistant\.content must be a string, a sequence of Text"):
        Assistant(5)  # type: ignore[arg-type]


def test_tool_schema_parameters_must_be_a_json_object_naming_the_tool() -> None:
    with pytest.raises(ValueError) as err:
        ToolSchema("f", "d", "notadict")  # type: ignore[arg-type]
    assert str(err.value) == (
        "ToolSchema 'f': parameters must be a JSON Schema object (a dict), not str: 'notadict'"
    )
    with pytest.raises(ValueError, match="ToolSchema 'g': parameters must be"):
        ToolSchema("g", "d", [("type", "object")])  # type: ignore[arg-type]


def test_tool_schema_with_a_dict_compares_but_is_not_hashable() -> None:
    # "hashable where their fields are": a dict of parameters is not.
    schema = ToolSchema("f", "d", {"type": "object"})
    assert schema == ToolSchema("f", "d", {"type": "object"})
    with pytest.raises(TypeError):
        hash(schema)


def test_finish_reason_values() -> None:
    assert [r.value for r in FinishReason] == ["stop", "tool_calls", "length"]
    assert FinishReason("tool_calls") is FinishReason.TOOL_CALLS


def test_done_is_the_only_instance_of_done() -> None:
    assert list(Done) == [DONE]
    assert pickle.loads(pickle.dumps(DONE)) is DONE
    assert repr(DONE) == "DONE"
    assert DONE != "[DONE]"


def test_errors_keep_what_they_carry_and_say_it_in_one_sentence() -> None:
    oserr = ConnectionRefusedError(111, "Connection refused")
    io = SseIoError(oserr)
    assert io.error is oserr and io.__cause__ is oserr
    conn = ConnectError(oserr, "http://127.0.0.1:9")
    assert conn.error is oserr and "127.0.0.1:9" in str(conn)
    assert LineTooLongError(64).limit == 64 and "64" in str(LineTooLongError(64))
    assert "b'\\xff'" in str(NotUtf8Error(b"\xff"))
    http = HttpError(400, '{"error":{"code":400,"message":"bad slot","type":"x"}}')
    assert (http.status, http.message) == (400, "bad slot")
    assert str(http) == "the server answered 400: bad slot"
    # an HTML page is not dumped: shown as one, with what it says of `url` (HTTP-ERRORS)
    assert str(HttpError(502, "<html>bad gateway</html>")) == (
        "the server answered 502: an HTML page; no llama-server answers an HTML page: url "
        "should be a llama-server's root, such as http://127.0.0.1:8080"
    )
    assert str(ProtocolError("chunk has no choices")) == "chunk has no choices"
    for err in (io, conn, http, LineTooLongError(3), TruncatedError(b"da"), StalledError(2.0)):
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err)
        assert "\n" not in str(err)


def test_a_long_value_in_a_message_is_cut() -> None:
    err = HttpError(500, "x" * 100_000)
    assert len(str(err)) < 400
    assert "100000" in str(err)


def test_top_level_exports_exactly_all() -> None:
    assert sorted(llamafast.__all__) == sorted(set(llamafast.__all__))
    for name in llamafast.__all__:
        assert hasattr(llamafast, name), name
