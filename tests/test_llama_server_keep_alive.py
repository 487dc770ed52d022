# Keep-alive against a real llama-server (docs/client.md, rule KEEP-ALIVE): it keeps a connection
# open after a whole answer (`Keep-Alive: timeout=5, max=100`) and closes it after every streamed
# answer although it sends the same header. Whole answers share a few connections; each stream
# has its own; no request fails, is retried or is sent twice on a connection known to be closed.
"""Both clients against a real llama-server: connections opened per request kind.

Marker `llama_server`; skipped without LLAMAFAST_LLAMA_SERVER and LLAMAFAST_TEST_MODEL.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _llama import NEEDS_SERVER
from llamafast import Config, InferConfig, Limits, Retrying

pytestmark = NEEDS_SERVER

ASK = [{"role": "user", "content": "Say hi."}]


def config(url: str) -> Config:
    return Config(InferConfig(url=url), Limits(max_tokens=4, retries=0))


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_300_whole_answers_share_at_most_4_connections(llama: str, package: Any) -> None:
    with package.Client(config(llama)) as client:
        counts = {client.count_tokens(ASK) for _ in range(300)}
        pool = client._pool
        assert len(counts) == 1
        assert pool.opened <= 4  # the server ends a connection after 100 answers
        assert pool.resent == 0


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_streams_each_have_one_connection_and_none_is_sent_on_a_closed_one(
    llama: str, package: Any
) -> None:
    async def main() -> tuple[list[Any], Any]:
        events: list[Any] = []
        async with package.AsyncClient(config(llama)) as client:
            for _ in range(10):
                await client.complete(ASK, events.append)
                await client.count_tokens(ASK)
            return events, client._pool

    events, pool = asyncio.run(main())
    assert [e for e in events if isinstance(e, Retrying)] == []
    assert pool.opened <= 11  # one per stream, and the first count's
    assert pool.resent <= 1  # at most once, before the close after a stream is learnt
    assert pool.closes_after_stream


def test_the_sync_client_learns_the_close_after_a_stream_too(llama: str) -> None:
    with llamafast.Client(config(llama)) as client:
        events: list[Any] = []
        for _ in range(10):
            client.complete(ASK, events.append)
            client.count_tokens(ASK)
        assert [e for e in events if isinstance(e, Retrying)] == []
        assert client._pool.resent <= 1
        assert client._pool.opened <= 11
