"""A real llama-server for the tests marked `llama_server`: started on a free loopback port,
waited for until `/health` answers 200, stopped after.

    LLAMAFAST_LLAMA_SERVER       the llama-server binary
    LLAMAFAST_TEST_MODEL         a GGUF model for it
    LLAMAFAST_TEST_MMPROJ        a projector GGUF for that model (content parts only)
    LLAMAFAST_LLAMA_SERVER_ARGS  more arguments for every server started here

tools/llama-server/build.sh builds all three and prints the variables.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from llamafast import ChatRequest, ToolSchema, User

BINARY = os.environ.get("LLAMAFAST_LLAMA_SERVER", "")
MODEL = os.environ.get("LLAMAFAST_TEST_MODEL", "")
MMPROJ = os.environ.get("LLAMAFAST_TEST_MMPROJ", "")

# A module's `pytestmark` when it needs a server: marked, and skipped without the variables.
NEEDS_SERVER = [
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
    """The status `/health` answers on `port`, None when nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def serve(*args: str, port: int | None = None) -> AbstractContextManager[str]:
    """llama-server with `args` (the model, or a models folder, among them) on `port` (a free one
    when None), as its base URL once it is healthy; its output is shown if it never is."""
    port = free_port() if port is None else port
    cmd = [BINARY, *args, "--host", "127.0.0.1", "--port", str(port), "--jinja"]
    cmd += shlex.split(os.environ.get("LLAMAFAST_LLAMA_SERVER_ARGS", ""))
    return running(cmd, port)


@contextmanager
def running(cmd: list[str], port: int) -> Iterator[str]:
    """llama-server started as `cmd` (which makes it listen on loopback `port`), as its base URL
    once `/health` answers 200; its output is shown if it never does."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
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
            stop(proc)


def server_pid(url: str) -> int:
    """The process id of the llama-server listening at `url` (Linux: /proc)."""
    port = url.rsplit(":", 1)[1].encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if args[0] == BINARY.encode() and port in args:
            return int(pid)
    raise LookupError(f"no llama-server process listens at {url}")


def kill_server(url: str) -> None:
    """SIGKILL the llama-server listening at `url`, and wait until its port refuses
    connections: its threads end, and its sockets close, a little after it shows as exited
    (while it dies, a connect may be reset instead)."""
    os.kill(server_pid(url), signal.SIGKILL)
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    until = time.monotonic() + 10
    while time.monotonic() < until:
        try:
            socket.create_connection(address, timeout=1).close()
        except ConnectionRefusedError:
            return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"{url} still takes connections 10 s after it was killed")


def resident_kib(url: str) -> int:
    """The resident memory (KiB) of the llama-server listening at `url` (Linux: /proc)."""
    with open(f"/proc/{server_pid(url)}/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))


def stop(proc: subprocess.Popen[bytes], grace: float = 15) -> None:
    """Ends llama-server. Its SIGTERM handler takes the task queue's lock, so a signal that lands
    while the main thread holds that lock deadlocks the server for good: after `grace` seconds
    it is killed."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


SLOTS = 2


def serve_model(*extra: str) -> AbstractContextManager[str]:
    """The test model with its reasoning split out (deepseek format), SLOTS slots and a 4,096
    token context, and `extra`: the server most tests talk to."""
    args = ["-m", MODEL, "--reasoning-format", "deepseek", "-np", str(SLOTS), "-c", "4096"]
    return serve(*args, *extra)


def tokens(url: str, text: str) -> list[int]:
    """The model's token ids for `text` (special tokens parsed), from the server's /tokenize."""
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    try:
        conn.request("POST", "/tokenize", json.dumps({"content": text, "parse_special": True}))
        ids = json.loads(conn.getresponse().read())["tokens"]
    finally:
        conn.close()
    assert ids and all(isinstance(i, int) for i in ids), ids
    return ids


READ_FILE = ToolSchema(
    "read_file",
    "Read a text file.",
    {
        "type": "object",
        "properties": {"path": {"type": "string", "enum": ["notes.txt"]}},
        "required": ["path"],
    },
)
ASK_NOTES = User("What does notes.txt say?")


def tool_call_request(url: str | None) -> ChatRequest:
    """A request that the test model answers with one call of read_file. It never samples a
    special token by itself, and the server's tool-call grammar waits, lazily, for
    "<tool_call>\\n": `<tool_call>` is made the first token, the presence penalty (on tokens
    already generated) lets "\\n" follow it, the grammar writes the call, and `<|im_end|>` (which
    the grammar allows only once the call is whole) ends it; spaces and tabs barred keep it short
    (tools/llama-server/record_serve.py records `serve`'s call so). `url` None: not steered
    (`serve` picks its answer by the request's fields)."""
    extra, temperature = None, None
    if url is not None:
        bias = {"<tool_call>": 300, "\n": 280, "<|im_end|>": 300, " ": -100, "\t": -100}
        logit_bias = [[tokens(url, piece)[0], value] for piece, value in bias.items()]
        extra, temperature = {"logit_bias": logit_bias, "presence_penalty": 250}, 0.0
    tools = (READ_FILE,)
    return ChatRequest(0, [ASK_NOTES], tools, False, temperature=temperature, extra=extra)
