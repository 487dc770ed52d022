# A loopback server that keeps connections alive, as llama-server does after a whole answer and a
# proxy in front of it does after any, and that closes one at the moment a test names: before the
# next request is sent (right after the last answer, while the client holds it idle), during that
# request's send (its first bytes arrived), after it (read whole, never answered), after every
# streamed answer (llama-server's manner, although its header says keep-alive), or after `max`
# answers. It counts the connections it accepted and logs each answer with the connection that
# carried it, so a test sees what was opened, reused and sent twice.
"""`KeepAliveServer`: recorded answers on kept-alive connections, closed where a test says."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llamafast
import llamafast.pure
from _loopback import LoopbackServer, read_request
from _server import load
from llamafast import Completion

__all__ = ["MESSAGES", "USES", "AsyncUse", "KeepAliveServer", "SyncUse"]

# Where the server drops a connection, relative to the request a plan names.
BEFORE, DURING, AFTER = "before", "during", "after"
CUT = "cut"  # answer the first bytes of a head, then close
SURPLUS = "surplus"  # answer, with bytes after the answer's end
STALL = "stall"  # answer the first half, then say nothing more (the connection left open)
WHOLE = {"/slots": "get_slots"}  # the recording of each whole answer but /models


def _next_request_begins(conn: socket.socket) -> bool:
    """Wait until a byte of the next request has come (True) or the client closed (False)."""
    try:
        if isinstance(conn, ssl.SSLSocket):
            if conn.pending():  # a request already decrypted
                return True
            # A peek at the TLS bytes themselves (below the TLS layer): the next record or the
            # close (the clients close without a close_notify alert).
            return bool(socket.socket.recv(conn, 1, socket.MSG_PEEK))
        return bool(conn.recv(1, socket.MSG_PEEK))
    except OSError:
        return False


def kept(name: str, header: str | None) -> bytes:
    """Recording `name` with its `Connection: close` made keep-alive (and `Keep-Alive: header`)."""
    raw = load(name)
    line = b"" if header is None else f"Keep-Alive: {header}\r\n".encode()
    assert b"Connection: close\r\n" in raw
    return raw.replace(b"Connection: close\r\n", line, 1)


@dataclass
class KeepAliveServer(LoopbackServer):
    """`plan[k]` (k counts requests from 1 as they arrive): drop the connection BEFORE request
    k (right after answering the one before it on that connection), DURING it (once its first
    byte came) or AFTER it (read whole, not answered). `close_after_stream`: close after every
    streamed answer; `most`: close after that many answers on a connection (and say
    `max=most`); `header`: the Keep-Alive header (None: none); `delay`: seconds before each
    chat's answer. CUT: answer the first bytes of a head, then close; SURPLUS: answer, and
    send bytes after the answer; STALL: answer half, then nothing until the client closes."""

    plan: dict[int, str] = field(default_factory=dict)
    close_after_stream: bool = False
    most: int | None = None
    header: str | None = "timeout=5, max=100"
    delay: float = 0.0  # seconds before each chat's answer
    tls: ssl.SSLContext | None = None  # speak TLS with this context
    ca: str | None = None  # the CA file that vouches for its certificate (its clients trust it)
    idle_close: float = 0.0  # seconds between the answer and the close BEFORE a request

    def __post_init__(self) -> None:
        super().__init__()
        if self.most is not None:
            self.header = f"timeout=5, max={self.most}"
        self.accepted = 0
        self.arrived = 0  # requests whose first byte came
        self.answered: list[tuple[int, str]] = []  # (connection number, path) per answer
        self.open_now = 0
        self.open_most = 0  # connections open at once, at most

    @property
    def url(self) -> str:
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    def _wrap(self, conn: socket.socket) -> socket.socket:
        return conn if self.tls is None else self.tls.wrap_socket(conn, server_side=True)

    def _accepted(self, conn: socket.socket) -> Any:
        self.accepted += 1
        self.open_now += 1
        self.open_most = max(self.open_most, self.open_now)
        return self.accepted

    def handle(self, conn: socket.socket, accepted: Any) -> None:
        try:
            self._answer_all(conn, accepted)
        finally:
            with self._lock:
                self.open_now -= 1

    def _answer_all(self, conn: socket.socket, number: int) -> None:
        answers = 0
        while True:
            if not _next_request_begins(conn):
                return  # the client closed it
            with self._lock:
                self.arrived += 1
                k = self.arrived
                moment = self.plan.get(k)
            if moment == DURING:
                return
            req = read_request(conn)
            if req is None or moment == AFTER:
                return
            if moment == CUT:
                conn.sendall(b"HTTP/1.1 200")
                return
            streamed = req.path == "/v1/chat/completions"
            if self.delay and streamed:
                time.sleep(self.delay)
            name = "content_only" if streamed else WHOLE.get(req.path, "models")
            with self._lock:  # logged before it is sent: a client that has it sees it logged
                self.answered.append((number, req.path))
                after = self.plan.get(k + 1)
            answer = kept(name, self.header) + (b"\r\n" if moment == SURPLUS else b"")
            if moment == STALL:
                conn.sendall(answer[: len(answer) // 2])
                _next_request_begins(conn)  # silent until the client closes it
                return
            conn.sendall(answer)
            answers += 1
            if after == BEFORE:
                time.sleep(self.idle_close)
                return
            if streamed and self.close_after_stream:
                return
            if self.most is not None and answers >= self.most:
                return


# --- the clients, one call at a time on one client (each kind: both clients, both twins) ---

MESSAGES = [{"role": "user", "content": "hi"}]


class SyncUse:
    """The sync client, one call at a time: `chat`, `complete` (a callback) or `models`; each
    gives the events it handed out (Retrying among them)."""

    def __init__(self, package: Any, config: llamafast.Config) -> None:
        self.client = package.Client(config)

    @property
    def pool(self) -> Any:
        return self.client._pool

    def chat(self, stop_after: int | None = None, limits: Any = None) -> list[Any]:
        events: list[Any] = []
        with self.client.stream(MESSAGES, limits=limits) as stream:
            for event in stream:
                events.append(event)
                if stop_after is not None and len(events) >= stop_after:
                    return events
            assert isinstance(stream.completion, Completion)
        return events

    def complete(self) -> list[Any]:
        events: list[Any] = []
        self.client.complete(MESSAGES, events.append)
        return events

    def models(self) -> list[Any]:
        assert self.client.models()
        return []

    def close(self) -> None:
        self.client.close()


class AsyncUse(SyncUse):
    """The asyncio client, each call run on one event loop that lives as long as the client."""

    def __init__(self, package: Any, config: llamafast.Config) -> None:
        self.runner = asyncio.Runner()
        self.client = package.AsyncClient(config)

    def chat(self, stop_after: int | None = None, limits: Any = None) -> list[Any]:
        async def run() -> list[Any]:
            events: list[Any] = []
            async with self.client.stream(MESSAGES, limits=limits) as stream:
                async for event in stream:
                    events.append(event)
                    if stop_after is not None and len(events) >= stop_after:
                        return events
                assert isinstance(stream.completion, Completion)
            return events

        return self.runner.run(run())

    def complete(self) -> list[Any]:
        events: list[Any] = []
        self.runner.run(self.client.complete(MESSAGES, events.append))
        return events

    def models(self) -> list[Any]:
        assert self.runner.run(self.client.models())
        return []

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.close()


USES: dict[str, Callable[[llamafast.Config], SyncUse]] = {
    "sync": lambda c: SyncUse(llamafast, c),
    "async": lambda c: AsyncUse(llamafast, c),
    "pure-sync": lambda c: SyncUse(llamafast.pure, c),
    "pure-async": lambda c: AsyncUse(llamafast.pure, c),
}
