# Strategy: telemetry costs nothing until asked for, and nothing per chunk once asked. The clients
# make their streams from a class attribute (`_stream_type`); `instrument` swaps in a subclass
# whose three overrides run once per request: at its start (__init__: the span opens), when the
# stream begins (_start_stream: the time to the first chunk) and when it ends (_release, which
# every end goes through: the Completion read, a failure, a close, the finalizer). The whole-answer
# calls (embed, rerank) are wrapped around the method. Every client (on the classes) or one client
# (on the instance); `uninstrument` puts the originals back, so an uninstrumented client runs the
# very code it runs without this module. OpenTelemetry (the API only) is imported when
# `instrument` is called: llamafast imports and works without it.
"""OpenTelemetry for llamafast's clients, after the generative-AI semantic conventions
(docs/client.md, rule TELEMETRY): `instrument()` every client, or `instrument(client)` one."""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import __version__
from ._client._async import AsyncClient, AsyncClientStream
from ._client._sync import Client, ClientStream
from ._config import Config, Limits
from ._values import ChatRequest, Completion

__all__ = [
    "OPERATION_DURATION",
    "TIME_TO_FIRST_CHUNK",
    "TOKEN_USAGE",
    "instrument",
    "uninstrument",
]

PROVIDER = "llama.cpp"  # gen_ai.provider.name: llama-server is llama.cpp's
OPERATION_DURATION = "gen_ai.client.operation.duration"
TOKEN_USAGE = "gen_ai.client.token.usage"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
# The buckets the conventions advise for each histogram.
_SECONDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
_TOKENS = [4**i for i in range(14)]
Attributes = dict[str, Any]


class _Recorder:
    """The tracer and the three histograms one `instrument` call records to, and whether message
    content is recorded."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, record_content: bool) -> None:
        from opentelemetry import metrics, trace

        tracer_provider = tracer_provider or trace.get_tracer_provider()
        meter_provider = meter_provider or metrics.get_meter_provider()
        self.tracer = tracer_provider.get_tracer("llamafast", __version__)
        meter = meter_provider.get_meter("llamafast", __version__)
        seconds = functools.partial(_histogram, meter, unit="s", buckets=_SECONDS)
        self.duration = seconds(OPERATION_DURATION, "GenAI operation duration.")
        self.first_chunk = seconds(TIME_TO_FIRST_CHUNK, "Time to receive the first chunk.")
        self.tokens = _histogram(
            meter, TOKEN_USAGE, "Number of input and output tokens used.", "{token}", _TOKENS
        )
        self.record_content = record_content
        self.kind = trace.SpanKind.CLIENT
        self.error_status = functools.partial(trace.Status, trace.StatusCode.ERROR)

    def start(self, operation: str, client: Any, model: str | None, extra: Attributes) -> _Watch:
        """A span opened for one request of `client`."""
        target = client._target
        model = model or client._cfg.infer.model
        base = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": model,
            "server.address": target.host,
            "server.port": target.port,
        }
        span = self.tracer.start_span(
            f"{operation} {model}", kind=self.kind, attributes={**base, **extra}
        )
        return _Watch(self, span, base)


def _histogram(meter: Any, name: str, description: str, unit: str, buckets: list[Any]) -> Any:
    try:  # the bucket advice came with opentelemetry-api 1.23
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:
        return meter.create_histogram(name, unit=unit, description=description)


class _Watch:
    """One request's span and clock, ended once (`end`)."""

    __slots__ = ("base", "first", "recorder", "span", "start")

    def __init__(self, recorder: _Recorder, span: Any, base: Attributes) -> None:
        self.recorder = recorder
        self.span = span
        self.base = base  # the metrics' attributes
        self.start = time.monotonic()
        self.first: float | None = None

    def end(self, response: Attributes, usage: tuple[int | None, int | None], error: Any) -> None:
        """Close the span with `response`'s attributes (or `error`'s) and record the metrics:
        `usage` the (input, output) tokens, None where unknown."""
        recorder, span = self.recorder, self.span
        now = time.monotonic()
        metric = dict(self.base)
        if "gen_ai.response.model" in response:
            metric["gen_ai.response.model"] = response["gen_ai.response.model"]
        for key in ("server.address", "server.port"):  # the server that answered
            response[key] = metric[key]
        if error is not None:
            metric["error.type"] = response["error.type"] = type(error).__qualname__
            span.set_status(recorder.error_status(str(error)))
        if self.first is not None:
            response["gen_ai.response.time_to_first_chunk"] = self.first - self.start
            recorder.first_chunk.record(self.first - self.start, metric)
        span.set_attributes(response)
        span.end()
        recorder.duration.record(now - self.start, metric)
        for kind, count in zip(("input", "output"), usage, strict=True):
            if count is not None:
                recorder.tokens.record(count, {**metric, "gen_ai.token.type": kind})


