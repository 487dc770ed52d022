"""`python -m llamafast serve`: a llama-server stand-in that answers from recordings, no model.

An HTTP/1.1 server (standard library only) that sends, for each request, one whole response
recorded byte for byte from a real llama-server (`_recordings/serve/`, made by
tools/llama-server/record_serve.py), paced as it was recorded. What it keeps of a server is what
a client can see: the slots (a request for a busy `id_slot` gets no byte until the slot is free,
as llama-server does), `/slots` and `/props` for the slot count it was started with, and a
context size that a long prompt overflows. The one number rewritten in an answer is a prompt's
token count (BYTES_PER_TOKEN), in the overflow's 400 and in `/v1/chat/completions/input_tokens`;
`/slots` and `/props` follow `--slots`.
The recordings are read through `llamafast._recordings`, the one reader of them.
The pieces a loopback test server needs as well (reading a request, the slot JSON, where the
slot is freed) are here, once; tests/_server.py imports them. It holds against its own clients
as http.server, h11 and aiohttp do (BOUNDS): one thread reads every request against a deadline
and within bounds, a capped pool of threads answers whole ones (`_serve_loop`, `_serve_reader`).
"""

from __future__ import annotations

import functools
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._recordings import BUNDLED, SERVE, split
from .._strict_json import too_deep
from ._failures import CliError, CliParser, error_line
from ._serve_loop import MAX_OPEN, WORKERS, LoopServer
from ._serve_reader import MAX_BODY, MAX_HEAD, REQUEST_DEADLINE, Request, raw_response, read_request

__all__ = ["RecordedServer", "Request", "main", "pick", "raw_response", "read_request"]

PROG = "llamafast serve"
BYTES_PER_TOKEN = 4
"""A prompt counts as one token per this many bytes of its messages and tools (JSON): a rough
stand-in for the tokenizer, enough to tell a prompt that cannot fit from one that can."""

MAX_DEPTH = 512
"""A body nested deeper than this (arrays and objects) is answered as one that is not JSON: past
what Python's recursion takes in json.loads or json.dumps; a real request nests a few levels."""

BOUNDS = (
    f"Each request must arrive whole within {REQUEST_DEADLINE:g} s of the connection (else 408), "
    f"its head within {MAX_HEAD // 1024} KiB (else 431), its body within "
    f"{MAX_BODY // (1024 * 1024)} MiB (else 413); a body that is not a JSON object, or nests "
    f"past {MAX_DEPTH} levels, gets llama-server's 400. At most {WORKERS} requests are answered "
    f"at once and {MAX_OPEN} connections held; the next wait to be accepted."
)
"""The bounds every client is held to, as `serve --help` says them."""

_ID = re.compile(rb'"id":"(chatcmpl-[^"]+)"')


def with_body(raw: bytes, body: bytes) -> bytes:
    """The recorded response `raw` with its JSON body replaced and Content-Length set to match;
    every other header byte as recorded."""
    head, _ = split(raw)
    head = re.sub(rb"(?im)^Content-Length: \d+", b"Content-Length: %d" % len(body), head)
    return head + body


def slots_body(template: dict[str, Any], busy: Sequence[bool]) -> bytes:
    """`/slots`: the recorded slot object once per slot, its `id` and `is_processing` set, in the
    server's compact JSON (the recorded bytes when nothing changed)."""
    slots = [dict(template, id=i, is_processing=b) for i, b in enumerate(busy)]
    return json.dumps(slots, separators=(",", ":")).encode()


def completion_id(raw: bytes) -> str | None:
    m = _ID.search(raw)
    return m.group(1).decode() if m else None


def release_offset(raw: bytes) -> int:
    """Where llama-server frees the slot: just before the chunk holding `data: [DONE]` (a client
    that has read [DONE] may ask /slots at once and see it idle); the end for any other body."""
    done_at = raw.rfind(b"data: [DONE]")
    return raw.rfind(b"\r\n", 0, done_at - 2) + 2 if done_at > 0 else len(raw)


