"""A fake llama-server for the end-to-end benchmark: recorded framing, bulk or paced streams.

Run (run.py does this; it reads the `PORT n` line and kills the process at the end):
    python bench/e2e/server.py                      # 127.0.0.1, a free port, printed on stdout
    python bench/e2e/server.py --loop uvloop --keep-alive --max-seconds 600

One asyncio process, stdlib only (uvloop if asked). Routes, after the mode prefix of wire.py:
`POST /v1/chat/completions` streams `max_tokens` chunks of the recorded shape (bulk: head and
whole body in one write; paced: `rate` events per second from the request's arrival, each event
its own write); a request for a slot being streamed waits until it is free, as llama-server
holds it. `GET /slots`, `GET /health`, `POST /v1/chat/completions/control` answer as recorded;
`GET /_stats` gives this process's CPU seconds and the events it has written, so the runner can
show that the server is not the bottleneck. Every answer says `Connection: close` as recorded
and the connection is closed after it, unless `--keep-alive` (then a client that does not ask
for `close` keeps its connection, as a proxy in front of llama-server does: `Connection:
keep-alive`, no bound said). `--close-streams` is llama-server's own way: every answer says
`Keep-Alive: timeout=5, max=100`, a whole answer keeps the connection (up to 100 answers on it),
a streamed one closes it all the same.
`--tls-cert`/`--tls-key` speak HTTPS. `GET /_stats` counts the connections accepted too (its
own included). The process ends when its stdin closes or after
`--max-seconds`, whichever comes first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import ssl
import sys
import threading
from collections import deque
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e import wire

MAX_HEAD = 1 << 16


class Stats:
    chunks = 0  # data events written
    responses = 0  # streamed responses finished
    requests = 0
    connections = 0  # accepted (after the TLS handshake with --tls-cert)


class Slots:
    """Which slots are streaming, and the requests each busy slot holds (in arrival order)."""

    def __init__(self) -> None:
        self.busy: set[int] = set()
        self.waiting: dict[int, deque[Conn]] = {}

    def take(self, slot: int, conn: Conn) -> bool:
        if slot in self.busy:
            self.waiting.setdefault(slot, deque()).append(conn)
            return False
        self.busy.add(slot)
        return True

    def free(self, slot: int) -> None:
        line = self.waiting.get(slot)
        while line:
            conn = line.popleft()
            if not conn.closed:
                conn.start_stream()  # the slot passes straight to the next in line
                return
        self.busy.discard(slot)


SLOTS = Slots()
KEEP_ALIVE = False
CLOSE_STREAMS = False  # llama-server: close after every streamed answer, whatever it said


class Conn(asyncio.Protocol):
    """One client connection: requests parsed one at a time, each answered in full."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.answering = False
        self.closed = False
        self.keep = False
        self.slot: int | None = None
        self.mode = wire.Mode()
        self.events: tuple[bytes, ...] = ()
        self.k = 0
        self.t0 = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.answers = 0  # answers written on this connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's is not a subclass)
        Stats.connections += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.release()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.answering:
            self.next_request()

    # --- requests ---------------------------------------------------------------------------

    def next_request(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                self.refuse(wire.NOT_FOUND)
            return
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        request_line = lines[0].split(" ", 2)
        if len(request_line) != 3:
            self.refuse(wire.NOT_FOUND)
            return
        method, target, _ = request_line
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:  # not written by any client measured here
            self.refuse(wire.BAD_JSON)
            return
        length = int(headers.get("content-length", "0"))
        if len(self.buf) < end + 4 + length:
            return
        data = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        Stats.requests += 1
        self.answering = True
        self.keep = KEEP_ALIVE and headers.get("connection", "").lower() != "close"
        mode, path = wire.Mode.split(target.split("?", 1)[0])
        self.mode = mode
        self.route(method, path, data)

    def refuse(self, raw: bytes) -> None:
        """Answer a request this server cannot read, and close: what follows is not trusted."""
        self.buf.clear()
        self.answering = True
        self.keep = False
        self.answer(raw)

    def route(self, method: str, path: str, data: bytes) -> None:
        if method == "POST" and path == "/v1/chat/completions":
            try:  # a body this server cannot read is answered, never left hanging
                request = json.loads(data)
                self.events = wire.events(int(request.get("max_tokens", wire.DEFAULT_CHUNKS)))
            except (ValueError, TypeError, AttributeError):
                self.answer(wire.BAD_JSON)
                return
            slot = request.get("id_slot")
            if isinstance(slot, int) and slot >= 0:
                self.slot = slot % self.mode.slots  # llama-server wraps a slot it lacks
                if not SLOTS.take(self.slot, self):
                    return  # held, silent, until the slot is free
            self.start_stream()
        elif method == "GET" and path == "/slots":
            busy = frozenset(SLOTS.busy)
            body = wire.slots_body(self.mode.slots, self.mode.shape, busy)
            self.answer(wire.json_response(wire.SLOTS_HEAD, body))
        elif method == "GET" and path == "/health":
            self.answer(wire.HEALTH)
        elif method == "POST" and path == "/v1/chat/completions/control":
            self.answer(wire.CONTROL_OK)
        elif method == "GET" and path == "/_stats":
            usage = resource.getrusage(resource.RUSAGE_SELF)
            stats = {
                "cpu": usage.ru_utime + usage.ru_stime,
                "chunks": Stats.chunks,
                "responses": Stats.responses,
                "requests": Stats.requests,
                "connections": Stats.connections,
            }
            self.answer(wire.json_response(wire.SLOTS_HEAD, json.dumps(stats).encode()))
        else:
            self.answer(wire.NOT_FOUND)

    def answer(self, raw: bytes) -> None:
        assert self.transport is not None
        if self.keep:
            kept = wire.LLAMA_KEEP_ALIVE if CLOSE_STREAMS else b"Connection: keep-alive\r\n"
            raw = raw.replace(b"Connection: close\r\n", kept, 1)
        self.transport.write(raw)
        self.done()

    def done(self) -> None:
        """The answer is written: close as recorded, or take the next request (keep-alive)."""
        assert self.transport is not None
        self.answers += 1
        if CLOSE_STREAMS and self.answers >= wire.LLAMA_MAX_ANSWERS:
            self.keep = False  # llama-server's `max` reached
        if not self.keep:
            self.transport.close()
            return
        self.answering = False
        if self.buf:
            self.next_request()

    def release(self) -> None:
        slot, self.slot = self.slot, None
        if slot is not None:
            SLOTS.free(slot)

    # --- the stream -------------------------------------------------------------------------

    def start_stream(self) -> None:
        if self.closed:
            self.release()
            return
        assert self.transport is not None
        head = wire.STREAM_HEAD
        if self.keep:
            head = wire.KEEP_ALIVE_HEAD if CLOSE_STREAMS else wire.PROXY_HEAD
        if self.mode.mode == "bulk":
            self.transport.write(head + b"".join(self.events))
            self.end_stream(len(self.events) - 2)
            return
        self.transport.write(head)
        self.k = 0
        self.t0 = asyncio.get_running_loop().time()
        self.tick()

    def tick(self) -> None:
        """Write the next event (the last data event together with [DONE] and the last chunk,
        as llama-server ends a stream), then schedule the one after at its absolute time."""
        self.timer = None
        if self.closed:
            return
        assert self.transport is not None
        events, k = self.events, self.k
        last = len(events) - 3  # the last data event; then [DONE], then the last chunk
        if k < last:
            self.transport.write(events[k])
            Stats.chunks += 1
            self.k = k + 1
            when = self.t0 + self.k / self.mode.rate
            self.timer = asyncio.get_running_loop().call_at(when, self.tick)
        else:
            self.transport.write(b"".join(events[k:]))
            self.end_stream(1)

    def end_stream(self, chunks: int) -> None:
        Stats.chunks += chunks
        Stats.responses += 1
        self.release()
        if CLOSE_STREAMS:
            self.keep = False
        self.done()


async def serve(
    port: int, max_seconds: float, ready: str, tls: ssl.SSLContext | None = None
) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, "127.0.0.1", port, backlog=1024, ssl=tls)
    sockname = server.sockets[0].getsockname()
    print(f"{ready} {sockname[1]}", flush=True)
    stop = asyncio.Event()

    def watch_stdin() -> None:  # the runner's end (or death) closes our stdin
        try:
            sys.stdin.buffer.read()
        finally:
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        await asyncio.wait_for(stop.wait(), max_seconds)
    except TimeoutError:
        print(f"server: --max-seconds {max_seconds:g} reached, stopping", file=sys.stderr)
    server.close()


def main(argv: list[str] | None = None) -> int:
    global KEEP_ALIVE, CLOSE_STREAMS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--keep-alive", action="store_true", help="keep connections not closed")
    ap.add_argument(
        "--close-streams",
        action="store_true",
        help="keep connections, but close each after a streamed answer (as llama-server does)",
    )
    ap.add_argument("--tls-cert", help="speak HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", help="the certificate's private key (PEM)")
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="stop after this long")
    args = ap.parse_args(argv)
    KEEP_ALIVE = args.keep_alive or args.close_streams
    CLOSE_STREAMS = args.close_streams
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    factory = None
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.port, args.max_seconds, "PORT", tls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
