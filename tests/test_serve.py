# `llamafast serve` (src/llamafast/_cli/_serve.py): every answer is a recording's bytes, chosen
# by the request's fields alone; the slots behave as llama-server's do; and the README's examples
# run as written against `python -m llamafast serve` in a subprocess, with each twin.
"""The recorded llama-server stand-in, in process and as the `serve` command."""

from __future__ import annotations

import array
import base64
import contextlib
import dataclasses
import http.client
import json
import os
import select
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _examples import NOT_RUN, Block, client_module, run_block, serve_process
from _llama import free_port, running, tool_call_request
from llamafast import (
    ChatRequest,
    Completion,
    Config,
    HttpError,
    InferConfig,
    Limits,
    System,
    Tool,
    ToolSchema,
    User,
)
from llamafast._cli._serve import (
    MAX_DEPTH,
    RecordedServer,
    completion_id,
    counted,
    pick,
    prompt_tokens,
    recording,
)
from llamafast._recordings import SERVE, split
from test_readme import ALL, PYTHON, README, _config_file

ROOT = Path(__file__).resolve().parent.parent
NO_THINKING = {"enable_thinking": False}
TOOLS = [ToolSchema("read_file", "Read a text file.", {"type": "object"})]


def serving(server: RecordedServer) -> Iterator[RecordedServer]:
    """`server` answering on a thread of its own until the test ends."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def srv() -> Iterator[RecordedServer]:
    yield from serving(RecordedServer("127.0.0.1", 0, 2, pace=False))


def exchange(srv: RecordedServer, method: str, path: str, body: Any = None) -> bytes:
    """The raw bytes the server sends for one request, until it closes."""
    with socket.create_connection(srv.server_address[:2]) as sock:
        sock.sendall(request_bytes(method, path, body))
        out = b""
        while part := sock.recv(65536):
            out += part
    return out


def request_bytes(method: str, path: str, body: Any = None) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


def chat_body(**fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Hi"}], "stream": True, **fields}


# --- which recording answers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({}, "reasoning"),  # the template opens the reasoning unless told not to
        ({"chat_template_kwargs": {"enable_thinking": True}}, "reasoning"),
        ({"chat_template_kwargs": NO_THINKING}, "content"),
        ({"tools": [{}]}, "tool_call"),
        ({"tools": [{}], "chat_template_kwargs": NO_THINKING}, "tool_call"),
        ({"response_format": {"type": "json_object"}}, "json_schema"),
        ({"stream": False}, "reasoning_nonstream"),
        (
            {"stream": False, "chat_template_kwargs": {"enable_thinking": False}},
            "content_nonstream",
        ),
        ({"stream": False, "response_format": {"type": "json_object"}}, "json_schema_nonstream"),
        ({"stream": False, "tools": [{}]}, "tool_call_nonstream"),
        ({"messages": [{"role": "user", "content": "x" * 4 * 2048}]}, "context_overflow"),
    ],
)
def test_the_recording_is_picked_by_the_request_fields(fields: dict[str, Any], name: str) -> None:
    assert pick(chat_body(**fields), 2048) == name


def test_after_a_tool_result_the_answer_comes_not_another_call() -> None:
    messages = [
        {"role": "user", "content": "Read notes.txt"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "tool_call_id": "a", "content": "text"},
    ]
    assert pick(chat_body(messages=messages, tools=[{}]), 2048) == "reasoning"


def test_a_prompt_just_inside_the_context_is_not_an_overflow() -> None:
    body = chat_body(messages=[{"role": "user", "content": "x" * (4 * 2048 - 40)}])
    assert pick(body, 2048) == "reasoning"


# --- the bytes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "name"),
    [
        ("GET", "/health", "health"),
        ("GET", "/slots", "slots"),
        ("GET", "/props", "props"),
        ("GET", "/nope", "unknown_path"),
        ("POST", "/v1/chat/completions/control", "control_unknown_id"),
    ],
)
def test_with_two_slots_each_endpoint_answers_its_recording_byte_for_byte(
    srv: RecordedServer, method: str, path: str, name: str
) -> None:
    body = {"id": "chatcmpl-none", "action": "reasoning_end"} if method == "POST" else None
    assert exchange(srv, method, path, body) == recording(name).raw


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({}, "reasoning"),
        ({"tools": [{}]}, "tool_call"),
        ({"stream": False}, "reasoning_nonstream"),
    ],
)
def test_a_chat_gets_the_recording_byte_for_byte(
    srv: RecordedServer, fields: dict[str, Any], name: str
) -> None:
    assert exchange(srv, "POST", "/v1/chat/completions", chat_body(**fields)) == recording(name).raw


def test_a_prompt_over_the_context_is_refused_with_its_own_token_count(
    srv: RecordedServer,
) -> None:
    body = chat_body(messages=[{"role": "user", "content": "word " * 3000}])
    out = exchange(srv, "POST", "/v1/chat/completions", body)
    tokens = prompt_tokens(body)
    assert tokens > 2048
    assert out == counted(recording("context_overflow").raw, tokens)
    error = json.loads(split(out)[1])["error"]
    assert error["n_prompt_tokens"] == tokens and error["n_ctx"] == 2048
    assert error["message"].startswith(f"request ({tokens} tokens) exceeds")
    # everything else as recorded: the head (but its length) and the rest of the body
    assert out.replace(str(tokens).encode(), b"3021") == recording("context_overflow").raw


def test_the_token_count_is_the_requests_own(srv: RecordedServer) -> None:
    path = "/v1/chat/completions/input_tokens"
    short, long = chat_body(), chat_body(messages=[{"role": "user", "content": "word " * 300}])
    counts = [json.loads(split(exchange(srv, "POST", path, b))[1]) for b in (short, long)]
    assert [c["input_tokens"] for c in counts] == [prompt_tokens(short), prompt_tokens(long)]
    assert counts[0]["input_tokens"] < counts[1]["input_tokens"]
    assert exchange(srv, "POST", path, json.loads(recording_request("input_tokens"))) == counted(
        recording("input_tokens").raw, prompt_tokens(json.loads(recording_request("input_tokens")))
    )


def recording_request(name: str) -> bytes:
    return SERVE.root.joinpath(f"{name}.request.json").read_bytes()


def test_a_body_that_is_not_json_gets_the_recorded_400(srv: RecordedServer) -> None:
    with socket.create_connection(srv.server_address[:2]) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\n{no")
        out = sock.makefile("rb").read()
    assert out == recording("bad_json").raw
    assert out.startswith(b"HTTP/1.1 400 ")


def test_slots_and_props_say_the_slot_count_it_was_started_with() -> None:
    server = RecordedServer("127.0.0.1", 0, 3, pace=False)
    try:
        slots = split(server.slots())[1]
        props = split(server.props)[1]
        assert [s["id"] for s in json.loads(slots)] == [0, 1, 2]
        assert json.loads(props)["total_slots"] == 3
        for raw in (server.slots(), server.props):  # Content-Length follows the body
            head, body = split(raw)
            assert f"Content-Length: {len(body)}\r\n".encode() in head
    finally:
        server.server_close()


def test_a_bad_slot_count_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="slots must be at least 1, not 0"):
        RecordedServer("127.0.0.1", 0, 0)


# --- the slots ---------------------------------------------------------------------------------


def test_a_request_for_a_busy_slot_gets_no_byte_until_the_slot_is_free(
    srv: RecordedServer,
) -> None:
    assert srv.acquire(2) == 0  # "another client" on slot 0 (2 wraps to 0, as llama-server does)
    busy = json.loads(split(exchange(srv, "GET", "/slots"))[1])
    assert [s["is_processing"] for s in busy] == [True, False]
    with socket.create_connection(srv.server_address[:2]) as sock:
        sock.sendall(request_bytes("POST", "/v1/chat/completions", chat_body(id_slot=0)))
        assert select.select([sock], [], [], 0.3)[0] == []  # not even the head
        other = exchange(srv, "POST", "/v1/chat/completions", chat_body(id_slot=1))
        assert other == recording("reasoning").raw  # slot 1 is free meanwhile
        srv.release(0)
        out = sock.makefile("rb").read()
    assert out == recording("reasoning").raw
    idle = json.loads(split(exchange(srv, "GET", "/slots"))[1])
    assert [s["is_processing"] for s in idle] == [False, False]


def test_a_request_without_a_slot_waits_for_any_slot(srv: RecordedServer) -> None:
    srv.acquire(0), srv.acquire(1)
    with socket.create_connection(srv.server_address[:2]) as sock:
        sock.sendall(request_bytes("POST", "/v1/chat/completions", chat_body()))
        assert select.select([sock], [], [], 0.3)[0] == []
        srv.release(1)
        assert sock.makefile("rb").read() == recording("reasoning").raw


def test_the_control_endpoint_knows_a_completion_being_streamed(
    srv: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = completion_id(recording("reasoning").raw)
    control = ("POST", "/v1/chat/completions/control", {"id": known, "action": "reasoning_end"})
    assert exchange(srv, *control) == recording("control_unknown_id").raw  # not streaming yet
    gate, send = threading.Event(), srv.send

    def held(conn: socket.socket, rec: Any, slot: int | None = None) -> None:
        if slot is not None:  # the chat: its slot taken, its id known, no byte sent yet
            gate.wait(30)
        send(conn, rec, slot)

    monkeypatch.setattr(srv, "send", held)
    with socket.create_connection(srv.server_address[:2]) as sock:
        sock.sendall(request_bytes("POST", "/v1/chat/completions", chat_body(id_slot=0)))
        while not srv.busy[0]:
            select.select([], [], [], 0.01)
        assert exchange(srv, *control) == recording("control_reasoning_end").raw
        gate.set()
        assert sock.makefile("rb").read() == recording("reasoning").raw
    assert exchange(srv, *control) == recording("control_unknown_id").raw


# --- through the clients -----------------------------------------------------------------------


def test_both_clients_read_every_chat_answer(srv: RecordedServer, impl: SimpleNamespace) -> None:
    mod = client_module(impl)
    client = mod.Client(Config(InferConfig(url=srv.url)))
    thought = client.complete(ChatRequest(0, [User("Is 17 prime?")], thinking=True))
    assert thought.reasoning_content and thought.content.startswith("Yes, ")
    called = client.complete(ChatRequest(1, [System("s"), User("Read")], tools=TOOLS))
    assert [c.name for c in called.tool_calls] == ["read_file"]
    answer = client.complete(ChatRequest(0, [User("Read"), Tool("a", "text")], tools=TOOLS))
    assert answer.content and not answer.tool_calls
    fmt = {"type": "json_schema", "json_schema": {"schema": {"type": "array"}}}
    primes = client.complete(ChatRequest(None, [User("Primes")], response_format=fmt))
    assert isinstance(json.loads(primes.content), list)


def recorded_vectors(name: str) -> list[list[float]]:
    """The vectors of embeddings recording `name`, read with the standard library."""
    items = json.loads(split(recording(name).raw)[1])["data"]
    if name == "embeddings_float":
        return [list(map(float, item["embedding"])) for item in items]
    return [list(array.array("f", base64.b64decode(item["embedding"]))) for item in items]


@pytest.mark.parametrize("fmt", ["base64", None])
def test_embeddings_answer_one_recorded_vector_per_input_in_order(
    srv: RecordedServer, fmt: str | None
) -> None:
    body: dict[str, Any] = {"input": ["a", "b", "c"], "model": "default"}
    if fmt:
        body["encoding_format"] = fmt
    raw = exchange(srv, "POST", "/v1/embeddings", body)
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    doc = json.loads(split(raw)[1])
    assert [item["index"] for item in doc["data"]] == [0, 1, 2]
    recorded = json.loads(split(recording(f"embeddings_{fmt or 'float'}").raw)[1])["data"]
    assert [d["embedding"] for d in doc["data"]] == [
        recorded[i % len(recorded)]["embedding"] for i in range(3)
    ]


def test_both_clients_embed_and_rerank(srv: RecordedServer, impl: SimpleNamespace) -> None:
    mod = client_module(impl)
    with mod.Client(Config(InferConfig(url=srv.url))) as client:
        vectors = client.embed(["the cat", "the mat", "stocks"])
        ranked = client.rerank("where?", ["a mat", "the market", "a sofa", "a box"], top_n=3)
    recorded = recorded_vectors("embeddings_base64")
    assert vectors.tolist() == [recorded[i % len(recorded)] for i in range(3)]
    scores = [
        r["relevance_score"] for r in json.loads(split(recording("rerank").raw)[1])["results"]
    ]
    assert len(ranked) == 3 and len({r.index for r in ranked}) == 3
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    assert {r.score for r in ranked} <= set(scores)


def test_a_prompt_over_the_context_is_the_recorded_400(
    srv: RecordedServer, impl: SimpleNamespace
) -> None:
    mod = client_module(impl)
    client = mod.Client(Config(InferConfig(url=srv.url)))
    with pytest.raises(HttpError) as caught:
        client.complete(ChatRequest(0, [User("word " * 3000)]))
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["error"]["type"] == "exceed_context_size_error"


# --- the command, and the README's examples against it ----------------------------------------


def test_the_command_answers_health(served: str) -> None:
    conn = http.client.HTTPConnection(served.removeprefix("http://"), timeout=30)
    conn.request("GET", "/health")
    assert conn.getresponse().read() == b'{"status":"ok"}'


def test_the_command_refuses_a_bad_slot_count_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llamafast", "serve", "--slots", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--slots must be at least 1, not 0" in done.stderr
    assert done.stderr.count("\n") <= 3  # argparse's usage line and the error, no traceback


# Every example that talks to a server (they all find it through llamafast.toml).
CLIENT_BLOCKS = [b for b in PYTHON if "llamafast.toml" in b.text]


def test_every_client_example_is_found() -> None:
    assert len(CLIENT_BLOCKS) >= 4
    assert all("llamafast.toml" in b.text for b in PYTHON if "Client(" in b.text)
    assert not [b.line for b in CLIENT_BLOCKS if NOT_RUN.search(b.above)]


@pytest.mark.parametrize("block", CLIENT_BLOCKS, ids=[f"README.md:{b.line}" for b in CLIENT_BLOCKS])
def test_the_readme_client_example_runs_as_written_against_serve(
    block: Block, served: str, tmp_path: Path, impl: SimpleNamespace
) -> None:
    run_block(block, f"README.md:{block.line}", _config_file(), served, tmp_path, impl)


@pytest.mark.parametrize(
    ("name", "fixture"),
    [
        ("control_reasoning_end", "control_reasoning_end"),
        ("control_unknown_id", "reasoning_control_unknown_id"),
        ("bad_json", "error_bad_json"),
        ("../tool_call", "tool_call"),  # the bundled one `replay` shows too
        ("embeddings_base64", "embeddings_base64"),
        ("embeddings_float", "embeddings_float"),
        ("rerank", "rerank"),
        ("models", "models"),
    ],
)
def test_the_recordings_taken_from_fixtures_are_theirs_byte_for_byte(
    name: str, fixture: str
) -> None:
    assert recording(name).raw == (ROOT / "fixtures" / "http" / f"{fixture}.http").read_bytes()


def test_the_asyncio_example_needs_the_two_slots_the_readme_says(tmp_path: Path) -> None:
    (block,) = [b for b in CLIENT_BLOCKS if "AsyncClient(" in b.text]
    proc, url = serve_process("--slots", "1", "--no-pace")
    try:
        (tmp_path / "llamafast.toml").write_text(f'[infer]\nurl = "{url}"\n', encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-c", block.text],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert done.returncode == 1
    assert "ValueError: slot 1 does not exist: the server has 1 slot" in done.stderr
    assert "-np 2" in README.read_text(encoding="utf-8")


def test_the_command_line_lists_serve_and_hands_it_its_arguments(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafast.__main__ import main
    from llamafast._cli import _serve

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "serve" in capsys.readouterr().out
    seen: list[list[str]] = []
    monkeypatch.setattr(_serve, "main", lambda argv: seen.append(list(argv)) or 7)
    assert main(["serve", "--port", "0", "--no-pace"]) == 7
    assert seen == [["--port", "0", "--no-pace"]]


@pytest.mark.parametrize("messages", [None, [], {"role": "user"}, ["Hi"]])
def test_odd_messages_still_get_an_answer(messages: Any) -> None:
    assert pick({"messages": messages, "stream": True}, 2048) == "reasoning"


# --- the README's llama-server command line, against the real one ------------------------------


@contextlib.contextmanager
def readme_server() -> Iterator[str]:
    """The real llama-server started with the README's command line: its URL."""
    # The first llama-server block: the one the examples need ("Several servers" has another).
    line = next(b.text for b in ALL if b.lang == "sh" and b.text.startswith("llama-server "))
    args = shlex.split(line.replace("\\\n", " "))
    port = free_port()
    args[0] = os.environ["LLAMAFAST_LLAMA_SERVER"]
    args[args.index("model.gguf")] = os.environ["LLAMAFAST_TEST_MODEL"]
    args[args.index("--port") + 1] = str(port)
    with running(args, port) as url:
        yield url


