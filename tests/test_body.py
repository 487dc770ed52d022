"""build_body: every rule of docs/request-body.md, the bytes and the fields alike."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamafast import (
    Assistant,
    ChatRequest,
    Config,
    InferConfig,
    Limits,
    System,
    Tool,
    ToolCall,
    ToolSchema,
    User,
    build_body,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CFG = Config()
READ_FILE = ToolSchema(
    name="read_file",
    description="Read a text file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def body(req: ChatRequest, cfg: Config = CFG) -> dict[str, Any]:
    parsed = json.loads(build_body(cfg, req))
    assert isinstance(parsed, dict)
    return parsed


def test_body_with_one_tool_and_thinking_on_has_every_field() -> None:
    cfg = Config(
        infer=InferConfig(model="qwen", temperature=0.7, top_p=0.9, top_k=40),
        limits=Limits(max_tokens=512),
    )
    got = body(ChatRequest(slot=1, messages=[User("hi")], tools=[READ_FILE], thinking=True), cfg)
    assert got == {
        "model": "qwen",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a text file.",
                    "parameters": READ_FILE.parameters,
                },
            }
        ],
        "id_slot": 1,
        "cache_prompt": True,
        "stream": True,
        "return_progress": True,
        "timings_per_token": True,
        "reasoning_control": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 512,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "chat_template_kwargs": {"enable_thinking": True},
    }


def test_thinking_off_is_sent_explicitly() -> None:
    # Qwen-style templates think when the flag is absent (docs/request-body.md, rule THINKING).
    got = body(ChatRequest(slot=0, messages=[User("hi")]))
    assert got["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize(
    ("message", "rendered"),
    [
        (System("be brief"), {"role": "system", "content": "be brief"}),
        (User("hello"), {"role": "user", "content": "hello"}),
        (
            Tool(tool_call_id="call_1", content="file text"),
            {"role": "tool", "tool_call_id": "call_1", "content": "file text"},
        ),
        (Assistant(content="It says hi."), {"role": "assistant", "content": "It says hi."}),
        (
            Assistant(
                reasoning_content="I should read it.",
                tool_calls=(ToolCall("call_1", "read_file", '{"path":"a.txt"}'),),
            ),
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "I should read it.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"a.txt"}'},
                    }
                ],
            },
        ),
    ],
)
def test_each_kind_of_message_is_rendered_as_06_shows(message: Any, rendered: Any) -> None:
    assert body(ChatRequest(slot=0, messages=[message]))["messages"] == [rendered]


def test_assistant_content_none_is_sent_as_empty_string() -> None:
    got = body(ChatRequest(slot=0, messages=[Assistant(content=None)]))
    assert got["messages"] == [{"role": "assistant", "content": ""}]


def test_reasoning_content_and_tool_calls_left_out_when_absent() -> None:
    (msg,) = body(ChatRequest(slot=0, messages=[Assistant(content="x")]))["messages"]
    assert "reasoning_content" not in msg
    assert "tool_calls" not in msg


def test_empty_reasoning_content_is_kept_since_only_none_is_left_out() -> None:
    (msg,) = body(ChatRequest(slot=0, messages=[Assistant("x", "")]))["messages"]
    assert msg["reasoning_content"] == ""


def test_tools_left_out_when_empty() -> None:
    assert "tools" not in body(ChatRequest(slot=0, messages=[User("hi")], tools=[]))


def test_arguments_stay_the_string_they_are() -> None:
    # Not parsed, not re-serialized: spacing and key order as the model produced them.
    args = '{ "b": 1,  "a": [2] }'
    req = ChatRequest(slot=0, messages=[Assistant(tool_calls=(ToolCall("c", "f", args),))])
    (msg,) = body(req)["messages"]
    assert msg["tool_calls"][0]["function"]["arguments"] == args
    req_bad = ChatRequest(
        slot=0, messages=[Assistant(tool_calls=(ToolCall("c", "f", "{not json"),))]
    )
    (msg,) = body(req_bad)["messages"]
    assert msg["tool_calls"][0]["function"]["arguments"] == "{not json"


def test_same_inputs_give_identical_bytes_and_a_fixed_key_order() -> None:
    def make() -> ChatRequest:
        return ChatRequest(
            slot=0,
            messages=[System("s"), User("u"), Assistant("a", "r", (ToolCall("i", "n", "{}"),))],
            tools=[READ_FILE],
            thinking=True,
        )

    first = build_body(CFG, make())
    assert all(build_body(CFG, make()) == first for _ in range(5))
    keys = list(json.loads(first))
    assert keys[:2] == ["model", "messages"]
    assert keys[-1] == "chat_template_kwargs"


def test_non_ascii_is_utf8_not_escaped_and_there_is_no_white_space() -> None:
    text = build_body(CFG, ChatRequest(slot=0, messages=[User("café 日本 🦙")]))
    assert "café 日本 🦙" in text
    assert "\\u" not in text
    assert ": " not in text and ", " not in text
    assert text == json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))


def test_messages_keep_their_order() -> None:
    msgs = [System("1"), User("2"), Assistant("3"), Tool("t", "4"), User("5")]
    got = body(ChatRequest(slot=0, messages=msgs))["messages"]
    assert [m["content"] for m in got] == ["1", "2", "3", "4", "5"]


def test_the_usage_chunk_is_always_asked_for() -> None:
    # Completion.usage comes from the chunk the server sends only with include_usage
    # (docs/request-body.md, rule FIXED).
    assert body(ChatRequest(None, [User("hi")]))["stream_options"] == {"include_usage": True}


def test_logprobs_are_sent_only_when_asked_for() -> None:
    # docs/request-body.md, rule LOGPROBS: left out when unset, so such a body is unchanged.
    plain = body(ChatRequest(0, [User("hi")]))
    assert "logprobs" not in plain and "top_logprobs" not in plain
    got = body(ChatRequest(0, [User("hi")], logprobs=True))
    assert got["logprobs"] is True and "top_logprobs" not in got
    got = body(ChatRequest(0, [User("hi")], logprobs=True, top_logprobs=2))
    assert (got["logprobs"], got["top_logprobs"]) == (True, 2)
    assert body(ChatRequest(0, [User("hi")], logprobs=True, top_logprobs=0))["top_logprobs"] == 0


def test_sse_ping_interval_is_sent_only_when_set() -> None:
    req = ChatRequest(slot=0, messages=[User("hi")])
    assert "sse_ping_interval" not in body(req)
    pinged = Config(limits=Limits(sse_ping_interval=2.0))
    assert body(req, pinged)["sse_ping_interval"] == 2.0


@pytest.mark.parametrize("slot", [-1, True, 1.0, "0"])
def test_a_bad_slot_is_a_value_error_naming_it(slot: Any) -> None:
    with pytest.raises(ValueError, match="slot") as err:
        build_body(CFG, ChatRequest(slot=slot, messages=[User("hi")]))
    assert repr(slot) in str(err.value)


def test_a_message_of_the_wrong_type_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="dict"):
        build_body(CFG, ChatRequest(slot=0, messages=[{"role": "user"}]))  # type: ignore[list-item]


def test_tool_parameters_that_are_not_json_are_a_value_error() -> None:
    bad = ToolSchema("f", "d", {"type": {1, 2}})
    with pytest.raises(ValueError, match="JSON"):
        build_body(CFG, ChatRequest(slot=0, messages=[User("hi")], tools=[bad]))


def test_a_message_s_name_is_sent_after_its_content_and_left_out_when_none() -> None:
    named = [System("s", "house"), User("u", "ann"), Assistant("a", "r", (), "bot")]
    got = body(ChatRequest(0, named))
    assert got["messages"] == [
        {"role": "system", "content": "s", "name": "house"},
        {"role": "user", "content": "u", "name": "ann"},
        {"role": "assistant", "content": "a", "name": "bot", "reasoning_content": "r"},
    ]
    assert list(got["messages"][2]) == ["role", "content", "name", "reasoning_content"]
    assert "name" not in body(ChatRequest(0, [System("s"), User("u")]))["messages"][1]


def test_an_empty_message_list_is_refused_saying_so() -> None:
    with pytest.raises(ValueError) as err:
        build_body(CFG, ChatRequest(0, []))
    assert str(err.value) == "messages is empty: a chat request needs at least one message"


def test_the_reasoning_fields_are_sent_only_when_set_before_the_template_kwargs() -> None:
    assert "reasoning_effort" not in body(ChatRequest(0, HI))
    assert "reasoning_budget_tokens" not in body(ChatRequest(0, HI))
    got = body(ChatRequest(0, HI, reasoning_effort="high", reasoning_budget_tokens=-1))
    assert (got["reasoning_effort"], got["reasoning_budget_tokens"]) == ("high", -1)
    assert list(got)[-3:] == ["reasoning_effort", "reasoning_budget_tokens", "chat_template_kwargs"]
    for effort in ("none", "minimal", "low", "medium", "high", "xhigh", "max"):
        assert body(ChatRequest(0, HI, reasoning_effort=effort))["reasoning_effort"] == effort
    top = 2**31 - 1  # the server's own bounds: -1 (its default budget) to INT32_MAX
    assert body(ChatRequest(0, HI, reasoning_budget_tokens=top))["reasoning_budget_tokens"] == top


def test_reasoning_effort_none_with_thinking_on_is_refused_as_a_contradiction() -> None:
    with pytest.raises(ValueError) as err:
        build_body(CFG, ChatRequest(0, HI, thinking=True, reasoning_effort="none"))
    assert str(err.value) == (
        "reasoning_effort 'none' turns thinking off, but thinking=True turns it on: give one"
    )


def test_a_lone_surrogate_is_a_value_error_not_a_body_that_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="Unicode"):
        build_body(CFG, ChatRequest(slot=0, messages=[User("bad \ud800 text")]))


def _request_from_recording(sent: dict[str, Any]) -> ChatRequest:
    def message(m: dict[str, Any]) -> Any:
        role = m["role"]
        if role == "system":
            return System(m["content"])
        if role == "user":
            return User(m["content"])
        if role == "tool":
            return Tool(m["tool_call_id"], m["content"])
        calls = tuple(
            ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in m.get("tool_calls", ())
        )
        return Assistant(m.get("content"), m.get("reasoning_content"), calls)

    tools = [
        ToolSchema(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
        for t in sent.get("tools", ())
    ]
    ours = {
        "model", "messages", "tools", "id_slot", "cache_prompt", "stream", "return_progress",
        "timings_per_token", "reasoning_control", "max_tokens", "temperature", "top_p", "top_k",
        "chat_template_kwargs", "sse_ping_interval", "stream_options", *TYPED,
    }  # fmt: skip
    return ChatRequest(
        slot=sent["id_slot"],
        messages=[message(m) for m in sent["messages"]],
        tools=tools,
        thinking=sent["chat_template_kwargs"]["enable_thinking"],
        **{k: sent[k] for k in TYPED if k in sent},
        extra={k: v for k, v in sent.items() if k not in ours} or None,
    )


# Fields the recordings carry to steer the tiny test model (fixtures/README.md): the typed ones
# go through ChatRequest's fields, the others through `extra` (usage_chunk's
# stream_options.include_usage is what build_body always sends).
TYPED = ("seed", "grammar", "tool_choice", "logprobs", "top_logprobs")


def _chat_requests() -> list[str]:
    names = []
    for path in sorted((FIXTURES / "http").glob("*.request.json")):
        try:
            sent = json.loads(path.read_text())
        except ValueError:  # error_bad_json sent a malformed body on purpose
            continue
        # Only the bodies shaped like ours (error_* were malformed on purpose; sse_ping turned
        # progress off to show bare pings; midstream_error_nonstream did not stream).
        if (
            sent.get("stream")
            and sent.get("timings_per_token")
            and not path.name.startswith("error_")
        ):
            names.append(path.name.removesuffix(".request.json"))
    return names


RECORDED = _chat_requests()


@pytest.mark.parametrize("name", RECORDED)
def test_body_has_the_shape_of_the_recorded_requests(name: str) -> None:
    sent = json.loads((FIXTURES / "http" / f"{name}.request.json").read_text())
    cfg = Config(
        infer=InferConfig(
            model=sent["model"],
            temperature=sent["temperature"],
            top_p=sent["top_p"],
            top_k=sent["top_k"],
        ),
        limits=Limits(
            max_tokens=sent["max_tokens"], sse_ping_interval=sent.get("sse_ping_interval", 0)
        ),
    )
    ours = body(_request_from_recording(sent), cfg)
    theirs = dict(sent)
    theirs.setdefault("reasoning_control", True)  # the client always asks for it
    theirs.setdefault("stream_options", {"include_usage": True})  # and for the usage chunk
    assert ours == theirs


# --- the per-request fields ------------------------------------------------------------------

HI = [User("hi")]
WRITE_FILE = ToolSchema("write_file", "Write a text file.", {"type": "object"})


def test_slot_none_leaves_id_slot_out_so_the_server_picks() -> None:
    got = body(ChatRequest(None, HI))
    assert "id_slot" not in got
    assert body(ChatRequest(0, HI))["id_slot"] == 0


@pytest.mark.parametrize(
    ("field", "value", "from_config"),
    [
        ("max_tokens", 7, 4096),
        ("temperature", 1.5, 0.6),
        ("top_p", 0.5, 0.95),
        ("top_k", 3, 20),
    ],
)
def test_a_field_left_none_takes_the_configs_value(
    field: str, value: Any, from_config: Any
) -> None:
    assert body(ChatRequest(0, HI))[field] == from_config
    assert body(ChatRequest(0, HI, **{field: value}))[field] == value


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_p", 0.05),
        ("seed", 42),
        ("stop", ["\n\n", "END"]),
        ("grammar", 'root ::= "yes" | "no"'),
        ("response_format", {"type": "json_object"}),
    ],
)
def test_a_field_the_config_lacks_is_left_out_when_none_and_sent_as_given(
    field: str, value: Any
) -> None:
    assert field not in body(ChatRequest(0, HI))
    assert body(ChatRequest(0, HI, **{field: value}))[field] == value


def test_zero_values_are_sent_not_mistaken_for_unset() -> None:
    got = body(ChatRequest(0, HI, temperature=0, top_p=0.0, top_k=0, min_p=0.0, seed=0))
    assert (got["temperature"], got["top_p"], got["top_k"], got["min_p"], got["seed"]) == (
        0,
        0.0,
        0,
        0.0,
        0,
    )


def test_an_empty_stop_is_left_out_and_a_tuple_is_sent_as_a_list() -> None:
    assert "stop" not in body(ChatRequest(0, HI, stop=()))
    assert "stop" not in body(ChatRequest(0, HI, stop=[]))
    assert body(ChatRequest(0, HI, stop=("a",)))["stop"] == ["a"]


def test_response_format_with_a_json_schema_is_sent_as_given_in_its_own_order() -> None:
    schema = {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "schema": {
                "type": "object",
                "properties": {"z": {"type": "string"}, "a": {"type": "integer"}},
            },
        },
    }
    text = build_body(CFG, ChatRequest(0, HI, response_format=schema))
    assert json.loads(text)["response_format"] == schema
    # a schema's property order steers the model's output: it is not sorted
    assert text.index('"z"') < text.index('"a"')


@pytest.mark.parametrize("word", ["auto", "none", "required"])
def test_tool_choice_words_are_sent_as_strings(word: str) -> None:
    assert body(ChatRequest(0, HI, [READ_FILE], tool_choice=word))["tool_choice"] == word
    assert "tool_choice" not in body(ChatRequest(0, HI, [READ_FILE]))


def test_tool_choice_naming_a_tool_is_sent_as_a_function_object() -> None:
    got = body(ChatRequest(0, HI, [READ_FILE, WRITE_FILE], tool_choice="write_file"))
    assert got["tool_choice"] == {"type": "function", "function": {"name": "write_file"}}


def test_tool_choice_keyword_wins_over_a_tool_of_the_same_name() -> None:
    auto = ToolSchema("auto", "a tool named auto", {"type": "object"})
    assert body(ChatRequest(0, HI, [auto], tool_choice="auto"))["tool_choice"] == "auto"


def test_tool_choice_naming_no_tool_is_a_value_error_naming_it_and_the_tools() -> None:
    with pytest.raises(ValueError, match="tool_choice 'delete_all'") as err:
        build_body(CFG, ChatRequest(0, HI, [READ_FILE], tool_choice="delete_all"))
    assert "'read_file'" in str(err.value)
    with pytest.raises(ValueError, match="the request has no tools"):
        build_body(CFG, ChatRequest(0, HI, tool_choice="read_file"))


def test_extra_comes_after_the_librarys_fields_sorted_by_key() -> None:
    extra = {"typical_p": 0.9, "logit_bias": [[1, -100.0]], "n_probs": 2, "ignore_eos": True}
    text = build_body(CFG, ChatRequest(0, HI, extra=extra))
    keys = list(json.loads(text))
    assert keys[-4:] == ["ignore_eos", "logit_bias", "n_probs", "typical_p"]
    assert keys[-5] == "chat_template_kwargs"
    pinged = Config(limits=Limits(sse_ping_interval=1.0))
    pinged_text = build_body(pinged, ChatRequest(0, HI, extra=extra))
    assert list(json.loads(pinged_text))[-5] == "sse_ping_interval"
    assert json.loads(text)["logit_bias"] == [[1, -100.0]]


def test_extra_in_any_insertion_order_gives_the_same_bytes() -> None:
    a = ChatRequest(0, HI, extra={"b": 1, "a": 2})
    b = ChatRequest(0, HI, extra={"a": 2, "b": 1})
    assert a == b
    assert build_body(CFG, a) == build_body(CFG, b)


def test_an_integer_and_the_equal_float_give_the_same_bytes() -> None:
    ints = ChatRequest(0, HI, temperature=1, top_p=1, min_p=0)
    floats = ChatRequest(0, HI, temperature=1.0, top_p=1.0, min_p=0.0)
    assert ints == floats
    assert build_body(CFG, ints) == build_body(CFG, floats)
    assert '"temperature":1.0,"top_p":1.0' in build_body(CFG, ints)


def test_an_empty_extra_is_the_same_as_none() -> None:
    assert build_body(CFG, ChatRequest(0, HI, extra={})) == build_body(CFG, ChatRequest(0, HI))


@pytest.mark.parametrize(
    "key",
    [
        "model", "messages", "tools", "id_slot", "stream", "cache_prompt", "return_progress",
        "timings_per_token", "reasoning_control", "chat_template_kwargs", "sse_ping_interval",
        "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "tool_choice",
        "response_format", "grammar", "stream_options", "logprobs", "top_logprobs",
        "reasoning_effort", "reasoning_budget_tokens",
    ],
)  # fmt: skip
def test_extra_may_not_set_a_field_the_library_writes(key: str) -> None:
    with pytest.raises(ValueError, match=f"extra may not set '{key}'"):
        build_body(CFG, ChatRequest(None, HI, extra={key: 1}))


def test_extra_keys_must_be_strings() -> None:
    with pytest.raises(ValueError, match="extra's keys must be strings, not 1"):
        build_body(CFG, ChatRequest(0, HI, extra={1: "x"}))  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="extra must be a mapping"):
        build_body(CFG, ChatRequest(0, HI, extra=[("a", 1)]))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "named", "says"),
    [
        ({"max_tokens": 0}, "max_tokens", "at least 1, not 0"),
        ({"max_tokens": True}, "max_tokens", "an integer, not True"),
        ({"max_tokens": 5.0}, "max_tokens", "an integer, not 5.0"),
        ({"temperature": -0.1}, "temperature", "at least 0, not -0.1"),
        ({"temperature": float("nan")}, "temperature", "a finite number, not nan"),
        ({"temperature": float("inf")}, "temperature", "a finite number, not inf"),
        ({"temperature": False}, "temperature", "a number, not False"),
        ({"temperature": "0.5"}, "temperature", "a number, not '0.5'"),
        ({"top_p": 1.01}, "top_p", "from 0 to 1, not 1.01"),
        ({"top_p": -0.5}, "top_p", "from 0 to 1, not -0.5"),
        ({"min_p": 2}, "min_p", "from 0 to 1, not 2"),
        ({"min_p": -0.01}, "min_p", "from 0 to 1, not -0.01"),
        ({"top_k": -1}, "top_k", "at least 0, not -1"),
        ({"top_k": 2.0}, "top_k", "an integer, not 2.0"),
        ({"seed": True}, "seed", "an integer, not True"),
        ({"seed": "7"}, "seed", "an integer, not '7'"),
        ({"stop": "END"}, "stop", "a sequence of strings, not 'END'"),
        ({"stop": ["a", ""]}, "stop[1]", "empty"),
        ({"stop": ["a", 3]}, "stop[1]", "a string, not 3"),
        ({"grammar": b"root"}, "grammar", "a string, not b'root'"),
        ({"response_format": "json"}, "response_format", "a mapping, not 'json'"),
        ({"tool_choice": 1}, "tool_choice", "a string, not 1"),
        ({"logprobs": 1}, "logprobs", "True or False, not 1"),
        ({"logprobs": "yes"}, "logprobs", "True or False, not 'yes'"),
        ({"top_logprobs": 2}, "top_logprobs", "needs logprobs=True"),
        ({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "at least 0, not -1"),
        ({"logprobs": True, "top_logprobs": 2.0}, "top_logprobs", "an integer, not 2.0"),
        ({"logprobs": True, "top_logprobs": True}, "top_logprobs", "an integer, not True"),
        ({"reasoning_effort": "hot"}, "reasoning_effort", "one of 'none', 'minimal', 'low', "),
        ({"reasoning_effort": "High"}, "reasoning_effort", "'max', not 'High'"),
        ({"reasoning_effort": 1}, "reasoning_effort", "a string, not 1"),
        ({"reasoning_budget_tokens": -2}, "reasoning_budget_tokens", "at least -1, not -2"),
        ({"reasoning_budget_tokens": 2**31}, "reasoning_budget_tokens", "at most 2147483647"),
        ({"reasoning_budget_tokens": 1.0}, "reasoning_budget_tokens", "an integer, not 1.0"),
        ({"reasoning_budget_tokens": True}, "reasoning_budget_tokens", "an integer, not True"),
    ],
)
def test_a_bad_value_is_a_value_error_naming_the_field(
    fields: dict[str, Any], named: str, says: str
) -> None:
    with pytest.raises(ValueError) as err:
        build_body(CFG, ChatRequest(0, HI, **fields))
    assert str(err.value).startswith(f"{named} ") and says in str(err.value), str(err.value)


def test_the_edges_of_each_range_are_accepted() -> None:
    got = body(ChatRequest(0, HI, max_tokens=1, top_p=1, min_p=1.0, temperature=0.0, seed=-1))
    assert (got["max_tokens"], got["top_p"], got["min_p"], got["seed"]) == (1, 1, 1.0, -1)


def nested_lists(depth: int) -> list[Any]:
    """A list nesting `depth` lists (built without recursion)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"response_format": {"schema": {1, 2}}}, "response_format"),
        ({"response_format": {"x": float("nan")}}, "response_format"),
        ({"extra": {"logit_bias": object()}}, "extra['logit_bias']"),
        ({"extra": {"ok": 1, "n": float("inf")}}, "extra['n']"),
        # nested past what json.dumps's recursion takes: a RecursionError, caught as the others
        ({"response_format": {"schema": nested_lists(100_000)}}, "response_format"),
        ({"extra": {"deep": nested_lists(100_000)}}, "extra['deep']"),
    ],
)
def test_a_value_json_cannot_write_is_a_value_error_naming_the_field(
    fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match="cannot be written as JSON") as err:
        build_body(CFG, ChatRequest(0, HI, **fields))
    assert str(err.value).startswith(f"{named} cannot"), str(err.value)


