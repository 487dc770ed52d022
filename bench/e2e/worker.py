"""One client, one fresh process, one measurement: what run.py starts for every cell and round.

Run (run.py does; the result is one JSON line on stdout):
    python bench/e2e/worker.py --client llamafast-async --port P --prefix /x/paced/50/100/short \
        --streams 100 --chunks 150

`--streams` lanes run at once (tasks for the async clients; the sync ones take one lane), each
making `--requests` requests in turn, each answer `--chunks` chunks; lane i asks for slot i.
Before measuring, one untimed warm-up request on the bulk prefix (same slots) runs every import
and code path. Then CPU is `resource.getrusage(RUSAGE_SELF)` user + system around the work
alone, so imports, the interpreter's start and the clients' closing are not counted. Every
client proves it read the whole answer (chunk count, completion, or exact byte count).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e import wire

TIMEOUT = 120.0  # seconds any one read may take before a client gives up
READ = 1 << 18  # the floors' read buffer

# A client factory takes (host, port, prefix, chunks) and returns (one, close): `one(slot)` makes
# one request and returns the data chunks it read; `close()` releases the client.
One = Callable[[int], Any]
Factory = Callable[[str, int, str, int], Any]
ASYNC: dict[str, Factory] = {}
SYNC: dict[str, Factory] = {}


def client(table: dict[str, Factory], name: str) -> Callable[[Factory], Factory]:
    def register(fn: Factory) -> Factory:
        table[name] = fn
        return fn

    return register


def check_completion(completion: Any, chunks: int) -> int:
    """The chunks of a finished llamafast answer (gen_stream's ends with its tool call)."""
    if completion.finish_reason.value != "tool_calls" or len(completion.tool_calls) != 1:
        raise AssertionError(f"an incomplete answer: {completion!r:.200}")
    return chunks


# --- llamafast ---------------------------------------------------------------------------------


@client(ASYNC, "llamafast-async")
def _llamafast_async(host: str, port: int, prefix: str, chunks: int) -> Any:
    import llamafast

    c = llamafast.AsyncClient(wire.config(f"http://{host}:{port}{prefix}", chunks))

    async def one(slot: int) -> int:
        async with c.stream(llamafast.ChatRequest(slot, [llamafast.User("hi")])) as stream:
            async for _ in stream:
                pass
        return check_completion(stream.completion, chunks)

    async def close() -> None:
        aclose = getattr(c, "aclose", None)
        if aclose is not None:
            await aclose()

    return one, close


@client(ASYNC, "llamafast-async-otel")
def _llamafast_async_otel(host: str, port: int, prefix: str, chunks: int) -> Any:
    """`llamafast-async` with llamafast.otel on (every client): each request's span goes to the
    OpenTelemetry SDK (a simple processor, its exporter keeping nothing) and its metrics to the
    SDK's meter provider, read once at the end."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from llamafast import otel

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return _llamafast_async(host, port, prefix, chunks)


@client(ASYNC, "llamafast-async-complete")
def _llamafast_async_complete(host: str, port: int, prefix: str, chunks: int) -> Any:
    """`AsyncClient.complete` with a plain function: the events are handed out from the
    arrival callback, with no task wake-up per arrival."""
    import llamafast

    c = llamafast.AsyncClient(wire.config(f"http://{host}:{port}{prefix}", chunks))

    async def one(slot: int) -> int:
        seen: list[Any] = []
        req = llamafast.ChatRequest(slot, [llamafast.User("hi")])
        completion = await c.complete(req, seen.append)
        if not seen:
            raise AssertionError("on_event was never called")
        return check_completion(completion, chunks)

    return one, c.aclose


@client(SYNC, "llamafast-sync")
def _llamafast_sync(host: str, port: int, prefix: str, chunks: int) -> Any:
    import llamafast

    c = llamafast.Client(wire.config(f"http://{host}:{port}{prefix}", chunks))

    def one(slot: int) -> int:
        with c.stream(llamafast.ChatRequest(slot, [llamafast.User("hi")])) as stream:
            for _ in stream:
                pass
        return check_completion(stream.completion, chunks)

    return one, lambda: None


def _aiohttp(host: str, port: int, prefix: str) -> tuple[str, Any, dict[str, str]]:
    """The chat URL, an aiohttp session with no connection cap, and the POST's headers."""
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=TIMEOUT)
    )
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    return f"http://{host}:{port}{prefix}/v1/chat/completions", session, headers


@client(ASYNC, "aiohttp-aiter_chat")
def _aiohttp_aiter_chat(host: str, port: int, prefix: str, chunks: int) -> Any:
    """aiohttp for the HTTP, llamafast.aiter_chat for the events (no llamafast client)."""
    import llamafast

    url, session, headers = _aiohttp(host, port, prefix)

    async def one(slot: int) -> int:
        async with session.post(url, data=wire.chat_body(slot, chunks), headers=headers) as r:
            chat = llamafast.aiter_chat(r.content.iter_any())
            async for _ in chat:
                pass
        return check_completion(chat.completion, chunks)

    return one, session.close