def plan(
    raw: bytes, reads: Sequence[tuple[float, int]], marks: set[int]
) -> list[tuple[float, int, bytes]]:
    """`raw` as (seconds after the start, offset, bytes) pieces: cut as the recorded `reads`
    ((ms, bytes) each; [] sends it at once) and at every offset in `marks`."""
    sends: list[tuple[float, bytes]] = []
    pos = 0
    for t_ms, n in reads:
        sends.append((t_ms / 1000.0, raw[pos : pos + n]))
        pos += n
    if pos < len(raw):  # no reads, or the response was rewritten: the rest with the last read
        sends.append((sends[-1][0] if sends else 0.0, raw[pos:]))
    pieces: list[tuple[float, int, bytes]] = []
    pos = 0
    for at, data in sends:
        cuts = sorted(m - pos for m in marks if pos < m < pos + len(data))
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            pieces.append((at, pos + a, data[a:b]))
        pos += len(data)
    return pieces


@dataclass(frozen=True)
class Recording:
    raw: bytes
    reads: tuple[tuple[float, int], ...]  # from NAME.timing.json; () when there is none


@functools.cache
def recording(name: str) -> Recording:
    """`_recordings/serve/NAME.http` (or `_recordings/NAME.http` for `../NAME`) and its pacing."""
    folder = SERVE
    if name.startswith("../"):
        folder, name = BUNDLED, name[3:]
    return Recording(folder.raw(name), tuple(folder.reads(name)))


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt's size as this server counts it (BYTES_PER_TOKEN)."""
    text = json.dumps([body.get("messages"), body.get("tools")], ensure_ascii=False)
    return len(text.encode()) // BYTES_PER_TOKEN


def pick(body: dict[str, Any], n_ctx: int) -> str:
    """The recording that answers the chat request `body`, by its fields alone:

    - a prompt over the context (`prompt_tokens` > n_ctx): `context_overflow` (400);
    - `tools` and the last message the user's: a call of `read_file` (the README's agent's
      tool);
    - `response_format`: the JSON-schema answer;
    - thinking on (`chat_template_kwargs.enable_thinking` true or left out, as the template
      opens the reasoning by default): reasoning, then the answer;
    - otherwise the answer alone.

    A request without `"stream": true` gets the `_nonstream` recording, as llama-server answers
    such a request with one JSON object."""
    if prompt_tokens(body) > n_ctx:
        return "context_overflow"
    stream = body.get("stream") is True
    messages = body.get("messages")
    last: dict[str, Any] = {}
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        last = messages[-1]
    kwargs = body.get("chat_template_kwargs")
    thinking = not isinstance(kwargs, dict) or kwargs.get("enable_thinking", True) is not False
    if body.get("tools") and last.get("role") == "user":
        name = "tool_call"
    elif body.get("response_format"):
        name = "json_schema"
    elif thinking:
        name = "reasoning"
    else:
        name = "content"
    return name if stream else f"{name}_nonstream"