def filled(value: Any, name: str = "") -> set[str]:
    """The (dotted) names of a result's fields that hold something: not None, empty or 0."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: set[str] = set()
        for field in dataclasses.fields(value):
            out |= filled(getattr(value, field.name), f"{name}{field.name}.")
        return out
    held = value is not None and value is not False and value != 0 and len(str(value)) > 0
    return {name.rstrip(".")} if held and value != () else set()


TURNS = ["thinking", "answer", "tool call"]


def say_hi(
    url: str, turn: str, client_class: Any = llamafast.Client, real: bool = False
) -> Completion:
    """One turn of a chat, asked of the server at `url` (`real`: llama-server, whose sampling
    is steered to the tool call; `serve` picks its answer by the request's fields)."""
    req = ChatRequest(0, [User("Hi")], thinking=turn == "thinking")
    max_tokens = 24
    if turn == "tool call":
        req, max_tokens = tool_call_request(url if real else None), 200
    with client_class(Config(InferConfig(url=url), Limits(max_tokens=max_tokens))) as client:
        return client.complete(req)


@pytest.mark.parametrize("turn", TURNS)
@pytest.mark.parametrize("client_class", [llamafast.Client, llamafast.pure.Client])
def test_serves_streams_end_with_the_servers_counts(
    srv: RecordedServer, turn: str, client_class: Any
) -> None:
    # Recorded as every client stream asks (stream_options.include_usage): `done.usage` is the
    # server's count, against serve as against llama-server, a tool call's turn included.
    host, port = srv.server_address[:2]
    usage = say_hi(f"http://{host}:{port}", turn, client_class).usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0


@pytest.mark.llama_server
@pytest.mark.skipif(
    not (os.environ.get("LLAMAFAST_LLAMA_SERVER") and os.environ.get("LLAMAFAST_TEST_MODEL")),
    reason="set LLAMAFAST_LLAMA_SERVER (the llama-server binary) and LLAMAFAST_TEST_MODEL "
    "(a GGUF file) to run against a real llama-server",
)
@pytest.mark.parametrize("turn", TURNS)
def test_serve_fills_every_field_the_real_server_fills(srv: RecordedServer, turn: str) -> None:
    # `serve` stands in for the real server: what a client reads from one (the usage counts of
    # a stream included), it reads from the other.
    with readme_server() as url:
        real = filled(say_hi(url, turn, real=True))
    host, port = srv.server_address[:2]
    served = filled(say_hi(f"http://{host}:{port}", turn))
    assert {"usage.prompt_tokens", "usage.completion_tokens", "timings.prompt_n"} <= real
    assert real - served == set(), f"filled by llama-server, not by serve: {real - served}"


@pytest.mark.llama_server
@pytest.mark.skipif(
    not (os.environ.get("LLAMAFAST_LLAMA_SERVER") and os.environ.get("LLAMAFAST_TEST_MODEL")),
    reason="set LLAMAFAST_LLAMA_SERVER (the llama-server binary) and LLAMAFAST_TEST_MODEL "
    "(a GGUF file) to run against a real llama-server",
)
def test_the_readme_command_line_gives_what_the_examples_need() -> None:
    with readme_server() as url:
        for mod in (llamafast, llamafast.pure):
            with mod.Client(Config(InferConfig(url=url), Limits(max_tokens=24))) as client:
                # slot 1 exists (-np 2: the asyncio example), and the reasoning comes apart
                # from the answer (--jinja, --reasoning-format deepseek)
                done = client.complete(ChatRequest(1, [User("Hi")], thinking=True))
            assert done.reasoning_content
            assert done.finish_reason is not None


# --- holding against its own clients ----------------------------------------------------------
# One selector thread reads every request against one deadline and within bounds; a pool of at
# most `workers` threads answers whole ones (src/llamafast/_cli/_serve_loop.py, _serve_reader.py).

BOUND_S = 30.0  # each exchange below ends well within this, or the server does not hold


@pytest.fixture
def guarded() -> Iterator[RecordedServer]:
    """A server with a short deadline (1 s) and 4 workers, so the bounds show in a test's time."""
    yield from serving(RecordedServer("127.0.0.1", 0, 2, pace=False, deadline=1.0, workers=4))


def sent_whole(srv: RecordedServer, data: bytes) -> bytes:
    """What the server answers to `data`, sent whole and the sending side closed (the send may
    be cut short by the server's close: what it answered is read all the same)."""
    with socket.create_connection(srv.server_address[:2], timeout=BOUND_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        with contextlib.suppress(ConnectionResetError):
            while part := sock.recv(65536):
                out += part
    return out


def test_a_client_trickling_its_head_is_cut_at_the_whole_request_deadline(
    guarded: RecordedServer,
) -> None:
    with socket.create_connection(guarded.server_address[:2], timeout=BOUND_S) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
        started, out = time.monotonic(), b""
        while time.monotonic() - started < 10:  # a byte every 0.3 s: no single read waits long
            if select.select([sock], [], [], 0.3)[0]:
                out = sock.makefile("rb").read()
                break
            sock.sendall(b"a")
    assert out.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), out
    assert json.loads(split(out)[1])["error"]["code"] == 408
    assert exchange(guarded, "GET", "/health") == recording("health").raw


def test_a_16_mb_head_is_refused_with_431_for_little_cpu(guarded: RecordedServer) -> None:
    head = b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (16 << 20)
    cpu = time.process_time()
    out = sent_whole(guarded, head)
    cpu = time.process_time() - cpu
    assert out.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), out[:200]
    # the target is 100 ms; the quadratic reader took 3 s of CPU for these 16 MB
    assert cpu < 1.0, f"{cpu:.2f} s of CPU for a 16 MB head"
    assert exchange(guarded, "GET", "/health") == recording("health").raw


