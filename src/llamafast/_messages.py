# Strategy: the openai-shaped call (`client.stream(messages, **fields)`) becomes a ChatRequest
# here, once, for both drivers: each message is a library value or an openai-shaped dict,
# converted key by key; a key or value that has no place in the library's values is refused with
# an error naming the message's index and the key, never dropped (but for two openai hints that
# llama-server does not read: an image's `detail`, a tool's `strict`).
"""Messages and tools written as the openai SDK writes them, converted to the library's values."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypedDict

from ._errors import cut
from ._values import (
    Assistant,
    Audio,
    ChatMessage,
    ChatRequest,
    Image,
    Part,
    ReasoningEffort,
    System,
    Text,
    Tool,
    ToolCall,
    ToolSchema,
    User,
)

__all__ = ["ChatFields", "chat_request", "to_messages", "to_tools"]

# The openai SDK's current name for `max_tokens`, taken as a keyword of the call and sent as
# `max_tokens` (docs/request-body.md, rule OPENAI-SHAPE).
MAX_COMPLETION_TOKENS: Final = "max_completion_tokens"
# The keyword fields of the openai-shaped call: ChatRequest's, but `messages` (the argument),
# and the openai name above.
FIELDS: Final = (
    *(f.name for f in dataclasses.fields(ChatRequest) if f.name != "messages"),
    MAX_COMPLETION_TOKENS,
)


class ChatFields(TypedDict, total=False):
    """The keywords of `stream`, `complete` and `count_tokens`, typed (PEP 692's
    `**fields: Unpack[ChatFields]`), so a type checker rejects an unknown keyword or a value of
    the wrong type (docs/request-body.md, rule TYPED-KEYWORDS). Each may be left out. They are
    the keywords the call takes at run time (`FIELDS`): ChatRequest's fields but `messages`, with
    their types (`reasoning_effort` one of its levels), `tools` taking openai-shaped tool dicts
    too, and `max_completion_tokens`, the openai SDK's name for `max_tokens`, typed and sent as
    it. A dict of them can be handed on (`client.stream(messages, **options)`)."""

    slot: int | None
    tools: Sequence[ToolSchema | Mapping[str, Any]]
    thinking: bool
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    seed: int | None
    stop: Sequence[str]
    tool_choice: str | None
    response_format: Mapping[str, Any] | None
    grammar: str | None
    model: str | None
    logprobs: bool
    top_logprobs: int | None
    reasoning_effort: ReasoningEffort | None
    reasoning_budget_tokens: int | None
    extra: Mapping[str, Any] | None
    conversation: str | None
    max_completion_tokens: int | None


# The keys each role's dict may have (the rest of the openai message has no place in the values):
# `name` on the roles openai gives one (llama-server hands it to the chat template); `developer`
# is the openai SDK's name for the system message, sent as one.
_KEYS: Final = {
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "reasoning_content", "tool_calls"),
    "tool": ("role", "content", "tool_call_id"),
}
_MESSAGE_TYPES: Final = (System, User, Assistant, Tool)
# An empty schema: what a tool without `parameters` takes (no arguments).
_NO_PARAMETERS: Final = {"type": "object", "properties": {}}


Path = tuple[str | int, ...]  # ("messages", 2, "content"): where a value is


def _show(path: Path) -> str:
    """`messages[2]['content']`: the path as Python would index it (made only for an error)."""
    return str(path[0]) + "".join(f"[{k!r}]" for k in path[1:])


def _at(path: Path, *keys: str | int) -> Path:
    return path + keys


def _mapping(where: Path, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{_show(where)} must be a dict, not {type(value).__name__}: {cut(value)}")
    return value


def _check_keys(where: Path, value: Mapping[str, Any], allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    for key in value:
        if key not in allowed:
            raise ValueError(
                f"{_show(where)} has the key {cut(key)}, which is not one of {', '.join(allowed)}"
            )


def _str(where: Path, value: object, *, optional: bool = False) -> Any:
    if isinstance(value, str) or (optional and value is None):
        return value
    what = "a string or None" if optional else "a string"
    raise TypeError(f"{_show(where)} must be {what}, not {type(value).__name__}: {cut(value)}")


def _need(where: Path, value: Mapping[str, Any], key: str) -> Any:
    if key not in value:
        raise ValueError(f"{_show(where)} has no {key!r}")
    return value[key]


def _need_str(where: Path, value: Mapping[str, Any], key: str) -> Any:
    """`value[key]`, which must be there and be a string."""
    return _str(_at(where, key), _need(where, value, key))


def _inner(
    where: Path, outer: Mapping[str, Any], key: str, allowed: Iterable[str]
) -> tuple[Path, Mapping[str, Any]]:
    """Where `outer[key]` is, and it: a dict that must be there, with none but the `allowed`
    keys."""
    inner = _at(where, key)
    value = _mapping(inner, _need(where, outer, key))
    _check_keys(inner, value, allowed)
    return inner, value


def _check_function_type(where: Path, value: Mapping[str, Any]) -> None:
    """A tool call's or a tool's `type`, when given, is "function"."""
    if value.get("type", "function") != "function":
        raise ValueError(f"{_show(_at(where, 'type'))} is {cut(value['type'])}, not 'function'")


def _sequence(where: Path, value: object) -> list[Any]:
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{_show(where)} must be a list, not {type(value).__name__}: {cut(value)}")
    return list(value)


# --- content parts --------------------------------------------------------------------------


def _part(where: Path, value: object) -> Part:
    if isinstance(value, (Text, Image, Audio)):
        return value
    part = _mapping(where, value)
    kind = _need(where, part, "type")
    if kind == "text":
        _check_keys(where, part, ("type", "text"))
        return Text(_need_str(where, part, "text"))
    if kind == "image_url":
        _check_keys(where, part, ("type", "image_url"))
        # `detail` is the openai API's resolution hint; llama-server has no such choice.
        inner, image = _inner(where, part, "image_url", ("url", "detail"))
        url = _need_str(inner, image, "url")
        if not url:
            raise ValueError(f"{_show(_at(inner, 'url'))} is empty")
        return Image(url=url)  # a data: URI is sent as it came
    if kind == "input_audio":
        _check_keys(where, part, ("type", "input_audio"))
        inner, audio = _inner(where, part, "input_audio", ("data", "format"))
        data = _need_str(inner, audio, "data")
        fmt = _need_str(inner, audio, "format")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{_show(_at(inner, 'data'))} is not base64: {cut(data)}") from None
        try:
            return Audio(raw, fmt)
        except ValueError as err:
            raise ValueError(f"{_show(_at(inner, 'format'))}: {err}") from None
    raise ValueError(
        f"{_show(_at(where, 'type'))} is {cut(kind)}, not 'text', 'image_url' or 'input_audio'"
    )


# What a system or user `content` may be: every accepted type, named in the error for another.
_CONTENT_TYPES = "a string or a list of content parts (text, image_url, input_audio)"


def _content_parts(where: Path, value: object) -> str | tuple[Part, ...]:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        shown = "None" if value is None else f"{type(value).__name__}: {cut(value)}"
        raise TypeError(f"{_show(where)} must be {_CONTENT_TYPES}, not {shown}")
    parts = tuple(_part(_at(where, j), p) for j, p in enumerate(_sequence(where, value)))
    if not parts:
        raise ValueError(f"{_show(where)} is an empty list: give the text or at least one part")
    return parts


# What an assistant's `content` may be: every accepted type, named in the error for another.
_ASSISTANT_CONTENT_TYPES = "a string, a list of text parts or None"


def _assistant_content(where: Path, value: object) -> str | tuple[Text, ...] | None:
    """An assistant's content: None, a string, or a list of text parts, kept as parts (the
    server reads them itself: joined with "\n" for a template that takes only strings)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(
            f"{_show(where)} must be {_ASSISTANT_CONTENT_TYPES}, not "
            f"{type(value).__name__}: {cut(value)}"
        )
    parts = []
    for j, item in enumerate(_sequence(where, value)):
        at = _at(where, j)
        if isinstance(item, Text):
            parts.append(item)
            continue
        part = _mapping(at, item)
        kind = _need(at, part, "type")
        if kind != "text":
            raise ValueError(
                f"{_show(_at(at, 'type'))} is {cut(kind)}: an assistant's content parts are "
                "'text' only"
            )
        _check_keys(at, part, ("type", "text"))
        parts.append(Text(_need_str(at, part, "text")))
    if not parts:
        raise ValueError(f"{_show(where)} is an empty list: give the text or at least one part")
    return tuple(parts)