# --- the peers ---------------------------------------------------------------------------------


def _openai_args(slot: int, chunks: int) -> dict[str, Any]:
    """The openai SDK's arguments for the body llamafast sends (llama-server's own fields in
    extra_body)."""
    body = json.loads(wire.chat_body(slot, chunks))
    sdk = {k: body.pop(k) for k in ("model", "messages", "max_tokens", "temperature", "top_p")}
    del body["stream"]
    return {**sdk, "stream": True, "extra_body": body}


@client(ASYNC, "openai-async")
def _openai_async(host: str, port: int, prefix: str, chunks: int) -> Any:
    import openai

    c = openai.AsyncOpenAI(
        base_url=f"http://{host}:{port}{prefix}/v1", api_key="bench", max_retries=0
    )

    async def one(slot: int) -> int:
        n = 0
        stream = await c.chat.completions.create(**_openai_args(slot, chunks))
        async for chunk in stream:
            chunk.choices[0].delta  # noqa: B018  (what a caller reads)
            n += 1
        return n

    return one, c.close


@client(SYNC, "openai-sync")
def _openai_sync(host: str, port: int, prefix: str, chunks: int) -> Any:
    import openai

    c = openai.OpenAI(base_url=f"http://{host}:{port}{prefix}/v1", api_key="bench", max_retries=0)

    def one(slot: int) -> int:
        n = 0
        for chunk in c.chat.completions.create(**_openai_args(slot, chunks)):
            chunk.choices[0].delta  # noqa: B018
            n += 1
        return n

    return one, c.close


def _data(payload: str) -> int:
    """What the hand-written clients do with a data payload: json.loads and take the delta."""
    json.loads(payload)["choices"][0]["delta"]
    return 1


@client(ASYNC, "httpx-sse-async")
def _httpx_async(host: str, port: int, prefix: str, chunks: int) -> Any:
    import httpx
    from httpx_sse import aconnect_sse

    url = f"http://{host}:{port}{prefix}/v1/chat/completions"
    c = httpx.AsyncClient(timeout=TIMEOUT, limits=httpx.Limits(max_connections=None))
    headers = {"Content-Type": "application/json"}

    async def one(slot: int) -> int:
        n = 0
        body = wire.chat_body(slot, chunks)
        async with aconnect_sse(c, "POST", url, content=body, headers=headers) as source:
            async for event in source.aiter_sse():
                if event.data == "[DONE]":
                    break
                n += _data(event.data)
        return n

    return one, c.aclose


@client(SYNC, "httpx-sse-sync")
def _httpx_sync(host: str, port: int, prefix: str, chunks: int) -> Any:
    import httpx
    from httpx_sse import connect_sse

    url = f"http://{host}:{port}{prefix}/v1/chat/completions"
    c = httpx.Client(timeout=TIMEOUT)
    headers = {"Content-Type": "application/json"}

    def one(slot: int) -> int:
        n = 0
        body = wire.chat_body(slot, chunks)
        with connect_sse(c, "POST", url, content=body, headers=headers) as source:
            for event in source.iter_sse():
                if event.data == "[DONE]":
                    break
                n += _data(event.data)
        return n

    return one, c.close


@client(ASYNC, "aiohttp-json")
def _aiohttp_json(host: str, port: int, prefix: str, chunks: int) -> Any:
    """The hand-written minimal client: aiohttp, split on \\n, json.loads each data line."""
    url, session, headers = _aiohttp(host, port, prefix)

    async def one(slot: int) -> int:
        n = 0
        rest = b""
        async with session.post(url, data=wire.chat_body(slot, chunks), headers=headers) as r:
            async for piece in r.content.iter_any():
                *lines, rest = (rest + piece).split(b"\n")
                for line in lines:
                    if line.startswith(b"data: "):
                        if line == b"data: [DONE]":
                            return n
                        n += _data(line[6:])  # type: ignore[arg-type]
        return n

    return one, session.close


# --- the floors: the same request, the answer's bytes only counted -----------------------------


class _Counter:
    """Counts a response's bytes until its last chunk (the end of a streamed body)."""

    def __init__(self, done: asyncio.Future[int]) -> None:
        self.done = done
        self.n = 0
        self.tail = b""

    def count(self, data: bytes | bytearray | memoryview) -> None:
        self.n += len(data)
        tail = bytes(data[-7:]) if len(data) >= 7 else (self.tail + bytes(data))[-7:]
        self.tail = tail
        if tail == wire.END and not self.done.done():
            self.done.set_result(self.n)

    def lost(self) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"closed after {self.n} bytes"))