def test_a_head_just_inside_the_bound_is_read() -> None:
    from llamafast._cli._serve_reader import MAX_HEAD, RequestReader

    start = b"GET /health HTTP/1.1\r\nX: "
    fits = start + b"a" * (MAX_HEAD - len(start) - 4) + b"\r\n\r\n"
    reader = RequestReader()
    assert all(reader.feed(fits[i : i + 1]) is None for i in range(len(fits) - 1))
    assert reader.feed(fits[-1:]) is not None  # byte by byte: every byte searched once


@pytest.mark.parametrize(
    ("length", "status"),
    [
        (str((64 << 20) + 1), b"413 Payload Too Large"),
        ("9" * 5000, b"413 Payload Too Large"),
        ("abc", b"400 Bad Request"),
        ("-1", b"400 Bad Request"),
        ("+3", b"400 Bad Request"),
        ("1_0", b"400 Bad Request"),
    ],
)
def test_a_content_length_past_the_bound_or_not_a_number_is_refused(
    guarded: RecordedServer, length: str, status: bytes
) -> None:
    # a GET /health: a length let through would be answered 200, not refused
    out = sent_whole(guarded, f"GET /health HTTP/1.1\r\nContent-Length: {length}\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 " + status + b"\r\n"), out
    assert exchange(guarded, "GET", "/health") == recording("health").raw


