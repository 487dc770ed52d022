"""The request body: a chat request as the exact JSON llama-server expects (docs/request-body.md).

The server's prompt cache only hits when a request repeats the earlier messages byte for byte,
so the body is built from plain dicts in one fixed key order and serialized with fixed
separators: the same inputs always give the same bytes. One implementation serves both twins;
it costs one `json.dumps` per request, not per chunk.
"""

from __future__ import annotations

import base64
import json
import math
import typing
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ._config import Config
from ._errors import cut
from ._values import (
    Assistant,
    Audio,
    Image,
    ReasoningEffort,
    System,
    Text,
    Tool,
    ToolSchema,
    User,
)

if TYPE_CHECKING:  # named in annotations only
    from ._values import ChatMessage, ChatRequest, Part, ToolCall

__all__ = ["RESERVED", "build_body"]


def _tool_call(call: ToolCall) -> dict[str, Any]:
    # `arguments` stays the string it is: it is never parsed (06, Rules).
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _part(part: Part) -> dict[str, Any]:
    # OpenAI's content-part shape, as llama-server reads it (docs/request-body.md, rule PARTS):
    # bytes go as base64 (encoded once, here), an image's inside a data: URI with its MIME type.
    match part:
        case Text(text):
            return {"type": "text", "text": text}
        case Image(data, mime, url):
            if url is None:
                url = f"data:{mime};base64,{_b64(data)}"
            return {"type": "image_url", "image_url": {"url": url}}
        case Audio(data, fmt):
            return {"type": "input_audio", "input_audio": {"data": _b64(data), "format": fmt}}
    raise TypeError(f"a content part must be Text, Image or Audio, not {type(part).__name__}")


def _b64(data: bytes | None) -> str:
    return base64.b64encode(data or b"").decode("ascii")


def _content(content: str | Sequence[Part]) -> str | list[dict[str, Any]]:
    return content if isinstance(content, str) else [_part(p) for p in content]


def _spoken(role: str, content: str | Sequence[Part], name: str | None) -> dict[str, Any]:
    """A system or user message; `name` follows the content, only when given, so a message
    without one has the bytes it always had (SAME-BYTES)."""
    out: dict[str, Any] = {"role": role, "content": _content(content)}
    if name is not None:
        out["name"] = name
    return out


def _message(msg: ChatMessage) -> dict[str, Any]:
    # One rendering per kind (06, "One example of each kind of message").
    match msg:
        case System(content, name):
            return _spoken("system", content, name)
        case User(content, name):
            return _spoken("user", content, name)
        case Tool(tool_call_id, content):
            return {"role": "tool", "tool_call_id": tool_call_id, "content": content}
        case Assistant(content, reasoning_content, tool_calls, name):
            # None is sent as "" (the template needs a string); text parts as parts, which the
            # server reads itself; name, reasoning_content are left out when None, tool_calls
            # when empty (06, Rules).
            out: dict[str, Any] = {
                "role": "assistant",
                "content": "" if content is None else _content(content),
            }
            if name is not None:
                out["name"] = name
            if reasoning_content is not None:
                out["reasoning_content"] = reasoning_content
            if tool_calls:
                out["tool_calls"] = [_tool_call(c) for c in tool_calls]
            return out
    kind = type(msg).__name__
    raise TypeError(f"a message must be System, User, Assistant or Tool, not {kind}: {cut(msg)}")


def _tool(tool: ToolSchema) -> dict[str, Any]:
    if not isinstance(tool, ToolSchema):
        raise TypeError(
            f"a tool must be a ToolSchema, not {type(tool).__name__}: {cut(repr(tool))}"
        )
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


# Every key the library writes itself. `extra` may add fields, never replace one of these: the
# prompt cache, the stream's shape and the client's own bookkeeping depend on them.
RESERVED: Final = frozenset(
    {
        "model",
        "messages",
        "tools",
        "id_slot",
        "stream",
        "stream_options",
        "cache_prompt",
        "return_progress",
        "timings_per_token",
        "reasoning_control",
        "chat_template_kwargs",
        "sse_ping_interval",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "tool_choice",
        "response_format",
        "grammar",
        "logprobs",
        "top_logprobs",
        "reasoning_effort",
        "reasoning_budget_tokens",
    }
)

