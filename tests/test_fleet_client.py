# Both clients against two or three loopback servers (docs/client.md, rule FLEET): every turn of
# a conversation lands on one server, from any client with the same urls; a server this client
# fills gives way to the least busy other; a refusing server is skipped, and used again after its
# back-off; numbered slots count across the servers; `stream.server` and `client.servers()` say
# where things went.
"""Several servers: the clients' routing against loopback servers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

import llamafast
from _drivers import FAST, Driver, Outcome
from _embed import EmbedServer, embed_handler, vector_for
from _keepalive import KeepAliveServer
from _resumable import EOF, ResumableServer, body_of
from _server import ReplayServer, Reply, capped_reply
from llamafast import ChatRequest, Config, InferConfig, Limits, ServerState, System, User
from llamafast._core import _fleet

EMBED = "/v1/embeddings"


@contextlib.contextmanager
def servers(*slots: int) -> Iterator[list[ReplayServer]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(ReplayServer(n_slots=n)) for n in slots]


def fleet_cfg(srvs: list[ReplayServer], **limits: Any) -> Config:
    return Config(InferConfig(urls=tuple(s.url for s in srvs)), Limits(**{**FAST, **limits}))


def turns(drive: Driver, cfg: Config, reqs: list[ChatRequest]) -> tuple[list[Outcome], Any]:
    """`reqs` one after another on one client of `drive`'s kind; the outcomes and what its
    `servers()` said at the end."""
    if drive.kind == "sync":
        with llamafast.Client(cfg) as client:
            return [drive.run_on(client, r) for r in reqs], client.servers()

    async def main() -> tuple[list[Outcome], Any]:
        async with llamafast.AsyncClient(cfg) as client:
            return [await drive.run_on(client, r) for r in reqs], client.servers()  # type: ignore[misc]

    return asyncio.run(main())


def conversation(i: int, turn: int) -> ChatRequest:
    """Turn `turn` of conversation `i`: its opening, then one more user message per turn."""
    msgs: list[Any] = [System(f"agent {i}"), User(f"task {i}")]
    msgs += [User(f"step {t}") for t in range(turn)]
    return ChatRequest(None, msgs)


def where(srvs: list[ReplayServer]) -> dict[str, set[int]]:
    """Each conversation's opening user text: the servers its chats arrived at."""
    seen: dict[str, set[int]] = {}
    for n, srv in enumerate(srvs):
        for log in srv.chat_logs():
            seen.setdefault(log.body["messages"][1]["content"], set()).add(n)
    return seen


def test_every_turn_of_a_conversation_lands_on_one_server(drive: Driver) -> None:
    with servers(2, 2, 2) as srvs:
        cfg = fleet_cfg(srvs)
        reqs = [conversation(i, t) for t in range(3) for i in range(8)]
        outs, states = turns(drive, cfg, reqs)
        for out in outs:
            out.ok()
        again, _ = turns(drive, cfg, [conversation(i, 3) for i in range(8)])  # another client
        for out in again:
            out.ok()
        seen = where(srvs)
        assert len(seen) == 8
        assert all(len(s) == 1 for s in seen.values()), seen
        assert len(set().union(*seen.values())) > 1  # spread, not all on one
        assert [s.url for s in states] == [_fleet.normal_url(s.url) for s in srvs]
        assert all(s.up and s.busy == 0 for s in states)
        for out, req in zip(outs, reqs, strict=True):
            if out.stream is not None:  # complete() hands out no stream
                [n] = seen[req.messages[1].content]  # type: ignore[union-attr]
                assert out.stream.server == _fleet.normal_url(srvs[n].url)


def test_the_conversation_key_decides_not_the_messages(drive: Driver) -> None:
    with servers(2, 2, 2) as srvs:
        reqs = [ChatRequest(None, [User(f"q{i}")], conversation="agent-1") for i in range(6)]
        outs, _ = turns(drive, fleet_cfg(srvs), reqs)
        for out in outs:
            out.ok()
        assert sum(1 for s in srvs if s.chat_logs()) == 1
        bodies = [log.body for s in srvs for log in s.chat_logs()]
        assert len(bodies) == 6 and all("conversation" not in b for b in bodies)


def _home(srvs: list[ReplayServer], req: ChatRequest) -> int:
    urls = [_fleet.normal_url(s.url) for s in srvs]
    n = len(srvs)
    return _fleet.choose(_fleet.conversation_key(req), urls, [0] * n, [None] * n, [True] * n)