def test_every_field_set_gives_identical_bytes_for_equal_requests_in_a_fixed_order() -> None:
    def make() -> ChatRequest:
        return ChatRequest(
            None,
            [User("u")],
            [READ_FILE],
            thinking=True,
            max_tokens=9,
            temperature=0.1,
            top_p=0.2,
            top_k=3,
            min_p=0.4,
            seed=5,
            stop=["x"],
            tool_choice="read_file",
            response_format={"type": "json_object"},
            grammar="root ::= x",
            logprobs=True,
            top_logprobs=3,
            reasoning_effort="low",
            reasoning_budget_tokens=100,
            extra={"z": 1, "a": 2},
        )

    first = build_body(CFG, make())
    assert all(build_body(CFG, make()) == first for _ in range(3))
    assert list(json.loads(first)) == [
        "model", "messages", "tools", "cache_prompt", "stream", "return_progress",
        "timings_per_token", "reasoning_control", "stream_options", "max_tokens", "temperature",
        "top_p", "top_k", "min_p", "seed", "stop", "tool_choice", "response_format", "grammar",
        "logprobs", "top_logprobs", "reasoning_effort", "reasoning_budget_tokens",
        "chat_template_kwargs", "a", "z",
    ]  # fmt: skip


# --- every combination of the per-request fields -----------------------------------------------

