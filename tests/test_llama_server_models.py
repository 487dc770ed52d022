# Against a real llama-server (marker `llama_server`; the variables of tests/test_llama_server.py):
# the context window (props, count_tokens, ContextOverflowError, props refreshed after a restart)
# on a server with a small context, and router mode (`--models-dir` holding two copies of the test
# model) for the per-request model, models(), load_model() and unload_model(). Both clients.
"""The context window and several models on one server, against a real llama-server."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _llama import MODEL, NEEDS_SERVER, SLOTS, free_port, serve
from llamafast import (
    AsyncClient,
    ChatRequest,
    Client,
    Config,
    ConnectError,
    ContextOverflowError,
    InferConfig,
    Limits,
    ModelInfo,
    User,
    Waiting,
)

CTX = 256

pytestmark = NEEDS_SERVER


def config(url: str, model: str = "default", **limits: Any) -> Config:
    base: dict[str, Any] = {"max_tokens": 4, "retry_base_ms": 50, "load_timeout": 120.0}
    return Config(InferConfig(url=url, model=model), Limits(**{**base, **limits}))


def call(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    result = getattr(client, method)(*args, **kwargs)
    if asyncio.iscoroutine(result):
        return asyncio.run(result)
    return result


@pytest.fixture(params=[Client, AsyncClient], ids=["sync", "async"])
def make(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(scope="module")
def small() -> Iterator[str]:
    with serve("-m", MODEL, "-c", str(CTX), "-np", str(SLOTS)) as url:
        yield url


@pytest.fixture(scope="module")
def router() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as models:
        for name in ("tiny-a", "tiny-b"):
            shutil.copyfile(MODEL, Path(models) / f"{name}.gguf")
        args = ["--models-dir", models, "--models-max", "1", "-c", str(CTX), "-np", str(SLOTS)]
        with serve(*args) as url:
            yield url


# --- the context window ----------------------------------------------------------------------


def test_props_tell_the_context_and_the_slots(make: Any, small: str) -> None:
    props = call(make(config(small)), "props")
    assert (props.n_ctx, props.slots) == (CTX, 2)
    assert props.model and props.modalities == frozenset()


def test_count_tokens_is_what_the_chat_counts(make: Any, small: str) -> None:
    client = make(config(small))
    req = ChatRequest(None, [User("hello there, how are you")], max_tokens=1)
    counted = call(client, "count_tokens", req)
    done = call(client, "complete", req)
    assert done.timings.prompt_n + done.timings.cache_n == counted
    # the fallback (apply the template, tokenize) counts the same
    client._core.input_tokens = False
    assert call(client, "count_tokens", req.messages, max_tokens=1) == counted


def test_an_overlong_prompt_is_context_overflow_with_the_server_counts(
    make: Any, small: str
) -> None:
    client = make(config(small))
    messages = [User("hello " * 400)]
    counted = call(client, "count_tokens", messages)
    with pytest.raises(ContextOverflowError) as info:
        call(client, "complete", ChatRequest(None, messages))
    assert (info.value.n_prompt_tokens, info.value.n_ctx) == (counted, CTX)


def test_props_are_asked_again_after_the_server_restarts(make: Any) -> None:
    port = free_port()
    client = make(config(f"http://127.0.0.1:{port}", retries=1, connect_timeout=5.0))
    with serve("-m", MODEL, "-c", str(CTX), "-np", str(SLOTS), port=port):
        assert call(client, "props").n_ctx == CTX
    # the server is gone: a request that finds it so tells the client to ask again
    with pytest.raises(ConnectError):
        call(client, "complete", ChatRequest(None, [User("hi")]))
    # twice the slots' context: 4 * CTX a slot
    with serve("-m", MODEL, "-c", str(8 * CTX), "-np", str(SLOTS), port=port):
        assert call(client, "props").n_ctx == 4 * CTX


# --- several models on one server ------------------------------------------------------------


def test_router_models_load_unload_and_a_waiting_request(make: Any, router: str) -> None:
    client = make(config(router, model="tiny-a"))
    assert {m.id for m in call(client, "models")} == {"tiny-a", "tiny-b"}
    call(client, "load_model", "tiny-a")
    assert ModelInfo("tiny-a", "loaded") in call(client, "models")
    call(client, "load_model", "tiny-a")  # already loaded: no error
    # tiny-b is not loaded (one model at a time): the request says it waits for the load
    events: list[Any] = []
    done = call(client, "complete", ChatRequest(None, [User("hi")], model="tiny-b"), events.append)
    assert Waiting(slot_busy=False) in events
    assert done.finish_reason is not None
    states = dict((m.id, m.state) for m in call(client, "models"))
    assert states["tiny-b"] == "loaded"
    call(client, "unload_model", "tiny-b")
    assert ModelInfo("tiny-b", "unloaded") in call(client, "models")
    call(client, "unload_model", "tiny-b")  # not running: no error
    # counting for a model that is not loaded loads it first
    assert call(client, "count_tokens", [User("hi")], model="tiny-b") > 0
    assert ModelInfo("tiny-b", "loaded") in call(client, "models")
    # the config's model (tiny-a) serves a request that names none; counting routes by it too
    assert call(client, "count_tokens", [User("hi")]) > 0


def test_router_unknown_model_is_an_error_naming_it(make: Any, router: str) -> None:
    client = make(config(router, model="tiny-a"))
    with pytest.raises(ValueError, match="'nope'"):
        call(client, "complete", ChatRequest(None, [User("hi")], model="nope"))
    with pytest.raises(ValueError, match="'nope'"):
        call(client, "load_model", "nope")
    with pytest.raises(ValueError, match="'nope'"):
        call(client, "unload_model", "nope")


def test_router_slots_are_the_loaded_model_s(make: Any, router: str) -> None:
    # A router answers /slots only for a model: the client asks for the body's model's slots.
    client = make(config(router, model="tiny-a", wait_for_slot=False))
    call(client, "load_model", "tiny-a")
    with pytest.raises(ValueError, match=f"slot {SLOTS}"):  # slots 0 and 1 only
        call(client, "complete", ChatRequest(SLOTS, [User("hi")]))
    done = call(client, "complete", ChatRequest(SLOTS - 1, [User("hi")]))  # free: no BusyError
    assert done.finish_reason is not None
