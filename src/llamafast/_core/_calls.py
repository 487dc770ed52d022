# Strategy: each of the client's calls that is not a chat is one request (or a few) whose answer
# the server sends whole, made under the exchange's rules of the first byte (`Exchange`) and read
# by the readers of _answers: `ServerCall` for the server's own endpoints (props, models, token
# counts, loading and unloading a model), `WholeCall` for one request whose answer is computed
# (embeddings, rerank, a wait's /slots). The bodies of embed and rerank are written here too.
"""The whole-answer calls: `ServerCall`, `WholeCall`, and the embed and rerank bodies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._config import Limits
from .._errors import HttpError, LoadTimeoutError, ProtocolError, cut, server_message
from .._values import ModelInfo, ServerProps
from ._answers import count_of, json_object, model_entry, not_served, read_models, read_props
from ._commands import Phase, Sleep
from ._exchange import Answer, Exchange, Piece, poll_delays
from ._session import INPUT_TOKENS_PATH, MAX_ERROR_BODY, MAX_SLOTS_BODY, MAX_VECTORS_BODY, Core

__all__ = ["EmbedPlan", "ServerCall", "WholeCall", "rerank_body"]


class ServerCall(Exchange):
    """One of the client's calls that is not a chat (`props`, `count_tokens`, `models`,
    `load_model`, `unload_model`), under the rules of the first byte: retries with back-off, a
    503 `Loading model` waited for within load_timeout. An error answer is HttpError (a
    ContextOverflowError when it says so); an answer that is not what the call expects is
    ProtocolError."""

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.deadline = core.clock() + core.limits.wait_timeout

    def _ask(
        self, method: str, path: str, payload: Any = None, limit: int = MAX_SLOTS_BODY
    ) -> Phase[tuple[int, str]]:
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        return (yield from self._small(method, path, limit, None, body))

    def props(self) -> Phase[ServerProps]:
        """GET /props, cached in the client until `Core.forget`."""
        core = self.core
        if core.props is None:
            status, text = yield from self._ask("GET", "/props")
            if status != 200:
                raise self.refusal(status, text)
            core.props = read_props(text)
        return core.props

    def count_tokens(self, body: bytes, model: str | None = None) -> Phase[int]:
        """The prompt tokens of the chat `body`: POST input_tokens where the server has it (a
        404 is remembered), else the prompt from /apply-template tokenized as the chat is
        (`add_special`, `parse_special`). A request that names its `model`, on a router: the
        model is loaded first (`load_model`), so the count does not wait on a held request."""
        core = self.core
        if model is not None and model not in core.ready_models:
            status, text = yield from self._ask("GET", "/models")
            listed = read_models(text) if status == 200 else None
            if listed is not None and model_entry(listed, model).state != "loaded":
                yield from self.load_model(model)
            core.ready_models.add(model)
        if core.input_tokens is not False:
            status, text = yield from self._small(
                "POST", INPUT_TOKENS_PATH, MAX_ERROR_BODY, None, body
            )
            if status == 200:
                count = count_of(text, f"POST {INPUT_TOKENS_PATH}", "input_tokens")
                core.input_tokens = True
                return count
            if status != 404:
                raise self.refusal(status, text)
            core.input_tokens = False
        status, text = yield from self._small("POST", "/apply-template", MAX_SLOTS_BODY, None, body)
        if status != 200:
            raise self.refusal(status, text)
        prompt = json_object(text, "POST /apply-template").get("prompt")
        if not isinstance(prompt, str):
            raise ProtocolError(f"POST /apply-template answered no prompt: {cut(text)}")
        model = json.loads(body).get("model")  # a router routes /tokenize by it
        payload = {"model": model, "content": prompt, "add_special": True, "parse_special": True}
        status, text = yield from self._ask("POST", "/tokenize", payload)
        if status != 200:
            raise self.refusal(status, text)
        tokens = json_object(text, "POST /tokenize").get("tokens")
        if not isinstance(tokens, list):
            raise ProtocolError(f"POST /tokenize answered no tokens: {cut(text)}")
        return len(tokens)

    def _list(self) -> Phase[tuple[tuple[ModelInfo, tuple[str, ...]], ...] | None]:
        status, text = yield from self._ask("GET", "/models")
        if status != 200:
            raise self.refusal(status, text)
        return read_models(text)

    def models(self) -> Phase[tuple[ModelInfo, ...]]:
        """GET /models: each model's id and state (a server that is not a router: its one
        model, "loaded")."""
        status, text = yield from self._ask("GET", "/models")
        if status != 200:
            raise self.refusal(status, text)
        data = json_object(text, "GET /models").get("data")
        listed = read_models(text)
        if listed is None:  # not a router: its one model is loaded
            assert isinstance(data, list)
            return tuple(ModelInfo(m["id"], "loaded") for m in data)
        return tuple(info for info, _ in listed)

    def load_model(self, model: str) -> Phase[None]:
        """POST /models/load, then GET /models until the model is loaded, within load_timeout
        (LoadTimeoutError). An unknown model is ValueError naming it; one already loaded or
        loading is not an error."""
        _check_name(model)
        status, text = yield from self._ask("POST", "/models/load", {"model": model})
        if status != 200 and server_message(text) != "model is already running":
            yield from self._refused(model, status, text)
        yield from self._until_state(model, "loaded")
        self.core.ready_models.add(model)

    def unload_model(self, model: str) -> Phase[None]:
        """POST /models/unload, then GET /models until the model is unloaded, within
        load_timeout (LoadTimeoutError). A model that is not running is not an error, an
        unknown one is ValueError naming it."""
        _check_name(model)
        self.core.ready_models.discard(model)
        status, text = yield from self._ask("POST", "/models/unload", {"model": model})
        if status != 200 and server_message(text) != "model is not running":
            yield from self._refused(model, status, text)
        yield from self._until_state(model, "unloaded")

    def _refused(self, model: str, status: int, text: str) -> Phase[None]:
        """A router's refusal to load or unload `model`: when its model list lacks it,
        ValueError naming it (the router says "File Not Found" or "model is not found");
        otherwise the HttpError."""
        refusal = self.refusal(status, text)  # before _list asks another request
        if status in (400, 404):
            listed = yield from self._list()
            if listed is not None:
                model_entry(listed, model)
        raise refusal

    def _until_state(self, model: str, state: str) -> Phase[None]:
        """GET /models until `model` is in `state`, polled as /health is while a model loads,
        at most load_timeout (LoadTimeoutError). Not a router: nothing to wait for."""
        limits = self.core.limits
        clock = self.core.clock
        until = clock() + limits.load_timeout
        for delay in poll_delays(limits):
            listed = yield from self._list()
            if listed is None or model_entry(listed, model).state == state:
                return
            if clock() >= until:
                raise LoadTimeoutError(limits.load_timeout)
            yield Sleep(min(until, clock() + delay))


def _check_name(model: Any) -> None:
    if not isinstance(model, str) or not model:
        raise ValueError(f"a model id must be a non-empty string, not {cut(model)}")


# --- embeddings and rerank: one JSON request, its whole answer ------------------------------------


def _texts(texts: Any, what: str) -> list[str]:
    """`texts` as a list of str: a sequence of str, not one str, not empty."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of str, not one {type(texts).__name__}")
    try:
        items = list(texts)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of str, not {type(texts).__name__}") from None
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}] must be a str, not {type(text).__name__}")
    if not items:
        raise ValueError(f"{what} is empty: there is nothing to send")
    return items


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class EmbedPlan:
    """The requests of one `embed` call: the texts in batches of `embed_batch`, in order, each
    asking for base64 (`encoding_format`), and how many may run at once; `cores`: the servers
    that are up, the batches spread over them in turn (docs/client.md, rule FLEET)."""

    def __init__(self, core: Core, texts: Any, model: str | None, limits: Limits | None) -> None:
        self.cores = [core] if core.fleet is None else core.fleet.up_cores()
        items = _texts(texts, "texts")
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model must be a str or None, not {type(model).__name__}")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits or None, not {type(limits).__name__}")
        self.limits = core.limits if limits is None else limits
        self.model = core.cfg.infer.model if model is None else model
        self.texts = items
        self.n = len(items)
        size = self.limits.embed_batch
        self.batches = [(i, min(size, self.n - i)) for i in range(0, self.n, size)]

    def body(self, first: int, count: int) -> bytes:
        return _json(
            {
                "input": self.texts[first : first + count],
                "model": self.model,
                "encoding_format": "base64",
            }
        )

    def core(self, first: int) -> Core:
        """The server of the batch that begins at text `first`."""
        return self.cores[first // self.limits.embed_batch % len(self.cores)]

    def width(self, slots: int | None) -> int:
        """Requests at once: one per server slot (one when the slot count is unknown), at
        most `max_connections` whatever /slots claims (docs/client.md, rule FAN-OUT). The one
        place a call's connections to its server are bounded."""
        return max(1, min(slots or 1, len(self.batches), self.limits.max_connections))


def rerank_body(
    core: Core, query: Any, documents: Any, top_n: int | None, model: str | None
) -> tuple[bytes, int]:
    """The body of a rerank request and the number of documents."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    docs = _texts(documents, "documents")
    if top_n is not None and (type(top_n) is not int or top_n < 1):
        raise ValueError(f"top_n must be a positive int or None, not {top_n!r}")
    if model is not None and not isinstance(model, str):
        raise TypeError(f"model must be a str or None, not {type(model).__name__}")
    body: dict[str, Any] = {
        "model": core.cfg.infer.model if model is None else model,
        "query": query,
        "documents": docs,
    }
    if top_n is not None:
        body["top_n"] = top_n
    return _json(body), len(docs)


class WholeCall(Exchange):
    """One request whose answer the server computes whole before it sends any (embeddings,
    rerank, a wait's /slots), read whole by the one exchange of every whole answer
    (`Exchange._exchange`, computed) under the rules of the first byte."""

    def __init__(
        self,
        core: Core,
        method: str,
        path: str,
        body: bytes | None,
        limit: int = MAX_VECTORS_BODY,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(core, limits)
        self.method = method
        self.path = path
        self.payload = body
        self.limit = limit

    def not_served(self, status: int, parts: Sequence[Piece], flag: str, what: str) -> HttpError:
        """The HttpError for an error answer of an endpoint llama-server serves only when
        started with `flag` (`not_served`), naming this request and the client's url."""
        return not_served(status, parts, flag, what, self.last_request, self.core.target.url)

    def phases(self) -> Phase[Answer]:
        """(status, the body's pieces) for any answer but a 503."""
        return (
            yield from self.first_byte_rules(
                lambda: self._exchange(
                    self.method, self.path, self.payload, self.limit, computed=True
                )
            )
        )
