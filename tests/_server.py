# A real HTTP/1.1 server on 127.0.0.1 replaying fixtures/http byte for byte, for the client tests.
# Raw sockets and one thread per connection (every recorded response says `Connection: close`,
# so each request is one connection); the tests steer it through plain attributes and `Reply`s.
"""The replaying llama-server stand-in, usable from sync and async tests alike.

Routing (method + path, query ignored):

- `GET /health`: `get_health.http`; while loading `get_health_loading.http`, and
  `get_health_after_loading.http` once a load has ended.
- `GET /slots`: `get_slots.http` when no slot is processing, `get_slots_while_busy.http` when
  exactly slot 0 of 2 is, otherwise the same JSON rewritten with the right flags and slot count.
- `POST /v1/chat/completions`: the next `Reply` of `script` (a list, consumed in order, or a
  callable given the parsed request body), else `default`. Like llama-server, a request for a
  slot that is processing gets no byte at all until the slot is free, and the slot number wraps.
- `POST /v1/chat/completions/control`: recorded in `controls`; `control_reasoning_end.http` when
  the id is a completion being streamed, else `reasoning_control_unknown_id.http`.
- anything else: `get_unknown_path.http`. While `loading`, every path answers 503.

Misbehaviour: `load_for(s)` / `load_until(done)`, `refuse()` / `accept()` (listener closed:
connection refused), `reset_next` (accept, read the request, RST), `hold_busy(slot)` /
`busy_until(slot, done)`, and per reply: pauses (`pause_until`: until an event), cuts, RST,
pacing from `.timing.json`, dropped `:` pings, or raw bytes of your own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _loopback
from _loopback import LoopbackServer, Request, raw_response, read_request, split
from _recordings import recorded_reports, recorded_times
from llamafast import (
    ChatEvent,
    Completion,
    Content,
    FinishReason,
    Progress,
    Reasoning,
    Timings,
    ToolCall,
    ToolCallDelta,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HTTP = FIXTURES / "http"

UNAUTHORIZED_BODY = (
    b'{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}'
)


def load(name: str) -> bytes:
    return (HTTP / f"{name}.http").read_bytes()


def dechunk(body: bytes) -> list[bytes]:
    """The payloads of a chunked body, in order (the last, empty one excluded)."""
    out: list[bytes] = []
    pos = 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol].split(b";")[0], 16)
        if size == 0:
            return out
        out.append(body[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2


def chunked(payloads: list[bytes], *, end: bool = True) -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads if p)
    return out + (b"0\r\n\r\n" if end else b"")


UNAUTHORIZED = raw_response(401, "Unauthorized", UNAUTHORIZED_BODY)


def event_offset(raw: bytes, n: int) -> int:
    """The offset in `raw` just after the `n`-th (1-based) blank line that ends an SSE event."""
    pos = raw.index(b"\r\n\r\n") + 4
    for _ in range(n):
        pos = raw.index(b"\n\n", pos) + 2
    return pos


@dataclass
class Reply:
    """How to answer one chat request.

    name: the recording (`fixtures/http/NAME.http`), or `raw`: bytes to send instead.
    pace: replay the `.timing.json` read times, divided by this factor (1.0: real time).
    pause_at / pause_s: after `pause_at` bytes of the raw response, send nothing for `pause_s`.
    pause_until: after `pause_at` bytes, send nothing until this event is set (no clock: a
    test that orders two requests by it does not depend on the machine's speed).
    cut_at: close the connection after `cut_at` bytes (the chunked body left incomplete).
    cut_line: end the body in the middle of its `cut_line`-th data line, with a clean chunked end.
    drop_pings: leave out the chunks that hold only `:` comment lines.
    rst: end the connection with a RST instead of a FIN wherever it ends.
    hold: send nothing until this event is set.
    """

    name: str = "content_only"
    raw: bytes | None = None
    pace: float | None = None
    pause_at: int | None = None
    pause_s: float = 0.0
    pause_until: threading.Event | None = None
    cut_at: int | None = None
    cut_line: int | None = None
    drop_pings: bool = False
    rst: bool = False
    hold: threading.Event | None = None
    linger: float = 0.0  # keep the connection open this long after the answer (keep-alive)

    def render(self) -> bytes:
        raw = self.raw if self.raw is not None else load(self.name)
        if self.drop_pings or self.cut_line is not None:
            head, body = split(raw)
            payloads = dechunk(body)
            if self.drop_pings:
                payloads = [p for p in payloads if p.strip(b"\r\n") not in (b":", b"")]
            if self.cut_line is not None:
                text = b"".join(payloads)
                starts = [m.start() for m in re.finditer(rb"(?m)^data: ", text)]
                start = starts[self.cut_line - 1]
                middle = start + (text.index(b"\n", start) - start) // 2
                payloads = [text[:middle]]
            raw = head + chunked(payloads)
        return raw

    def reads(self) -> list[tuple[float, int]]:
        """The `.timing.json` reads ((ms, bytes) each), sped up by `pace`; [] sends at once."""
        if self.pace is None or self.raw is not None:
            return []
        timing = json.loads((HTTP / f"{self.name}.timing.json").read_text())
        return [(t_ms / self.pace, n) for t_ms, n in timing["reads_ms_bytes"]]


def capped_reply() -> Reply:
    """The thinking_capped recording, paused near its end so the control request finds it."""
    raw = load("thinking_capped")
    return Reply("thinking_capped", pause_at=event_offset(raw, 180), pause_s=0.3)


@dataclass
class ChatLog:
    """One chat request as the server saw it."""

    slot: int
    body: dict[str, Any]
    arrived: float
    started: float = 0.0  # first byte sent
    ended: float = 0.0
    closed_by_client: bool = False
    closed_at: float = 0.0


class ReplayServer(LoopbackServer):
    """A loopback llama-server stand-in. Use as a context manager, or `start()` / `stop()`."""

    backlog = 256

    def __init__(
        self,
        n_slots: int = 2,
        pieces: int | None = None,
        gap: float = 0.0002,
        tls: ssl.SSLContext | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.tls = tls  # serve HTTPS with this context
        self.prefix = prefix  # like a reverse proxy: serve under this path, 404 elsewhere
        self.n_slots = n_slots
        # A remote-like server: every answer goes out in pieces of at most `pieces` bytes,
        # `gap` seconds apart (a proxy, a slow network); None sends each write whole. The
        # default gap is many times what the client takes to read a piece, so each piece
        # still comes on its own, and a long recording (1,000 pieces) takes 0.3 s, not 2.
        self.pieces = pieces
        self.gap = gap
        self.script: list[Reply] | Callable[[dict[str, Any]], Reply] = []
        self.default = Reply("content_only")
        self.requests: list[Request] = []
        self.chats: list[ChatLog] = []
        self.controls: list[dict[str, Any]] = []
        self.reset_next = 0  # RST this many connections after reading their request
        self.control_reply: str | None = None  # answer every control request with this recording
        self.loading_until = 0.0
        self.chat_loading = False  # /health says ok while the chat answers 503 Loading model
        self.api_key: str | None = None  # like --api-key: 401 without "Bearer <key>"
        self.slots_answered = 0  # /slots answers sent in full
        self._was_loading = False
        self._slot_locks = [threading.Lock() for _ in range(n_slots)]
        self._processing = [False] * n_slots
        self._forced_busy: set[int] = set()
        self._active_ids: set[str] = set()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{self.prefix}"

    # --- misbehaviour ---------------------------------------------------------------------

    def load_for(self, seconds: float) -> None:
        """Answer every request 503 `Loading model` for `seconds` from now."""
        self.loading_until = time.monotonic() + seconds
        self._was_loading = True

    def load_until(self, done: Callable[[], bool], guard: float = 30.0) -> None:
        """Answer every request 503 `Loading model` from now until `done()` says so (looked at
        every 10 ms; `guard` seconds at most): no clock decides what the client sees."""
        self.loading_until = math.inf
        self._was_loading = True

        def run() -> None:
            until = time.monotonic() + guard
            while not done() and time.monotonic() < until:
                time.sleep(0.01)
            self.loading_until = 0.0

        threading.Thread(target=run, daemon=True).start()

    def until_asked(self, path: str) -> Callable[[], bool]:
        """A `done` for load_until / busy_until: once `path` has been asked (ends with it)."""
        return lambda: any(p.endswith(path) for p in self.paths())

    def refuse_for(self, seconds: float) -> None:
        self.refuse()
        timer = threading.Timer(seconds, self.accept)
        timer.daemon = True
        timer.start()

    @contextlib.contextmanager
    def hold_busy(self, slot: int) -> Iterator[None]:
        """Slot `slot` processes "another client's" request: `/slots` says so, chats wait."""
        with self._slot_locks[slot]:
            self._forced_busy.add(slot)
            try:
                yield
            finally:
                self._forced_busy.discard(slot)

    def busy_until(
        self, slot: int, done: Callable[[], bool], guard: float = 30.0
    ) -> threading.Thread:
        """`hold_busy(slot)` from now until `done()` says so (looked at every 10 ms; `guard`
        seconds at most), in the background: no clock decides what the client sees."""
        entered = threading.Event()

        def run() -> None:
            with self.hold_busy(slot):
                entered.set()
                until = time.monotonic() + guard
                while not done() and time.monotonic() < until:
                    time.sleep(0.01)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        entered.wait()
        return thread

    # --- inspection ---------------------------------------------------------------------

    def paths(self, method: str | None = None) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests if method is None or r.method == method]

    def chat_logs(self) -> list[ChatLog]:
        with self._lock:
            return list(self.chats)

    # --- the server -----------------------------------------------------------------------

    def _wrap(self, conn: socket.socket) -> socket.socket:
        return conn if self.tls is None else self.tls.wrap_socket(conn, server_side=True)

    def handle(self, conn: socket.socket, accepted: Any) -> None:
        request = self._read_request(conn)
        if request is None:
            return
        with self._lock:
            self.requests.append(request)
            reset = self.reset_next > 0
            if reset:
                self.reset_next -= 1
        if reset:
            _rst(conn)
            return
        if self.prefix:
            if not request.path.startswith(self.prefix + "/"):
                self._sendall(conn, load("get_unknown_path"))
                return
            request = dataclasses.replace(request, path=request.path[len(self.prefix) :])
        self._route(conn, request)

    @staticmethod
    def _read_request(conn: socket.socket) -> Request | None:
        return read_request(conn)  # the tests stand in their own readers here

    def _route(self, conn: socket.socket, req: Request) -> None:
        loading = time.monotonic() < self.loading_until
        if self.api_key is not None and req.path != "/health":  # llama-server exempts /health
            if req.headers.get("authorization") != f"Bearer {self.api_key}":
                self._sendall(conn, UNAUTHORIZED)
                return
        if self.chat_loading and req.path.startswith("/v1/chat"):
            self._sendall(conn, load("chat_while_loading"))
            return
        if req.method == "GET" and req.path == "/health":
            if loading:
                name = "get_health_loading"
            else:
                name = "get_health_after_loading" if self._was_loading else "get_health"
            self._sendall(conn, load(name))
        elif loading:
            name = "chat_while_loading" if req.path.startswith("/v1/chat") else "get_health_loading"
            self._sendall(conn, load(name))
        elif req.method == "GET" and req.path == "/slots":
            self._sendall(conn, self._slots())
            with self._lock:
                self.slots_answered += 1
        elif req.method == "POST" and req.path == "/v1/chat/completions/control":
            body = json.loads(req.body)
            with self._lock:
                self.controls.append(body)
                known = body.get("id") in self._active_ids
            name = "control_reasoning_end" if known else "reasoning_control_unknown_id"
            self._sendall(conn, load(self.control_reply or name))
        elif req.method == "POST" and req.path == "/v1/chat/completions":
            self._chat(conn, req)
        else:
            self._sendall(conn, load("get_unknown_path"))

    def _sendall(self, conn: socket.socket, data: bytes) -> None:
        if self.pieces is None:
            conn.sendall(data)
            return
        for at in range(0, len(data), self.pieces):
            if at:
                time.sleep(self.gap)
            conn.sendall(data[at : at + self.pieces])

    def _slots(self) -> bytes:
        with self._lock:
            busy = [self._processing[i] or i in self._forced_busy for i in range(self.n_slots)]
        if self.n_slots == 2 and busy == [False, False]:
            return load("get_slots")
        if self.n_slots == 2 and busy == [True, False]:
            return load("get_slots_while_busy")
        template = json.loads(split(load("get_slots"))[1])[0]
        return raw_response(200, "OK", _loopback.slots_body(template, busy))

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if callable(self.script):
                return self.script(body)
            if self.script:
                return self.script.pop(0)
            return self.default

    def _chat(self, conn: socket.socket, req: Request) -> None:
        body = json.loads(req.body)
        if "id_slot" in body:
            slot = int(body["id_slot"]) % self.n_slots  # llama-server wraps the slot number
        else:  # the server picks: an idle slot if there is one
            with self._lock:
                idle = [i for i in range(self.n_slots) if not self._processing[i]]
                idle = [i for i in idle if i not in self._forced_busy]
                slot = idle[0] if idle else 0
                self._processing[slot] = True
        reply = self._next_reply(body)
        log = ChatLog(slot, body, req.at)
        with self._lock:
            self.chats.append(log)
        raw = reply.render()
        cid = _loopback.completion_id(raw)
        with self._slot_locks[slot]:  # no byte at all while the slot is busy
            self._processing[slot] = True
            if cid:
                with self._lock:
                    self._active_ids.add(cid)
            try:
                if reply.hold is not None:
                    reply.hold.wait()
                log.started = time.monotonic()
                self._send(conn, reply, raw, log)
                if reply.rst:
                    _rst(conn)
                elif reply.linger:
                    self._wait(conn, time.monotonic() + reply.linger, log)
            finally:
                self._done(slot, cid)
            log.ended = time.monotonic()

    def _done(self, slot: int, cid: str | None) -> None:
        with self._lock:
            self._processing[slot] = False
            if cid:
                self._active_ids.discard(cid)

    def _send(self, conn: socket.socket, reply: Reply, raw: bytes, log: ChatLog) -> bool:
        """Send `raw` as `reply` says; False when the client closed first or the reply was cut."""
        if reply.cut_at is not None:
            raw = raw[: reply.cut_at]
        # The slot is free again just before the final `[DONE]` chunk goes out: a client that
        # has read [DONE] may ask /slots at once (llama-server has the same order).
        release = _loopback.release_offset(raw)
        marks = {release}
        if reply.pause_at is not None:
            marks.add(reply.pause_at)
        pieces = _loopback.plan(raw, reply.reads(), marks)
        t0 = time.monotonic()
        for at, offset, piece in pieces:
            if offset == reply.pause_at and reply.pause_s:
                if not self._wait(conn, time.monotonic() + reply.pause_s, log):
                    return False
                t0 += reply.pause_s
            if offset == reply.pause_at and reply.pause_until is not None:
                paused = time.monotonic()
                while not reply.pause_until.is_set():
                    if not self._wait(conn, time.monotonic() + 0.05, log):
                        return False
                t0 += time.monotonic() - paused
            if not self._wait(conn, t0 + at, log):
                return False
            if offset >= release:
                self._done(log.slot, None)
            try:
                self._sendall(conn, piece)
            except OSError:
                self._client_closed(log)
                return False
        return reply.cut_at is None

    def _wait(self, conn: socket.socket, until: float, log: ChatLog) -> bool:
        """Sleep until `until`, noticing a client that closes meanwhile (False then)."""
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return True
            readable, _, _ = select.select([conn], [], [], min(left, 0.05))
            if readable:
                try:
                    data = conn.recv(1024, socket.MSG_PEEK)
                except OSError:
                    data = b""
                if not data:
                    self._client_closed(log)
                    return False
                conn.recv(1024)
            if self.stopped:
                return False

    def _client_closed(self, log: ChatLog) -> None:
        log.closed_by_client = True
        log.closed_at = time.monotonic()


def _rst(conn: socket.socket) -> None:
    """Close with a RST: SO_LINGER on, timeout 0."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        conn.close()


def expected(name: str) -> tuple[list[ChatEvent], Completion | None]:
    """The events and the Completion that `fixtures/expected/NAME.json` says `NAME` gives."""
    data = json.loads((FIXTURES / "expected" / f"{name}.json").read_text())
    events: list[ChatEvent] = []
    for e in data.get("events", []):
        kind = e["type"]
        if kind == "progress":
            events.append(Progress(e["total"], e["cache"], e["processed"]))
        elif kind == "reasoning":
            events.append(Reasoning(e["text"]))
        elif kind == "content":
            events.append(Content(e["text"]))
        else:
            events.append(ToolCallDelta(e["index"], e["id"], e["name"], e["arguments"]))
    c = data.get("completion")
    if c is None or c["finish_reason"] is None:
        return events, None
    completion = Completion(
        id=c["id"],
        content=c["content"],
        reasoning_content=c["reasoning_content"],
        tool_calls=tuple(ToolCall(t["id"], t["name"], t["arguments"]) for t in c["tool_calls"]),
        finish_reason=FinishReason(c["finish_reason"]),
        timings=Timings(**c["timings"], **recorded_times(data)),
        reasoning_tokens=c["reasoning_tokens"],
        thinking_capped=c["thinking_capped"],
        **recorded_reports(data),
    )
    return events, completion
