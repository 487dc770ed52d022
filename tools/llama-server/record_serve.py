#!/usr/bin/env python3
"""Record the exchanges `python -m llamafast serve` answers with, from a real llama-server.

usage: record_serve.py BINARY MODEL OUT_DIR [NAME ...]   (stdlib only; NAMEs: only those exchanges)

Starts BINARY as the README's command line says (`--jinja --reasoning-format deepseek -np 2
--slots`, a 4096-token context), the model linked as `tiny.gguf` in a temporary directory so
that no local path ends up in a recording, and writes for each exchange OUT_DIR/NAME.http (the
response exactly as it came off the socket), NAME.request.json (the body sent, if any) and
NAME.timing.json (when each recv() returned, ms from the request, and how many bytes it brought).
Every request says `Connection: close`, as the recordings in fixtures/ do. The tool call is
steered by sampling alone (`tool_call`), so the server's own tool-call grammar and parser make it.
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


READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "enum": ["notes.txt"]}},
            "required": ["path"],
        },
    },
}


def tool_call(stream: bool, token: dict[str, int]) -> dict[str, Any]:
    """A call of read_file, as the README's agent makes. The tiny model never samples a special
    token by itself (make_model.py), and the server's tool-call grammar waits, lazily, for
    "<tool_call>\n": `<tool_call>` is made the first token, the presence penalty (on tokens
    already generated) lets "\n" follow it, the grammar then writes the call, and `<|im_end|>`
    (which the grammar allows only once the call is whole) ends the answer; spaces and tabs are
    barred, so the arguments stay short. `token`: the ids of those pieces."""
    bias = {"<tool_call>": 300, "\n": 280, "<|im_end|>": 300, " ": -100, "\t": -100}
    return chat(
        [SYSTEM, {"role": "user", "content": "What does notes.txt say?"}],
        stream,
        max_tokens=200,
        chat_template_kwargs={"enable_thinking": False},
        tools=[READ_FILE],
        temperature=0,
        presence_penalty=250,
        logit_bias=[[token[piece], b] for piece, b in bias.items()],
    )


def tool_calls(port: int) -> list[tuple[str, dict[str, Any]]]:
    """The tool call, streamed and whole, with the ids of this model's pieces."""
    pieces = ["<tool_call>", "\n", "<|im_end|>", " ", "\t"]
    token = {}
    for piece in pieces:
        body = json.dumps({"content": piece, "parse_special": True}).encode()
        raw, _ = exchange(port, "POST", "/tokenize", body)
        [token[piece]] = json.loads(raw.split(b"\r\n\r\n", 1)[1])["tokens"]
    return [("tool_call", tool_call(True, token)), ("tool_call_nonstream", tool_call(False, token))]


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
    only = set(sys.argv[4:])
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
            jobs += [(n, "POST", "/v1/chat/completions", b) for n, b in tool_calls(port)]
            jobs += [(n, "POST", "/v1/chat/completions/input_tokens", b) for n, b in COUNTS]
            for name, method, path, req in jobs:
                if only and name not in only:
                    continue
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