# tool_choice words the server knows; any other string must name one of the request's tools.
_CHOICES: Final = ("auto", "none", "required")
# reasoning_effort's levels, as llama-server names them: the type's (_values.ReasoningEffort).
EFFORTS: Final = typing.get_args(ReasoningEffort)
# reasoning_budget_tokens' bounds in the server (its server-schema.cpp): -1 is its own default.
_BUDGET_MAX: Final = 2**31 - 1


# No NaN or Infinity (not JSON), UTF-8 rather than \u escapes, no insignificant white space:
# json.dumps's text with these options, from one encoder made once (json.dumps makes one per
# call when given options; encode keeps no state between calls, so threads may share it).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _int(name: str, value: Any, lo: int | None) -> int:
    """An integer field (bool is not one), at least `lo` when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {cut(value)}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be at least {lo}, not {value!r}")
    return int(value)


def _number(name: str, value: Any, hi: float | None) -> float:
    """A finite number (bool is not one) from 0 up to `hi` when given, as a float: 1 and 1.0
    make equal requests, so they are written the same way."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {cut(value)}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, not {value!r}")
    if value < 0 or (hi is not None and value > hi):
        where = "at least 0" if hi is None else f"from 0 to {hi:g}"
        raise ValueError(f"{name} must be {where}, not {value!r}")
    return float(value)


def _stop(stop: Any) -> list[str]:
    # A bare string is a Sequence[str] too; sent as one it would stop at each of its characters.
    kind = type(stop)
    if kind is not tuple and kind is not list:  # those two spared the ABC's slower check
        if isinstance(stop, (str, bytes)) or not isinstance(stop, Sequence):
            raise ValueError(f"stop must be a sequence of strings, not {cut(stop)}")
    out = []
    for i, s in enumerate(stop):
        if not isinstance(s, str):
            raise ValueError(f"stop[{i}] must be a string, not {cut(s)}")
        if not s:
            raise ValueError(f"stop[{i}] is empty: an empty stop string would end every answer")
        out.append(s)
    return out


def _tool_choice(choice: Any, tools: Sequence[ToolSchema]) -> str | dict[str, Any]:
    if not isinstance(choice, str):
        raise ValueError(f"tool_choice must be a string, not {cut(choice)}")
    if choice in _CHOICES:  # a keyword wins over a tool of the same name
        return choice
    names = [t.name for t in tools]
    if choice not in names:
        known = ", ".join(repr(n) for n in names) if names else "the request has no tools"
        raise ValueError(
            f"tool_choice {cut(choice)} is not 'auto', 'none', 'required' or the name of one "
            f"of the request's tools ({known})"
        )
    return {"type": "function", "function": {"name": choice}}


def _extra(extra: Any) -> list[tuple[str, Any]]:
    """`extra`'s fields sorted by key (so equal mappings give the same bytes)."""
    if not isinstance(extra, Mapping):
        raise ValueError(f"extra must be a mapping of field names to values, not {cut(extra)}")
    for key in extra:
        if not isinstance(key, str):
            raise ValueError(f"extra's keys must be strings, not {cut(key)}")
        if key in RESERVED:
            raise ValueError(
                f"extra may not set {key!r}: the library writes that field itself "
                "(use the ChatRequest or Config field for it)"
            )
    return sorted(extra.items())


def _unwritable(body: dict[str, Any]) -> str:
    """The name of the first field of `body` that json cannot write (as `extra['k']` for extra's
    fields, which follow the library's own)."""
    for key, value in body.items():
        try:
            _dumps(value)
        except (TypeError, ValueError, RecursionError):  # as _serialize's
            return key if key in RESERVED else f"extra[{key!r}]"
    return "the request"  # pragma: no cover - only a failing field makes the whole fail


