# The ways a test runs one chat request: the sync Client iterated, the AsyncClient iterated, and
# AsyncClient.complete (its events from the arrival callback), each giving an `Outcome`, so a
# test states a rule once and holds every way to it (the `drive` fixture in conftest.py picks
# them). `cfg` makes the Config every such test uses: a server's URL and limits short enough
# for a test, one definition whatever the module.
"""The drivers (`SyncDriver`, `AsyncDriver`, `CompleteDriver`), their `Outcome`, `cfg`, `req`,
and `until` (a wait for what happens on another thread, bounded)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import llamafast
from _server import ReplayServer
from llamafast import ChatEvent, ChatRequest, Completion, Config, InferConfig, Limits, User

# Limits short enough for a loopback test and long enough for a slow machine.
FAST: dict[str, Any] = {
    "wait_timeout": 5.0,
    "load_timeout": 5.0,
    "stall_timeout": 2.0,
    "connect_timeout": 2.0,
    "retries": 3,
    "retry_base_ms": 10,
    "retry_max_ms": 40,
}


def cfg(
    server: ReplayServer | str,
    *,
    base: Mapping[str, Any] = FAST,
    ca_file: str | None = None,
    **limits: Any,
) -> Config:
    """The Config for `server` (a server or its URL): `base` limits, `limits` over them. A module
    whose tests want other limits binds its own `base` (functools.partial)."""
    url = server if isinstance(server, str) else server.url
    return Config(InferConfig(url=url, ca_file=ca_file), Limits(**{**base, **limits}))


def req(slot: int = 0, text: str = "hi", thinking: bool = False) -> ChatRequest:
    """A one-message chat request for `slot`."""
    return ChatRequest(slot, [User(text)], thinking=thinking)


def until(check: Callable[[], object], seconds: float = 10.0) -> None:
    """Wait, looking every 10 ms, until `check()` is true; fail the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.01)


@dataclass
class Outcome:
    """What one request gave: its events, then a Completion or an error."""

    events: list[ChatEvent]
    completion: Completion | None = None
    error: BaseException | None = None
    elapsed: float = 0.0
    stream: Any = None  # kept, so that a test sees the close did not wait for the GC

    def raised(self, cls: type[BaseException]) -> Any:
        assert isinstance(self.error, cls), f"expected {cls.__name__}, got {self.error!r}"
        return self.error

    def ok(self) -> Completion:
        assert self.error is None, f"unexpected {self.error!r}"
        assert self.completion is not None
        return self.completion


OnDone = Callable[[int, Outcome], object]