ORDER = [
    "model", "messages", "tools", "id_slot", "cache_prompt", "stream", "return_progress",
    "timings_per_token", "reasoning_control", "stream_options", "max_tokens", "temperature",
    "top_p", "top_k", "min_p", "seed", "stop", "tool_choice", "response_format", "grammar",
    "logprobs", "top_logprobs", "reasoning_effort", "reasoning_budget_tokens",
    "chat_template_kwargs", "sse_ping_interval",
]  # fmt: skip
UNIT = st.floats(min_value=0, max_value=1, allow_nan=False)


@st.composite
def requests(draw: st.DrawFn) -> ChatRequest:
    tools = draw(st.sampled_from([(), (READ_FILE,), (READ_FILE, WRITE_FILE)]))
    choices = ["auto", "none", "required", *(t.name for t in tools)]
    maybe = st.none
    logprobs = draw(st.booleans())
    return ChatRequest(
        draw(maybe() | st.integers(0, 8)),
        [User(draw(st.text(max_size=8)))],
        tools,
        draw(st.booleans()),
        max_tokens=draw(maybe() | st.integers(1, 1 << 20)),
        temperature=draw(maybe() | st.floats(0, 5, allow_nan=False) | st.integers(0, 2)),
        top_p=draw(maybe() | UNIT),
        top_k=draw(maybe() | st.integers(0, 100)),
        min_p=draw(maybe() | UNIT),
        seed=draw(maybe() | st.integers(-1, 1 << 32)),
        stop=draw(st.lists(st.text(min_size=1, max_size=4), max_size=3)),
        tool_choice=draw(maybe() | st.sampled_from(choices)),
        response_format=draw(maybe() | st.just({"type": "json_object"})),
        grammar=draw(maybe() | st.text(max_size=10)),
        logprobs=logprobs,
        top_logprobs=draw(maybe() | st.integers(0, 20)) if logprobs else None,
        reasoning_effort=draw(maybe() | st.sampled_from(["low", "medium", "high"])),
        reasoning_budget_tokens=draw(maybe() | st.integers(-1, 1 << 20)),
        extra=draw(
            maybe()
            | st.dictionaries(
                st.text(max_size=6).filter(lambda k: k not in ORDER),
                st.integers() | st.text(max_size=4) | st.booleans(),
                max_size=4,
            )
        ),
    )


