"""`Completion.to_message()`: the next turn's assistant message in the openai shape
(docs/request-body.md, rule TO-MESSAGE), from a completion either twin assembled, read back by
`_messages` into the very `Assistant` value it stands for, and sent by both clients as the same
bytes that value gives.
"""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import llamafast
import llamafast.pure
from _drivers import cfg
from _recordings import open_recording
from _server import ReplayServer, Reply
from llamafast import (
    Assistant,
    ChatRequest,
    Completion,
    Config,
    FinishReason,
    ProtocolError,
    Timings,
    Tool,
    ToolCall,
    User,
    build_body,
)
from llamafast._messages import to_messages, to_tools
from llamafast._values import Completion as ValuesCompletion

needs_c = pytest.mark.usefixtures("c_impl")
CHAT = "/v1/chat/completions"
CFG = Config()

# The recordings a turn may end with: text, reasoning then text, a tool call, cut by max_tokens.
RECORDED = ["content_only", "reasoning_then_content", "tool_call", "length"]


def completion(
    content: str | None = None,
    reasoning_content: str | None = None,
    tool_calls: tuple[ToolCall, ...] = (),
    finish_reason: FinishReason = FinishReason.STOP,
) -> Completion:
    return Completion(
        "c1", content, reasoning_content, tool_calls, finish_reason, Timings(), 0, False
    )


def assistant_of(c: Completion) -> Assistant:
    """The Assistant value one writes by hand for the next turn."""
    return Assistant(c.content, c.reasoning_content, c.tool_calls)


def body_with(message: object) -> bytes:
    """The body of a request whose messages are a user's and then `message` (a dict or value)."""
    req = ChatRequest(None, to_messages([{"role": "user", "content": "hi"}, message]))
    return build_body(CFG, req).encode("utf-8")


def check_round_trip(c: Completion) -> None:
    """`_messages` reads `c.to_message()` back as the hand-written Assistant, and the body holds
    the same bytes either way (docs/request-body.md, rule TO-MESSAGE)."""
    assert to_messages([c.to_message()]) == (assistant_of(c),)
    assert body_with(c.to_message()) == body_with(assistant_of(c))


def call(i: int, arguments: str = '{"path":"a.txt"}') -> ToolCall:
    return ToolCall(f"id{i}", f"tool{i}", arguments)


def openai_call(c: ToolCall) -> dict[str, Any]:
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}


# --- the shape --------------------------------------------------------------------------------


def test_only_tool_calls_give_content_none_and_no_reasoning_key() -> None:
    c = completion(tool_calls=(call(0),), finish_reason=FinishReason.TOOL_CALLS)
    assert c.to_message() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "id0",
                "type": "function",
                "function": {"name": "tool0", "arguments": '{"path":"a.txt"}'},
            }
        ],
    }
    check_round_trip(c)
    sent = json.loads(body_with(c.to_message()))["messages"][1]
    assert sent["content"] == ""  # what llama-server's template needs (rule MESSAGES)


def test_content_and_reasoning_give_both_and_no_tool_calls_key() -> None:
    c = completion("It is 4.", "2 + 2 is 4")
    assert c.to_message() == {
        "role": "assistant",
        "content": "It is 4.",
        "reasoning_content": "2 + 2 is 4",
    }
    check_round_trip(c)


def test_an_empty_content_is_kept_empty_not_none() -> None:
    c = completion("", "")
    assert c.to_message() == {"role": "assistant", "content": "", "reasoning_content": ""}
    check_round_trip(c)


def test_a_completion_with_nothing_gives_content_none() -> None:
    c = completion()
    assert c.to_message() == {"role": "assistant", "content": None}
    check_round_trip(c)


def test_several_tool_calls_keep_their_order_ids_names_and_arguments() -> None:
    calls = tuple(call(i, json.dumps({"n": i})) for i in (2, 0, 1))
    c = completion("Let me look.", tool_calls=calls, finish_reason=FinishReason.TOOL_CALLS)
    m = c.to_message()
    assert m["tool_calls"] == [openai_call(x) for x in calls]
    check_round_trip(c)