class SyncDriver:
    """The sync client, iterated; `module` is the package whose `Client` it uses (`llamafast`,
    or `llamafast.pure` for the pure twins)."""

    kind = "sync"

    def __init__(self, module: ModuleType = llamafast) -> None:
        self.module = module

    def run(self, cfg: Config, req: ChatRequest, stop_after: int | None = None) -> Outcome:
        return self.run_on(self.module.Client(cfg), req, stop_after)

    @staticmethod
    def run_on(
        client: llamafast.Client, req: ChatRequest, stop_after: int | None = None
    ) -> Outcome:
        out = Outcome([])
        t0 = time.monotonic()
        try:
            with client.stream(req) as stream:
                out.stream = stream
                for event in stream:
                    out.events.append(event)
                    if stop_after is not None and len(out.events) >= stop_after:
                        break
                else:
                    out.completion = stream.completion
        except Exception as err:
            out.error = err
        out.elapsed = time.monotonic() - t0
        return out

    def run_in_turn(self, cfg: Config, reqs: list[ChatRequest]) -> list[Outcome]:
        """`reqs` one after the other on one client (what it learns carries over)."""
        with self.module.Client(cfg) as client:
            return [self.run_on(client, r) for r in reqs]

    def run_many(
        self, cfg: Config, reqs: list[ChatRequest], on_done: OnDone | None = None
    ) -> list[Outcome]:
        """All of `reqs` at once on one client, each in its own thread, entered in order;
        `on_done(i, outcome)` as soon as request `i` has ended."""
        client = self.module.Client(cfg)
        outs = [Outcome([]) for _ in reqs]
        streams = [client.stream(r).__enter__() for r in reqs]

        def one(i: int) -> None:
            t0 = time.monotonic()
            try:
                with streams[i] as stream:
                    outs[i].events.extend(stream)
                    outs[i].completion = stream.completion
            except Exception as err:
                outs[i].error = err
            outs[i].elapsed = time.monotonic() - t0
            if on_done is not None:
                on_done(i, outs[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return outs


async def timed_outcome(body: Callable[[Outcome], Awaitable[None]]) -> Outcome:
    """What `body` records in a new Outcome, its error caught, and how long it took."""
    out = Outcome([])
    t0 = time.monotonic()
    try:
        await body(out)
    except Exception as err:
        out.error = err
    out.elapsed = time.monotonic() - t0
    return out


class AsyncDriver:
    """The async client, iterated; `module` as for SyncDriver."""

    kind = "async"

    def __init__(self, module: ModuleType = llamafast) -> None:
        self.module = module

    def run(self, cfg: Config, req: ChatRequest, stop_after: int | None = None) -> Outcome:
        async def main() -> Outcome:
            async with self.module.AsyncClient(cfg) as client:
                return await self.run_on(client, req, stop_after)

        return asyncio.run(main())

    @staticmethod
    async def run_on(
        client: llamafast.AsyncClient, req: ChatRequest, stop_after: int | None = None
    ) -> Outcome:
        async def body(out: Outcome) -> None:
            async with client.stream(req) as stream:
                out.stream = stream
                async for event in stream:
                    out.events.append(event)
                    if stop_after is not None and len(out.events) >= stop_after:
                        break
                else:
                    out.completion = stream.completion

        return await timed_outcome(body)

    def run_in_turn(self, cfg: Config, reqs: list[ChatRequest]) -> list[Outcome]:
        """`reqs` one after the other on one client (what it learns carries over)."""

        async def main() -> list[Outcome]:
            async with self.module.AsyncClient(cfg) as client:
                return [await self.run_on(client, r) for r in reqs]

        return asyncio.run(main())

    def run_many(
        self, cfg: Config, reqs: list[ChatRequest], on_done: OnDone | None = None
    ) -> list[Outcome]:
        async def one(client: llamafast.AsyncClient, i: int) -> Outcome:
            out = await self.run_on(client, reqs[i])
            if on_done is not None:
                on_done(i, out)
            return out

        async def main() -> list[Outcome]:
            async with self.module.AsyncClient(cfg) as client:
                return list(await asyncio.gather(*(one(client, i) for i in range(len(reqs)))))

        return asyncio.run(main())


class _Enough(Exception):
    """Raised from `on_event` to stop a `complete` after `stop_after` events."""


class CompleteDriver(AsyncDriver):
    """The async client through `AsyncClient.complete` with a plain function: its events are
    handed out from the arrival callback, not by iteration; stopping early is an exception
    raised from the callback (which must close the stream as leaving `async for` does)."""

    kind = "complete"

    @staticmethod
    async def run_on(
        client: llamafast.AsyncClient, req: ChatRequest, stop_after: int | None = None
    ) -> Outcome:
        async def body(out: Outcome) -> None:
            def on_event(event: ChatEvent) -> None:
                out.events.append(event)
                if stop_after is not None and len(out.events) >= stop_after:
                    raise _Enough

            try:
                out.completion = await client.complete(req, on_event)
            except _Enough:
                pass

        return await timed_outcome(body)


Driver = SyncDriver | AsyncDriver


DRIVERS: dict[str, type[Driver]] = {
    "sync": SyncDriver,
    "async": AsyncDriver,
    "complete": CompleteDriver,
}
