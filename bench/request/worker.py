"""One client in one fresh process: N sequential short streamed chats, the CPU they cost this
process and the connections the server accepted for them.

Run (run.py does; the result is one JSON line on stdout):
    python bench/request/worker.py --client llamafast-sync --url http://127.0.0.1:P/x/bulk/0/4/short
    python bench/request/worker.py --client floor --url https://127.0.0.1:P/x/bulk/0/4/short \
        --ca /tmp/pki/ca.pem --requests 300 --fresh

Every request asks slot 0 for a `--chunks`-chunk answer (bench/e2e/wire.py: llama-server's
framing, gen_stream's chunks). `--warm-up` untimed requests first run every import and code path
(and the one `/slots` llamafast asks per client). Then `GET /_stats` (on a connection of its
own), CPU (`getrusage` user + system of this process) around the N requests only, `GET /_stats`
again: the connections and requests the server counted in between, less the second query's own.
Every client proves it read each answer to its end (the completion, the chunk count, or the
exact byte count); a failure is one JSON line with its `error`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import inspect
import json
import socket
import ssl
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e import wire
from e2e.worker import READ, TIMEOUT, check_completion, client, cpu, recv_answer

SLOT = 0


@dataclass(frozen=True)
class Target:
    """The server a worker talks to: its base URL (scheme, host, port, mode prefix), the CA that
    signed its certificate (https), the chunks of each answer, and whether it closes the
    connection after each streamed answer (`fresh`, what the floor must know)."""

    url: str
    ca: str | None
    chunks: int
    fresh: bool

    @property
    def parts(self) -> tuple[str, str, int, str]:
        """(scheme, host, port, prefix)"""
        u = urlsplit(self.url)
        return u.scheme, u.hostname or "", u.port or 0, u.path

    def tls(self) -> ssl.SSLContext | None:
        """The context trusting the private CA, or None over http://."""
        return ssl.create_default_context(cafile=self.ca) if self.parts[0] == "https" else None


# A factory takes the Target and returns (one, close): `one()` makes one request and returns
# the data chunks it read (async rows: a coroutine function); `close()` releases the client.
Factory = Callable[[Target], Any]
SYNC: dict[str, Factory] = {}
ASYNC: dict[str, Factory] = {}


def _llamafast_row(cls_name: str, run: Callable[[Any, Any], Any]) -> Factory:
    """A llamafast row: `run(client, request)` makes one request with llamafast's `cls_name`
    client (a coroutine with `AsyncClient`) and returns its completion."""
    import llamafast

    def make(t: Target) -> Any:
        infer = llamafast.InferConfig(url=t.url, ca_file=t.ca)
        cfg = llamafast.Config(infer, llamafast.Limits(max_tokens=t.chunks))
        c = getattr(llamafast, cls_name)(cfg)
        req = llamafast.ChatRequest(SLOT, [llamafast.User("hi")])
        if cls_name == "Client":
            return (lambda: check_completion(run(c, req), t.chunks)), c.close

        async def one() -> int:
            return check_completion(await run(c, req), t.chunks)

        return one, c.aclose

    return make


def _for_each_event(c: Any, req: Any) -> Any:
    with c.stream(req) as stream:
        for _ in stream:
            pass
    return stream.completion


async def _async_for_each_event(c: Any, req: Any) -> Any:
    async with c.stream(req) as stream:
        async for _ in stream:
            pass
    return stream.completion


def _complete(c: Any, req: Any) -> Any:
    return c.complete(req)  # with AsyncClient, the coroutine the row awaits


SYNC["llamafast-sync"] = _llamafast_row("Client", _for_each_event)
SYNC["llamafast-sync-complete"] = _llamafast_row("Client", _complete)
ASYNC["llamafast-async"] = _llamafast_row("AsyncClient", _async_for_each_event)
ASYNC["llamafast-async-complete"] = _llamafast_row("AsyncClient", _complete)


class Retried:
    """The openai rows' tries that failed before the answer began (`APIConnectionError`: sent on
    a connection the server had closed after its last streamed answer), each tried again at
    once, at most RETRIES times, as the SDK's own retries (its default max_retries=2) would, but
    without their backoff sleep, so a run takes no longer than its work."""

    count = 0


RETRIES = 2


def _openai_call(t: Target) -> dict[str, Any]:
    """The openai SDK's arguments for the body llamafast sends (bench/e2e/worker.py's)."""
    from e2e.worker import _openai_args

    return _openai_args(SLOT, t.chunks)


async def _retrying(create: Callable[[], Any], failed: type[Exception]) -> Any:
    """`create()` (awaited when it gives an awaitable: AsyncOpenAI's), tried again at once after
    a `failed` try, at most RETRIES times, each counted in Retried."""
    for _ in range(RETRIES):
        try:
            got = create()
            return (await got) if inspect.isawaitable(got) else got
        except failed:
            Retried.count += 1
    got = create()
    return (await got) if inspect.isawaitable(got) else got