def test_a_line_that_is_not_a_request_is_refused(guarded: RecordedServer) -> None:
    assert sent_whole(guarded, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request\r\n")


def nested(depth: int) -> bytes:
    return b'{"messages":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize(
    "body",
    [
        nested(100_000),  # thousands deep: past Python's recursion
        nested(600),  # parses, but past MAX_DEPTH (512)
        nested(MAX_DEPTH),  # one past it (the outer object is a level)
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        b"[" * 5000,
        b"{no",
        b'{"messages":"\xff"}',  # not UTF-8
        b"[1]",  # not an object
        b'{"messages":[{"role":"user","content":"\\ud800"}]}',  # half a surrogate pair
    ],
    ids=[
        "deep",
        "past-bound",
        "one-past",
        "objects",
        "unclosed",
        "invalid",
        "latin-1",
        "array",
        "surrogate",
    ],
)
@pytest.mark.parametrize(
    "path",
    ["/v1/chat/completions", "/v1/embeddings", "/rerank", "/v1/chat/completions/input_tokens"],
)
def test_a_body_it_cannot_read_gets_the_recorded_400_and_the_next_client_an_answer(
    guarded: RecordedServer, body: bytes, path: str
) -> None:
    head = f"POST {path} HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    assert sent_whole(guarded, head + body) == recording("bad_json").raw
    assert exchange(guarded, "GET", "/health") == recording("health").raw