def test_a_refusing_server_is_skipped_and_used_again_after_its_back_off(
    drive: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_fleet, "DOWN_S", 0.3)
    with servers(2, 2) as srvs:
        req = conversation(0, 0)
        home = _home(srvs, req)
        srvs[home].refuse()
        cfg = fleet_cfg(srvs)
        if drive.kind == "sync":
            with llamafast.Client(cfg) as client:
                moved = drive.run_on(client, req)
                down = client.servers()
                srvs[home].accept()
                while not client.servers()[home].up:
                    time.sleep(0.05)
                back = drive.run_on(client, req)
        else:

            async def main() -> tuple[Outcome, Any, Outcome]:
                async with llamafast.AsyncClient(cfg) as client:
                    moved = await drive.run_on(client, req)  # type: ignore[misc]
                    down = client.servers()
                    srvs[home].accept()
                    while not client.servers()[home].up:
                        await asyncio.sleep(0.05)
                    return moved, down, await drive.run_on(client, req)  # type: ignore[misc]

            moved, down, back = asyncio.run(main())
        moved.ok()
        back.ok()
        assert not any(isinstance(e, llamafast.Retrying) for e in moved.events)
        assert not down[home].up and down[1 - home].up
        assert len(srvs[1 - home].chat_logs()) == 1
        assert len(srvs[home].chat_logs()) == 1  # the second turn went back home


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_server_this_client_fills_gives_way_to_the_least_busy_other(kind: str) -> None:
    with servers(1, 1, 1) as srvs:
        req = conversation(0, 0)
        home = _home(srvs, req)
        cfg = fleet_cfg(srvs)
        if kind == "sync":
            with llamafast.Client(cfg) as client:
                with client.stream(req) as held:
                    next(iter(held))  # the home server's one slot is this client's now
                    during = client.servers()
                    with client.stream(conversation(0, 1)) as other:
                        events = list(other)
                        elsewhere = other.server
                    assert held.server == during[home].url
                    list(held)
                after = client.servers()
        else:

            async def main() -> tuple[Any, Any, str, list[Any]]:
                async with llamafast.AsyncClient(cfg) as client:
                    async with client.stream(req) as held:
                        await anext(aiter(held))
                        during = client.servers()
                        async with client.stream(conversation(0, 1)) as other:
                            events = [e async for e in other]
                            elsewhere = other.server
                        assert held.server == during[home].url
                        _ = [e async for e in held]
                    return during, client.servers(), elsewhere, events

            during, after, elsewhere, events = asyncio.run(main())
        assert events
        assert during[home].busy == 1 and during[home].slots == 1
        assert elsewhere != during[home].url
        assert all(s.busy == 0 for s in after)


