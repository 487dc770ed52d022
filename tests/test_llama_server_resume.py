# Resumed streams against a real llama-server (docs/client.md, rule RESUME), through a loopback
# proxy that cuts the first streamed answer once, at a random byte of its body: the answer goes
# on from where it broke and equals the unbroken run's (temperature 0, a fixed seed), the POST
# sent once. A stream left after a few events stops the generation: the slot is idle at once.
"""Both clients, both twins, against a real llama-server: a cut stream resumed, a closed one
stopped.

Marker `llama_server`; skipped without LLAMAFAST_LLAMA_SERVER and LLAMAFAST_TEST_MODEL.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
import urllib.request
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _llama import NEEDS_SERVER, resident_kib
from _loopback import RelayProxy
from llamafast import Completion, Config, InferConfig, Limits

pytestmark = NEEDS_SERVER

ASK = [{"role": "user", "content": "Count from one to twenty in words."}]
FIELDS: dict[str, Any] = {"temperature": 0.0, "seed": 7, "max_tokens": 60}


def config(url: str) -> Config:
    return Config(InferConfig(url=url), Limits(retries=0, stall_timeout=30.0))


def answer(package: Any, kind: str, url: str, stop_after: int | None = None) -> Completion | None:
    """The Completion of ASK (None when left after `stop_after` events)."""
    if kind == "sync":
        with package.Client(config(url)) as client, client.stream(ASK, **FIELDS) as stream:
            for n, _ in enumerate(stream, 1):
                if n == stop_after:
                    return None
            return stream.completion  # type: ignore[no-any-return]

    async def main() -> Completion | None:
        async with package.AsyncClient(config(url)) as client:
            async with client.stream(ASK, **FIELDS) as stream:
                n = 0
                async for _ in stream:
                    n += 1
                    if n == stop_after:
                        return None
                return stream.completion  # type: ignore[no-any-return]

    return asyncio.run(main())


def same(c: Completion) -> tuple[Any, ...]:
    """What two runs of one request share (not the id, the time, the timings)."""
    usage = c.usage
    return (
        c.content,
        c.reasoning_content,
        c.finish_reason,
        c.tool_calls,
        usage and usage.completion_tokens,
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_stream_cut_at_a_random_body_byte_gives_the_unbroken_answer(
    llama: str, package: Any, kind: str
) -> None:
    whole = answer(package, kind, llama)
    assert whole is not None
    cut = random.Random().randrange(1, 1500)
    with RelayProxy(int(llama.rsplit(":", 1)[1]), cut) as proxy:
        broken = answer(package, kind, proxy.url)
    assert broken is not None, cut
    assert same(broken) == same(whole), cut
    assert proxy.requests.count("POST /v1/chat/completions") == 1
    assert proxy.requests.count("GET /v1/stream") == 1


def busy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/slots", timeout=5) as r:
        return any(s["is_processing"] for s in json.load(r))


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_stream_left_after_a_few_events_frees_its_slot(
    llama: str, package: Any, kind: str
) -> None:
    FIELDS["max_tokens"] = 2000
    try:
        assert answer(package, kind, llama, stop_after=3) is None
    finally:
        FIELDS["max_tokens"] = 60
    until = time.monotonic() + 1.0
    while busy(llama) and time.monotonic() < until:
        time.sleep(0.02)
    assert not busy(llama)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_servers_stream_buffers_do_not_grow_with_the_requests(llama: str) -> None:
    # The server keeps a finished stream's buffer 300 s (about 15 KiB for a short answer),
    # and frees it when a new stream takes its id: a client's streams in turn reuse the id
    # of the last one read to its end, so 300 requests leave one buffer, not 300 (4.5 MB).
    ask = [{"role": "user", "content": "Say hi."}]
    with llamafast.Client(Config(InferConfig(url=llama), Limits(max_tokens=8))) as client:
        for _ in range(30):
            client.complete(ask)
        before = resident_kib(llama)
        for _ in range(300):
            client.complete(ask)
        grown = resident_kib(llama) - before
    assert grown < 1500, f"the server grew by {grown} KiB over 300 requests"
