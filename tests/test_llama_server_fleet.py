# Several real llama-servers (docs/client.md, rule FLEET): every turn of a conversation is answered
# by one server, the same from a second client, and after its first turn the server reuses the
# conversation's prompt from its cache (timings.cache_n) instead of computing it again.
"""Both clients, both twins, against two real llama-servers: conversations stick.

Marker `llama_server`; skipped without LLAMAFAST_LLAMA_SERVER and LLAMAFAST_TEST_MODEL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _llama import NEEDS_SERVER, kill_server, serve_model
from _loopback import RelayProxy
from llamafast import Assistant, ChatRequest, Completion, Config, InferConfig, Limits, System, User

pytestmark = NEEDS_SERVER

# A conversation's server is a hash of its key and the servers' URLs, whose ports are random:
# with 6, all landed on one server in 2 runs of 64 ("both servers used" failed by chance); with
# 16, in 2 of 65,536.
CONVERSATIONS = 16
TURNS = 3


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[str, str]]:
    with serve_model() as first, serve_model() as second:
        yield first, second


def config(urls: tuple[str, ...]) -> Config:
    return Config(InferConfig(urls=urls), Limits(max_tokens=4, retries=0))


def turn(i: int, answers: list[Completion]) -> ChatRequest:
    """The next turn of conversation `i`, after its `answers` so far."""
    msgs: list[Any] = [System(f"You are agent {i}. " * 20), User(f"Task {i}: count to three.")]
    for t, done in enumerate(answers):
        msgs += [Assistant(done.content or ""), User(f"Step {t}: go on.")]
    return ChatRequest(None, msgs, temperature=0.0, seed=1)


Seen = dict[int, list[tuple[str, Any]]]


def run(
    package: Any, kind: str, urls: tuple[str, ...], before: Callable[[int, Seen], None]
) -> Seen:
    """Every conversation's turns, interleaved, on one client: (server, timings) per turn;
    `before(t, seen)` before turn t."""
    seen: Seen = {i: [] for i in range(CONVERSATIONS)}
    answers: dict[int, list[Completion]] = {i: [] for i in range(CONVERSATIONS)}
    if kind == "sync":
        with package.Client(config(urls)) as client:
            for t in range(TURNS):
                before(t, seen)
                for i in range(CONVERSATIONS):
                    with client.stream(turn(i, answers[i])) as stream:
                        list(stream)
                    answers[i].append(stream.completion)
                    seen[i].append((stream.server, stream.completion.timings))
        return seen

    async def main() -> None:
        async with package.AsyncClient(config(urls)) as client:
            for t in range(TURNS):
                before(t, seen)
                for i in range(CONVERSATIONS):
                    async with client.stream(turn(i, answers[i])) as stream:
                        _ = [e async for e in stream]
                    answers[i].append(stream.completion)
                    seen[i].append((stream.server, stream.completion.timings))

    asyncio.run(main())
    return seen


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_turn_of_a_conversation_is_answered_by_one_server_from_its_cache(
    fleet: tuple[str, str], package: Any, kind: str
) -> None:
    seen = run(package, kind, fleet, nothing)
    homes = {i: {server for server, _ in turns} for i, turns in seen.items()}
    assert all(len(h) == 1 for h in homes.values()), homes
    assert len(set().union(*homes.values())) == 2  # both servers used
    for turns in seen.values():
        for _, timings in turns[1:]:  # the opening was computed once, on that server
            assert timings is not None and timings.cache_n > 0
    again = run(package, "sync" if kind == "async" else "async", fleet, nothing)  # another
    assert {i: {s for s, _ in t} for i, t in again.items()} == homes


def nothing(t: int, seen: Seen) -> None:
    """No change between turns."""


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_server_killed_between_turns_moves_its_conversations_and_loses_nothing(kind: str) -> None:
    # One of three servers dies after the first turn: its conversations' next turns go to the
    # next server of their ranking (a refused connection moves a request at once, unsent) and
    # stay there; every turn is answered, once (each server behind a relay that counts the
    # POSTs it took), and the others' conversations stay where they were.
    killed: list[str] = []

    with serve_model() as a, serve_model() as b, serve_model() as c:
        relays = {}
        with contextlib.ExitStack() as stack:
            for url in (a, b, c):
                relay = stack.enter_context(RelayProxy(int(url.rsplit(":", 1)[1])))
                relays[relay.url] = (relay, url)

            def kill_a_home(t: int, seen: Seen) -> None:
                if t == 1:
                    killed.append(seen[0][0][0])  # conversation 0's server (its relay)
                    relay, url = relays[killed[0]]
                    kill_server(url)
                    relay.stop()  # refuses from now on, as the server does

            seen = run(llamafast, kind, tuple(relays), kill_a_home)
    homes = {i: [server for server, _ in turns] for i, turns in seen.items()}
    assert all(len(h) == TURNS for h in homes.values()), homes  # nothing lost
    moved = [i for i, h in homes.items() if h[0] == killed[0]]
    for i, h in homes.items():
        if i in moved:
            assert killed[0] not in h[1:] and len(set(h[1:])) == 1, homes
        else:
            assert len(set(h)) == 1, homes
    posts = [r.requests.count("POST /v1/chat/completions") for r, _ in relays.values()]
    assert sum(posts) == CONVERSATIONS * TURNS, posts  # none sent twice
