# A small end-to-end measurement of the clients' own cost: a fake llama-server in its own process
# (one HTTP chunk per event, recorded framing, 128 slots), each client in a fresh process, and
# that process's CPU time (getrusage) per chunk or per request; rounds interleaved, medians.
"""Client-process CPU per chunk: the clients side by side with the floors.

    python bench/client_cpu.py [--rounds 3] [--old SRC] [scenario ...]

Scenarios: paced100 (100 streams at 50 chunks/s), bulk20 (20 streams, bulk), sync1 (one
stream at 100 chunks/s), sync1bulk (one stream, bulk), seq (sequential 100-chunk requests
against a 128-slot server, CPU per request; `--slots` changes the count). `--old SRC` adds
the clients of another source tree (e.g. a worktree of an older commit) as `*_old`; `--slim`
answers /slots with only the fields the clients read, so that an old client with a 64 KiB cap
can run against many slots.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "http" / "content_only.http"

SCENARIOS = {
    # name: (streams, chunks per stream, chunks per second or 0 for bulk, requests in sequence)
    "paced100": (100, 100, 50.0, 1),
    "bulk20": (20, 2000, 0.0, 1),
    "sync1": (1, 300, 100.0, 1),
    "sync1bulk": (1, 5000, 0.0, 1),
    "seq": (1, 100, 0.0, 200),
}
CLIENTS = {
    "paced100": ["async", "async_uv", "floor_bp", "floor_bp_uv"],
    "bulk20": ["async", "async_uv", "floor_bp", "floor_bp_uv"],
    "sync1": ["sync", "floor_recv"],
    "sync1bulk": ["sync", "floor_recv"],
    "seq": ["sync", "async", "bare_chat", "bare_post"],
}
OLD = {"async", "sync"}


def payloads() -> list[bytes]:
    raw = FIXTURE.read_bytes()
    body = raw[raw.index(b"\r\n\r\n") + 4 :]
    out, pos = [], 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol], 16)
        if not size:
            return out
        out.append(body[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2


def chunk(p: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(p), p)


# --- the fake server ----------------------------------------------------------------------


def serve(port_file: str, n_chunks: int, rate: float, n_slots: int, slim: bool) -> None:
    ps = payloads()
    head = (
        b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    first = [chunk(p) for p in ps[:4]]
    middle = chunk(ps[5])
    last = [chunk(p) for p in ps[-2:]] + [b"0\r\n\r\n"]
    raw = (ROOT / "fixtures" / "http" / "get_slots.http").read_bytes()
    template = json.loads(raw[raw.index(b"\r\n\r\n") + 4 :])[0]
    if slim:  # only what the clients read: lets an old client with a 64 KiB cap run too
        template = {"is_processing": False}
    slots = json.dumps([dict(template, id=i) for i in range(n_slots)], separators=(",", ":"))
    slots_answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (len(slots), slots.encode())
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head_in = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head_in.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            if head_in.startswith(b"GET /slots"):
                writer.write(slots_answer)
            elif head_in.startswith(b"GET"):
                writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"status":"ok"}')
            elif rate:
                writer.write(head + b"".join(first))
                t0 = time.monotonic()
                for i in range(n_chunks):
                    delay = t0 + (i + 1) / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    writer.write(middle)
                writer.write(b"".join(last))
            else:
                writer.write(head + b"".join(first))
                for _ in range(n_chunks):
                    writer.write(middle)
                    if writer.transport.get_write_buffer_size() > 1 << 16:
                        await writer.drain()
                writer.write(b"".join(last))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        Path(port_file).write_text(str(server.sockets[0].getsockname()[1]))
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# --- the clients (each in its own process) --------------------------------------------------


REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)


class CountingProtocol(asyncio.BufferedProtocol):
    """The floor: a BufferedProtocol that only counts bytes until the chunked end."""

    def __init__(self, done: asyncio.Future[int]) -> None:
        self.buf = bytearray(1 << 16)
        self.n = 0
        self.tail = b""
        self.done = done

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int) -> None:
        self.n += nbytes
        self.tail = (self.tail + bytes(self.buf[max(0, nbytes - 5) : nbytes]))[-5:]
        if self.tail == b"0\r\n\r\n" and not self.done.done():
            self.done.set_result(self.n)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.n)


def run_client(kind: str, port: int, streams: int, requests: int) -> float:
    """Run the workload once; the CPU seconds it took this process."""
    import llamafast

    url = f"http://127.0.0.1:{port}"
    cfg = llamafast.Config(llamafast.InferConfig(url=url), llamafast.Limits(wait_timeout=600))
    # one slot each (the client orders requests pinned to the same slot)
    reqs = [llamafast.ChatRequest(i, [llamafast.User("x")]) for i in range(streams)]
    base = kind.removesuffix("_old").removesuffix("_uv")
    uv = kind.endswith("_uv")

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    if base == "sync":
        client = llamafast.Client(cfg)
        client.complete(reqs[0])  # warm: imports, the slot count
        t0 = cpu()
        for _ in range(requests):
            client.complete(reqs[0])
        return cpu() - t0
    if base == "bare_chat":  # by hand: http.client and the engine, nothing else
        import http.client

        t0 = cpu()
        for _ in range(requests):
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.request(
                "POST", "/v1/chat/completions", b"{}", {"Content-Type": "application/json"}
            )
            for _event in llamafast.ChatStream(conn.getresponse()):
                pass
            conn.close()
        return cpu() - t0
    if base in ("floor_recv", "bare_post"):
        buf = bytearray(1 << 16)
        view = memoryview(buf)
        t0 = cpu()
        for _ in range(requests):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(REQUEST)
            while sock.recv_into(view):
                pass
            sock.close()
        return cpu() - t0

    async def main() -> float:
        loop = asyncio.get_running_loop()
        if base == "async":
            client = llamafast.AsyncClient(cfg)
            await client.complete(reqs[0])
            t0 = cpu()
            for _ in range(requests):
                await asyncio.gather(*(client.complete(r) for r in reqs))
            return cpu() - t0

        async def one() -> int:
            done: asyncio.Future[int] = loop.create_future()
            transport, _ = await loop.create_connection(
                lambda: CountingProtocol(done), "127.0.0.1", port
            )
            transport.write(REQUEST)
            n = await done
            transport.close()
            return n

        await one()
        t0 = cpu()
        for _ in range(requests):
            await asyncio.gather(*(one() for _ in range(streams)))
        return cpu() - t0

    if uv:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    return asyncio.run(main())


# --- the conductor ---------------------------------------------------------------------------


def measure(
    scenario: str, clients: list[str], rounds: int, old: str | None, n_slots: int, slim: bool
) -> dict[str, list[float]]:
    streams, n_chunks, rate, requests = SCENARIOS[scenario]
    port_file = f"/tmp/client_cpu_port_{os.getpid()}"
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            port_file,
            str(n_chunks),
            str(rate),
            str(n_slots),
            "1" if slim else "0",
        ]
    )
    try:
        while not Path(port_file).exists() or not Path(port_file).read_text():
            time.sleep(0.05)
        port = int(Path(port_file).read_text())
        out: dict[str, list[float]] = {c: [] for c in clients}
        for _ in range(rounds):
            for kind in clients:
                env = dict(os.environ)
                if kind.endswith("_old") and old:
                    env["PYTHONPATH"] = old
                args = [sys.executable, __file__, "--client", kind, str(port)]
                args += [str(streams), str(requests)]
                done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
                seconds = float(done.stdout.strip())
                per = n_chunks * streams * requests if scenario != "seq" else requests
                out[kind].append(seconds / per * 1e6)
        return out
    finally:
        server.kill()
        Path(port_file).unlink(missing_ok=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(
            sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
        )
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        kind, port, streams, requests = sys.argv[2], *map(int, sys.argv[3:6])
        print(run_client(kind, port, streams, requests))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old", help="a source tree whose clients run as *_old")
    parser.add_argument("--slots", type=int, default=128, help="the server's slot count")
    parser.add_argument("--slim", action="store_true", help="/slots with only id, is_processing")
    parser.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args()
    for scenario in args.scenarios:
        clients = list(CLIENTS[scenario])
        if args.old:
            clients += [f"{c}_old" for c in clients if c.removesuffix("_uv") in OLD]
        got = measure(scenario, clients, args.rounds, args.old, args.slots, args.slim)
        unit = "us/request" if scenario == "seq" else "us/chunk"
        print(
            f"{scenario} (client-process CPU, {unit}, median of {args.rounds}, {args.slots} slots)"
        )
        for kind, values in got.items():
            print(f"  {kind:<14} {statistics.median(values):9.2f}")


if __name__ == "__main__":
    main()
