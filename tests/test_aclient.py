# What only the asyncio client has: many concurrent streams on one client, task cancellation,
# awaitable callbacks, and no third-party dependency. The rules it shares with Client are
# tested for both in test_client.py (its `drive` fixture).
"""AsyncClient against tests/_server.py: concurrency, cancellation, standard library only."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import itertools
import subprocess
import sys
import time
from typing import Any

import pytest

import llamafast
from _drivers import AsyncDriver, until
from _drivers import cfg as kit_cfg
from _server import ReplayServer, Reply, event_offset, expected, load
from llamafast import (
    AsyncClient,
    ChatEvent,
    ChatRequest,
    Progress,
    Queued,
    User,
)
from llamafast._client import _transport

NAMES = ["content_only", "reasoning_then_content", "tool_call", "length", "usage_chunk"]


SERVER = {"n_slots": 4}  # the `server` fixture's (conftest.py)
# Limits for many streams at once on a slow machine.
cfg = functools.partial(
    kit_cfg, base={"wait_timeout": 20.0, "stall_timeout": 5.0, "retry_base_ms": 10}
)


def test_100_concurrent_streams_complete_in_per_slot_order(server: ReplayServer) -> None:
    def pick(body: dict[str, object]) -> Reply:
        text = body["messages"][0]["content"]  # type: ignore[index]
        name = text.split(":")[1]
        raw = load(name)
        return Reply(name, pause_at=event_offset(raw, 1), pause_s=0.005)

    server.script = pick
    reqs = [ChatRequest(i % 4, [User(f"{i}:{NAMES[i % 5]}")]) for i in range(100)]
    t0 = time.monotonic()
    outs = AsyncDriver().run_many(cfg(server), reqs)
    elapsed = time.monotonic() - t0
    for i, out in enumerate(outs):
        events, completion = expected(NAMES[i % 5])
        assert out.ok() == completion, i
        assert [e for e in out.events if not isinstance(e, Queued)] == events
        queued = [e.ahead for e in out.events if isinstance(e, Queued)]
        assert queued == sorted(queued, reverse=True) and len(set(queued)) == len(queued)
        assert (queued[0] if queued else 0) == i // 4  # behind every earlier one on its slot
    logs = server.chat_logs()
    assert len(logs) == 100
    for slot in range(4):
        mine = [log for log in logs if log.slot == slot]
        order = [int(log.body["messages"][0]["content"].split(":")[0]) for log in mine]
        assert order == list(range(slot, 100, 4))  # per-slot order holds
        for before, after in itertools.pairwise(mine):
            assert after.arrived >= before.ended - 0.01  # one at a time on a slot
    # the four slots did run side by side
    spans = sorted((log.started, log.ended) for log in logs)
    overlapping = sum(1 for a, b in itertools.pairwise(spans) if b[0] < a[1])
    assert overlapping > 10
    assert elapsed < 120  # a hang guard: a few seconds even on a loaded machine


def test_cancelling_the_task_closes_the_connection(server: ReplayServer) -> None:
    raw = load("content_only")
    # the server's pause ends when the client closes: only the cancel can end it
    server.script = [Reply(pause_at=event_offset(raw, 3), pause_s=60.0), Reply()]

    async def main() -> float:
        async with AsyncClient(cfg(server)) as client:
            got: list[ChatEvent] = []

            async def consume() -> None:
                async with client.stream(ChatRequest(0, [User("a")])) as stream:
                    async for event in stream:
                        got.append(event)

            task = asyncio.create_task(consume())
            while len(got) < 3:
                await asyncio.sleep(0.01)
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # the slot is handed on at once: the next request on it streams right away
            second = await client.complete(ChatRequest(0, [User("b")]))
            assert second == expected("content_only")[1]
            return t0

    t0 = asyncio.run(main())
    first = server.chat_logs()[0]
    assert first.closed_by_client and first.closed_at - t0 < 20  # not the 60 s pause


def test_leaving_the_block_early_closes_at_once(server: ReplayServer) -> None:
    raw = load("content_only")
    server.script = [Reply(pause_at=event_offset(raw, 3), pause_s=5.0)]

    async def main() -> None:
        async with AsyncClient(cfg(server)) as client:
            async with client.stream(ChatRequest(0, [User("a")])) as stream:
                async for _ in stream:
                    break
            # the client and the stream are alive: only the block's exit can have closed it
            for _ in range(50):
                if server.chat_logs()[0].closed_by_client:
                    break
                await asyncio.sleep(0.01)
            assert server.chat_logs()[0].closed_by_client
            assert stream.id is not None

    asyncio.run(main())


def test_cancelling_a_queued_task_leaves_the_line(server: ReplayServer) -> None:
    raw = load("content_only")
    server.script = lambda body: Reply(pause_at=event_offset(raw, 2), pause_s=0.3)

    async def main() -> list[list[ChatEvent]]:
        async with AsyncClient(cfg(server)) as client:
            logs: list[list[ChatEvent]] = [[], [], []]

            async def run(i: int) -> None:
                async with client.stream(ChatRequest(0, [User(str(i))])) as stream:
                    async for event in stream:
                        logs[i].append(event)

            tasks = [asyncio.create_task(run(i)) for i in range(3)]
            await asyncio.sleep(0.1)
            tasks[1].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return logs

    logs = asyncio.run(main())
    assert logs[1] == [Queued(1)]
    assert logs[2][:2] == [Queued(2), Queued(1)]  # moved up when the cancelled one left
    assert [log.body["messages"][0]["content"] for log in server.chat_logs()] == ["0", "2"]


def test_complete_awaits_an_async_callback(server: ReplayServer) -> None:
    seen: list[ChatEvent] = []

    async def on_event(event: ChatEvent) -> None:
        await asyncio.sleep(0)
        seen.append(event)

    async def main() -> llamafast.Completion:
        async with AsyncClient(cfg(server)) as client:
            assert client.config == cfg(server)
            return await client.complete(ChatRequest(0, [User("x")]), on_event)

    assert asyncio.run(main()) == expected("content_only")[1]
    assert seen == expected("content_only")[0]


# --- complete(on_event=plain function): events from the arrival callback ----------------------


def run_complete(server: ReplayServer, name: str, on_event: object) -> Any:
    server.script = [Reply(name)]

    async def main() -> llamafast.Completion:
        async with AsyncClient(cfg(server)) as client:
            return await client.complete(ChatRequest(0, [User("x")]), on_event)  # type: ignore[arg-type]

    return asyncio.run(main())


@pytest.mark.parametrize("name", NAMES)
def test_complete_hands_a_plain_function_the_events_from_the_arrival_callback(name: str) -> None:
    seen: list[ChatEvent] = []
    tasks: list[object] = []

    def on_event(event: ChatEvent) -> None:
        seen.append(event)
        tasks.append(asyncio.current_task())

    with ReplayServer(pieces=97, gap=0.002) as server:  # the body in pieces, 2 ms apart
        assert run_complete(server, name, on_event) == expected(name)[1]
    assert seen == expected(name)[0]
    # the first event comes through iteration (inside the task); the body's later events
    # from the protocol's callback, which is what spares a task wake-up per arrival
    assert tasks[0] is not None and tasks[-1] is None


def test_complete_awaits_what_a_plain_function_returns_before_handing_out_more(
    server: ReplayServer,
) -> None:
    seen: list[tuple[str, ChatEvent]] = []

    async def later(event: ChatEvent) -> None:
        await asyncio.sleep(0.002)
        seen.append(("awaited", event))

    def on_event(event: ChatEvent) -> object:
        seen.append(("called", event))
        return later(event)

    want = expected("tool_call")
    assert run_complete(server, "tool_call", on_event) == want[1]
    # each event's awaitable finished before the next event was handed out
    assert seen == [(kind, e) for e in want[0] for kind in ("called", "awaited")]


def test_complete_sees_the_callers_context_variables(server: ReplayServer) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    seen: list[str] = []

    async def main() -> None:
        var.set("the caller's")
        async with AsyncClient(cfg(server)) as client:
            await client.complete(ChatRequest(0, [User("x")]), lambda _: seen.append(var.get()))

    asyncio.run(main())
    assert len(seen) > 2 and set(seen) == {"the caller's"}


def test_an_exception_from_on_event_is_raised_as_is_and_closes_the_stream(
    server: ReplayServer,
) -> None:
    raw = load("content_only")
    server.script = [Reply(pause_at=event_offset(raw, 4), pause_s=5.0)]
    seen: list[ChatEvent] = []

    def on_event(event: ChatEvent) -> None:
        seen.append(event)
        if len(seen) == 3:  # from the arrival callback: the first came through iteration
            raise ValueError("the agent's own bug")

    async def main() -> None:
        async with AsyncClient(cfg(server)) as client:
            await client.complete(ChatRequest(0, [User("x")]), on_event)

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="the agent's own bug") as caught:
        asyncio.run(main())
    assert type(caught.value) is ValueError  # not mapped to a ProtocolError
    assert time.monotonic() - t0 < 20 and len(seen) == 3  # a hang guard
    until(lambda: server.chat_logs()[0].closed_by_client, 20)


def test_stream_state_and_completion_before_end(server: ReplayServer) -> None:
    server.script = [Reply("reasoning_then_content")]

    async def main() -> None:
        async with (
            AsyncClient(cfg(server)) as client,
            client.stream(ChatRequest(0, [User("x")])) as stream,
        ):
            with pytest.raises(RuntimeError, match="not ended yet"):
                _ = stream.completion
            async for event in stream:
                if isinstance(event, Progress):
                    continue
                assert stream.id is not None
            assert stream.reasoning_tokens == 41 and stream.is_finished
            assert stream.completion == expected("reasoning_then_content")[1]

    asyncio.run(main())


def test_async_client_needs_no_third_party_package(server: ReplayServer) -> None:
    # Its transport is its own asyncio protocol: it streams with aiohttp unimportable.
    code = (
        "import asyncio, sys; sys.modules['aiohttp'] = None\n"
        "import llamafast\n"
        f"cfg = llamafast.Config(llamafast.InferConfig(url={server.url!r}))\n"
        "req = llamafast.ChatRequest(0, [llamafast.User('x')])\n"
        "done = asyncio.run(llamafast.AsyncClient(cfg).complete(req))\n"
        "print(done.content)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == expected("content_only")[1].content  # type: ignore[union-attr]


def test_under_uvloop_streams_queue_and_stall_alike(server: ReplayServer) -> None:
    uvloop = pytest.importorskip("uvloop")
    raw = load("content_only")
    server.script = [
        Reply("reasoning_then_content"),
        Reply(),
        Reply(pause_at=event_offset(raw, 3), pause_s=2.0),
    ]

    async def main() -> list[object]:
        client = AsyncClient(cfg(server, stall_timeout=0.3))
        first = client.complete(ChatRequest(0, [User("a")]))
        second = client.complete(ChatRequest(0, [User("b")]))
        done = list(await asyncio.gather(first, second))
        try:
            await client.complete(ChatRequest(0, [User("c")]))
        except llamafast.StalledError as err:
            done.append(err)
        return done

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        first, second, stalled = runner.run(main())
    assert first == expected("reasoning_then_content")[1]
    assert second == expected("content_only")[1]
    assert isinstance(stalled, llamafast.StalledError)


@pytest.mark.parametrize("how", ["stream", "complete"])
@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_finished_request_s_connection_is_freed_by_reference_counting(
    server: ReplayServer, package: Any, how: str
) -> None:
    # A connection holds its parser's buffer (64 KiB) and its Sink: once its request has ended
    # and been let go, nothing may keep it in a reference cycle, or every request's buffers
    # wait for the cycle collector (with it off here, they would never be freed).
    engine = _transport.PURE if package is llamafast.pure else _transport.SELECTED

    async def main() -> None:
        client = package.AsyncClient(cfg(server))
        for _ in range(3):
            if how == "complete":
                await client.complete(ChatRequest(0, [User("hi")]), lambda event: None)
                continue
            async with client.stream(ChatRequest(0, [User("hi")])) as stream:
                async for _ in stream:
                    pass
            del stream
        await asyncio.sleep(0.05)  # the transports' connection_lost callbacks run
        await client.aclose()

    gc.collect()
    gc.disable()
    try:
        asyncio.run(main())
        alive = sum(isinstance(o, engine.AsyncConnection) for o in gc.get_objects())
    finally:
        gc.enable()
        gc.collect()
    assert alive == 0, f"{alive} finished connections kept alive by a reference cycle"
