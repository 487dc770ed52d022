"""The openai-shaped messages and tools (`_messages`), and the content parts: the values, their
checks, and the body they give (docs/request-body.md, rules PARTS and OPENAI-SHAPE)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamafast import (
    Assistant,
    Audio,
    ChatRequest,
    Config,
    Image,
    System,
    Text,
    Tool,
    ToolCall,
    ToolSchema,
    User,
    build_body,
)
from llamafast._messages import chat_request, to_messages, to_tools

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(40)
CFG = Config()


def body(req: ChatRequest) -> dict[str, Any]:
    parsed = json.loads(build_body(CFG, req))
    assert isinstance(parsed, dict)
    return parsed


def messages_of(*msgs: Any) -> list[Any]:
    return body(ChatRequest(None, list(msgs)))["messages"]  # type: ignore[no-any-return]


# --- the content parts: values ------------------------------------------------------------------


def test_user_and_system_keep_a_string_as_it_is() -> None:
    assert User("hi").content == "hi"
    assert System("be brief").content == "be brief"


def test_a_sequence_of_parts_is_stored_as_a_tuple_and_stays_hashable() -> None:
    parts = [Text("look"), Image(PNG, "image/png")]
    msg = User(parts)
    assert msg.content == (Text("look"), Image(PNG, "image/png"))
    assert isinstance(msg.content, tuple)
    assert msg == User(tuple(parts))
    assert hash(msg) == hash(User(tuple(parts)))
    assert System([Text("s")]).content == (Text("s"),)


def test_bytes_like_data_is_kept_as_bytes() -> None:
    assert Image(bytearray(b"ab"), "image/png").data == b"ab"
    assert type(Audio(memoryview(b"ab"), "wav").data) is bytes


@pytest.mark.parametrize("cls", [User, System])
def test_content_that_is_not_a_string_or_parts_is_refused_naming_the_part(cls: Any) -> None:
    with pytest.raises(TypeError, match=r"content\[1\] must be Text, Image or Audio.*'oops'"):
        cls([Text("a"), "oops"])
    with pytest.raises(TypeError, match="must be a string or a sequence"):
        cls(b"bytes")
    with pytest.raises(TypeError, match="must be a string or a sequence"):
        cls(5)
    with pytest.raises(ValueError, match="empty sequence"):
        cls([])


def test_image_takes_data_with_an_image_mime_type_or_a_url() -> None:
    with pytest.raises(ValueError, match="needs data"):
        Image()
    with pytest.raises(ValueError, match="not both"):
        Image(PNG, "image/png", url="https://x/y.png")
    with pytest.raises(ValueError, match=r"mime must be an image MIME type.*None"):
        Image(PNG)
    with pytest.raises(ValueError, match="'audio/wav'"):
        Image(PNG, "audio/wav")
    with pytest.raises(TypeError, match=r"Image\.data must be bytes, not str"):
        Image("abc", "image/png")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="url must be a non-empty string"):
        Image(url="")


def test_audio_needs_bytes_and_a_format() -> None:
    with pytest.raises(ValueError, match=r"format must be a format name.*''"):
        Audio(WAV, "")
    with pytest.raises(TypeError, match=r"Audio\.data must be bytes"):
        Audio("x", "wav")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Text\.text must be a string"):
        Text(5)  # type: ignore[arg-type]


def test_a_part_s_repr_shows_the_size_not_the_bytes() -> None:
    big = Image(bytes(1 << 20), "image/jpeg")
    assert repr(big) == "Image(data=<1048576 bytes>, mime='image/jpeg')"
    assert repr(Audio(b"abc", "mp3")) == "Audio(data=<3 bytes>, format='mp3')"
    assert repr(Image(url="https://x/y.png")) == "Image(url='https://x/y.png')"


# --- the content parts: the body ---------------------------------------------------------------


def test_parts_are_written_in_openai_content_part_shape() -> None:
    msg = User([Text("what is this?"), Image(PNG, "image/png"), Audio(WAV, "wav")])
    b64_png = base64.b64encode(PNG).decode()
    assert messages_of(msg) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64_png}"}},
                {
                    "type": "input_audio",
                    "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"},
                },
            ],
        }
    ]


def test_an_image_url_is_sent_as_given() -> None:
    msg = System([Image(url="https://example.com/a.png")])
    assert messages_of(msg) == [
        {
            "role": "system",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
        }
    ]


def test_the_body_with_parts_is_the_same_bytes_every_time_and_compact() -> None:
    req = ChatRequest(0, [User([Text("é"), Image(PNG, "image/webp")])])
    one = build_body(CFG, req)
    assert one == build_body(CFG, ChatRequest(0, [User([Text("é"), Image(PNG, "image/webp")])]))
    assert '"content":[{"type":"text","text":"é"},{"type":"image_url","image_url":' in one
    # The base64 text appears once, with no escapes or white space inside it.
    b64 = base64.b64encode(PNG).decode()
    assert one.count(b64) == 1
    assert f'"url":"data:image/webp;base64,{b64}"' in one


def test_a_plain_string_content_is_still_a_string_in_the_body() -> None:
    assert messages_of(User("hi")) == [{"role": "user", "content": "hi"}]


# --- openai-shaped messages -------------------------------------------------------------------


def test_openai_dicts_convert_to_the_library_values() -> None:
    got = to_messages(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "think",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a":1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "assistant", "content": "done"},
            User("values pass through"),
        ]
    )
    assert got == (
        System("be brief"),
        User("hi"),
        Assistant(None, "think", (ToolCall("c1", "f", '{"a":1}'),)),
        Tool("c1", "42"),
        Assistant("done"),
        User("values pass through"),
    )


def test_openai_content_parts_convert_to_parts() -> None:
    data_uri = "data:image/png;base64," + base64.b64encode(PNG).decode()
    (msg,) = to_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": data_uri, "detail": "low"}},
                    {
                        "type": "input_audio",
                        "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"},
                    },
                ],
            }
        ]
    )
    assert msg == User([Text("see"), Image(url=data_uri), Audio(WAV, "wav")])
    # The same body as the values built by hand.
    by_hand = User([Text("see"), Image(PNG, "image/png"), Audio(WAV, "wav")])
    assert build_body(CFG, ChatRequest(None, [msg])) == build_body(
        CFG, ChatRequest(None, [by_hand])
    )


@pytest.mark.parametrize(
    ("message", "error", "pattern"),
    [
        ("hi", TypeError, r"messages\[1\] must be System, User, Assistant, Tool or an openai"),
        ({"content": "x"}, ValueError, r"messages\[1\] has no 'role'"),
        ({"role": "bot", "content": "x"}, ValueError, r"messages\[1\]\['role'\] is 'bot'"),
        ({"role": "user"}, ValueError, r"messages\[1\] has no 'content'"),
        (
            {"role": "tool", "tool_call_id": "c", "content": "x", "name": "bob"},
            ValueError,
            r"messages\[1\] has the key 'name', which is not one of role, content, tool_call_id$",
        ),
        (
            {"role": "user", "content": "x", "name": 5},
            TypeError,
            r"messages\[1\]\['name'\] must be a string, not int: 5$",
        ),
        (
            {"role": "developer", "content": "x", "name": ""},
            ValueError,
            r"messages\[1\]\['name'\] is empty",
        ),
        (
            {"role": "developer", "content": "x", "tool_call_id": "c"},
            ValueError,
            r"messages\[1\] has the key 'tool_call_id', which is not one of role, content, name$",
        ),
        (
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            ValueError,
            r"messages\[1\]\['content'\]\[0\]\['type'\] is 'image_url': an assistant's content "
            r"parts are 'text' only",
        ),
        (
            {"role": "assistant", "content": [{"type": "text", "text": "a", "x": 1}]},
            ValueError,
            r"messages\[1\]\['content'\]\[0\] has the key 'x'",
        ),
        (
            {"role": "assistant", "content": [{"type": "text"}]},
            ValueError,
            r"messages\[1\]\['content'\]\[0\] has no 'text'",
        ),
        (
            {"role": "assistant", "content": []},
            ValueError,
            r"messages\[1\]\['content'\] is an empty list",
        ),
        (
            {"role": "user", "content": 5},
            TypeError,
            r"messages\[1\]\['content'\] must be a string or a list of content parts "
            r"\(text, image_url, input_audio\), not int: 5$",
        ),
        (
            {"role": "user", "content": None},
            TypeError,
            r"messages\[1\]\['content'\] must be a string or a list of content parts "
            r"\(text, image_url, input_audio\), not None$",
        ),
        (
            {"role": "user", "content": []},
            ValueError,
            r"messages\[1\]\['content'\] is an empty list",
        ),
        (
            {"role": "user", "content": [{"type": "video", "x": 1}]},
            ValueError,
            r"messages\[1\]\['content'\]\[0\]\['type'\] is 'video'",
        ),
        (
            {"role": "user", "content": [{"type": "text"}]},
            ValueError,
            r"messages\[1\]\['content'\]\[0\] has no 'text'",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": "http://x"}]},
            TypeError,
            r"messages\[1\]\['content'\]\[0\]\['image_url'\] must be a dict, not str",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": "@@", "format": "wav"}}
                ],
            },
            ValueError,
            r"messages\[1\]\['content'\]\[0\]\['input_audio'\]\['data'\] is not base64",
        ),
        (
            {"role": "tool", "content": "x"},
            ValueError,
            r"messages\[1\] has no 'tool_call_id'",
        ),
        (
            {"role": "tool", "tool_call_id": "c", "content": ["x"]},
            TypeError,
            r"messages\[1\]\['content'\] must be a string, not list",
        ),
        (
            {"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "function": {}}]},
            ValueError,
            r"messages\[1\]\['tool_calls'\]\[0\]\['function'\] has no 'arguments'",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            TypeError,
            r"\['tool_calls'\]\[0\]\['function'\]\['arguments'\] must be the arguments' JSON text",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "x", "function": {}}],
            },
            ValueError,
            r"messages\[1\]\['tool_calls'\]\[0\]\['type'\] is 'x', not 'function'",
        ),
        (
            {"role": "assistant", "reasoning_content": 3},
            TypeError,
            r"messages\[1\]\['reasoning_content'\] must be a string or None, not int",
        ),
    ],
)
def test_a_bad_openai_message_names_its_index_and_key(
    message: Any, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        to_messages([{"role": "user", "content": "fine"}, message])


def test_messages_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="messages must be a list, not dict"):
        to_messages({"role": "user", "content": "hi"})
    with pytest.raises(TypeError, match="messages must be a list, not str"):
        to_messages("hi")


def test_a_name_is_kept_on_every_role_openai_gives_one_and_sent_unchanged() -> None:
    got = to_messages(
        [
            {"role": "system", "content": "rules", "name": "house"},
            {"role": "developer", "content": "be brief", "name": "dev"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"},
            {"role": "assistant", "content": "hello", "name": "bot"},
        ]
    )
    assert got == (
        System("rules", "house"),
        System("be brief", "dev"),
        User([Text("hi")], "ann"),
        Assistant("hello", name="bot"),
    )
    assert messages_of(*got) == [
        {"role": "system", "content": "rules", "name": "house"},
        {"role": "system", "content": "be brief", "name": "dev"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"},
        {"role": "assistant", "content": "hello", "name": "bot"},
    ]


def test_developer_is_the_system_role_and_gives_the_system_message_s_bytes() -> None:
    (dev,) = to_messages([{"role": "developer", "content": [{"type": "text", "text": "s"}]}])
    assert dev == System([Text("s")])
    as_system = to_messages([{"role": "system", "content": [{"type": "text", "text": "s"}]}])
    assert build_body(CFG, ChatRequest(None, [dev])) == build_body(
        CFG, ChatRequest(None, as_system)
    )


def test_assistant_text_parts_are_kept_and_sent_as_parts() -> None:
    # llama-server reads an assistant's text parts itself (joined with "\n" for a template that
    # takes only strings, handed on as parts to one that takes them): sent as they came.
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    (msg,) = to_messages([{"role": "assistant", "content": parts, "tool_calls": []}])
    assert msg == Assistant([Text("one"), Text("two")])
    assert messages_of(msg) == [{"role": "assistant", "content": parts}]


# --- openai-shaped tools and the call's fields -------------------------------------------------


def test_openai_tool_dicts_convert_to_tool_schemas() -> None:
    params = {"type": "object", "properties": {"p": {"type": "string"}}}
    schema = ToolSchema("g", "", {"type": "object"})
    got = to_tools(
        [
            {
                "type": "function",
                "function": {"name": "f", "description": "d", "parameters": params},
            },
            {"type": "function", "function": {"name": "bare"}},
            schema,
        ]
    )
    assert got == (
        ToolSchema("f", "d", params),
        ToolSchema("bare", "", {"type": "object", "properties": {}}),
        schema,
    )
    with pytest.raises(ValueError, match=r"tools\[0\]\['function'\] has no 'name'"):
        to_tools([{"type": "function", "function": {}}])
    with pytest.raises(ValueError, match=r"tools\[0\]\['type'\] is 'web'"):
        to_tools([{"type": "web", "function": {"name": "f"}}])
    with pytest.raises(TypeError) as err:
        to_tools([{"type": "function", "function": {"name": "f", "parameters": "notadict"}}])
    assert str(err.value) == (
        "tools[0]['function']['parameters'] must be a dict, not str: 'notadict'"
    )


def test_chat_request_from_messages_and_fields_leaves_the_slot_to_the_server() -> None:
    req = chat_request(
        [{"role": "user", "content": "hi"}],
        {"max_tokens": 5, "tools": [{"type": "function", "function": {"name": "f"}}]},
    )
    assert req == ChatRequest(
        None,
        (User("hi"),),
        tools=(ToolSchema("f", "", {"type": "object", "properties": {}}),),
        max_tokens=5,
    )
    assert chat_request([User("x")], {"slot": 1}).slot == 1
    assert "id_slot" not in body(req)


def test_max_completion_tokens_is_max_tokens_and_both_are_refused_naming_both() -> None:
    req = chat_request([User("x")], {"max_completion_tokens": 7})
    assert req == ChatRequest(None, (User("x"),), max_tokens=7)
    assert body(req)["max_tokens"] == 7 and "max_completion_tokens" not in body(req)
    with pytest.raises(ValueError) as err:
        chat_request([User("x")], {"max_completion_tokens": 7, "max_tokens": 7})
    assert str(err.value) == (
        "max_tokens and max_completion_tokens are the same field (max_completion_tokens is the "
        "openai SDK's name for it): give one"
    )
    req = ChatRequest(0, [User("x")])
    with pytest.raises(TypeError, match="its fields go in it, not as keywords: max_completion"):
        chat_request(req, {"max_completion_tokens": 3})


def test_the_reasoning_fields_are_keywords_of_the_call() -> None:
    req = chat_request([User("x")], {"reasoning_effort": "none", "reasoning_budget_tokens": 64})
    assert (req.reasoning_effort, req.reasoning_budget_tokens) == ("none", 64)


def test_chat_request_refuses_an_unknown_field_and_fields_beside_a_request() -> None:
    with pytest.raises(TypeError, match="'stream' is not a field of a chat request"):
        chat_request([User("x")], {"stream": True})
    req = ChatRequest(0, [User("x")])
    assert chat_request(req, {}) is req
    with pytest.raises(TypeError, match="its fields go in it, not as keywords: max_tokens"):
        chat_request(req, {"max_tokens": 3})


# --- any parts: the body round-trips, and the openai dict gives the same bytes -----------------

_parts = st.one_of(
    st.builds(Text, st.text()),
    st.builds(Image, st.binary(), st.sampled_from(["image/png", "image/jpeg", "image/webp"])),
    st.builds(Image, url=st.text(min_size=1)),
    st.builds(Audio, st.binary(), st.sampled_from(["wav", "mp3"])),
)


def _as_openai(part: Any) -> dict[str, Any]:
    match part:
        case Text(text):
            return {"type": "text", "text": text}
        case Image(data, mime, None):
            url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
            return {"type": "image_url", "image_url": {"url": url}}
        case Image(None, None, url):
            return {"type": "image_url", "image_url": {"url": url}}
        case Audio(data, fmt):
            b64 = base64.b64encode(data).decode()
            return {"type": "input_audio", "input_audio": {"data": b64, "format": fmt}}
    raise AssertionError(part)


@settings(max_examples=200)
@given(st.lists(_parts, min_size=1, max_size=5))
def test_any_parts_round_trip_and_the_openai_dict_gives_the_same_bytes(parts: list[Any]) -> None:
    req = ChatRequest(None, [User(parts)])
    text = build_body(CFG, req)
    assert text == build_body(CFG, ChatRequest(None, [User(list(parts))]))  # SAME-BYTES
    sent = json.loads(text)["messages"][0]["content"]
    assert sent == [_as_openai(p) for p in parts]
    converted = to_messages([{"role": "user", "content": sent}])
    assert build_body(CFG, ChatRequest(None, converted)) == text


# A content of the wrong type names every type that role accepts, with the message's index and
# the key (docs/request-body.md, rule OPENAI-SHAPE).
PARTS_OR_TEXT = "a string or a list of content parts (text, image_url, input_audio)"


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"role": "user", "content": 123}, f"must be {PARTS_OR_TEXT}, not int: 123"),
        ({"role": "system", "content": 1.5}, f"must be {PARTS_OR_TEXT}, not float: 1.5"),
        ({"role": "user", "content": b"hi"}, f"must be {PARTS_OR_TEXT}, not bytes: b'hi'"),
        (
            {"role": "user", "content": {"type": "text", "text": "hi"}},
            f"must be {PARTS_OR_TEXT}, not dict: {{'type': 'text', 'text': 'hi'}}",
        ),
        ({"role": "tool", "tool_call_id": "c", "content": 7}, "must be a string, not int: 7"),
        (
            {"role": "assistant", "content": 7},
            "must be a string, a list of text parts or None, not int: 7",
        ),
    ],
)
def test_a_content_of_the_wrong_type_names_every_accepted_type(
    message: dict[str, object], says: str
) -> None:
    with pytest.raises(TypeError) as err:
        to_messages([{"role": "user", "content": "first"}, message])
    assert str(err.value) == f"messages[1]['content'] {says}"
