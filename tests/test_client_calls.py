# The openai-shaped call, per-request limits, the clients as context managers and the log
# (docs/client.md, rules OPENAI-SHAPE, LIMITS, CLOSE-CLIENT and LOG), through every way of
# calling: Client and AsyncClient, `stream` and `complete`, of `llamafast` and `llamafast.pure`.
"""Client and AsyncClient: messages and fields as keywords, `limits=`, `with`, and logging."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _drivers import FAST, Outcome, timed_outcome
from _drivers import cfg as make_cfg
from _server import ReplayServer, Reply, capped_reply, event_offset, expected, load
from llamafast import (
    BusyError,
    ChatRequest,
    Config,
    ConnectError,
    Image,
    InferConfig,
    Limits,
    Retrying,
    StalledError,
    Text,
    ThinkingCapped,
    ToolSchema,
    User,
    build_body,
)

CHAT = "/v1/chat/completions"
MODULES = {"llamafast": llamafast, "pure": llamafast.pure}
WAYS = ["sync-stream", "sync-complete", "async-stream", "async-complete"]
SECRET = "sk-never-logged-0123"
PRIVATE = "my private question"

Run = Callable[..., Outcome]


def runner(module: ModuleType, way: str) -> Run:
    """Run one call `way` on a new client of `module`: (cfg, req, **kw) -> Outcome."""

    def sync(cfg: Config, req: Any, **kw: Any) -> Outcome:
        out = Outcome([])
        client = module.Client(cfg)
        try:
            if way == "sync-complete":
                out.completion = client.complete(req, out.events.append, **kw)
            else:
                with client.stream(req, **kw) as stream:
                    out.events.extend(stream)
                    out.completion = stream.completion
        except Exception as err:
            out.error = err
        return out

    def run_async(cfg: Config, req: Any, **kw: Any) -> Outcome:
        async def body(out: Outcome) -> None:
            async with module.AsyncClient(cfg) as client:
                if way == "async-complete":
                    out.completion = await client.complete(req, out.events.append, **kw)
                    return
                async with client.stream(req, **kw) as stream:
                    async for event in stream:
                        out.events.append(event)
                    out.completion = stream.completion

        return asyncio.run(timed_outcome(body))

    return sync if way.startswith("sync") else run_async


@pytest.fixture(params=[(m, w) for m in MODULES for w in WAYS], ids=lambda p: f"{p[0]}-{p[1]}")
def call(request: pytest.FixtureRequest) -> Run:
    module, way = request.param
    return runner(MODULES[module], way)


# --- the openai-shaped call (OPENAI-SHAPE) --------------------------------------------------------


def test_messages_as_openai_dicts_send_the_body_of_the_equal_request(
    call: Run, server: ReplayServer
) -> None:
    cfg = make_cfg(server)
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    out = call(cfg, messages, max_tokens=9, temperature=0.0)
    events, completion = expected("content_only")
    assert out.completion == completion and out.events == events
    (log,) = server.chat_logs()
    same = ChatRequest(
        None,
        [llamafast.System("be brief"), User([Text("hi")])],
        max_tokens=9,
        temperature=0.0,
    )
    assert log.body == json.loads(build_body(cfg, same))
    assert "id_slot" not in log.body  # slot defaults to None: the server picks


def test_the_call_takes_slot_and_openai_tools_as_keywords(call: Run, server: ReplayServer) -> None:
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}
    out = call(make_cfg(server), [User("hi")], slot=1, tools=[tool], tool_choice="f")
    assert out.error is None
    (log,) = server.chat_logs()
    assert log.body["id_slot"] == 1
    assert log.body["tools"] == [tool]
    assert log.body["tool_choice"] == {"type": "function", "function": {"name": "f"}}


def test_a_request_value_still_works_and_refuses_fields_beside_it(
    call: Run, server: ReplayServer
) -> None:
    assert call(make_cfg(server), ChatRequest(0, [User("hi")])).error is None
    err = call(make_cfg(server), ChatRequest(0, [User("hi")]), max_tokens=3).error
    assert isinstance(err, TypeError) and "max_tokens" in str(err)


def test_a_bad_message_is_refused_before_anything_is_sent(call: Run, server: ReplayServer) -> None:
    out = call(make_cfg(server), [{"role": "user", "content": "ok"}, {"role": "user"}])
    assert isinstance(out.error, ValueError)
    assert "messages[1] has no 'content'" in str(out.error)
    out = call(make_cfg(server), [User("hi")], nonsense=1)
    assert isinstance(out.error, TypeError) and "'nonsense'" in str(out.error)
    assert server.requests == []


def test_an_openai_sdk_s_call_reaches_the_server_as_llama_server_reads_it(
    call: Run, server: ReplayServer
) -> None:
    # docs/request-body.md, OPENAI-SHAPE: developer, name, assistant text parts and
    # max_completion_tokens, as the openai SDK sends them today.
    messages = [
        {"role": "developer", "content": "be brief", "name": "house"},
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"},
    ]
    out = call(make_cfg(server), messages, max_completion_tokens=9, reasoning_effort="low")
    assert out.error is None
    (log,) = server.chat_logs()
    assert log.body["messages"] == [
        {"role": "system", "content": "be brief", "name": "house"},
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"},
    ]
    assert (log.body["max_tokens"], log.body["reasoning_effort"]) == (9, "low")
    assert "max_completion_tokens" not in log.body


def test_an_empty_message_list_or_both_token_caps_are_refused_before_anything_is_sent(
    call: Run, server: ReplayServer
) -> None:
    err = call(make_cfg(server), []).error
    assert isinstance(err, ValueError) and str(err).startswith("messages is empty")
    err = call(make_cfg(server), [User("hi")], max_tokens=3, max_completion_tokens=3).error
    assert isinstance(err, ValueError) and "max_tokens and max_completion_tokens" in str(err)
    assert server.requests == []


def test_parts_reach_the_server_in_content_part_shape(call: Run, server: ReplayServer) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(20)
    out = call(make_cfg(server), [User([Text("what?"), Image(png, "image/png")])])
    assert out.error is None
    (log,) = server.chat_logs()
    content = log.body["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "what?"}
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")


# --- per-request limits (LIMITS) ----------------------------------------------------------------


def test_limits_bound_the_body_of_that_request_only(call: Run, server: ReplayServer) -> None:
    cfg = make_cfg(server, max_tokens=100)
    assert call(cfg, [User("a")], limits=Limits(**{**FAST, "max_tokens": 7})).error is None
    assert call(cfg, [User("b")]).error is None
    first, second = server.chat_logs()
    assert first.body["max_tokens"] == 7 and second.body["max_tokens"] == 100


def test_limits_bound_the_waiting_of_that_request(call: Run, server: ReplayServer) -> None:
    # The client would wait for the busy slot; this request's limits say not to.
    with server.hold_busy(0):
        out = call(make_cfg(server), [User("hi")], slot=0, limits=Limits(wait_for_slot=False))
    assert isinstance(out.error, BusyError)
    assert CHAT not in server.paths()


def test_limits_bound_the_retries_of_that_request(call: Run, server: ReplayServer) -> None:
    server.refuse()
    out = call(make_cfg(server, retries=3), [User("hi")], limits=Limits(**{**FAST, "retries": 0}))
    assert isinstance(out.error, ConnectError) and out.events == []
    out = call(make_cfg(server, retries=1), [User("hi")])
    assert isinstance(out.error, ConnectError) and [type(e) for e in out.events] == [Retrying]


def test_limits_bound_the_stall_of_that_request(call: Run, server: ReplayServer) -> None:
    raw = load("content_only")
    server.default = Reply("content_only", pause_at=event_offset(raw, 1), pause_s=1.5)
    limits = Limits(**{**FAST, "stall_timeout": 0.2})
    out = call(make_cfg(server, stall_timeout=30.0), [User("hi")], limits=limits)
    assert isinstance(out.error, StalledError) and out.error.seconds == 0.2


def test_limits_bound_the_thinking_of_that_request(call: Run, server: ReplayServer) -> None:
    server.script = [capped_reply()]
    limits = Limits(**{**FAST, "thinking_budget": 20})
    out = call(make_cfg(server), [User("hi")], slot=0, thinking=True, limits=limits)
    assert out.completion is not None and out.completion.thinking_capped
    assert sum(isinstance(e, ThinkingCapped) for e in out.events) == 1


def test_limits_must_be_limits(call: Run, server: ReplayServer) -> None:
    out = call(make_cfg(server), [User("hi")], limits={"retries": 0})
    assert isinstance(out.error, TypeError) and "limits must be a Limits, not dict" in str(
        out.error
    )


# --- the clients as context managers (CLOSE-CLIENT) ---------------------------------------------


@pytest.mark.parametrize("module", MODULES.values(), ids=MODULES.keys())
def test_with_client_closes_its_open_streams_and_then_refuses(
    module: ModuleType, server: ReplayServer
) -> None:
    hold = threading.Event()
    server.default = Reply(hold=hold)
    with module.Client(make_cfg(server)) as client:
        stream = client.stream([User("hi")]).__enter__()
        timer = threading.Timer(0.2, client.close)  # from another thread, as a blocked read
        timer.start()
        assert list(stream) == []  # the close ended the read: no events, no completion
        timer.join()
    hold.set()
    with pytest.raises(RuntimeError, match="Client is closed"):
        client.stream([User("again")])
    with pytest.raises(RuntimeError, match="Client is closed"):
        client.complete([User("again")])


@pytest.mark.parametrize("module", MODULES.values(), ids=MODULES.keys())
def test_leaving_with_client_closes_a_stream_left_open(
    module: ModuleType, server: ReplayServer
) -> None:
    with module.Client(make_cfg(server)) as client:
        stream = client.stream([User("hi")]).__enter__()
        next(iter(stream))
    assert stream._closed and stream._conns == []
    with pytest.raises(RuntimeError, match="closed"):
        stream.completion  # noqa: B018


@pytest.mark.parametrize("module", MODULES.values(), ids=MODULES.keys())
def test_async_with_client_closes_its_open_streams_and_then_refuses(
    module: ModuleType, server: ReplayServer
) -> None:
    async def main() -> None:
        async with module.AsyncClient(make_cfg(server)) as client:
            stream = client.stream([User("hi")])
            await stream.__aenter__()
            await stream.__anext__()
        assert stream._closed and stream._conns == []
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        with pytest.raises(RuntimeError, match="AsyncClient is closed"):
            client.stream([User("again")])

    asyncio.run(main())


# --- the log (LOG) -----------------------------------------------------------------------------


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llamafast"]


def test_one_debug_line_per_request_without_key_or_text(
    call: Run, server: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.api_key = SECRET
    cfg = Config(InferConfig(url=server.url + "?token=q1", api_key=SECRET), Limits(**FAST))
    caplog.set_level(logging.DEBUG, logger="llamafast")
    out = call(cfg, [{"role": "user", "content": PRIVATE}], slot=1)
    assert out.error is None
    assert lines(caplog) == [
        f"POST http://127.0.0.1:{server.port}{CHAT}: slot 1, 1 message(s), "
        f"{len(server.requests[-1].body)} bytes"
    ]
    assert all(r.levelno == logging.DEBUG for r in caplog.records)
    text = caplog.text
    assert SECRET not in text and PRIVATE not in text and "q1" not in text


def test_a_debug_line_per_retry_and_wait(
    call: Run, server: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="llamafast")
    server.refuse_for(0.05)
    call(make_cfg(server, retries=50), [User(PRIVATE)])
    retries = [ln for ln in lines(caplog) if "retry" in ln]
    assert retries and retries[0].startswith("any slot: retry 1 in ")
    caplog.clear()
    # Busy until the client has said it waits: no clock decides what it sees.
    server.busy_until(0, lambda: any("waiting" in r.getMessage() for r in caplog.records))
    call(make_cfg(server, slot_check_delay=0.05), [User(PRIVATE)], slot=0)
    assert "slot 0: waiting, the slot is busy" in lines(caplog)
    assert PRIVATE not in caplog.text


def test_a_debug_line_for_a_thinking_cap(
    call: Run, server: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="llamafast")
    server.script = [capped_reply()]
    out = call(make_cfg(server, thinking_budget=20), [User(PRIVATE)], slot=0, thinking=True)
    assert out.completion is not None and out.completion.thinking_capped
    capped = [ln for ln in lines(caplog) if "thinking capped" in ln]
    assert len(capped) == 1 and capped[0].startswith("slot 0: thinking capped after ")


def test_nothing_is_logged_above_debug(call: Run, server: ReplayServer, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="llamafast")
    server.refuse_for(0.05)
    call(make_cfg(server, retries=50), [User("hi")])
    assert lines(caplog) == []


def test_schema_values_and_dicts_mix(call: Run, server: ReplayServer) -> None:
    schema = ToolSchema("g", "", {"type": "object"})
    out = call(make_cfg(server), [User("hi")], tools=[schema])
    assert out.error is None
    assert server.chat_logs()[0].body["tools"][0]["function"]["name"] == "g"
