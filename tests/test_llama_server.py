# Against a real llama-server: start it on a free loopback port, wait for /health, stream chats
# through both clients (one with thinking, its reasoning ended through the control endpoint),
# stop it. Needs LLAMAFAST_LLAMA_SERVER (the binary) and LLAMAFAST_TEST_MODEL (a GGUF file).
"""Integration with a real llama-server (marker `llama_server`; skipped without the variables).

Run it with:

    LLAMAFAST_LLAMA_SERVER=/path/to/llama-server LLAMAFAST_TEST_MODEL=/path/to/model.gguf \\
        python -m pytest -m llama_server tests/test_llama_server.py

The model must think (a Qwen3-style chat template; the server runs with `--jinja
--reasoning-format deepseek`), and the server must support `reasoning_control` (the build the
recordings came from does). LLAMAFAST_LLAMA_SERVER_ARGS adds arguments (split like a shell).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import shlex
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from llamafast import (
    AsyncClient,
    ChatEvent,
    ChatRequest,
    Client,
    Completion,
    Config,
    Content,
    FinishReason,
    InferConfig,
    Limits,
    Reasoning,
    ThinkingCapped,
    User,
)

BINARY = os.environ.get("LLAMAFAST_LLAMA_SERVER", "")
MODEL = os.environ.get("LLAMAFAST_TEST_MODEL", "")
SLOTS = 2

pytestmark = [
    pytest.mark.llama_server,
    pytest.mark.skipif(
        not (BINARY and MODEL),
        reason="set LLAMAFAST_LLAMA_SERVER (the llama-server binary) and LLAMAFAST_TEST_MODEL "
        "(a GGUF file) to run against a real llama-server",
    ),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def health(port: int) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    port = free_port()
    args = [BINARY, "-m", MODEL, "--host", "127.0.0.1", "--port", str(port), "--jinja"]
    args += ["--reasoning-format", "deepseek", "-np", str(SLOTS), "-c", "4096"]
    args += shlex.split(os.environ.get("LLAMAFAST_LLAMA_SERVER_ARGS", ""))
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while health(port) != 200:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read().decode("utf-8", "replace")[-3000:]
                    pytest.fail(f"llama-server did not become ready ({proc.returncode}):\n{tail}")
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def config(url: str, **limits: object) -> Config:
    base: dict[str, object] = {"max_tokens": 256, "stall_timeout": 120.0, "retry_base_ms": 50}
    return Config(InferConfig(url=url), Limits(**{**base, **limits}))  # type: ignore[arg-type]


THINK = ChatRequest(0, [User("Think step by step: what is 17 * 23?")], thinking=True)


def check_capped(events: list[ChatEvent], completion: Completion, budget: int) -> None:
    capped = [e for e in events if isinstance(e, ThinkingCapped)]
    assert len(capped) == 1 and capped[0].tokens > budget, events[:50]
    assert completion.thinking_capped
    assert completion.reasoning_content and completion.finish_reason in FinishReason
    at = events.index(capped[0])
    assert any(isinstance(e, Reasoning) for e in events[:at])
    # the server ended the reasoning: it stops soon after, and an answer may follow
    assert completion.reasoning_tokens < 256


def test_stream_with_thinking_ended_through_the_control_endpoint(llama: str) -> None:
    client = Client(config(llama, thinking_budget=16))
    events: list[ChatEvent] = []
    with client.stream(THINK) as stream:
        for event in stream:
            events.append(event)
        completion = stream.completion
    check_capped(events, completion, 16)
    assert completion.id.startswith("chatcmpl")


def test_async_stream_with_thinking_ended(llama: str) -> None:
    async def main() -> tuple[list[ChatEvent], Completion]:
        async with AsyncClient(config(llama, thinking_budget=16)) as client:
            events: list[ChatEvent] = []
            completion = await client.complete(THINK, events.append)
            return events, completion

    events, completion = asyncio.run(main())
    check_capped(events, completion, 16)


def test_answer_without_thinking(llama: str) -> None:
    events: list[ChatEvent] = []
    completion = Client(config(llama, max_tokens=32)).complete(
        ChatRequest(1, [User("Say hello.")]), events.append
    )
    assert not any(isinstance(e, Reasoning) for e in events)
    assert completion.content and any(isinstance(e, Content) for e in events)
    assert completion.timings.predicted_n > 0


def test_slot_the_server_does_not_have(llama: str) -> None:
    with pytest.raises(ValueError, match=f"slot {SLOTS} does not exist"):
        Client(config(llama)).complete(ChatRequest(SLOTS, [User("hi")]))
