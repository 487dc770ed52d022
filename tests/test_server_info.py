# The rules of the context window and the router's models (docs/client.md), through both clients
# and both twins, against small loopback servers that answer as llama-server does: the shapes
# were read from a real llama-server (tests/test_llama_server_models.py checks them against one).
"""props(), count_tokens(), ContextOverflowError, the per-request model and the router's models."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _server import ReplayServer, Reply
from llamafast import (
    BusyError,
    ChatRequest,
    Config,
    ContextOverflowError,
    HttpError,
    InferConfig,
    Limits,
    LoadTimeoutError,
    ModelInfo,
    ServerProps,
    User,
    Waiting,
    build_body,
)

FAST: dict[str, Any] = {
    "connect_timeout": 2.0,
    "retries": 2,
    "retry_base_ms": 5,
    "retry_max_ms": 10,
    "load_timeout": 5.0,
}

CLIENTS = {
    "sync": llamafast.Client,
    "async": llamafast.AsyncClient,
    "pure-sync": llamafast.pure.Client,
    "pure-async": llamafast.pure.AsyncClient,
}


@pytest.fixture(params=list(CLIENTS))
def make(request: pytest.FixtureRequest) -> Callable[[Config], Any]:
    return CLIENTS[request.param]


def call(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """client.method(...) for either client: the async one run to its end."""
    result = getattr(client, method)(*args, **kwargs)
    if asyncio.iscoroutine(result):
        return asyncio.run(result)
    return result


def complete(client: Any, req: ChatRequest) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    return call(client, "complete", req, events.append), events


PROPS = {
    "default_generation_settings": {"n_ctx": 256, "params": {}},
    "total_slots": 2,
    "model_alias": "tiny",
    "model_path": "/models/tiny.gguf",
    "modalities": {"vision": True, "video": False, "audio": False},
    "build_info": "b1-0c1e570",
}
SSE = (
    'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}],'
    '"id":"c1","object":"chat.completion.chunk"}\n\n'
    'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    '"id":"c1","object":"chat.completion.chunk"}\n\ndata: [DONE]\n\n'
)


def router_models(states: dict[str, str]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": k, "aliases": [], "status": {"value": v, "args": []}} for k, v in states.items()
        ],
    }


class Fake:
    """A loopback server whose answers the test sets: `routes[(method, path)]` is a function
    of the parsed body giving (status, JSON value or SSE text); `log` lists what was asked."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Callable[[Any], tuple[int, Any]]] = {}
        self.log: list[tuple[str, str, Any]] = []
        self.queries: list[str] = []  # the paths asked with a query, query and all
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                path = self.path.split("?")[0]
                fake.log.append((method, path, body))
                if "?" in self.path:
                    fake.queries.append(self.path)
                route = fake.routes.get((method, self.path), fake.routes.get((method, path)))
                status, value = (404, {"error": {"code": 404, "message": "File Not Found"}})
                if route is not None:
                    status, value = route(body)
                sse = isinstance(value, str)
                data = value.encode() if isinstance(value, str) else json.dumps(value).encode()
                self.send_response(status)
                ctype = "text/event-stream" if sse else "application/json"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up (closed) before the answer: nothing to report

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True).start()

    def asked(self, path: str) -> int:
        return sum(1 for _, p, _ in self.log if p == path)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake() -> Iterator[Fake]:
    srv = Fake()
    srv.routes[("GET", "/props")] = lambda _: (200, PROPS)
    srv.routes[("POST", "/v1/chat/completions")] = lambda _: (200, SSE)
    try:
        yield srv
    finally:
        srv.close()


def config(url: str, **limits: Any) -> Config:
    return Config(InferConfig(url=url, model="tiny"), Limits(**{**FAST, **limits}))


# --- ContextOverflowError -------------------------------------------------------------------


def test_a_prompt_longer_than_the_context_is_context_overflow_never_retried(
    make: Callable[[Config], Any],
) -> None:
    with ReplayServer() as server:
        server.default = Reply("error_context_exceeded")
        client = make(config(server.url))
        with pytest.raises(ContextOverflowError) as info:
            complete(client, ChatRequest(None, [User("long")]))
        assert (info.value.n_prompt_tokens, info.value.n_ctx, info.value.status) == (
            24765,
            4096,
            400,
        )
        assert isinstance(info.value, HttpError)
        assert len(server.chat_logs()) == 1


# --- props() -------------------------------------------------------------------------------