class RecordedServer(LoopServer):
    """The server: `serve_forever()` answers until `shutdown()`; `url` says where. Its clients
    are held to the bounds of `_serve_loop` and `_serve_reader` (see BOUNDS)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8080,
        slots: int = 2,
        *,
        pace: bool = True,
        deadline: float = REQUEST_DEADLINE,
        workers: int = WORKERS,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        self.n_slots = slots
        self.pace = pace
        self.busy = [False] * slots
        self.active: set[str] = set()  # completion ids being streamed (for /control)
        self.changed = threading.Condition()
        props = recording("props")
        body = json.loads(split(props.raw)[1])
        self.n_ctx = int(body["default_generation_settings"]["n_ctx"])
        self.props = with_body(props.raw, _set_total_slots(split(props.raw)[1], slots))
        self.slot_template = json.loads(split(recording("slots").raw)[1])[0]
        super().__init__(host, port, deadline=deadline, workers=workers)

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{host}:{port}"

    # --- the slots --------------------------------------------------------------------------

    def acquire(self, slot: int | None) -> int:
        """Take slot `slot` (wrapped to the slot count, as llama-server does), or any idle one
        for None; until it is free, wait."""
        with self.changed:
            while True:
                if slot is None:
                    idle = [i for i, b in enumerate(self.busy) if not b]
                    if idle:
                        self.busy[idle[0]] = True
                        return idle[0]
                elif not self.busy[slot % self.n_slots]:
                    self.busy[slot % self.n_slots] = True
                    return slot % self.n_slots
                self.changed.wait()

    def release(self, slot: int) -> None:
        with self.changed:
            if self.busy[slot]:
                self.busy[slot] = False
                self.changed.notify_all()

    def slots(self) -> bytes:
        with self.changed:
            busy = list(self.busy)
        return with_body(recording("slots").raw, slots_body(self.slot_template, busy))

    # --- answering ------------------------------------------------------------------------------

    def answer(self, conn: socket.socket, req: Request) -> None:
        if req.method == "GET" and req.path == "/health":
            self.send(conn, recording("health"))
        elif req.method == "GET" and req.path == "/slots":
            conn.sendall(self.slots())
        elif req.method == "GET" and req.path in ("/models", "/v1/models"):
            self.send(conn, recording("models"))  # one model, loaded: not a router
        elif req.method == "GET" and req.path == "/props":
            conn.sendall(self.props)
        elif req.method == "POST" and req.path in ("/v1/chat/completions", "/chat/completions"):
            self.chat(conn, req)
        elif req.method == "POST" and req.path in ("/v1/embeddings", "/embeddings"):
            body = self.parse(conn, req)
            if body is not None:
                conn.sendall(embedded(body))
        elif req.method == "POST" and req.path in ("/rerank", "/v1/rerank", "/reranking"):
            body = self.parse(conn, req)
            if body is not None:
                conn.sendall(reranked(body))
        elif req.method == "POST" and req.path == "/v1/chat/completions/input_tokens":
            body = self.parse(conn, req)
            if body is not None:
                conn.sendall(counted(recording("input_tokens").raw, prompt_tokens(body)))
        elif req.method == "POST" and req.path == "/v1/chat/completions/control":
            body = json_object(req.body)
            cid = body.get("id") if body is not None else None
            known = isinstance(cid, str) and cid in self.active
            self.send(conn, recording("control_reasoning_end" if known else "control_unknown_id"))
        else:
            self.send(conn, recording("unknown_path"))

    def parse(self, conn: socket.socket, req: Request) -> dict[str, Any] | None:
        """The request's JSON object; None when it is not one (the recorded 400 is sent)."""
        body = json_object(req.body)
        if body is None:
            self.send(conn, recording("bad_json"))
        return body

    def chat(self, conn: socket.socket, req: Request) -> None:
        body = self.parse(conn, req)
        if body is None:
            return
        rec = recording(pick(body, self.n_ctx))
        if not rec.raw.startswith(b"HTTP/1.1 200"):  # refused before any slot is taken, saying
            conn.sendall(counted(rec.raw, prompt_tokens(body)))  # how long the prompt is
            return
        wanted = body.get("id_slot")
        slot = self.acquire(wanted if isinstance(wanted, int) and wanted >= 0 else None)
        cid = completion_id(rec.raw)
        if cid:
            with self.changed:
                self.active.add(cid)
        try:
            self.send(conn, rec, slot)
        finally:
            with self.changed:
                self.active.discard(cid or "")
            self.release(slot)

    def send(self, conn: socket.socket, rec: Recording, slot: int | None = None) -> None:
        """`rec` as recorded (paced unless `pace` is off); `slot` freed where llama-server does."""
        release = release_offset(rec.raw)
        t0 = time.monotonic()
        for at, offset, piece in plan(rec.raw, rec.reads if self.pace else (), {release}):
            if slot is not None and offset >= release:
                self.release(slot)
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            conn.sendall(piece)


def json_object(body: bytes) -> dict[str, Any] | None:
    """`body` as a JSON object, or None where llama-server's parser answers `bad_json`: not
    JSON, not UTF-8, not an object, a lone surrogate escape (`\\ud800`); and where this one
    cannot go: nested past MAX_DEPTH (refused whatever the depth, never a RecursionError)."""
    if too_deep(body, MAX_DEPTH):  # counted before json.loads recurses into it, at any depth
        return None
    try:
        value = json.loads(body)
        if not isinstance(value, dict):
            return None
        if b"\\u" in body:  # an escape may be half a surrogate pair, which UTF-8 cannot carry
            json.dumps(value, ensure_ascii=False).encode()
    # UnicodeError is a ValueError. RecursionError is still live: json.loads and json.dumps
    # recurse once per level, and within MAX_DEPTH a caller's stack already deep can run out.
    except (ValueError, RecursionError):
        return None
    return value


def _inputs(body: dict[str, Any], key: str) -> list[Any]:
    value = body.get(key)
    return value if isinstance(value, list) else [value]


