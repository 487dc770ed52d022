#!/usr/bin/env python3
"""Record the exchanges `python -m llamafast serve` answers with, from a real llama-server.

usage: record_serve.py BINARY MODEL OUT_DIR   (stdlib only)

Starts BINARY as the README's command line says (`--jinja --reasoning-format deepseek -np 2
--slots`, a 4096-token context), the model linked as `tiny.gguf` in a temporary directory so
that no local path ends up in a recording, and writes for each exchange OUT_DIR/NAME.http (the
response exactly as it came off the socket), NAME.request.json (the body sent, if any) and
NAME.timing.json (when each recv() returned, ms from the request, and how many bytes it brought).
Every request says `Connection: close`, as the recordings in fixtures/ do. No tool call is
recorded here: this build does not constrain `tool_choice` for the tiny model, so `serve` answers
with the bundled `tool_call.http` (fixtures/INDEX.md) instead.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
COMMON = {"cache_prompt": True, "return_progress": True, "timings_per_token": True}
SAMPLING = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "seed": 42}
PRIMES = {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}


def chat(messages: list[dict[str, Any]], stream: bool, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", "messages": messages, "id_slot": 0, **COMMON}
    body["stream"] = stream
    if stream:  # as the client sends every stream: the last chunk carries the server's counts
        body["stream_options"] = {"include_usage": True}
    body["reasoning_control"] = True
    return {**body, **SAMPLING, **fields}


def reasoning(stream: bool) -> dict[str, Any]:
    return chat(
        [SYSTEM, {"role": "user", "content": "Is 17 prime?"}],
        stream,
        max_tokens=120,
        chat_template_kwargs={"enable_thinking": True},
        grammar='root ::= [a-z ]{30,80} "\\n</think>\\n\\n" "Yes, " [a-z ]{10,40} "."',
    )


def content(stream: bool) -> dict[str, Any]:
    return chat(
        [SYSTEM, {"role": "user", "content": "What does notes.txt say?"}],
        stream,
        max_tokens=64,
        chat_template_kwargs={"enable_thinking": False},
        grammar='root ::= "It says " [a-z ]{8,30} "."',
    )


def json_schema(stream: bool) -> dict[str, Any]:
    body = chat(
        [{"role": "user", "content": "Three prime numbers, as a JSON array."}],
        stream,
        max_tokens=400,  # room for the white space the schema's grammar allows
        chat_template_kwargs={"enable_thinking": False},
        response_format={"type": "json_schema", "json_schema": {"schema": PRIMES}},
    )
    del body["id_slot"]
    return body


def overflow() -> dict[str, Any]:
    return chat([{"role": "user", "content": "word " * 3000}], True, max_tokens=16)


GETS = [("health", "/health"), ("props", "/props"), ("slots", "/slots"), ("unknown_path", "/x")]
POSTS = [
    ("reasoning", reasoning(True)),
    ("content", content(True)),
    ("json_schema", json_schema(True)),
    ("reasoning_nonstream", reasoning(False)),
    ("content_nonstream", content(False)),
    ("json_schema_nonstream", json_schema(False)),
    ("context_overflow", overflow()),
]
# What the server would count for a request (the same body as `content`), not generating.
COUNTS = [("input_tokens", content(False))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exchange(port: int, method: str, path: str, body: bytes) -> tuple[bytes, list[list[float]]]:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    if method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        t0 = time.perf_counter()
        sock.sendall(head.encode() + b"\r\n" + body)
        raw, reads = b"", []
        while part := sock.recv(65536):
            reads.append([round((time.perf_counter() - t0) * 1000, 3), len(part)])
            raw += part
    return raw, reads


def main() -> int:
    binary, model, out = sys.argv[1], os.path.abspath(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryFile() as log:
        os.symlink(model, os.path.join(cwd, "tiny.gguf"))
        args = [binary, "-m", "tiny.gguf", "--host", "127.0.0.1", "--port", str(port)]
        args += ["--jinja", "--reasoning-format", "deepseek", "-np", "2", "--slots", "-c", "4096"]
        proc = subprocess.Popen(args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    raw, _ = exchange(port, "GET", "/health", b"")
                    if raw.startswith(b"HTTP/1.1 200"):
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    sys.exit(log.read().decode("utf-8", "replace")[-3000:])
                time.sleep(0.2)
            jobs = [(n, "GET", p, None) for n, p in GETS]
            jobs += [(n, "POST", "/v1/chat/completions", b) for n, b in POSTS]
            jobs += [(n, "POST", "/v1/chat/completions/input_tokens", b) for n, b in COUNTS]
            for name, method, path, req in jobs:
                body = json.dumps(req, separators=(",", ":")).encode() if req else b""
                raw, reads = exchange(port, method, path, body)
                (out / f"{name}.http").write_bytes(raw)
                timing = {"t_first_byte_ms": reads[0][0], "t_total_ms": reads[-1][0]}
                timing["reads_ms_bytes"] = reads  # type: ignore[assignment]
                (out / f"{name}.timing.json").write_text(json.dumps(timing) + "\n")
                if req:
                    (out / f"{name}.request.json").write_bytes(body)
                print(name, raw.split(b"\r\n", 1)[0].decode(), len(raw), flush=True)
        finally:
            # llama-server's SIGTERM handler takes its task queue's lock and deadlocks when the
            # signal lands while the main thread holds it: kill it after a grace period
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