def test_props_reads_the_server_and_is_asked_once(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    client = make(config(fake.url))
    props = call(client, "props")
    assert props == ServerProps(n_ctx=256, model="tiny", modalities=frozenset({"vision"}), slots=2)
    assert call(client, "props") == props
    assert fake.asked("/props") == 1


def test_props_are_asked_again_after_a_sign_of_a_restart(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    client = make(config(fake.url, retries=0))
    call(client, "props")
    fake.routes[("POST", "/v1/chat/completions")] = lambda _: (503, {"error": {"message": "busy"}})
    with pytest.raises(HttpError):
        complete(client, ChatRequest(None, [User("hi")]))
    call(client, "props")
    assert fake.asked("/props") == 2


def test_props_are_asked_again_when_an_overflow_names_another_context(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    client = make(config(fake.url))
    assert call(client, "props").n_ctx == 256
    overflow = {"code": 400, "message": "too long", "type": "exceed_context_size_error"}
    fake.routes[("POST", "/v1/chat/completions")] = lambda _: (
        400,
        {"error": {**overflow, "n_prompt_tokens": 900, "n_ctx": 512}},
    )
    fake.routes[("GET", "/props")] = lambda _: (
        200,
        {**PROPS, "default_generation_settings": {"n_ctx": 512}},
    )
    with pytest.raises(ContextOverflowError):
        complete(client, ChatRequest(None, [User("hi")]))
    assert call(client, "props").n_ctx == 512


def test_props_without_a_context_size_is_a_protocol_error(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    fake.routes[("GET", "/props")] = lambda _: (200, {"total_slots": 1})
    with pytest.raises(llamafast.ProtocolError, match="context size"):
        call(make(config(fake.url)), "props")


# --- count_tokens() ------------------------------------------------------------------------


def test_count_tokens_sends_the_chat_body_to_input_tokens(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    fake.routes[("POST", "/v1/chat/completions/input_tokens")] = lambda _: (
        200,
        {"input_tokens": 25, "object": "response.input_tokens"},
    )
    cfg = config(fake.url)
    client = make(cfg)
    req = ChatRequest(None, [User("hello there")])
    assert call(client, "count_tokens", req) == 25
    assert call(client, "count_tokens", [User("hello there")]) == 25
    assert fake.log[0][2] == json.loads(build_body(cfg, req))
    assert fake.log[1][2] == fake.log[0][2]


def test_count_tokens_takes_the_openai_names_and_refuses_an_empty_list(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    fake.routes[("POST", "/v1/chat/completions/input_tokens")] = lambda _: (
        200,
        {"input_tokens": 4},
    )
    client = make(config(fake.url))
    messages = [
        {"role": "developer", "content": "s", "name": "n"},
        {"role": "user", "content": "u"},
    ]
    assert call(client, "count_tokens", messages, max_completion_tokens=5) == 4
    sent = fake.log[0][2]
    assert sent["max_tokens"] == 5 and "max_completion_tokens" not in sent
    assert sent["messages"][0] == {"role": "system", "content": "s", "name": "n"}
    with pytest.raises(ValueError, match=r"^messages is empty"):
        call(client, "count_tokens", [])
    with pytest.raises(ValueError, match="max_tokens and max_completion_tokens"):
        call(client, "count_tokens", [User("u")], max_tokens=5, max_completion_tokens=5)
    assert len(fake.log) == 1


def test_count_tokens_without_input_tokens_applies_the_template_then_tokenizes(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    fake.routes[("POST", "/apply-template")] = lambda _: (200, {"prompt": "<u>hi</u>"})
    fake.routes[("POST", "/tokenize")] = lambda body: (200, {"tokens": list(range(7))})
    client = make(config(fake.url))
    assert call(client, "count_tokens", [User("hi")], max_tokens=5) == 7
    assert call(client, "count_tokens", [User("hi")]) == 7
    # the missing endpoint is remembered: asked once
    assert fake.asked("/v1/chat/completions/input_tokens") == 1
    tokenize = [b for _, p, b in fake.log if p == "/tokenize"]
    assert tokenize[0] == {
        "model": "tiny",
        "content": "<u>hi</u>",
        "add_special": True,
        "parse_special": True,
    }
    assert [b["max_tokens"] for _, p, b in fake.log if p == "/apply-template"] == [5, 4096]


def test_count_tokens_for_a_model_not_loaded_loads_it_first(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    loaded = threading.Event()
    fake.routes[("GET", "/models")] = lambda _: (
        200,
        router_models({"b": "loaded" if loaded.is_set() else "unloaded"}),
    )
    fake.routes[("POST", "/models/load")] = lambda _: (loaded.set(), (200, {"success": True}))[1]
    fake.routes[("POST", "/v1/chat/completions/input_tokens")] = lambda _: (
        200,
        {"input_tokens": 3},
    )
    client = make(config(fake.url))
    assert call(client, "count_tokens", [User("hi")], model="b") == 3
    assert call(client, "count_tokens", [User("hi")], model="b") == 3
    assert fake.asked("/models/load") == 1
    assert fake.asked("/models") == 2  # before loading, then loaded; then known


def test_count_tokens_takes_a_request_or_messages(make: Callable[[Config], Any]) -> None:
    client = make(config("http://127.0.0.1:9"))
    with pytest.raises(TypeError, match="max_tokens"):
        call(client, "count_tokens", ChatRequest(None, [User("hi")]), max_tokens=3)
    with pytest.raises(TypeError, match="str"):
        call(client, "count_tokens", "hi")


# --- the request's model and the router's models -------------------------------------------


def test_the_request_model_wins_over_the_config() -> None:
    cfg = config("http://127.0.0.1:9")
    assert json.loads(build_body(cfg, ChatRequest(None, [User("hi")])))["model"] == "tiny"
    body = build_body(cfg, ChatRequest(None, [User("hi")], model="other"))
    assert json.loads(body)["model"] == "other"
    with pytest.raises(ValueError, match="model"):
        build_body(cfg, ChatRequest(None, [User("hi")], model=""))


def test_models_lists_ids_and_states(make: Callable[[Config], Any], fake: Fake) -> None:
    fake.routes[("GET", "/models")] = lambda _: (
        200,
        router_models({"a": "loaded", "b": "unloaded"}),
    )
    assert call(make(config(fake.url)), "models") == (
        ModelInfo("a", "loaded"),
        ModelInfo("b", "unloaded"),
    )


def test_a_single_model_server_lists_its_model_loaded(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    fake.routes[("GET", "/models")] = lambda _: (200, {"data": [{"id": "/m/tiny.gguf"}]})
    client = make(config(fake.url))
    assert call(client, "models") == (ModelInfo("/m/tiny.gguf", "loaded"),)
    # its model is not routed: a request naming another is sent as it is
    out, _ = complete(client, ChatRequest(None, [User("hi")], model="other"))
    assert out.content == "ok"


def test_a_request_for_a_loading_model_says_it_waits(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    fake.routes[("GET", "/models")] = lambda _: (
        200,
        router_models({"a": "loaded", "b": "loading"}),
    )
    client = make(config(fake.url))
    out, events = complete(client, ChatRequest(None, [User("hi")], model="b"))
    assert out.content == "ok" and Waiting(slot_busy=False) in events
    # once it answered, the model is known loaded: not asked again
    _, events = complete(client, ChatRequest(None, [User("hi")], model="b"))
    assert Waiting(slot_busy=False) not in events
    assert fake.asked("/models") == 1


def test_a_loading_model_is_waited_for_within_load_timeout(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    # The router holds the request while it loads the model: past wait_timeout, the wait goes
    # on up to load_timeout, then LoadTimeoutError (not WaitTimeoutError).
    release = threading.Event()
    fake.routes[("GET", "/models")] = lambda _: (200, router_models({"b": "unloaded"}))
    fake.routes[("POST", "/v1/chat/completions")] = lambda _: (release.wait(10), (200, SSE))[1]
    client = make(config(fake.url, wait_timeout=0.05, load_timeout=0.3))
    try:
        with pytest.raises(LoadTimeoutError):
            complete(client, ChatRequest(None, [User("hi")], model="b"))
    finally:
        release.set()


def test_a_loaded_model_is_no_wait(make: Callable[[Config], Any], fake: Fake) -> None:
    fake.routes[("GET", "/models")] = lambda _: (200, router_models({"a": "loaded"}))
    _, events = complete(make(config(fake.url)), ChatRequest(None, [User("hi")], model="a"))
    assert not any(isinstance(e, Waiting) for e in events)


def test_an_unknown_model_is_an_error_naming_it(make: Callable[[Config], Any], fake: Fake) -> None:
    fake.routes[("GET", "/models")] = lambda _: (200, router_models({"a": "loaded"}))
    client = make(config(fake.url))
    with pytest.raises(ValueError, match="'nope'"):
        complete(client, ChatRequest(None, [User("hi")], model="nope"))
    assert fake.asked("/v1/chat/completions") == 0
    fake.routes[("POST", "/models/load")] = lambda _: (
        404,
        {"error": {"message": "File Not Found"}},
    )
    many = {f"m{i}": "unloaded" for i in range(30)}
    fake.routes[("GET", "/models")] = lambda _: (200, router_models(many))
    listed = r"'nope' \(its models: 'm0', .*'m9', \.\.\. \(30 in all\)\)"
    with pytest.raises(ValueError, match=listed):
        call(client, "load_model", "nope")


def test_load_model_waits_until_loaded(make: Callable[[Config], Any], fake: Fake) -> None:
    states = iter(["unloaded", "loading", "loading", "loaded"])
    fake.routes[("POST", "/models/load")] = lambda _: (200, {"success": True})
    fake.routes[("GET", "/models")] = lambda _: (200, router_models({"a": next(states)}))
    call(make(config(fake.url)), "load_model", "a")
    assert fake.asked("/models") == 4
    assert [b for m, p, b in fake.log if p == "/models/load"] == [{"model": "a"}]


def test_load_model_gives_up_after_load_timeout(make: Callable[[Config], Any], fake: Fake) -> None:
    fake.routes[("POST", "/models/load")] = lambda _: (200, {"success": True})
    fake.routes[("GET", "/models")] = lambda _: (200, router_models({"a": "loading"}))
    with pytest.raises(LoadTimeoutError):
        call(make(config(fake.url, load_timeout=0.05)), "load_model", "a")


def test_unload_model_of_a_model_not_running_is_no_error(
    make: Callable[[Config], Any], fake: Fake
) -> None:
    fake.routes[("POST", "/models/unload")] = lambda _: (
        400,
        {"error": {"code": 400, "message": "model is not running"}},
    )
    fake.routes[("GET", "/models")] = lambda _: (200, router_models({"a": "unloaded"}))
    call(make(config(fake.url)), "unload_model", "a")
    assert fake.asked("/models/unload") == 1


# --- a router's slots: asked per model ------------------------------------------------------

# A router answers GET /slots only for a model (`?model=`), and asking loads that model.
MODEL_MISSING = {
    "error": {
        "code": 400,
        "message": "model name is missing from the request",
        "type": "invalid_request_error",
    }
}


def slots(*busy: bool) -> list[dict[str, Any]]:
    return [{"id": i, "n_ctx": 256, "is_processing": b} for i, b in enumerate(busy)]


@pytest.fixture
def router(fake: Fake) -> Fake:
    fake.routes[("GET", "/slots")] = lambda _: (400, MODEL_MISSING)
    fake.routes[("GET", "/models")] = lambda _: (
        200,
        router_models({"a": "loaded", "b": "unloaded"}),
    )
    fake.routes[("GET", "/slots?model=a")] = lambda _: (200, slots(True, True))
    fake.routes[("GET", "/slots?model=b")] = lambda _: (500, {"error": {"message": "loads b"}})
    return fake


def test_a_router_is_asked_for_the_slots_of_the_request_s_model(
    make: Callable[[Config], Any], router: Fake
) -> None:
    client = make(config(router.url, wait_for_slot=False))
    with pytest.raises(BusyError):
        complete(client, ChatRequest(None, [User("hi")], model="a"))
    assert "/slots?model=a" in router.queries
    assert router.asked("/v1/chat/completions") == 0


def test_a_router_s_slots_are_those_of_the_config_s_model(
    make: Callable[[Config], Any], router: Fake
) -> None:
    client = make(Config(InferConfig(url=router.url, model="a"), Limits(**FAST)))
    with pytest.raises(ValueError, match="slot 5"):
        complete(client, ChatRequest(5, [User("hi")]))
    assert "/slots?model=a" in router.queries


def test_a_router_s_model_not_loaded_has_no_busy_slot_and_is_not_loaded_by_asking(
    make: Callable[[Config], Any], router: Fake
) -> None:
    client = make(config(router.url, wait_for_slot=False))
    out, _ = complete(client, ChatRequest(None, [User("hi")], model="b"))
    assert out.content == "ok"
    assert "/slots?model=b" not in router.queries


def test_a_model_name_is_quoted_in_the_slots_query(
    make: Callable[[Config], Any], router: Fake
) -> None:
    router.routes[("GET", "/models")] = lambda _: (200, router_models({"org/m v1": "loaded"}))
    router.routes[("GET", "/slots?model=org%2Fm%20v1")] = lambda _: (200, slots(False, True))
    client = make(config(router.url, wait_for_slot=False))
    out, _ = complete(client, ChatRequest(0, [User("hi")], model="org/m v1"))
    assert out.content == "ok"
    assert "/slots?model=org%2Fm%20v1" in router.queries
