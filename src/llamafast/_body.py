"""The request body (06-llama-request.md): a chat request as the exact JSON llama-server expects.

The server's prompt cache only hits when a request repeats the earlier messages byte for byte,
so the body is built from plain dicts in one fixed key order and serialized with fixed
separators: the same inputs always give the same bytes. One implementation serves both twins;
it costs one `json.dumps` per request, not per chunk.
"""

from __future__ import annotations

import json
from typing import Any

from ._config import Config
from ._errors import cut
from ._values import Assistant, ChatMessage, ChatRequest, System, Tool, ToolCall, ToolSchema, User

__all__ = ["build_body"]


def _tool_call(call: ToolCall) -> dict[str, Any]:
    # `arguments` stays the string it is: it is never parsed (06, Rules).
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _message(msg: ChatMessage) -> dict[str, Any]:
    # One rendering per kind (06, "One example of each kind of message").
    match msg:
        case System(content):
            return {"role": "system", "content": content}
        case User(content):
            return {"role": "user", "content": content}
        case Tool(tool_call_id, content):
            return {"role": "tool", "tool_call_id": tool_call_id, "content": content}
        case Assistant(content, reasoning_content, tool_calls):
            # None is sent as "" (the template needs a string); reasoning_content is left out
            # when None, tool_calls when empty (06, Rules).
            out: dict[str, Any] = {
                "role": "assistant",
                "content": "" if content is None else content,
            }
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


def build_body(cfg: Config, req: ChatRequest) -> str:
    """The JSON body for `req`: UTF-8 text (no `\\u` escapes), no insignificant white space.

    Raises `ValueError` for a slot that is not a non-negative integer, for tool parameters that
    are not JSON, and for text that cannot be sent as UTF-8 (a lone surrogate); `TypeError` for a
    message or tool of the wrong type.
    """
    if isinstance(req.slot, bool) or not isinstance(req.slot, int) or req.slot < 0:
        raise ValueError(f"slot must be a non-negative integer, not {req.slot!r}")
    infer, limits = cfg.infer, cfg.limits
    body: dict[str, Any] = {
        "model": infer.model,
        "messages": [_message(m) for m in req.messages],
    }
    if req.tools:  # rendered at the top of the prompt: sent only when there are tools (06)
        body["tools"] = [_tool(t) for t in req.tools]
    body["id_slot"] = req.slot
    body["cache_prompt"] = True
    body["stream"] = True
    body["return_progress"] = True
    body["timings_per_token"] = True
    body["reasoning_control"] = True
    body["max_tokens"] = limits.max_tokens
    body["temperature"] = infer.temperature
    body["top_p"] = infer.top_p
    body["top_k"] = infer.top_k
    # Qwen-style templates think when the flag is absent, so "off" is always sent explicitly.
    body["chat_template_kwargs"] = {"enable_thinking": bool(req.thinking)}
    if limits.sse_ping_interval > 0:
        body["sse_ping_interval"] = limits.sse_ping_interval
    try:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"the request cannot be written as JSON: {err}") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[max(0, err.start - 40) : err.end + 40]
        raise ValueError(f"the request holds text that is not valid Unicode near {bad!r}") from None
    return text
