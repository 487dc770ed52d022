"""The bytes on the wire, defined once for the fake server, the clients and the smoke test.

The response framing is the recordings' (fixtures/http): the recorded head byte for byte,
chunked transfer encoding with one HTTP chunk per SSE event, `data: [DONE]`, the last chunk.
The payloads are bench/gen_stream.py's llama-server-shaped chunks (about 540 bytes each: the
nine-field `timings`, prompt progress, reasoning, answer text, one tool call in pieces), so every
client parses the same JSON the server sends with `timings_per_token`.

The mode of a request is in a path prefix that the clients take as part of their base URL:
`/x/<mode>/<rate>/<slots>/<shape>` (`/x/paced/50/100/short`, `/x/bulk/0/128/full`); the fake
server strips it, so `/x/.../v1/chat/completions` is the chat endpoint and `/x/.../slots` answers
`<slots>` slots in the `full` shape (each entry as recorded, about 1.3 KB) or the `short` one
(the entry's top-level fields without `params` and `next_token`).
"""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent
if str(BENCH) not in sys.path:  # gen_stream lives in bench/
    sys.path.insert(0, str(BENCH))

import gen_stream  # noqa: E402
from llamafast import ChatRequest, Config, InferConfig, Limits, User, build_body  # noqa: E402

HTTP = BENCH.parent / "fixtures" / "http"
MIN_CHUNKS = gen_stream.MIN_CHUNKS  # the shortest stream with every kind of chunk
DEFAULT_CHUNKS = 100  # an answer's chunks when the request does not say
LAST_CHUNK = b"0\r\n\r\n"
END = b"\r\n" + LAST_CHUNK  # how every streamed body ends: the last event's CRLF, the last chunk
MODES = ("bulk", "paced")
SHAPES = ("full", "short")


def recorded(name: str) -> tuple[bytes, bytes]:
    """(head with its blank line, body) of fixtures/http/NAME.http."""
    raw = (HTTP / f"{name}.http").read_bytes()
    end = raw.index(b"\r\n\r\n") + 4
    return raw[:end], raw[end:]


STREAM_HEAD = recorded("content_only")[0]
LLAMA_KEEP_ALIVE = b"Connection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\n"
LLAMA_MAX_ANSWERS = 100  # llama-server's `max`: it closes a connection after that many answers
# llama-server's own head when it keeps the connection (it says so on streamed answers too, and
# closes them all the same); a proxy in front of it keeps the connection with no bound said.
KEEP_ALIVE_HEAD = STREAM_HEAD.replace(b"Connection: close\r\n", LLAMA_KEEP_ALIVE)
PROXY_HEAD = STREAM_HEAD.replace(b"Connection: close\r\n", b"Connection: keep-alive\r\n")