def test_each_server_has_its_own_kept_connections(drive: Driver) -> None:
    with KeepAliveServer() as a, KeepAliveServer() as b:
        srvs: list[Any] = [a, b]
        cfg = fleet_cfg(srvs, max_connections=1)
        homes = {_home(srvs, conversation(i, 0)): i for i in range(20)}
        assert len(homes) == 2
        reqs = [conversation(homes[n % 2], n // 2) for n in range(6)]  # a, b, a, b, ...
        outs, _ = turns(drive, cfg, reqs)
        for out in outs:
            out.ok()
        for srv in srvs:  # one connection each, carrying its /slots and its three chats
            assert srv.accepted == 1
            assert [p for _, p in srv.answered].count("/v1/chat/completions") == 3


def _call(kind: str, cfg: Config, method: str, *args: Any, **kw: Any) -> tuple[Any, Any]:
    """`client.method(*args, **kw)` on a new client of `kind`; its result and `servers()`."""
    if kind == "sync":
        with llamafast.Client(cfg) as client:
            return getattr(client, method)(*args, **kw), client.servers()

    async def main() -> tuple[Any, Any]:
        async with llamafast.AsyncClient(cfg) as client:
            return await getattr(client, method)(*args, **kw), client.servers()

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_whole_answer_goes_to_a_server_that_is_up(kind: str) -> None:
    with KeepAliveServer() as a, KeepAliveServer() as b:
        a.refuse()
        models, states = _call(kind, fleet_cfg([a, b]), "models")
        assert models
        assert [s.up for s in states] == [False, True]
        assert b.answered and not a.answered


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_embeddings_batches_spread_over_every_server(kind: str) -> None:
    texts = [f"text number {i}" for i in range(20)]
    with EmbedServer(embed_handler(dim=6)) as a, EmbedServer(embed_handler(dim=6)) as b:
        cfg = fleet_cfg([a, b], embed_batch=5)
        vectors, _ = _call(kind, cfg, "embed", texts)
        assert vectors.tolist() == [vector_for(t, 6) for t in texts]  # float32 exactly
        for srv in (a, b):
            assert sum(len(body["input"]) for p, body in srv.bodies if p == EMBED) == 10


def test_a_broken_stream_resumes_and_a_closed_one_stops_on_its_own_server(drive: Driver) -> None:
    # docs/client.md, rules FLEET and RESUME: the GET and the DELETE go where the POST went.
    length = len(body_of("reasoning_then_content"))
    ask = ChatRequest(None, [User("hi")], thinking=True)
    with ResumableServer() as alone:
        whole = drive.run(Config(InferConfig(url=alone.url), Limits(**FAST)), ask).ok()
    with ResumableServer() as one, ResumableServer() as two:
        srvs: list[Any] = [one, two]
        home, other = (one, two) if _home(srvs, ask) == 0 else (two, one)
        home.breaks = {0: (length // 2, EOF)}
        assert drive.run(fleet_cfg(srvs), ask).ok() == whole

        def sent() -> list[str]:
            return [s.method for s in home.sent if s.path != "/slots"]

        assert sent() == ["POST", "GET"]
        drive.run(fleet_cfg(srvs), ask, stop_after=2)
        assert home.deleted.wait(10)
        assert sent() == ["POST", "GET", "POST", "DELETE"]
        assert not other.sent


def test_the_servers_own_budget_is_learnt_per_server(drive: Driver) -> None:
    # BUDGET, per server: a server seen reasoning past the budget it was sent gets the control
    # request and no budget of its own from then on; the other servers still get theirs.
    with servers(1, 1) as srvs:
        a = next(i for i in range(100) if _home(srvs, conversation(i, 0)) == 0)
        b = next(i for i in range(100) if _home(srvs, conversation(i, 0)) == 1)
        srvs[0].script = [capped_reply(), Reply("reasoning_then_content")]
        srvs[1].script = [Reply("reasoning_then_content"), capped_reply()]
        srvs[1].script.append(Reply("reasoning_then_content"))
        order = [(a, 0), (b, 0), (b, 1), (b, 2), (a, 1)]
        outs, _ = turns(
            drive, fleet_cfg(srvs, thinking_budget=41), [conversation(*t) for t in order]
        )
        assert [o.ok().thinking_capped for o in outs] == [True, True, True, False, False]
        sent = [[c.body.get("reasoning_budget_tokens") for c in s.chats] for s in srvs]
        assert sent == [[42, None], [42, 42, None]]
        assert [len(s.controls) for s in srvs] == [1, 1]


def test_numbered_slots_count_across_servers(drive: Driver) -> None:
    with servers(2, 3) as srvs:
        outs, states = turns(drive, fleet_cfg(srvs), [ChatRequest(3, [User("x")])])
        outs[0].ok()
        assert not srvs[0].chat_logs()
        [log] = srvs[1].chat_logs()
        assert log.body["id_slot"] == 1
        assert [s.slots for s in states] == [2, 3]


def test_a_numbered_slot_past_the_fleet_is_refused_before_the_chat(drive: Driver) -> None:
    with servers(2, 3) as srvs:
        outs, _ = turns(drive, fleet_cfg(srvs), [ChatRequest(5, [User("x")])])
        err = outs[0].raised(ValueError)
        assert "5 slots" in str(err)
        assert not srvs[0].chat_logs() and not srvs[1].chat_logs()


def test_servers_of_one_url_and_the_stream_server() -> None:
    with ReplayServer() as srv:
        cfg = Config(InferConfig(url=srv.url.upper().replace("HTTP://", "http://")), Limits(**FAST))
        with llamafast.Client(cfg) as client:
            with client.stream(ChatRequest(None, [User("x")])) as stream:
                list(stream)
            assert stream.server == _fleet.normal_url(srv.url)
            assert client.servers() == (ServerState(stream.server, True, 0, 0),)