def _name(where: Path, value: Mapping[str, Any]) -> str | None:
    """The message's `name`, when given: a non-empty string."""
    if "name" not in value:
        return None
    name: str = _str(_at(where, "name"), value["name"])
    if not name:
        raise ValueError(f"{_show(_at(where, 'name'))} is empty: give the name or leave it out")
    return name


# --- messages ---------------------------------------------------------------------------------


def _tool_call(where: Path, value: object) -> ToolCall:
    if isinstance(value, ToolCall):
        return value
    call = _mapping(where, value)
    _check_keys(where, call, ("id", "type", "function"))
    _check_function_type(where, call)
    inner, function = _inner(where, call, "function", ("name", "arguments"))
    arguments = _need(inner, function, "arguments")
    if not isinstance(arguments, str):
        raise TypeError(
            f"{_show(_at(inner, 'arguments'))} must be the arguments' JSON text (a string, as the "
            f"server sent it; json.dumps a dict), not {type(arguments).__name__}: {cut(arguments)}"
        )
    return ToolCall(
        _need_str(where, call, "id"),
        _need_str(inner, function, "name"),
        arguments,
    )


def _message(where: Path, value: object) -> ChatMessage:
    if isinstance(value, _MESSAGE_TYPES):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{_show(where)} must be System, User, Assistant, Tool or an openai-shaped dict, not "
            f"{type(value).__name__}: {cut(value)}"
        )
    role = _need(where, value, "role")
    keys = _KEYS.get(role) if isinstance(role, str) else None
    if keys is None:
        raise ValueError(
            f"{_show(_at(where, 'role'))} is {cut(role)}, "
            "not 'system', 'developer', 'user', 'assistant' or 'tool'"
        )
    _check_keys(where, value, keys)
    content = _at(where, "content")
    if role in ("system", "developer"):
        return System(_content_parts(content, _need(where, value, "content")), _name(where, value))
    if role == "user":
        return User(_content_parts(content, _need(where, value, "content")), _name(where, value))
    if role == "tool":
        return Tool(
            _need_str(where, value, "tool_call_id"),
            _str(content, _need(where, value, "content")),
        )
    calls = value.get("tool_calls")
    where_calls = _at(where, "tool_calls")
    return Assistant(
        _assistant_content(content, value.get("content")),
        _str(_at(where, "reasoning_content"), value.get("reasoning_content"), optional=True),
        ()
        if calls is None
        else tuple(
            _tool_call(_at(where_calls, k), c) for k, c in enumerate(_sequence(where_calls, calls))
        ),
        _name(where, value),
    )