def embedded(body: dict[str, Any]) -> bytes:
    """An embeddings answer as the recorded one (`encoding_format: "base64"`: the base64
    recording, else the one with JSON numbers), one item per input: the recorded vectors in
    turn, each with its input's `index`; `usage` counts the inputs as chat prompts are counted.
    The vectors are the recorded ones, not a model's reading of these texts."""
    name = "embeddings_base64" if body.get("encoding_format") == "base64" else "embeddings_float"
    raw = recording(name).raw
    doc = json.loads(split(raw)[1])
    items = doc["data"]
    n = len(_inputs(body, "input"))
    doc["data"] = [{**items[i % len(items)], "index": i} for i in range(n)]
    tokens = len(json.dumps(body.get("input"), ensure_ascii=False).encode()) // BYTES_PER_TOKEN
    doc["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return with_body(raw, json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode())


def reranked(body: dict[str, Any]) -> bytes:
    """A rerank answer as the recorded one: every document (at most `top_n`) with the recorded
    scores in turn, best first, as llama-server orders them; `usage` as for a chat prompt."""
    raw = recording("rerank").raw
    doc = json.loads(split(raw)[1])
    scores = [r["relevance_score"] for r in sorted(doc["results"], key=lambda r: r["index"])]
    n = len(_inputs(body, "documents"))
    results = [{"index": i, "relevance_score": scores[i % len(scores)]} for i in range(n)]
    results.sort(key=lambda r: -r["relevance_score"])
    top_n = body.get("top_n")
    if isinstance(top_n, int) and top_n > 0:
        results = results[:top_n]
    doc["results"] = results
    tokens = len(json.dumps(body, ensure_ascii=False).encode()) // BYTES_PER_TOKEN
    doc["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return with_body(raw, json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode())


_COUNTS = re.compile(rb'(?<="input_tokens":)\d+|(?<="n_prompt_tokens":)\d+|(?<=request \()\d+')


def counted(raw: bytes, tokens: int) -> bytes:
    """The recorded response `raw` with the prompt's token count (`input_tokens`, and the
    overflow's `n_prompt_tokens` and message) that of the request answered: the one number in
    it that describes the request rather than the server."""
    _, body = split(raw)
    return with_body(raw, _COUNTS.sub(str(tokens).encode(), body))


def _set_total_slots(body: bytes, slots: int) -> bytes:
    """The recorded /props body with `total_slots` the slot count this server has."""
    return re.sub(rb'"total_slots":\d+', b'"total_slots":%d' % slots, body, count=1)


MAX_SLOTS = 1024
"""The most slots `serve` is started with (each is a line in every /slots answer)."""


def main(argv: Sequence[str] | None = None) -> int:
    """`llamafast serve`: answer until interrupted; the exit status is returned (docs/cli.md,
    rules SERVE-OPTIONS and EXITS: a bad option 2 in the command line's one-line style; a
    failure to listen 1). An interrupt (Ctrl-C) closes the server and goes on up to the
    command line, which reports it as every command's (rule INTERRUPT, 130)."""
    ap = CliParser(
        prog=PROG,
        description="Answer as llama-server does, from recordings of a real one (no model): "
        "chat with reasoning, a tool call, JSON-schema output, /health, /slots, /props, a busy "
        "slot, a context overflow.",
        epilog=BOUNDS,
    )
    ap.add_argument("--host", default="127.0.0.1", help="the address (default: 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8080, help="the port (default: 8080; 0: any)")
    ap.add_argument(
        "--slots", type=int, default=2, metavar="N", help=f"slots, 1 to {MAX_SLOTS} (default: 2)"
    )
    ap.add_argument("--no-pace", action="store_true", help="answer at once, not as recorded")
    args = ap.parse_args(argv)
    if not 0 <= args.port <= 65535:
        ap.error(f"--port must be from 0 to 65535, not {args.port}")
    if args.slots < 1:
        ap.error(f"--slots must be at least 1, not {args.slots}")
    if args.slots > MAX_SLOTS:
        ap.error(f"--slots must be at most {MAX_SLOTS}, not {args.slots}")
    try:
        server = RecordedServer(args.host, args.port, args.slots, pace=not args.no_pace)
    except (OSError, ValueError) as err:  # ValueError: a host holding a NUL
        failed = CliError.of(err, f"cannot listen on {args.host}:{args.port}: ")
        sys.stderr.write(error_line(PROG, failed))
        return 1
    with server:
        print(f"{PROG}: {server.url} ({args.slots} slots, recorded answers)", flush=True)
        server.serve_forever()
    return 0