def build_body(cfg: Config, req: ChatRequest) -> str:
    """The JSON body for `req`: UTF-8 text (no `\\u` escapes), no insignificant white space.

    A per-request field left None takes the Config's value where it has one (`max_tokens`,
    `temperature`, `top_p`, `top_k`) and is otherwise left out; `slot=None` leaves `id_slot`
    out so the server picks the slot; `extra`'s fields follow the library's own, sorted by key.
    Equal requests give identical bytes (nested mappings keep their own key order: a JSON
    schema's property order steers the model).

    Raises `ValueError` naming the field for a bad slot, an out-of-range or mistyped value, an
    unknown `tool_choice`, an `extra` key the library writes itself, a value json cannot write,
    and text that cannot be sent as UTF-8 (a lone surrogate); `TypeError` for a message or tool
    of the wrong type.
    """
    if not req.messages:  # the server would answer a 400 or a prompt of nothing but the template
        raise ValueError("messages is empty: a chat request needs at least one message")
    slot = req.slot
    if slot is not None and (isinstance(slot, bool) or not isinstance(slot, int) or slot < 0):
        raise ValueError(f"slot must be a non-negative integer or None, not {slot!r}")
    conversation = req.conversation  # a client's routing key (rule FLEET): never sent
    if conversation is not None and not isinstance(conversation, str):
        raise ValueError(f"conversation must be a string or None, not {cut(conversation)}")
    model = cfg.infer.model
    if req.model is not None:  # the request's model wins over the config's (router mode)
        if not isinstance(req.model, str) or not req.model:
            raise ValueError(f"model must be a non-empty string or None, not {cut(req.model)}")
        model = req.model
    body: dict[str, Any] = {
        "model": model,
        "messages": [_message(m) for m in req.messages],
    }
    if req.tools:  # rendered at the top of the prompt: sent only when there are tools
        body["tools"] = [_tool(t) for t in req.tools]
    if slot is not None:  # left out, the server picks the slot whose cache fits the prompt best
        body["id_slot"] = slot
    if _plain(req):  # the rest as written last time for this Config: the same text
        tail = _plain_tail(cfg, req)
        return _utf8(f"{_json(body)[:-1]},{tail}}}")
    _add_tail(body, cfg, req)
    return _utf8(_json(body))


def _add_tail(body: dict[str, Any], cfg: Config, req: ChatRequest) -> None:
    """The fields after `id_slot`, in their order."""
    body["cache_prompt"] = True
    body["stream"] = True
    body["return_progress"] = True
    body["timings_per_token"] = True
    body["reasoning_control"] = True
    # The usage chunk (Completion.usage): after the finish chunk, one with the token counts.
    body["stream_options"] = {"include_usage": True}
    _add_sampling(body, cfg, req)
    _add_output_controls(body, req)
    _add_reasoning(body, req)
    # Qwen-style templates think when the flag is absent, so "off" is always sent explicitly.
    body["chat_template_kwargs"] = {"enable_thinking": bool(req.thinking)}
    if cfg.limits.sse_ping_interval > 0:
        body["sse_ping_interval"] = cfg.limits.sse_ping_interval
    if req.extra is not None:
        body.update(_extra(req.extra))


def _plain(req: ChatRequest) -> bool:
    """`req` sets none of the fields after `id_slot` but `thinking` and
    `reasoning_budget_tokens` (each of the others at its default: the Config's values go)."""
    stop = req.stop
    return (
        req.max_tokens is None
        and req.temperature is None
        and req.top_p is None
        and req.top_k is None
        and req.min_p is None
        and req.seed is None
        and (type(stop) is tuple or type(stop) is list)
        and not stop
        and req.tool_choice is None
        and req.response_format is None
        and req.grammar is None
        and req.logprobs is False
        and req.top_logprobs is None
        and req.reasoning_effort is None
        and req.extra is None
    )


# The last plain request's fields after `id_slot` as JSON members: (the Config, thinking, the
# budget, the text). Those of a plain request (`_plain`) depend on these alone, and a Config
# is frozen, so the same one (`is`) gives the same text: most requests of a client are plain
# and share it, which spares writing and checking a dozen fields per request.
_last_tail: tuple[Config | None, bool, int | None, str] = (None, False, None, "")


def _plain_tail(cfg: Config, req: ChatRequest) -> str:
    global _last_tail
    thinking = bool(req.thinking)
    budget = req.reasoning_budget_tokens
    last = _last_tail
    if last[0] is cfg and last[1] is thinking and type(budget) is int and last[2] == budget:
        return last[3]
    if budget is None and last[0] is cfg and last[1] is thinking and last[2] is None:
        return last[3]
    tail: dict[str, Any] = {}
    _add_tail(tail, cfg, req)  # checks the budget as the full path does
    text = _json(tail)[1:-1]
    _last_tail = (cfg, thinking, budget, text)
    return text


