"""Embeddings answers in llama-server's shape, and a loopback server that answers them.

`answer(rows)` writes a `/v1/embeddings` body as llama-server does (`model`, `object`, `usage`,
then `data`: each item `embedding`, `index`, `object`, and `encoding_format` for base64, the
key order of the recording in fixtures/http/embeddings_base64.http). `EmbedServer` (a
LoopbackServer) answers POST /v1/embeddings, /rerank and GET /slots from a handler, counting the
requests in flight.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any

from _loopback import LoopbackServer, raw_response, read_request

MODEL = "/models/tiny-qwen3.gguf"


def pack(row: Sequence[float]) -> bytes:
    """One vector as little-endian float32 bytes (values rounded to float32)."""
    return struct.pack(f"<{len(row)}f", *row)


def item(row: Sequence[float] | bytes | Any, index: int, *, b64: bool = True) -> dict[str, Any]:
    if b64:
        raw = row if isinstance(row, bytes) else pack(row)
        vec: Any = base64.b64encode(raw).decode()
        return {
            "embedding": vec,
            "index": index,
            "object": "embedding",
            "encoding_format": "base64",
        }
    return {"embedding": list(row), "index": index, "object": "embedding"}


def answer(
    rows: Sequence[Sequence[float]],
    *,
    b64: bool = True,
    tokens: int = 7,
    model: str = MODEL,
    items: list[dict[str, Any]] | None = None,
) -> bytes:
    data = items if items is not None else [item(r, i, b64=b64) for i, r in enumerate(rows)]
    doc = {
        "model": model,
        "object": "list",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "data": data,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def vector_for(text: str, dim: int) -> list[float]:
    """A vector that tells its text apart: its length, then its first characters' codes."""
    codes = [float(len(text))] + [float(ord(c)) for c in text]
    return (codes + [0.5] * dim)[:dim]


Handler = Callable[[str, dict[str, Any]], tuple[int, bytes]]


def embed_handler(dim: int = 8, *, b64: bool | None = None) -> Handler:
    """Answers /v1/embeddings as llama-server does: base64 when asked (or as `b64` says)."""

    def handle(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        texts = body["input"]
        as_b64 = body.get("encoding_format") == "base64" if b64 is None else b64
        rows = [vector_for(t, dim) for t in texts]
        return 200, answer(rows, b64=as_b64, tokens=sum(len(t) for t in texts))

    return handle


class EmbedServer(LoopbackServer):
    """Answers POST /v1/embeddings and /rerank by `handler(path, body)`, GET /slots with `slots`
    idle slots, anything else 404; `bodies` keeps each POST, `most` the most in flight at once."""

    def __init__(self, handler: Handler, slots: int = 2) -> None:
        super().__init__()
        self.handler = handler
        self.slots = slots
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.in_flight = 0
        self.most = 0

    def handle(self, conn: socket.socket, accepted: Any) -> None:
        request = read_request(conn)
        if request is None:
            return
        if request.method == "GET":
            if request.path == "/slots":
                slots = [{"id": i, "is_processing": False} for i in range(self.slots)]
                self._send(conn, 200, json.dumps(slots).encode())
            else:
                self._send(conn, 404, b'{"error":{"code":404,"message":"File Not Found"}}')
            return
        body = json.loads(request.body)
        with self._lock:
            self.bodies.append((request.path, body))
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            status, data = self.handler(request.path, body)
        finally:
            with self._lock:
                self.in_flight -= 1
        self._send(conn, status, data)

    @staticmethod
    def _send(conn: socket.socket, status: int, data: bytes) -> None:
        phrase = HTTPStatus(status).phrase
        conn.sendall(raw_response(status, phrase, data, "application/json; charset=utf-8"))
