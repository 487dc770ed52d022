"""Embeddings answers in llama-server's shape, and a loopback server that answers them.

`answer(rows)` writes a `/v1/embeddings` body as llama-server does (`model`, `object`, `usage`,
then `data`: each item `embedding`, `index`, `object`, and `encoding_format` for base64, the
key order of the recording in fixtures/http/embeddings_base64.http). `EmbedServer` answers POST
/v1/embeddings, /rerank and GET /slots from a handler, counting the requests in flight.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class EmbedServer:
    def __init__(self, handler: Handler, slots: int = 2) -> None:
        self.handler = handler
        self.slots = slots
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.in_flight = 0
        self.most = 0
        self.lock = threading.Lock()
        server = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/slots":
                    slots = [{"id": i, "is_processing": False} for i in range(server.slots)]
                    self._send(200, json.dumps(slots).encode())
                else:
                    self._send(404, b'{"error":{"code":404,"message":"File Not Found"}}')

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(size))
                with server.lock:
                    server.bodies.append((self.path, body))
                    server.in_flight += 1
                    server.most = max(server.most, server.in_flight)
                try:
                    status, data = server.handler(self.path, body)
                finally:
                    with server.lock:
                        server.in_flight -= 1
                self._send(status, data)

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[EmbedServer]:
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