@pytest.mark.parametrize("arguments", ['{"path": "a.t', "", "not json", '{"a": NaN}'])
def test_arguments_that_are_not_json_are_kept_as_received(arguments: str) -> None:
    # ToolCall.arguments is the JSON text as received (docs/assembler.md, rule CALLS): the next
    # turn sends the model its own call back exactly, whatever it wrote.
    c = completion(tool_calls=(call(0, arguments),), finish_reason=FinishReason.TOOL_CALLS)
    with pytest.raises(ProtocolError):
        c.tool_calls[0].parse_arguments()
    assert c.to_message()["tool_calls"][0]["function"]["arguments"] == arguments
    check_round_trip(c)
    sent = json.loads(body_with(c.to_message()))["messages"][1]
    assert sent["tool_calls"][0]["function"]["arguments"] == arguments


def test_a_completion_cut_by_length_gives_what_arrived() -> None:
    cut_call = call(0, '{"path": "a')  # the arguments were still arriving
    c = completion("The answer is", None, (cut_call,), FinishReason.LENGTH)
    assert c.to_message() == {
        "role": "assistant",
        "content": "The answer is",
        "tool_calls": [openai_call(cut_call)],
    }
    check_round_trip(c)


def test_each_call_gives_a_fresh_dict() -> None:
    c = completion("text", "why", (call(0),), FinishReason.TOOL_CALLS)
    first = c.to_message()
    first["content"] = "changed"
    first["tool_calls"][0]["function"]["arguments"] = "changed"
    first["tool_calls"].append("junk")
    del first["reasoning_content"]
    second = c.to_message()
    assert second is not first
    assert second == {
        "role": "assistant",
        "content": "text",
        "reasoning_content": "why",
        "tool_calls": [openai_call(call(0))],
    }
    assert c == completion("text", "why", (call(0),), FinishReason.TOOL_CALLS)


# Text a request can carry: any string but a lone surrogate (rule NOT-JSON refuses it).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
CALLS = st.lists(st.builds(ToolCall, TEXT, TEXT, TEXT), max_size=3).map(tuple)


@given(st.none() | TEXT, st.none() | TEXT, CALLS, st.sampled_from(FinishReason))
def test_any_completion_round_trips_to_the_same_bytes(
    content: str | None,
    reasoning: str | None,
    calls: tuple[ToolCall, ...],
    finish: FinishReason,
) -> None:
    check_round_trip(completion(content, reasoning, calls, finish))


# --- from either twin -------------------------------------------------------------------------


def assembled(impl: types.SimpleNamespace, name: str) -> Completion:
    """The Completion a twin's ChatStream assembles from the recording `name`."""
    with impl.ChatStream(open_recording(name)) as stream:
        for _ in stream:
            pass
        return stream.completion  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_completion_of_either_twin_round_trips(
    impl: types.SimpleNamespace, name: str
) -> None:
    c = assembled(impl, name)
    assert type(c) is ValuesCompletion  # one class, so one method serves both twins
    m = c.to_message()
    assert m["role"] == "assistant" and m["content"] == c.content
    assert m.get("reasoning_content") == c.reasoning_content
    assert m.get("tool_calls", []) == [openai_call(x) for x in c.tool_calls]
    check_round_trip(c)


def test_the_recorded_tool_call_gives_the_server_s_call(impl: types.SimpleNamespace) -> None:
    m = assembled(impl, "tool_call").to_message()
    assert m["tool_calls"] == [
        {
            "id": "kQZhSjiaNeduFt5W3MCodqMC5stt33uL",
            "type": "function",
            "function": {
                "name": "read_file",
                "arguments": '{"path"\n\n\t \t \t:"<tool_call><tool_call>"\n\n}',
            },
        }
    ]


def test_the_recorded_reasoning_and_length_keep_what_arrived(impl: types.SimpleNamespace) -> None:
    m = assembled(impl, "reasoning_then_content").to_message()
    assert set(m) == {"role", "content", "reasoning_content"}
    assert m["reasoning_content"].startswith("atanenenqndth") and m["content"].startswith("Yes,")
    cut = assembled(impl, "length")
    assert cut.finish_reason is FinishReason.LENGTH
    assert cut.to_message() == {"role": "assistant", "content": cut.content}


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps(
        {"id": "c9", "choices": [{"index": 0, "finish_reason": finish, "delta": delta}]}
    )


