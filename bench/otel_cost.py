# What llamafast.otel costs per request, side by side in one process: `Client.complete` against
# `llamafast serve` (unpaced, on a thread of this process), not instrumented, instrumented with
# OpenTelemetry's no-op providers (llamafast's own part: its hooks and attributes), and with the
# SDK's providers (what a user with the SDK pays: a span through a simple processor to an
# exporter that keeps nothing, the metrics to an in-memory reader). Rounds interleave the three;
# the CPU of the whole process (the server's thread too, the same in each) per request, medians.
"""CPU per request with llamafast.otel off, on with no-op providers, on with the SDK.

    python bench/otel_cost.py [--requests 2000] [--rounds 5]

Needs opentelemetry-sdk (`pip install -e '.[test]'`). The differences are what telemetry adds
to a request of any length; bench/e2e gives a paced request's whole CPU to set them against.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import llamafast
from llamafast import ChatRequest, Config, InferConfig, Limits, User, otel
from llamafast._cli._serve import RecordedServer


def _sdk() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


def _noop() -> tuple[Any, Any]:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    return NoOpTracerProvider(), NoOpMeterProvider()


MODES: dict[str, Callable[[], tuple[Any, Any]] | None] = {"off": None, "noop": _noop, "sdk": _sdk}


def cpu_per_request(url: str, mode: str, requests: int) -> float:
    """µs of process CPU per `complete()` of one client in `mode`."""
    client = llamafast.Client(Config(InferConfig(url=url), Limits(max_tokens=64)))
    providers = MODES[mode]
    if providers is not None:
        tracer_provider, meter_provider = providers()
        otel.instrument(client, tracer_provider=tracer_provider, meter_provider=meter_provider)
    req = ChatRequest(0, [User("What does notes.txt say?")], thinking=False)
    with client:
        for _ in range(100):  # warm up: the connection kept, the slot count learnt
            client.complete(req)
        start = time.process_time()
        for _ in range(requests):
            client.complete(req)
        return (time.process_time() - start) / requests * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests per cell (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    args = ap.parse_args(argv)
    server = RecordedServer("127.0.0.1", 0, 2, pace=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        cells: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                cells[mode].append(cpu_per_request(f"http://{host}:{port}", mode, args.requests))
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    off = cells["off"]
    print(f"{args.requests} requests x {args.rounds} rounds, process CPU µs per request (median)")
    for mode, values in cells.items():
        added = [v - o for v, o in zip(values, off, strict=True)]
        print(
            f"  {mode:5} {statistics.median(values):8.1f}"
            f"   added: {statistics.median(added):6.1f}  (per round: "
            + ", ".join(f"{a:.1f}" for a in added)
            + ")"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