class _BufferedFloor(asyncio.BufferedProtocol):
    def __init__(self, request: bytes, done: asyncio.Future[int]) -> None:
        self.request = request
        self.counter = _Counter(done)
        self.buf = bytearray(READ)
        self.view = memoryview(self.buf)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        self.counter.count(self.view[:nbytes])

    def connection_lost(self, exc: Exception | None) -> None:
        self.counter.lost()


class _PlainFloor(asyncio.Protocol):
    def __init__(self, request: bytes, done: asyncio.Future[int]) -> None:
        self.request = request
        self.counter = _Counter(done)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.counter.count(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.counter.lost()


def _async_floor(protocol: type[asyncio.BaseProtocol]) -> Factory:
    def make(host: str, port: int, prefix: str, chunks: int) -> Any:
        size = wire.response_size(chunks)

        async def one(slot: int) -> int:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[int] = loop.create_future()
            request = wire.chat_request(host, port, prefix, slot, chunks)
            transport, _ = await loop.create_connection(
                lambda: protocol(request, done),  # type: ignore[call-arg]
                host,
                port,
            )
            try:
                n = await asyncio.wait_for(done, TIMEOUT)
            finally:
                transport.close()
            if n != size:
                raise AssertionError(f"read {n} bytes, not the {size} of the answer")
            return chunks

        async def close() -> None:
            pass

        return one, close

    return make


ASYNC["floor-buffered-protocol"] = _async_floor(_BufferedFloor)
ASYNC["floor-protocol"] = _async_floor(_PlainFloor)


# --- what an async client cannot avoid: one task wake-up per arrival, and the engine ----------


class _WakingFloor(asyncio.BufferedProtocol):
    """Reads into one buffer; each arrival is handed to the task waiting in `arrivals()`
    through a future: the least an `async for` over a stream costs on top of the floor."""

    def __init__(
        self, request: bytes, free: Callable[[], memoryview], take: Callable[[int], bool]
    ) -> None:
        self.request = request
        self.free = free
        self.take = take
        self.waiter: asyncio.Future[None] | None = None
        self.got: list[memoryview] = []
        self.lost: Exception | None = None
        self.ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.free()

    def buffer_updated(self, nbytes: int) -> None:
        self.ended = self.take(nbytes)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionError("closed before the end")
        self._wake()

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _response_parser() -> Any:
    """The clients' ResponseParser (the selected twin's), where this install keeps it."""
    try:
        from llamafast._client._transport import ResponseParser
    except ImportError:  # an install from before the drivers moved into llamafast._client
        from llamafast._transport import ResponseParser  # type: ignore[no-redef]
    return ResponseParser


def _waking_floor(engine: bool) -> Factory:
    def make(host: str, port: int, prefix: str, chunks: int) -> Any:
        if engine:
            from llamafast import Assembler, SseDecoder

            ResponseParser = _response_parser()

        async def one(slot: int) -> int:
            loop = asyncio.get_running_loop()
            request = wire.chat_request(host, port, prefix, slot, chunks)
            counter = _Counter(loop.create_future())
            if engine:  # read into the HTTP parser's buffer, as AsyncClient does
                parser, decoder, chat = ResponseParser(), SseDecoder(), Assembler()
                items: list[Any] = []
                free = parser.free

                def take(n: int) -> bool:
                    for piece in parser.filled(n):
                        items.extend(decoder.feed(piece))
                    return bool(parser.done)

            else:
                view = memoryview(bytearray(READ))

                def free() -> memoryview:
                    return view

                def take(n: int) -> bool:
                    counter.count(view[:n])
                    return counter.done.done()

            proto = _WakingFloor(request, free, take)
            transport, _ = await loop.create_connection(lambda: proto, host, port)
            events = 0
            try:
                while not proto.ended:
                    if proto.lost is not None:
                        raise proto.lost
                    if engine:
                        for item in items:
                            if type(item) is str:
                                events += len(chat.push(item))
                        items.clear()
                    waiter = proto.waiter = loop.create_future()
                    await waiter
            finally:
                transport.close()
            if engine:
                for item in items:
                    if type(item) is str:
                        events += len(chat.push(item))
                return check_completion(chat.finish(), chunks)
            return chunks

        async def close() -> None:
            pass

        return one, close

    return make


ASYNC["floor-wake"] = _waking_floor(engine=False)
ASYNC["floor-wake-engine"] = _waking_floor(engine=True)


def recv_answer(sock: socket.socket, view: memoryview, size: int) -> None:
    """Read one streamed answer of `size` bytes (head included) into `view`, over and over,
    until its last chunk; only the bytes are counted (the floors' whole work)."""
    n = 0
    tail = b""
    while tail != wire.END:
        got = sock.recv_into(view)
        if not got:
            raise AssertionError(f"closed after {n} bytes")
        n += got
        tail = bytes(view[got - 7 : got]) if got >= 7 else (tail + bytes(view[:got]))[-7:]
    if n != size:
        raise AssertionError(f"read {n} bytes, not the {size} of the answer")


@client(SYNC, "floor-recv_into")
def _recv_into_floor(host: str, port: int, prefix: str, chunks: int) -> Any:
    size = wire.response_size(chunks)
    view = memoryview(bytearray(READ))

    def one(slot: int) -> int:
        with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
            sock.sendall(wire.chat_request(host, port, prefix, slot, chunks))
            recv_answer(sock, view, size)
        return chunks

    return one, lambda: None


@client(SYNC, "floor-recv_into-engine")
def _recv_into_engine_floor(host: str, port: int, prefix: str, chunks: int) -> Any:
    """The bare POST again, its body read into the HTTP parser's buffer and turned into events
    by llamafast's engine (SseDecoder, Assembler): what `Client` costs without its client."""
    from llamafast import Assembler, SseDecoder

    ResponseParser = _response_parser()

    def one(slot: int) -> int:
        parser, decoder, chat = ResponseParser(), SseDecoder(), Assembler()
        with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
            sock.sendall(wire.chat_request(host, port, prefix, slot, chunks))
            while not parser.done:
                got = sock.recv_into(parser.free())
                if not got:
                    raise AssertionError("closed before the end of the answer")
                for piece in parser.filled(got):
                    for item in decoder.feed(piece):
                        if type(item) is str:
                            chat.push(item)
        return check_completion(chat.finish(), chunks)

    return one, lambda: None


CLIENTS = {**ASYNC, **SYNC}


# --- the measurement ---------------------------------------------------------------------------


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _run_async(args: argparse.Namespace) -> dict[str, Any]:
    make = ASYNC[args.client]

    async def lanes(one: Callable[[int], Awaitable[int]]) -> int:
        async def lane(slot: int) -> int:
            return sum([await one(slot) for _ in range(args.requests)])

        return sum(await asyncio.gather(*(lane(i) for i in range(args.streams))))

    if args.warm_prefix != args.prefix:
        one, close = make(args.host, args.port, args.warm_prefix, args.chunks)
        await one(0)
        await close()
        one, close = make(args.host, args.port, args.prefix, args.chunks)
    else:
        one, close = make(args.host, args.port, args.prefix, args.chunks)
        await one(0)
    c0, t0 = cpu(), time.perf_counter()
    chunks = await lanes(one)
    c1, t1 = cpu(), time.perf_counter()
    await close()
    return {"cpu": c1 - c0, "wall": t1 - t0, "chunks": chunks}


def _run_sync(args: argparse.Namespace) -> dict[str, Any]:
    if args.streams != 1:
        raise ValueError(f"a sync client runs one stream at a time, not {args.streams}")
    make = SYNC[args.client]
    if args.warm_prefix != args.prefix:
        one, close = make(args.host, args.port, args.warm_prefix, args.chunks)
        one(0)
        close()
        one, close = make(args.host, args.port, args.prefix, args.chunks)
    else:
        one, close = make(args.host, args.port, args.prefix, args.chunks)
        one(0)
    c0, t0 = cpu(), time.perf_counter()
    chunks = sum(one(0) for _ in range(args.requests))
    c1, t1 = cpu(), time.perf_counter()
    close()
    return {"cpu": c1 - c0, "wall": t1 - t0, "chunks": chunks}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", choices=sorted(CLIENTS), required=True)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prefix", required=True, help="the mode prefix of the measured requests")
    ap.add_argument("--warm-prefix", help="the warm-up request's prefix (default: --prefix)")
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--requests", type=int, default=1, help="requests per stream, in turn")
    ap.add_argument("--chunks", type=int, default=wire.DEFAULT_CHUNKS)
    args = ap.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        ap.error(f"the benchmark talks to loopback only, not {args.host!r}")
    args.warm_prefix = args.warm_prefix or args.prefix
    expected = args.streams * args.requests * args.chunks
    try:
        if args.client in SYNC:
            result = _run_sync(args)
        else:
            factory = None
            if args.loop == "uvloop":
                import uvloop

                factory = uvloop.new_event_loop
            with asyncio.Runner(loop_factory=factory) as runner:
                result = runner.run(_run_async(args))
        if result["chunks"] != expected:
            raise AssertionError(f"read {result['chunks']} chunks, not {expected}")
    except Exception as err:
        result = {"error": f"{type(err).__name__}: {err}"[:300]}
    result.update(requests=args.streams * args.requests, expected=expected)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