def piece(index: int, arguments: str, name: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    entry: dict[str, Any] = {"index": index, "function": function}
    if name is not None:
        entry |= {"id": f"call{index}", "type": "function"}
        function["name"] = name
    return {"tool_calls": [entry]}


# Two calls streamed interleaved, the second's arguments not JSON as received.
TWO_CALLS = [
    chunk({"reasoning_content": "two files"}),
    chunk(piece(0, '{"path":', "read_file")),
    chunk(piece(1, "{'path': 'b'", "read_file")),
    chunk(piece(0, '"a"}')),
    chunk({}, "tool_calls"),
]


def test_streamed_tool_calls_keep_their_order_and_text(impl: types.SimpleNamespace) -> None:
    asm = impl.Assembler()
    for payload in TWO_CALLS:
        asm.push(payload)
    m = asm.finish().to_message()
    assert m == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "two files",
        "tool_calls": [
            openai_call(ToolCall("call0", "read_file", '{"path":"a"}')),
            openai_call(ToolCall("call1", "read_file", "{'path': 'b'")),
        ],
    }


@needs_c
@pytest.mark.parametrize("name", RECORDED)
def test_both_twins_give_the_same_message(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, name: str
) -> None:
    assert assembled(py_impl, name).to_message() == assembled(c_impl, name).to_message()


# --- a tool round trip through the clients ----------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
FIRST = {"role": "user", "content": "Read notes.txt."}


def answer_tools_then_text(body: dict[str, Any]) -> Reply:
    return Reply("tool_call" if body["messages"][-1]["role"] == "user" else "content_only")


Turn = Callable[[Any, list[Any]], Completion]


def sync_stream(client: Any, messages: list[Any]) -> Completion:
    with client.stream(messages, tools=TOOLS) as stream:
        for _ in stream:
            pass
        return stream.completion  # type: ignore[no-any-return]


def sync_complete(client: Any, messages: list[Any]) -> Completion:
    return client.complete(messages, tools=TOOLS)  # type: ignore[no-any-return]


async def async_stream(client: Any, messages: list[Any]) -> Completion:
    async with client.stream(messages, tools=TOOLS) as stream:
        async for _ in stream:
            pass
        return stream.completion  # type: ignore[no-any-return]


async def async_complete(client: Any, messages: list[Any]) -> Completion:
    return await client.complete(messages, tools=TOOLS)  # type: ignore[no-any-return]


def agent_sync(module: Any, server: ReplayServer, turn: Turn) -> list[Completion]:
    with module.Client(cfg(server)) as client:
        messages: list[Any] = [FIRST]
        done = turn(client, messages)
        messages.append(done.to_message())
        messages += [
            {"role": "tool", "tool_call_id": c.id, "content": "4"} for c in done.tool_calls
        ]
        return [done, turn(client, messages)]


def agent_async(module: Any, server: ReplayServer, turn: Any) -> list[Completion]:
    async def run() -> list[Completion]:
        async with module.AsyncClient(cfg(server)) as client:
            messages: list[Any] = [FIRST]
            done = await turn(client, messages)
            messages.append(done.to_message())
            messages += [
                {"role": "tool", "tool_call_id": c.id, "content": "4"} for c in done.tool_calls
            ]
            return [done, await turn(client, messages)]

    return asyncio.run(run())


AGENTS = {
    "sync-stream": (agent_sync, sync_stream),
    "sync-complete": (agent_sync, sync_complete),
    "async-stream": (agent_async, async_stream),
    "async-complete": (agent_async, async_complete),
}


@pytest.mark.parametrize("module", [llamafast, llamafast.pure], ids=["top", "pure"])
@pytest.mark.parametrize("way", list(AGENTS))
def test_a_tool_round_trip_sends_the_assistant_message_back_as_it_came(
    server: ReplayServer, module: Any, way: str
) -> None:
    server.script = answer_tools_then_text
    agent, turn = AGENTS[way]
    first, last = agent(module, server, turn)
    assert first.finish_reason is FinishReason.TOOL_CALLS and last.content is not None
    sent = [r.body for r in server.requests if r.path == CHAT]
    assert len(sent) == 2
    by_hand = [User(FIRST["content"]), assistant_of(first), Tool(first.tool_calls[0].id, "4")]
    req = ChatRequest(None, by_hand, to_tools(TOOLS))
    assert sent[1] == build_body(cfg(server), req).encode("utf-8")
    message = json.loads(sent[1])["messages"][1]
    (c,) = first.tool_calls
    assert message == {
        "role": "assistant",
        "content": first.content,
        "tool_calls": [openai_call(c)],
    }
    assert c.id == "kQZhSjiaNeduFt5W3MCodqMC5stt33uL" and c.name == "read_file"
    # The first turn's messages come back unchanged, so the server's prompt cache holds.
    assert json.loads(sent[1])["messages"][0] == json.loads(sent[0])["messages"][0]