@pytest.mark.parametrize("depth", [500, MAX_DEPTH - 1])  # the latter exactly MAX_DEPTH deep
def test_a_body_nested_within_the_bound_is_answered(guarded: RecordedServer, depth: int) -> None:
    body = json.loads(nested(depth))
    raw = exchange(guarded, "POST", "/v1/chat/completions/input_tokens", body)
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize("body", [nested(100_000), b'{"id":[]}', b'{"id":{}}'])
def test_the_control_endpoint_answers_any_body(guarded: RecordedServer, body: bytes) -> None:
    head = f"POST /v1/chat/completions/control HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n"
    assert sent_whole(guarded, head.encode() + body) == recording("control_unknown_id").raw


def test_200_slow_clients_leave_it_answering_with_its_threads_capped(
    guarded: RecordedServer,
) -> None:
    threads = threading.active_count()  # the test's, and the server's selector thread
    slow = [socket.create_connection(guarded.server_address[:2]) for _ in range(200)]
    try:
        for sock in slow:
            sock.sendall(b"GET /health HTTP/1.1\r\nX-Slow: a")
        assert exchange(guarded, "GET", "/health") == recording("health").raw
        for sock in slow:
            sock.sendall(b"a")  # still there, still slow
        assert exchange(guarded, "GET", "/slots") == guarded.slots()
        assert threading.active_count() <= threads + guarded.workers
    finally:
        for sock in slow:
            sock.close()


def test_requests_past_the_workers_wait_for_one_and_are_all_answered(
    guarded: RecordedServer,
) -> None:
    threads = threading.active_count()
    guarded.acquire(0), guarded.acquire(1)  # every chat waits for a slot, holding its worker
    waiting = [socket.create_connection(guarded.server_address[:2]) for _ in range(10)]
    try:
        for sock in waiting:
            sock.sendall(request_bytes("POST", "/v1/chat/completions", chat_body()))
        started = time.monotonic()
        while guarded._jobs.qsize() < 10 - guarded.workers:  # 4 workers hold 4; 6 queued
            assert time.monotonic() - started < BOUND_S
            select.select([], [], [], 0.01)
        assert threading.active_count() <= threads + guarded.workers
        guarded.release(0), guarded.release(1)
        for sock in waiting:
            sock.settimeout(BOUND_S)
            assert sock.makefile("rb").read() == recording("reasoning").raw
    finally:
        for sock in waiting:
            sock.close()
