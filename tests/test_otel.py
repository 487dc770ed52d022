# llamafast.otel against the loopback servers, read back through the OpenTelemetry SDK's in-memory
# span exporter and metric reader: each request kind gives one span after the generative-AI
# semantic conventions and its metrics; content only when asked; an uninstrumented client never
# asks for a tracer. Every chat case runs on each driver (sync, async, complete) of both packages
# (`llamafast` and `llamafast.pure`, the two twins).
"""llamafast.otel: spans and metrics of chat, embeddings and rerank (docs/client.md, TELEMETRY)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _drivers import DRIVERS, Driver, cfg, req
from _embed import EmbedServer, embed_handler
from _server import ReplayServer, Reply
from llamafast import (
    ChatRequest,
    Config,
    ContextOverflowError,
    HttpError,
    InferConfig,
    System,
    User,
)

# The SDK is a test dependency (pyproject's `test` extra); skip only where it truly is absent.
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from llamafast import otel  # noqa: E402

MODULES = {"llamafast": llamafast, "pure": llamafast.pure}


class Telemetry:
    """A tracer provider and a meter provider whose spans and points stay in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = sdk_trace.TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def providers(self) -> dict[str, Any]:
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        """The data points of metric `name`."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    """Every client instrumented (llamafast.otel.instrument()) for the test, then not."""
    t = Telemetry()
    otel.instrument(**t.providers())
    try:
        yield t
    finally:
        otel.uninstrument()


@pytest.fixture(params=list(MODULES))
def twin_drive(request: pytest.FixtureRequest, drive: Driver) -> Driver:
    """The `drive` driver on `llamafast` and on `llamafast.pure`."""
    module: ModuleType = MODULES[request.param]
    return type(drive)(module)


def one_span(t: Telemetry) -> Any:
    spans = t.spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_a_chat_gives_one_span_after_the_conventions(
    telemetry: Telemetry, twin_drive: Driver, server: ReplayServer
) -> None:
    server.script = [Reply("usage_chunk")]
    request = ChatRequest(0, [User("hi")], max_tokens=5, temperature=0.5, model="tiny")
    config = cfg(server)
    done = twin_drive.run(config, request).ok()
    span = one_span(telemetry)
    assert span.name == "chat tiny"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    host, port = server.url.split("//")[1].split(":")
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "llama.cpp",
        "gen_ai.request.model": "tiny",
        "gen_ai.request.max_tokens": 5,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.top_p": config.infer.top_p,  # as sent: the Config's
        "gen_ai.request.top_k": config.infer.top_k,
        "server.address": host,
        "server.port": int(port.rstrip("/")),
        "gen_ai.response.id": done.id,
        "gen_ai.response.model": "tiny.gguf",
        "gen_ai.response.finish_reasons": ("length",),
        "gen_ai.usage.input_tokens": 59,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 39,
        "gen_ai.response.time_to_first_chunk": span.attributes[
            "gen_ai.response.time_to_first_chunk"
        ],
    }
    assert 0 < span.attributes["gen_ai.response.time_to_first_chunk"] < 60


def test_the_request_attributes_are_what_was_sent(
    telemetry: Telemetry, twin_drive: Driver, server: ReplayServer
) -> None:
    # A field the request leaves out is sent as the Config has it: the span says so.
    server.script = [Reply("usage_chunk")]
    infer = llamafast.InferConfig(url=server.url, temperature=0.25, top_p=0.5, top_k=7)
    config = llamafast.Config(infer, cfg(server, max_tokens=11).limits)
    twin_drive.run(config, ChatRequest(0, [User("hi")], seed=3, stop=["x"])).ok()
    attrs = one_span(telemetry).attributes
    sent = server.chats[0].body
    assert sent["max_tokens"] == attrs["gen_ai.request.max_tokens"] == 11
    assert sent["temperature"] == attrs["gen_ai.request.temperature"] == 0.25
    assert sent["top_p"] == attrs["gen_ai.request.top_p"] == 0.5
    assert sent["top_k"] == attrs["gen_ai.request.top_k"] == 7
    assert sent["seed"] == attrs["gen_ai.request.seed"] == 3
    assert tuple(sent["stop"]) == attrs["gen_ai.request.stop_sequences"] == ("x",)


def test_the_span_names_the_server_that_answered(
    telemetry: Telemetry, twin_drive: Driver, server: ReplayServer
) -> None:
    # Several servers (rule FLEET): the first refuses, the chat goes to the second, and the
    # span and the metrics name the second.
    from _llama import free_port

    server.script = [Reply("usage_chunk")]
    urls = (f"http://127.0.0.1:{free_port()}", server.url)
    twin_drive.run(Config(InferConfig(urls=urls), cfg(server).limits), req(None)).ok()
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    assert one_span(telemetry).attributes["server.port"] == port
    points = telemetry.points("gen_ai.client.operation.duration")
    assert {p.attributes["server.port"] for p in points} == {port}


def test_reasoning_tokens_and_the_server_timings_without_usage(
    telemetry: Telemetry, twin_drive: Driver, server: ReplayServer
) -> None:
    # No usage chunk: the counts come from the server's timings (prompt_n + cache_n, predicted_n).
    server.script = [Reply("reasoning_then_content")]
    done = twin_drive.run(cfg(server), req(thinking=True)).ok()
    attrs = one_span(telemetry).attributes
    assert attrs["gen_ai.request.model"] == "default"
    assert attrs["gen_ai.usage.input_tokens"] == done.timings.prompt_n + done.timings.cache_n
    assert attrs["gen_ai.usage.output_tokens"] == done.timings.predicted_n
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == done.reasoning_tokens == 41
    assert "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs


def test_a_failed_chat_gives_error_type_and_status_error(
    telemetry: Telemetry, twin_drive: Driver, server: ReplayServer
) -> None:
    server.script = [Reply("error_context_exceeded")]
    twin_drive.run(cfg(server), req()).raised(ContextOverflowError)
    span = one_span(telemetry)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "ContextOverflowError"
    assert "gen_ai.response.finish_reasons" not in span.attributes
    (point,) = telemetry.points("gen_ai.client.operation.duration")
    assert point.attributes["error.type"] == "ContextOverflowError"


def test_metrics_of_a_chat(telemetry: Telemetry, twin_drive: Driver, server: ReplayServer) -> None:
    server.script = [Reply("usage_chunk")]
    twin_drive.run(cfg(server), req()).ok()
    (duration,) = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 1 and duration.sum > 0
    assert duration.attributes["gen_ai.operation.name"] == "chat"
    assert duration.attributes["gen_ai.response.model"] == "tiny.gguf"
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in telemetry.points(otel.TOKEN_USAGE)}
    assert tokens == {"input": 59, "output": 5}
    (first,) = telemetry.points("gen_ai.client.operation.time_to_first_chunk")
    assert first.count == 1 and 0 < first.sum <= duration.sum


def test_content_is_recorded_only_when_asked(twin_drive: Driver, server: ReplayServer) -> None:
    t = Telemetry()
    otel.instrument(record_content=True, **t.providers())
    try:
        server.script = [Reply("tool_call")]
        request = ChatRequest(0, [System("be brief"), User("hi")])
        done = twin_drive.run(cfg(server), request).ok()
    finally:
        otel.uninstrument()
    attrs = one_span(t).attributes
    assert json.loads(attrs["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
    ]
    (call,) = done.tool_calls
    assert json.loads(attrs["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": done.content},
                {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
            ],
            "finish_reason": "tool_calls",
        }
    ]


def test_one_client_instrumented_leaves_the_others_alone(server: ReplayServer) -> None:
    t = Telemetry()
    mine = llamafast.Client(cfg(server))
    other = llamafast.pure.Client(cfg(server))
    otel.instrument(mine, **t.providers())
    for client in (mine, other, mine):
        assert DRIVERS["sync"].run_on(client, req()).error is None
    assert [s.name for s in t.spans()] == ["chat default", "chat default"]


def test_not_instrumented_never_asks_for_a_tracer(
    twin_drive: Driver, server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Instrumented, then not: the clients made after uninstrument() (and before) do no
    # telemetry work at all, the provider is never asked for a tracer nor a meter.
    t = Telemetry()
    otel.instrument(**t.providers())
    otel.uninstrument()
    asked: list[str] = []
    monkeypatch.setattr(t.tracer_provider, "get_tracer", lambda *a, **k: asked.append("t"))
    monkeypatch.setattr(t.meter_provider, "get_meter", lambda *a, **k: asked.append("m"))
    assert twin_drive.run(cfg(server), req()).error is None
    assert asked == [] and t.spans() == []
    assert llamafast.AsyncClient(cfg(server))._stream_type is llamafast.AsyncClientStream


EMBED_KINDS = ["sync", "async", "pure-sync", "pure-async"]


def run_call(kind: str, url: str, method: str, *args: Any, **kw: Any) -> Any:
    """`method` of a fresh client of `kind` (test_embed.py's run)."""
    from test_embed import CLIENTS, run

    (param,) = [p for p in CLIENTS if p.id == kind]
    return run(param.values[0], url, method, *args, **kw)


@pytest.mark.parametrize("kind", EMBED_KINDS)
def test_embeddings_give_one_span(telemetry: Telemetry, kind: str) -> None:
    with EmbedServer(embed_handler(dim=6)) as srv:
        e = run_call(kind, srv.url, "embed", ["a", "bb", "ccc"], model="nomic")
    span = one_span(telemetry)
    assert span.name == "embeddings nomic"
    attrs = span.attributes
    assert attrs["gen_ai.operation.name"] == "embeddings"
    assert attrs["gen_ai.request.model"] == "nomic"
    assert attrs["gen_ai.response.model"] == e.model
    assert attrs["gen_ai.usage.input_tokens"] == e.usage.prompt_tokens == 6
    assert attrs["gen_ai.embeddings.dimension.count"] == 6
    (point,) = telemetry.points("gen_ai.client.token.usage")
    assert point.attributes["gen_ai.token.type"] == "input" and point.sum == 6


@pytest.mark.parametrize("kind", EMBED_KINDS)
def test_rerank_gives_one_span_and_errors_theirs(telemetry: Telemetry, kind: str) -> None:
    from test_embed import rerank_answer

    results = [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]
    with EmbedServer(lambda p, b: (200, rerank_answer(results))) as srv:
        run_call(kind, srv.url, "rerank", "q", ["a", "b"])
    with EmbedServer(lambda p, b: (501, b'{"error":{"code":501,"message":"no"}}')) as srv:
        with pytest.raises(HttpError):
            run_call(kind, srv.url, "rerank", "q", ["a"])
    ok, failed = telemetry.spans()
    assert ok.name == "rerank default" and ok.attributes["gen_ai.operation.name"] == "rerank"
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "HttpError"


def test_without_opentelemetry_instrument_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # llamafast and llamafast.otel import without it; instrument() names the extra.
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImportError, match=r"pip install 'llamafast\[otel\]'"):
        otel.instrument()
    assert llamafast.Client._stream_type is llamafast.ClientStream
