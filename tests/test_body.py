"""build_body: every rule of reference/06-llama-request.md, and API.md's serialization rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
        "max_tokens": 512,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "chat_template_kwargs": {"enable_thinking": True},
    }


def test_thinking_off_is_sent_explicitly() -> None:
    # Qwen-style templates think when the flag is absent (issue 2, item 3).
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
    return ChatRequest(
        slot=sent["id_slot"],
        messages=[message(m) for m in sent["messages"]],
        tools=tools,
        thinking=sent["chat_template_kwargs"]["enable_thinking"],
    )


# Fields the recordings carry only to steer the tiny test model (fixtures/README.md).
# usage_chunk asked for stream_options.include_usage to show the usage chunk.
STEERING = {"seed", "grammar", "logit_bias", "tool_choice", "ignore_eos", "stream_options"}


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
    theirs = {k: v for k, v in sent.items() if k not in STEERING}
    theirs.setdefault("reasoning_control", True)  # the client always asks for it (issue 4)
    assert ours == theirs