@dataclass(frozen=True)
class Mode:
    """What the fake server does for one path prefix."""

    mode: str = "bulk"  # bulk: every event at once; paced: `rate` events per second per stream
    rate: float = 0.0
    slots: int = 1
    shape: str = "full"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.mode == "paced" and not self.rate > 0:
            raise ValueError(f"a paced mode needs a rate above 0, not {self.rate!r}")
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, not {self.slots!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, not {self.shape!r}")

    @property
    def prefix(self) -> str:
        return f"/x/{self.mode}/{self.rate:g}/{self.slots}/{self.shape}"

    @classmethod
    def split(cls, path: str) -> tuple[Mode, str]:
        """(the mode, the path without the prefix) of a request path; no prefix: the default."""
        parts = path.split("/", 6)
        if len(parts) < 6 or parts[1] != "x":
            return cls(), path
        mode = cls(parts[2], float(parts[3]), int(parts[4]), parts[5])
        return mode, "/" + (parts[6] if len(parts) > 6 else "")


@functools.cache
def payloads(chunks: int) -> tuple[bytes, ...]:
    """The `chunks` data payloads of one response, as UTF-8 JSON."""
    if chunks < MIN_CHUNKS:
        raise ValueError(f"chunks must be at least {MIN_CHUNKS}, not {chunks}")
    return tuple(p.encode("utf-8") for p in gen_stream.payloads(chunks))


def frame(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


@functools.cache
def events(chunks: int) -> tuple[bytes, ...]:
    """The body of one streamed response as HTTP chunks: one per SSE event, [DONE], the last."""
    out = [frame(b"data: " + p + b"\n\n") for p in payloads(chunks)]
    out.append(frame(b"data: [DONE]\n\n"))
    out.append(LAST_CHUNK)
    return tuple(out)


@functools.cache
def body(chunks: int) -> bytes:
    return b"".join(events(chunks))


def response_size(chunks: int, head: bytes = STREAM_HEAD) -> int:
    """Bytes of one whole streamed response, `head` included (what a floor client must count)."""
    return len(head) + len(body(chunks))


# --- GET /slots -----------------------------------------------------------------------------

_SLOTS_HEAD, _SLOTS_BODY = recorded("get_slots")
_ENTRY = json.loads(_SLOTS_BODY)[0]


def _template(entry: dict[str, object]) -> str:
    text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("{", "{{").replace("}", "}}")
    text = text.replace('"id":0,', '"id":{id},', 1)
    return re.sub(r'"is_processing":(true|false)', '"is_processing":{busy}', text, count=1)


_TEMPLATES = {
    "full": _template(_ENTRY),
    "short": _template({k: v for k, v in _ENTRY.items() if k not in ("params", "next_token")}),
}


def slots_body(count: int, shape: str, busy: frozenset[int] = frozenset()) -> bytes:
    """The JSON of GET /slots: `count` entries of `shape`, `busy` ones processing."""
    template = _TEMPLATES[shape]
    entries = (template.format(id=i, busy="true" if i in busy else "false") for i in range(count))
    return ("[" + ",".join(entries) + "]").encode("utf-8")


def json_response(head: bytes, body: bytes) -> bytes:
    """A recorded JSON answer's head with the Content-Length of `body`, then `body`."""
    head = re.sub(rb"Content-Length: \d+", b"Content-Length: %d" % len(body), head)
    return head + body


SLOTS_HEAD = _SLOTS_HEAD
HEALTH = b"".join(recorded("get_health"))
CONTROL_OK = b"".join(recorded("control_reasoning_end"))
NOT_FOUND = b"".join(recorded("get_unknown_path"))
BAD_JSON = b"".join(recorded("error_bad_json"))


# --- the request every hand-written client sends ----------------------------------------------


def chat_body(slot: int, chunks: int) -> bytes:
    """The body llamafast sends for `ChatRequest(slot, [User("hi")])` with `Limits(max_tokens=
    chunks)`: the hand-written clients and the floors send these same bytes."""
    return build_body(config("http://127.0.0.1", chunks), ChatRequest(slot, [User("hi")])).encode()


def config(url: str, chunks: int) -> Config:
    """llamafast's Config for `chunks`-chunk answers from the server at `url`, with room for
    every stream of a scenario at once (`max_connections` is 32 unless raised, and the paced
    scenario runs 100 streams side by side). A baseline from before the pool (no
    `max_connections`: one connection per request, unbounded) is run as it is."""
    room: dict[str, Any] = {"max_connections": 1024} if hasattr(Limits(), "max_connections") else {}
    return Config(InferConfig(url=url), Limits(max_tokens=chunks, **room))


def chat_request(
    host: str, port: int, prefix: str, slot: int, chunks: int, keep_alive: bool = False
) -> bytes:
    """The whole POST a floor client writes: llamafast's bytes, with `Connection: close` unless
    `keep_alive` (then the server may keep the connection for the next request)."""
    data = chat_body(slot, chunks)
    close = "" if keep_alive else "Connection: close\r\n"
    return (
        f"POST {prefix}/v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(data)}\r\n{close}\r\n"
    ).encode() + data