def _add_sampling(body: dict[str, Any], cfg: Config, req: ChatRequest) -> None:
    """The sampling fields, each the request's (checked) or else the Config's, in their order:
    `max_tokens`, `temperature`, `top_p`, `top_k`, then `min_p`, `seed` and `stop` when given."""
    infer, limits = cfg.infer, cfg.limits
    body["max_tokens"] = (
        limits.max_tokens if req.max_tokens is None else _int("max_tokens", req.max_tokens, 1)
    )
    body["temperature"] = (
        infer.temperature
        if req.temperature is None
        else _number("temperature", req.temperature, None)
    )
    body["top_p"] = infer.top_p if req.top_p is None else _number("top_p", req.top_p, 1.0)
    body["top_k"] = infer.top_k if req.top_k is None else _int("top_k", req.top_k, 0)
    if req.min_p is not None:
        body["min_p"] = _number("min_p", req.min_p, 1.0)
    if req.seed is not None:
        body["seed"] = _int("seed", req.seed, None)
    stop = _stop(req.stop)
    if stop:  # an empty list would be sent for nothing
        body["stop"] = stop


def _add_output_controls(body: dict[str, Any], req: ChatRequest) -> None:
    """The fields that shape the answer, each only when given: `tool_choice`,
    `response_format`, `grammar`, `logprobs`, `top_logprobs`."""
    if req.tool_choice is not None:
        body["tool_choice"] = _tool_choice(req.tool_choice, req.tools)
    if req.response_format is not None:
        if not isinstance(req.response_format, Mapping):
            raise ValueError(f"response_format must be a mapping, not {cut(req.response_format)}")
        body["response_format"] = dict(req.response_format)  # as given, any Mapping
    if req.grammar is not None:
        if not isinstance(req.grammar, str):
            raise ValueError(f"grammar must be a string, not {cut(req.grammar)}")
        body["grammar"] = req.grammar
    # Sent only when asked for: a body without them is the body of before (docs/request-body.md,
    # rule LOGPROBS); the server refuses top_logprobs without logprobs, so it is refused here.
    if req.logprobs is not False:
        if req.logprobs is not True:
            raise ValueError(f"logprobs must be True or False, not {cut(req.logprobs)}")
        body["logprobs"] = True
    if req.top_logprobs is not None:
        if not req.logprobs:
            raise ValueError(
                f"top_logprobs {cut(req.top_logprobs)} needs logprobs=True (the server refuses it "
                "without)"
            )
        body["top_logprobs"] = _int("top_logprobs", req.top_logprobs, 0)


def _add_reasoning(body: dict[str, Any], req: ChatRequest) -> None:
    """`reasoning_effort` and `reasoning_budget_tokens`, each only when given (a body without
    them is the body of before), checked as the server reads them."""
    effort = req.reasoning_effort
    if effort is not None:
        if not isinstance(effort, str):
            raise ValueError(f"reasoning_effort must be a string, not {cut(effort)}")
        if effort not in EFFORTS:
            levels = ", ".join(repr(e) for e in EFFORTS)
            raise ValueError(f"reasoning_effort must be one of {levels}, not {cut(effort)}")
        if effort == "none" and req.thinking:
            raise ValueError(
                "reasoning_effort 'none' turns thinking off, but thinking=True turns it on: "
                "give one"
            )
        body["reasoning_effort"] = effort
    if req.reasoning_budget_tokens is not None:
        budget = _int("reasoning_budget_tokens", req.reasoning_budget_tokens, -1)
        if budget > _BUDGET_MAX:
            raise ValueError(f"reasoning_budget_tokens must be at most {_BUDGET_MAX}, not {budget}")
        body["reasoning_budget_tokens"] = budget


def _json(body: dict[str, Any]) -> str:
    """`body` as JSON text; a ValueError naming the field json cannot write."""
    try:
        return _dumps(body)
    # RecursionError stays: json.dumps recurses once per level of a caller's value
    # (response_format, extra), which no depth check bounds before it is written.
    except (TypeError, ValueError, RecursionError) as err:
        raise ValueError(f"{_unwritable(body)} cannot be written as JSON: {err}") from None


def _utf8(text: str) -> str:
    """`text`, the body sent; a ValueError for text that cannot be sent as UTF-8 (a lone
    surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[max(0, err.start - 40) : err.end + 40]
        raise ValueError(f"the request holds text that is not valid Unicode near {bad!r}") from None
    return text