@settings(max_examples=300)
@given(requests())
def test_any_valid_request_gives_its_fields_in_order_and_the_same_bytes_again(
    req: ChatRequest,
) -> None:
    text = build_body(CFG, req)
    assert build_body(CFG, copy.deepcopy(req)) == text
    got = json.loads(text)
    extra = sorted(req.extra or {})
    own = [k for k in got if k in ORDER and k not in extra]
    assert own == [k for k in ORDER if k in own]  # the library's fields in their fixed order
    assert list(got)[len(own) :] == extra  # then extra's, sorted
    assert ("id_slot" in got) is (req.slot is not None)
    for field, fallback in [
        ("max_tokens", CFG.limits.max_tokens),
        ("temperature", CFG.infer.temperature),
        ("top_p", CFG.infer.top_p),
        ("top_k", CFG.infer.top_k),
    ]:
        value = getattr(req, field)
        assert got[field] == (fallback if value is None else value)
    for field in ("min_p", "seed", "response_format", "grammar"):
        value = getattr(req, field)
        assert got.get(field) == value and ((field in got) is (value is not None))
    assert got.get("stop") == (list(req.stop) or None)
    assert got.get("logprobs") == (req.logprobs or None)
    assert got.get("top_logprobs") == req.top_logprobs
    assert got.get("reasoning_effort") == req.reasoning_effort
    assert got.get("reasoning_budget_tokens") == req.reasoning_budget_tokens