# --- chat: the stream subclass ------------------------------------------------------------------


def _chat_attributes(req: ChatRequest, cfg: Config, limits: Limits | None) -> Attributes:
    """The sampling the chat was sent with: the request's own fields, else the Config's, as the
    body has them (`_body._add_sampling`); a seed and stop sequences when given."""
    infer = cfg.infer
    limits = limits or cfg.limits
    attrs: Attributes = {
        "gen_ai.request.max_tokens": _given(req.max_tokens, limits.max_tokens),
        "gen_ai.request.temperature": _given(req.temperature, infer.temperature),
        "gen_ai.request.top_p": _given(req.top_p, infer.top_p),
        "gen_ai.request.top_k": _given(req.top_k, infer.top_k),
    }
    if req.seed is not None:
        attrs["gen_ai.request.seed"] = req.seed
    if req.stop:
        attrs["gen_ai.request.stop_sequences"] = tuple(req.stop)
    return attrs


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def _completion_attributes(done: Completion) -> tuple[Attributes, tuple[int | None, int | None]]:
    """The span's response attributes and the (input, output) tokens: the server's usage, else
    its timings (prompt_n + cache_n, predicted_n), else unknown."""
    attrs: Attributes = {
        "gen_ai.response.id": done.id,
        "gen_ai.response.finish_reasons": (done.finish_reason.value,),
    }
    if done.model is not None:
        attrs["gen_ai.response.model"] = done.model
    usage, timings = done.usage, done.timings
    tokens: tuple[int | None, int | None] = (None, None)
    if usage is not None:
        tokens = (usage.prompt_tokens, usage.completion_tokens)
        if usage.cached_tokens:
            attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
    elif timings.prompt_n or timings.predicted_n:
        tokens = (timings.prompt_n + timings.cache_n, timings.predicted_n)
        if timings.cache_n:
            attrs["gen_ai.usage.cache_read.input_tokens"] = timings.cache_n
    if tokens[0] is not None:
        attrs["gen_ai.usage.input_tokens"] = tokens[0]
        attrs["gen_ai.usage.output_tokens"] = tokens[1]
    if done.reasoning_tokens:
        attrs["gen_ai.usage.reasoning.output_tokens"] = done.reasoning_tokens
    return attrs, tokens


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An openai-shaped message's content as the conventions' parts."""
    parts: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        parts.append({"type": "reasoning", "content": message["reasoning_content"]})
    content = message.get("content")
    if message.get("role") == "tool":
        return [
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content}
        ]
    if isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for part in content:
            kind = part.get("type")
            text = part.get("text") if kind == "text" else None
            parts.append({"type": "text", "content": text} if kind == "text" else {"type": kind})
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return parts


def _input_messages(body: str) -> str:
    """The request body's messages as gen_ai.input.messages (JSON)."""
    messages = json.loads(body).get("messages", [])
    return json.dumps([{"role": m.get("role"), "parts": _parts(m)} for m in messages])


def _output_messages(done: Completion) -> str:
    """The Completion as gen_ai.output.messages (JSON)."""
    message = {"role": "assistant", "parts": _parts(done.to_message())}
    message["finish_reason"] = done.finish_reason.value
    return json.dumps([message])


class _WatchedChat:
    """The overrides the instrumented stream classes add (see the strategy comment)."""

    _recorder: _Recorder
    _otel: _Watch | None = None

    def __init__(self, client: Any, req: ChatRequest, body: str, limits: Any = None) -> None:
        super().__init__(client, req, body, limits)  # type: ignore[call-arg]
        recorder = self._recorder
        extra = _chat_attributes(req, client._cfg, limits)
        if recorder.record_content:
            extra["gen_ai.input.messages"] = _input_messages(body)
        self._otel = recorder.start("chat", client, req.model, extra)

    def _start_stream(self) -> None:
        watch = self._otel
        if watch is not None and watch.first is None:
            watch.first = time.monotonic()
        super()._start_stream()  # type: ignore[misc]

    def _release(self) -> None:
        super()._release()  # type: ignore[misc]
        watch = self._otel
        if watch is None:
            return
        self._otel = None
        # The server that answered: with several (rule FLEET), known once the chat was routed.
        target = self._core.core.target  # type: ignore[attr-defined]
        watch.base["server.address"], watch.base["server.port"] = target.host, target.port
        done: Completion | None = getattr(self, "_completion", None)
        error = sys.exc_info()[1]  # every failure's _release runs in its except block
        if isinstance(error, StopIteration | StopAsyncIteration):
            error = None
        if done is None or error is not None:
            watch.end({}, (None, None), error)
            return
        attrs, tokens = _completion_attributes(done)
        if watch.recorder.record_content:
            attrs["gen_ai.output.messages"] = _output_messages(done)
        watch.end(attrs, tokens, None)


