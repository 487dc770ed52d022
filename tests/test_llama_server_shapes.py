# The openai shapes and fields the body speaks (docs/request-body.md, rules OPENAI-SHAPE,
# MESSAGES and REASONING) against a real llama-server: what the client converts, the server
# reads as it reads the openai shape itself, and the reasoning fields are taken.
"""A real llama-server reads developer, name, assistant text parts and the reasoning fields.

Marker `llama_server`; skipped without LLAMAFAST_LLAMA_SERVER and LLAMAFAST_TEST_MODEL (see
tests/test_llama_server.py for the model it needs).
"""

from __future__ import annotations

import http.client
import json
from typing import Any

from _llama import NEEDS_SERVER
from llamafast import (
    ChatEvent,
    ChatRequest,
    Client,
    Config,
    InferConfig,
    Limits,
    Reasoning,
    User,
    build_body,
)
from llamafast._messages import chat_request

pytestmark = NEEDS_SERVER

# The openai SDK's shapes: developer with a name, a user's name, assistant text parts.
OPENAI = [
    {"role": "developer", "content": "Answer briefly.", "name": "house"},
    {"role": "user", "content": "Say hi.", "name": "ann"},
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}],
    },
    {"role": "user", "content": "Again."},
]


def config(url: str, **limits: Any) -> Config:
    return Config(InferConfig(url=url), Limits(**{"stall_timeout": 120.0, **limits}))


def post(url: str, path: str, body: dict[str, Any]) -> Any:
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        text = answer.read()
        assert answer.status == 200, text
        return json.loads(text)
    finally:
        conn.close()


def test_the_converted_messages_give_the_prompt_the_openai_shape_gives(llama: str) -> None:
    sent = json.loads(build_body(config(llama), chat_request(OPENAI, {})))
    ours = post(llama, "/apply-template", {"messages": sent["messages"]})["prompt"]
    theirs = post(llama, "/apply-template", {"messages": OPENAI})["prompt"]
    assert ours == theirs and "Answer briefly." in ours


def test_a_call_in_the_openai_shape_is_answered(llama: str) -> None:
    client = Client(config(llama, max_tokens=8))
    done = client.complete(OPENAI, max_completion_tokens=8, reasoning_effort="low")
    assert done.timings.predicted_n > 0
    assert client.count_tokens(OPENAI) > 0


def test_reasoning_effort_none_is_taken_and_nothing_reasons(llama: str) -> None:
    events: list[ChatEvent] = []
    done = Client(config(llama, max_tokens=16)).complete(
        [User("Say hello.")], events.append, reasoning_effort="none"
    )
    assert not any(isinstance(e, Reasoning) for e in events)
    assert done.reasoning_content is None and done.timings.predicted_n > 0


def test_the_server_ends_the_reasoning_at_reasoning_budget_tokens(llama: str) -> None:
    # The end of reasoning pushed far down and end-of-generation banned, as in
    # tests/test_llama_server.py: the model would reason through all 64 tokens, but the server
    # forces the end at the budget.
    end = post(llama, "/tokenize", {"content": "</think>"})["tokens"]

    def run(budget: int | None) -> int:
        req = ChatRequest(
            None,
            [User("Think step by step: what is 17 * 23?")],
            thinking=True,
            max_tokens=64,
            reasoning_effort="high",
            reasoning_budget_tokens=budget,
            extra={"logit_bias": [[t, -100.0] for t in end], "ignore_eos": True},
        )
        return Client(config(llama)).complete(req).reasoning_tokens

    assert run(None) >= 60
    assert run(8) <= 12
