"""A fake llama-server for the embeddings benchmark, in its own process.

POST /v1/embeddings answers `len(input)` vectors of `--dim` values, base64 when the request asks
for it, JSON numbers otherwise or when the request's `model` is `numbers` (how the benchmark
reaches llamafast's JSON-number path: llamafast always asks for base64), from bodies built once
at start; GET /slots answers `--slots` idle slots. HTTP/1.1 with keep-alive (the clients that
reuse a connection may), one thread per connection.

    python bench/embed/server.py --port 0 --dim 4096    # prints the port, then serves
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bodies import body, vectors


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--slots", type=int, default=1)
    args = ap.parse_args()
    rows = vectors(args.batch, args.dim)
    answers: dict[tuple[int, bool], bytes] = {}

    def answer(n: int, b64: bool) -> bytes:
        key = (n, b64)
        if key not in answers:
            answers[key] = head(200, body(rows[:n], b64))
        return answers[key]

    slots = head(
        200, json.dumps([{"id": i, "is_processing": False} for i in range(args.slots)]).encode()
    )
    listener = socket.create_server(("127.0.0.1", args.port))
    print(listener.getsockname()[1], flush=True)

    def serve(conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(1 << 16)
                    if not data:
                        return
                    buf += data
                head_end = buf.index(b"\r\n\r\n") + 4
                lines = buf[:head_end].decode("latin-1").split("\r\n")
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                while len(buf) < head_end + length:
                    data = conn.recv(1 << 16)
                    if not data:
                        return
                    buf += data
                payload, buf = buf[head_end : head_end + length], buf[head_end + length :]
                if lines[0].startswith("GET /slots"):
                    conn.sendall(slots)
                    continue
                req = json.loads(payload)
                texts = req["input"]
                n = len(texts) if isinstance(texts, list) else 1
                b64 = req.get("encoding_format") == "base64" and req.get("model") != "numbers"
                conn.sendall(answer(n, b64))

    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def head(status: int, data: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status} OK\r\nServer: llama.cpp\r\n"
        f"Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
    ).encode() + data


if __name__ == "__main__":
    main()
