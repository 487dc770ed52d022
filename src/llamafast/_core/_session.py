# Strategy: what one client keeps across its requests (h11's connection state, one level up):
# its settings, its target and the headers of every request, the slot lines, and what it has
# learnt of the server (slot count, props, endpoints, loaded models), forgotten together when a
# sign says the server may have restarted. The request's bytes are written here, once.
"""A client's state across its requests (`Core`), the server's paths, and a request's bytes."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from .._config import Config
from .._engine import _twins
from .._url import Target
from .._values import ServerProps
from ._lines import Lines

__all__ = [
    "CHAT_PATH",
    "CONTROL_PATH",
    "EMBED_PATH",
    "INPUT_TOKENS_PATH",
    "MAX_ERROR_BODY",
    "MAX_SLOTS_BODY",
    "MAX_VECTORS_BODY",
    "NEEDS_MODEL",
    "POLL_MAX_S",
    "RERANK_PATH",
    "Core",
    "request_bytes",
]

CHAT_PATH = "/v1/chat/completions"
CONTROL_PATH = "/v1/chat/completions/control"
INPUT_TOKENS_PATH = "/v1/chat/completions/input_tokens"
POLL_MAX_S = 1.0  # /health is polled at least this often while a model loads
MAX_ERROR_BODY = 1 << 16  # bytes of an error answer (or /health, control) kept
# /slots grows with the slot count (about 1.3 KB a slot in llama-server's shape): its own limit.
MAX_SLOTS_BODY = 1 << 26
EMBED_PATH = "/v1/embeddings"
RERANK_PATH = "/rerank"
# An embeddings answer holds every vector of a batch (64 x 4,096 float32 in base64: 1.4 MB).
MAX_VECTORS_BODY = 1 << 31
MAX_HEADS = 64  # request heads a client keeps written (one per method and path it asks)
NEEDS_MODEL = "model name is missing from the request"  # a router's 400 to a /slots without one


class Core:
    """What one client keeps across its requests to one server (`url`, else the config's):
    the config, the lines, the cached slot
    count (asked once, forgotten when the server restarts or refuses), the jitter's source,
    and the twin whose Sink turns a body into events."""

    def __init__(
        self,
        cfg: Config,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        sink: Callable[[int], Any] | None = None,
        url: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.limits = cfg.limits
        self.target = Target.parse(cfg.infer.url if url is None else url)
        # Set by the client's `Fleet` (rule FLEET): the servers, this one's place among them
        # (its `Connect.server`) and its URL in normal form.
        self.fleet: Any = None
        self.index = 0
        self.server = self.target.url
        self.clock = clock
        self.rng = rng or random.Random()
        self.lines = Lines()
        self.slot_count: int | None = None
        # Cached until the server may have restarted (`forget`): its props, whether it has the
        # input_tokens endpoint, the router's models seen loaded.
        self.props: ServerProps | None = None
        self.input_tokens: bool | None = None
        self.ready_models: set[str] = set()
        self.router: bool | None = None  # a router (several models, /slots per model)?
        # Learnt from the first answer sent with it (BUDGET): does the server end the
        # reasoning at the request's `reasoning_budget_tokens`?
        self.budget_honoured: bool | None = None
        # Does the server resume streams (docs/client.md, rule RESUME)? False once a /v1/stream
        # request was answered as by a server without them: no conversation id is sent then.
        self.resumable: bool | None = None
        self.spare_conv_ids: list[str] = []  # of streams read to their end (RESUME)
        self.sink = _twins.SELECTED.Sink if sink is None else sink
        key = cfg.infer.api_key
        # Every request the clients make carries the key (llama-server's --api-key), or the
        # URL's user and password (the config refuses both at once).
        auth = self.target.auth_header if key is None else f"Bearer {key}"
        self.headers: dict[str, str] = {} if auth is None else {"Authorization": auth}
        self._heads: dict[tuple[str, str, bool], bytes] = {}  # `request`'s, once written

    def forget(self) -> None:
        """What the client knows of the server is stale: a connection refused or reset, a 503,
        a model loading are the signs of a server (re)starting, so the slot count, the props,
        the endpoints and the loaded models are asked again."""
        self.slot_count = None
        self.props = None
        self.input_tokens = None
        self.ready_models.clear()
        self.router = None
        self.budget_honoured = None
        self.resumable = None

    def request(
        self, method: str, path: str, body: bytes | None = None, extra: bytes = b""
    ) -> bytes:
        """One HTTP/1.1 request to the server, head and body. The head but its Content-Length
        (and the `extra` header lines of a body's request) is the same for every request of one
        method and path: written once per client."""
        key = (method, path, body is not None)
        head = self._heads.get(key)
        if head is None:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            if path == CHAT_PATH:
                headers["Accept"] = "text/event-stream"
            headers.update(self.headers)
            head = request_bytes(method, self.target, self.target.path(path), None, headers)
            if len(self._heads) < MAX_HEADS:
                self._heads[key] = head
        if body is None:
            return head
        # The head ends with its blank line: the Content-Length goes before it.
        return b"%s%sContent-Length: %d\r\n\r\n%s" % (head[:-2], extra, len(body), body)

    def request_once(self, method: str, path: str) -> bytes:
        """A request without a body whose path is its own (a query naming one stream): its
        head is not kept."""
        return request_bytes(method, self.target, self.target.path(path), None, self.headers)

    def __repr__(self) -> str:
        return f"Core({self.target.url!r})"


def request_bytes(
    method: str, target: Target, path: str, body: bytes | None, headers: dict[str, str]
) -> bytes:
    """One HTTP/1.1 request: head and body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {target.host_header}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if body is None else head + body