def _now(coro: Coroutine[Any, Any, Any]) -> Any:
    """The value of a coroutine that awaits nothing unfinished (`_retrying` of a sync call)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("a sync call's retry awaited something")


def _openai_row(sdk: str, http_client: str) -> Factory:
    """An openai row: the SDK's `sdk` client over httpx's `http_client` (trusting the private CA
    over https), each request `stream=True` and every chunk's delta read."""

    def make(t: Target) -> Any:
        import httpx
        import openai

        http = getattr(httpx, http_client)(verify=t.tls() or True, timeout=TIMEOUT)
        kw = {"base_url": t.url + "/v1", "api_key": "bench", "max_retries": 0}
        c = getattr(openai, sdk)(**kw, http_client=http)
        create = functools.partial(c.chat.completions.create, **_openai_call(t))

        def stream() -> Any:  # a coroutine: awaited by the async row, run at once by the sync
            return _retrying(create, openai.APIConnectionError)

        # every chunk's delta read, as a caller does (a pydantic model: always true)
        if sdk == "OpenAI":
            return (lambda: sum(1 for chunk in _now(stream()) if chunk.choices[0].delta)), c.close

        async def one() -> int:
            return sum([1 async for chunk in await stream() if chunk.choices[0].delta])

        return one, c.close

    return make


SYNC["openai-sync"] = _openai_row("OpenAI", "Client")
ASYNC["openai-async"] = _openai_row("AsyncOpenAI", "AsyncClient")


@client(SYNC, "floor")
def _floor(t: Target) -> Any:
    """One keep-alive socket (TLS over https): the same request bytes as llamafast's, the
    answer's bytes read to its last chunk and counted, no event parsed. Against a server that
    closes after each streamed answer (`fresh`), a new connection per request, as it must."""
    _, host, port, prefix = t.parts
    request = wire.chat_request(host, port, prefix, SLOT, t.chunks, keep_alive=True)
    size = wire.response_size(t.chunks, wire.KEEP_ALIVE_HEAD if t.fresh else wire.PROXY_HEAD)
    view = memoryview(bytearray(READ))
    tls = t.tls()
    held: list[socket.socket] = []

    def one() -> int:
        if not held:
            sock = socket.create_connection((host, port), timeout=TIMEOUT)
            held.append(tls.wrap_socket(sock, server_hostname=host) if tls else sock)
        held[0].sendall(request)
        recv_answer(held[0], view, size)
        if t.fresh:
            held.pop().close()
        return t.chunks

    return one, lambda: [s.close() for s in held]


CLIENTS = {**SYNC, **ASYNC}


# --- the measurement ---------------------------------------------------------------------------


def server_stats(t: Target) -> dict[str, float]:
    """The server's counters (`GET /_stats`, on a connection of its own, closed after)."""
    scheme, host, port, _ = t.parts
    if scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=TIMEOUT, context=t.tls()
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        conn.request("GET", "/_stats", headers={"Connection": "close"})
        stats: dict[str, float] = json.loads(conn.getresponse().read())
        return stats
    finally:
        conn.close()


class Meter:
    """`with Meter(t) as m:` around the N requests: this process's CPU and wall time inside the
    block only, the server's counters (`GET /_stats`) just before and just after it."""

    def __init__(self, t: Target) -> None:
        self.t = t
        self.result: dict[str, Any] = {}

    def __enter__(self) -> Meter:
        self.before = server_stats(self.t)
        self.retried = Retried.count
        self.c0, self.t0 = cpu(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        c1, t1 = cpu(), time.perf_counter()
        after, before = server_stats(self.t), self.before
        self.result = {
            "cpu": c1 - self.c0,
            "wall": t1 - self.t0,
            # the second query counted its own connection and request
            "connections": after["connections"] - before["connections"] - 1,
            "server_requests": after["requests"] - before["requests"] - 1,
            "server_cpu": after["cpu"] - before["cpu"],
            "retried": Retried.count - self.retried,
        }


def run_sync(name: str, t: Target, requests: int, warm_up: int) -> dict[str, Any]:
    one, close = SYNC[name](t)
    for _ in range(warm_up):
        one()
    with Meter(t) as meter:
        chunks = sum(one() for _ in range(requests))
    close()
    return {**meter.result, "chunks": chunks}


async def run_async(name: str, t: Target, requests: int, warm_up: int) -> dict[str, Any]:
    one, close = ASYNC[name](t)
    for _ in range(warm_up):
        await one()
    with Meter(t) as meter:  # the two /_stats queries block the loop, outside the measure
        chunks = 0
        for _ in range(requests):
            chunks += await one()
    await close()
    return {**meter.result, "chunks": chunks}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", choices=sorted(CLIENTS), required=True)
    ap.add_argument("--url", required=True, help="the server's base URL, mode prefix included")
    ap.add_argument("--ca", help="the PEM file of the CA that signed the server's certificate")
    ap.add_argument("--requests", type=int, default=100, help="the measured requests, in turn")
    ap.add_argument("--warm-up", type=int, default=5, help="untimed requests before them")
    ap.add_argument("--chunks", type=int, default=20, help="data chunks of each answer")
    ap.add_argument("--fresh", action="store_true", help="the server closes after each stream")
    args = ap.parse_args(argv)
    t = Target(args.url, args.ca, args.chunks, args.fresh)
    if t.parts[1] not in ("127.0.0.1", "localhost", "::1"):
        ap.error(f"the benchmark talks to loopback only, not {t.parts[1]!r}")
    try:
        if args.client in SYNC:
            result = run_sync(args.client, t, args.requests, args.warm_up)
        else:
            result = asyncio.run(run_async(args.client, t, args.requests, args.warm_up))
        if (got := result["chunks"]) != args.requests * args.chunks:
            raise AssertionError(f"read {got} chunks, not {args.requests} x {args.chunks}")
    except Exception as err:
        result = {"error": f"{type(err).__name__}: {err}"[:300]}
    result["requests"] = args.requests
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