def _stream_class(base: type, recorder: _Recorder) -> type:
    return type(f"Instrumented{base.__name__}", (_WatchedChat, base), {"_recorder": recorder})


# --- the whole-answer calls ---------------------------------------------------------------------


def _embed_attributes(result: Any) -> tuple[Attributes, tuple[int | None, int | None]]:
    attrs: Attributes = {"gen_ai.embeddings.dimension.count": result.dim}
    if result.model is not None:
        attrs["gen_ai.response.model"] = result.model
    if result.usage is None:
        return attrs, (None, None)
    attrs["gen_ai.usage.input_tokens"] = result.usage.prompt_tokens
    return attrs, (result.usage.prompt_tokens, None)


def _no_attributes(result: Any) -> tuple[Attributes, tuple[int | None, int | None]]:
    return {}, (None, None)


_CALLS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "embed": ("embeddings", _embed_attributes),
    "rerank": ("rerank", _no_attributes),
}


def _wrapped(recorder: _Recorder, name: str, method: Callable[..., Any], is_async: bool) -> Any:
    """`method` (a client's embed or rerank, unbound) in a span."""
    operation, read = _CALLS[name]

    def ended(watch: _Watch, result: Any) -> Any:
        attrs, tokens = read(result)
        watch.end(attrs, tokens, None)
        return result

    if is_async:

        async def call_async(client: Any, *args: Any, **kw: Any) -> Any:
            watch = recorder.start(operation, client, kw.get("model"), {})
            try:
                result = await method(client, *args, **kw)
            except BaseException as err:
                watch.end({}, (None, None), err)
                raise
            return ended(watch, result)

        return functools.update_wrapper(call_async, method)

    def call(client: Any, *args: Any, **kw: Any) -> Any:
        watch = recorder.start(operation, client, kw.get("model"), {})
        try:
            result = method(client, *args, **kw)
        except BaseException as err:
            watch.end({}, (None, None), err)
            raise
        return ended(watch, result)

    return functools.update_wrapper(call, method)


# --- instrument, uninstrument -------------------------------------------------------------------

_CLASSES: tuple[tuple[type, type, bool], ...] = (
    (AsyncClient, AsyncClientStream, True),
    (Client, ClientStream, False),
)
# What instrument() replaces, as the library defines it: put back by uninstrument().
_ORIGINALS: dict[type, dict[str, Any]] = {
    cls: {n: cls.__dict__[n] for n in ("_stream_type", *_CALLS)} for cls, *_ in _CLASSES
}
_lock = threading.Lock()


def _patch(target: Any, cls: type, stream: type, is_async: bool, recorder: _Recorder) -> None:
    target._stream_type = _stream_class(stream, recorder)
    for name in _CALLS:
        method = _wrapped(recorder, name, _ORIGINALS[cls][name], is_async)
        setattr(target, name, method if target is cls else method.__get__(target))


def instrument(
    client: AsyncClient | Client | None = None,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    record_content: bool = False,
) -> None:
    """Record a span and metrics for each chat (`stream`, `complete`), `embed` and `rerank`
    request after OpenTelemetry's generative-AI semantic conventions (docs/client.md, rule
    TELEMETRY): of `client` alone, or with None of every client, those made before and after.

    `tracer_provider`, `meter_provider`: where they go (None: the global ones).
    `record_content`: also record the messages sent and the answer (gen_ai.input.messages,
    gen_ai.output.messages); never by default, they may hold what users would not log."""
    try:
        recorder = _Recorder(tracer_provider, meter_provider, record_content)
    except ImportError as err:
        raise ImportError(
            f"llamafast.otel needs opentelemetry-api ({err}): pip install 'llamafast[otel]'"
        ) from None
    with _lock:
        for cls, stream, is_async in _CLASSES:
            if client is None:
                _patch(cls, cls, stream, is_async, recorder)
            elif isinstance(client, cls):
                _patch(client, cls, stream, is_async, recorder)
                return
    if client is not None:
        raise TypeError(f"instrument() needs a Client or AsyncClient, not {type(client).__name__}")


def uninstrument(client: AsyncClient | Client | None = None) -> None:
    """Stop recording: of `client` alone (what `instrument(client)` did), or with None of every
    client (what `instrument()` did). Idempotent."""
    with _lock:
        for cls, *_ in _CLASSES:
            originals = _ORIGINALS[cls]
            if client is None:
                for name, value in originals.items():
                    setattr(cls, name, value)
            elif isinstance(client, cls):
                for name in originals:
                    vars(client).pop(name, None)