def to_messages(messages: object) -> tuple[ChatMessage, ...]:
    """`messages` as the library's values: each one a value already, or an openai-shaped dict
    (`role`, `content`, `name`, `tool_calls`, `tool_call_id`, `reasoning_content`) converted;
    the `developer` role is the system message.

    Raises ValueError or TypeError naming the message's index and the key at fault."""
    return tuple(
        _message(("messages", i), m) for i, m in enumerate(_sequence(("messages",), messages))
    )


def to_tools(tools: object) -> tuple[ToolSchema, ...]:
    """`tools` as ToolSchemas: each one a ToolSchema, or the openai shape
    `{"type": "function", "function": {"name", "description", "parameters"}}`."""
    out = []
    for i, value in enumerate(_sequence(("tools",), tools)):
        if isinstance(value, ToolSchema):
            out.append(value)
            continue
        where: Path = ("tools", i)
        tool = _mapping(where, value)
        _check_keys(where, tool, ("type", "function"))
        _check_function_type(where, tool)
        inner, function = _inner(
            where, tool, "function", ("name", "description", "parameters", "strict")
        )
        parameters = function.get("parameters", _NO_PARAMETERS)
        _mapping(_at(inner, "parameters"), parameters)
        out.append(
            ToolSchema(
                _need_str(inner, function, "name"),
                _str(_at(inner, "description"), function.get("description", "")),
                parameters,
            )
        )
    return tuple(out)


def chat_request(req: object, fields: Mapping[str, Any]) -> ChatRequest:
    """The ChatRequest a client call means: `req` itself when it is one (then no `fields`), or
    the messages `req` and the keyword `fields` (ChatRequest's; `slot` None unless given;
    `max_completion_tokens` is `max_tokens`, and both given is a ValueError)."""
    if isinstance(req, ChatRequest):
        if fields:
            raise TypeError(
                f"a ChatRequest was given, so its fields go in it, not as keywords: "
                f"{', '.join(sorted(fields))}"
            )
        return req
    for key in fields:
        if key not in FIELDS:
            raise TypeError(
                f"{key!r} is not a field of a chat request; the fields are {', '.join(FIELDS)}"
            )
    if MAX_COMPLETION_TOKENS in fields:
        if "max_tokens" in fields:
            raise ValueError(
                f"max_tokens and {MAX_COMPLETION_TOKENS} are the same field "
                f"({MAX_COMPLETION_TOKENS} is the openai SDK's name for it): give one"
            )
        fields = dict(fields)
        fields["max_tokens"] = fields.pop(MAX_COMPLETION_TOKENS)
    if "tools" in fields:
        fields = {**fields, "tools": to_tools(fields["tools"])}
    return ChatRequest(**{"slot": None, **fields}, messages=to_messages(req))
