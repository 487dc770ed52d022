# Against a real llama-server: start it on a free loopback port, wait for /health, stream chats
# through both clients (one with thinking, its reasoning ended through the control endpoint),
# stop it. Needs LLAMAFAST_LLAMA_SERVER (the binary) and LLAMAFAST_TEST_MODEL (a GGUF file).
"""Integration with a real llama-server (marker `llama_server`; skipped without the variables).

Run it with:

    LLAMAFAST_LLAMA_SERVER=/path/to/llama-server LLAMAFAST_TEST_MODEL=/path/to/model.gguf \\
        python -m pytest -m llama_server tests/test_llama_server.py

The model must think (a Qwen3-style chat template whose prompt opens the reasoning, as
Qwen3.5's does; the server runs with `--jinja --reasoning-format deepseek`), and the server must
support `reasoning_control` (the build the recordings came from does). The tests do not count on
what a random-weight model happens to write: where the outcome matters they steer it (a grammar,
a JSON schema, a seed, `logit_bias` and `ignore_eos` through `extra`). A second server, started
with `--api-key`, checks the Authorization header. LLAMAFAST_LLAMA_SERVER_ARGS adds arguments
(split like a shell).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import llamafast
from _llama import ASK_NOTES, NEEDS_SERVER, READ_FILE, SLOTS, serve_model, tokens, tool_call_request
from llamafast import (
    AsyncClient,
    ChatEvent,
    ChatRequest,
    Client,
    Completion,
    Config,
    Content,
    FinishReason,
    HttpError,
    InferConfig,
    Limits,
    Reasoning,
    ThinkingCapped,
    Tool,
    ToolCallDelta,
    User,
)

pytestmark = NEEDS_SERVER


API_KEY = "llamafast-test-key-0123"


@pytest.fixture(scope="module")
def llama_with_key() -> Iterator[str]:
    """A second server, which answers only requests carrying API_KEY (/health stays open)."""
    with serve_model("--api-key", API_KEY) as url:
        yield url


def config(url: str, api_key: str | None = None, **limits: object) -> Config:
    base: dict[str, object] = {"max_tokens": 256, "stall_timeout": 120.0, "retry_base_ms": 50}
    limits = {**base, **limits}
    return Config(InferConfig(url=url, api_key=api_key), Limits(**limits))  # type: ignore[arg-type]


def think_request(url: str) -> ChatRequest:
    """A request that reasons past any small budget whatever the weights: the end of reasoning
    is pushed far down (a large finite bias, so the reasoning_end the client asks for, which
    forces that token, still wins) and end-of-generation tokens are banned (ignore_eos)."""
    bias = [[token, -100.0] for token in tokens(url, "</think>")]
    return ChatRequest(
        0,
        [User("Think step by step: what is 17 * 23?")],
        thinking=True,
        extra={"logit_bias": bias, "ignore_eos": True},
    )


def check_capped(events: list[ChatEvent], completion: Completion, budget: int) -> None:
    capped = [e for e in events if isinstance(e, ThinkingCapped)]
    assert len(capped) == 1 and capped[0].tokens >= budget, events[:50]
    assert completion.thinking_capped
    assert completion.reasoning_content and completion.finish_reason in FinishReason
    at = events.index(capped[0])
    assert any(isinstance(e, Reasoning) for e in events[:at])
    # the server ended the reasoning: it stops soon after, and an answer may follow
    assert completion.reasoning_tokens < 256


@pytest.mark.parametrize("honoured", [True, False])
def test_stream_with_thinking_ended_at_the_budget(llama: str, honoured: bool) -> None:
    # This server ends the reasoning at the request's reasoning_budget_tokens: the budget goes
    # as its own, and the reasoning stops at it. Where a server is known not to honour it, the
    # client asks it to end the reasoning (the control endpoint), a few tokens past the budget.
    client = Client(config(llama, thinking_budget=16))
    if not honoured:
        client._core.budget_honoured = False  # as if an earlier answer had shown it
    events: list[ChatEvent] = []
    with client.stream(think_request(llama)) as stream:
        for event in stream:
            events.append(event)
        completion = stream.completion
    check_capped(events, completion, 16)
    assert completion.id.startswith("chatcmpl")
    assert client._core.budget_honoured is honoured
    if honoured:
        assert completion.reasoning_tokens == 16 and ThinkingCapped(16) in events
    else:
        assert completion.reasoning_tokens > 16


@pytest.mark.parametrize("honoured", [True, False])
def test_async_stream_with_thinking_ended(llama: str, honoured: bool) -> None:
    req = think_request(llama)

    async def main() -> tuple[list[ChatEvent], Completion]:
        async with AsyncClient(config(llama, thinking_budget=16)) as client:
            if not honoured:
                client._core.budget_honoured = False
            events: list[ChatEvent] = []
            completion = await client.complete(req, events.append)
            assert client._core.budget_honoured is honoured
            return events, completion

    events, completion = asyncio.run(main())
    check_capped(events, completion, 16)
    assert (completion.reasoning_tokens == 16) is honoured


def test_answer_without_thinking(llama: str) -> None:
    events: list[ChatEvent] = []
    completion = Client(config(llama, max_tokens=32)).complete(
        ChatRequest(1, [User("Say hello.")]), events.append
    )
    assert not any(isinstance(e, Reasoning) for e in events)
    assert completion.content and any(isinstance(e, Content) for e in events)
    assert completion.timings.predicted_n > 0


def test_slot_the_server_does_not_have(llama: str) -> None:
    with pytest.raises(ValueError, match=f"slot {SLOTS} does not exist"):
        Client(config(llama)).complete(ChatRequest(SLOTS, [User("hi")]))


# --- the per-request fields ------------------------------------------------------------------


def test_response_format_with_a_json_schema_gives_valid_json(llama: str) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "integer", "enum": [1, 2, 3]},
            "word": {"type": "string", "enum": ["yes", "no"]},
        },
        "required": ["answer", "word"],
        "additionalProperties": False,
    }
    req = ChatRequest(
        0,
        [User("Answer in JSON.")],
        max_tokens=400,  # room for the white space the schema's grammar allows
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    )
    completion = Client(config(llama)).complete(req)
    assert completion.finish_reason is FinishReason.STOP, completion
    value = json.loads(completion.content or "")
    assert set(value) == {"answer", "word"}
    assert value["answer"] in (1, 2, 3) and value["word"] in ("yes", "no")


def test_the_same_seed_gives_the_same_text(llama: str) -> None:
    client = Client(config(llama))
    req = ChatRequest(1, [User("Write a few words.")], max_tokens=24, temperature=1.0, seed=1234)
    first, second = client.complete(req), client.complete(req)
    assert first.content and first.timings.predicted_n == 24
    assert (second.content, second.reasoning_content) == (first.content, first.reasoning_content)


def test_stop_ends_the_answer(llama: str) -> None:
    client = Client(config(llama))
    grammar = 'root ::= "alpha beta gamma delta"'  # the model can write only this
    whole = client.complete(ChatRequest(0, [User("Say it.")], grammar=grammar, max_tokens=64))
    assert whole.content == "alpha beta gamma delta"
    cut = client.complete(
        ChatRequest(0, [User("Say it.")], grammar=grammar, max_tokens=64, stop=["gamma"])
    )
    assert cut.finish_reason is FinishReason.STOP
    assert cut.content is not None and cut.content.rstrip() == "alpha beta"


def test_max_tokens_and_temperature_per_request(llama: str) -> None:
    completion = Client(config(llama)).complete(
        ChatRequest(0, [User("Go on.")], max_tokens=5, temperature=0.0, extra={"ignore_eos": True})
    )
    assert completion.finish_reason is FinishReason.LENGTH
    assert completion.timings.predicted_n == 5
    assert completion.timings.predicted_ms > 0 and completion.timings.predicted_per_second > 0


# --- what the server reports -------------------------------------------------------------------


def test_usage_and_model_come_with_every_completion(llama: str) -> None:
    client = Client(config(llama))
    req = ChatRequest(0, [User("Count on.")], max_tokens=6, extra={"ignore_eos": True})
    events: list[ChatEvent] = []
    first = client.complete(req, events.append)
    second = client.complete(req)  # the same prompt again: from the slot's cache
    assert first.model and first.model == second.model
    assert first.usage is not None and second.usage is not None
    assert first.usage.completion_tokens == first.timings.predicted_n == 6
    assert first.usage.prompt_tokens == first.timings.prompt_n + first.timings.cache_n
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    assert second.usage.cached_tokens == second.timings.cache_n > 0
    # not asked for: none on the events or the completion
    assert first.logprobs == () and all(e.logprobs == () for e in events if isinstance(e, Content))


def test_logprobs_and_top_logprobs_on_the_events_and_the_completion(llama: str) -> None:
    req = ChatRequest(
        1,
        [User("Go on.")],
        max_tokens=8,
        logprobs=True,
        top_logprobs=2,
        extra={"ignore_eos": True},
    )

    async def main() -> tuple[list[ChatEvent], Completion]:
        async with AsyncClient(config(llama)) as client:
            events: list[ChatEvent] = []
            return events, await client.complete(req, events.append)

    sync_events: list[ChatEvent] = []
    sync = Client(config(llama)).complete(req, sync_events.append)
    for events, completion in [(sync_events, sync), asyncio.run(main())]:
        contents = [e for e in events if isinstance(e, Content)]
        assert completion.logprobs == tuple(t for e in contents for t in e.logprobs)
        assert completion.usage is not None
        # one per token whose text the server sent (it holds back a partial UTF-8 character)
        assert 0 < len(completion.logprobs) <= completion.usage.completion_tokens == 8
        for t in completion.logprobs:
            assert t.token and t.logprob <= 0.0 and len(t.top) == 2
            assert t.top[0][1] >= t.top[1][1]  # most likely first
            assert t.logprob <= t.top[0][1]  # the token drawn is at most the likeliest


def test_top_logprobs_without_logprobs_is_refused_before_it_is_sent(llama: str) -> None:
    with pytest.raises(ValueError, match="top_logprobs 2 needs logprobs=True"):
        Client(config(llama)).complete(ChatRequest(0, [User("hi")], top_logprobs=2))


def test_slot_none_lets_the_server_pick_and_runs_concurrently(llama: str) -> None:
    client = Client(config(llama))
    req = ChatRequest(None, [User("Say hello.")], max_tokens=16)
    done: list[Completion] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            done.append(client.complete(req))
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(SLOTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(done) == SLOTS and all(c.timings.predicted_n > 0 for c in done)


# --- a server started with --api-key ----------------------------------------------------------


def test_api_key_is_sent_on_every_request(llama_with_key: str) -> None:
    # /slots, chat and (with a budget) the control endpoint all need the key on this server
    client = Client(config(llama_with_key, api_key=API_KEY, thinking_budget=8))
    client._core.budget_honoured = False  # the budget through the control endpoint
    completion = client.complete(
        ChatRequest(0, [User("Think, then say hello.")], thinking=True, max_tokens=48)
    )
    assert completion.timings.predicted_n > 0


def test_async_client_sends_the_api_key(llama_with_key: str) -> None:
    async def main() -> Completion:
        async with AsyncClient(config(llama_with_key, api_key=API_KEY)) as client:
            return await client.complete(ChatRequest(1, [User("Say hello.")], max_tokens=8))

    assert asyncio.run(main()).timings.predicted_n > 0


@pytest.mark.parametrize("key", [None, "not-the-key"])
def test_without_the_right_key_the_server_answers_401(llama_with_key: str, key: str | None) -> None:
    with pytest.raises(HttpError) as err:
        Client(config(llama_with_key, api_key=key)).complete(
            ChatRequest(0, [User("hi")], max_tokens=4)
        )
    assert err.value.status == 401
    assert "not-the-key" not in str(err.value)


@pytest.mark.parametrize("mod", [llamafast, llamafast.pure], ids=["default", "pure"])
def test_a_tool_round_trip(llama: str, mod: Any) -> None:
    # The server's own tool-call grammar and parser make the call (the sampling steers the test
    # model to it); the client reads it streamed, and the next turn, built with to_message(),
    # is one the server takes.
    with mod.Client(config(llama)) as client:
        events: list[ChatEvent] = []
        done = client.complete(tool_call_request(llama), events.append)
        assert done.finish_reason is FinishReason.TOOL_CALLS
        [call] = done.tool_calls
        assert call.name == "read_file" and json.loads(call.arguments) == {"path": "notes.txt"}
        assert call.id and any(isinstance(e, ToolCallDelta) for e in events)
        assert done.usage is not None and done.usage.completion_tokens > 0
        message = done.to_message()
        assert message["tool_calls"][0]["function"]["arguments"] == call.arguments
        turn = [ASK_NOTES, message, Tool(call.id, "Buy milk.")]
        after = client.complete(turn, slot=0, tools=[READ_FILE], max_tokens=8)
        assert after.content and after.finish_reason is FinishReason.LENGTH
        # the call and its answer are in the prompt
        assert after.usage is not None and after.usage.prompt_tokens > done.usage.prompt_tokens