def test_a_body_does_not_depend_on_the_bodies_built_before() -> None:
    # The fields after id_slot of a request that sets none of them but thinking and its budget
    # are written once per Config, thinking and budget: each body is the one it is in any order,
    # and a budget the full path refuses is refused after a valid one of equal value.
    other = Config(InferConfig(temperature=1.0), Limits(max_tokens=7, sse_ping_interval=0))
    cases = [
        (cfg, ChatRequest(slot, [User("hi")], thinking=thinking, reasoning_budget_tokens=budget))
        for cfg in (CFG, other)
        for slot in (None, 1)
        for thinking in (False, True)
        for budget in (None, 0, 1, -1)
    ]
    forward = [build_body(cfg, req) for cfg, req in cases]
    backward = [build_body(cfg, req) for cfg, req in reversed(cases)][::-1]
    assert forward == backward
    assert len(set(forward)) == len(cases)  # each case's own body
    for text, (cfg, req) in zip(forward, cases, strict=True):
        sent = json.loads(text)
        assert sent["chat_template_kwargs"] == {"enable_thinking": req.thinking}
        assert sent.get("reasoning_budget_tokens") == req.reasoning_budget_tokens
        assert sent["max_tokens"] == cfg.limits.max_tokens
    build_body(CFG, ChatRequest(0, [User("hi")], reasoning_budget_tokens=1))
    with pytest.raises(ValueError, match="reasoning_budget_tokens must be an integer"):
        build_body(CFG, ChatRequest(0, [User("hi")], reasoning_budget_tokens=True))  # type: ignore[arg-type]
