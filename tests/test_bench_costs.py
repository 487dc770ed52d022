"""The two cost scripts run end to end with a few requests and print a figure for each of their
cells: bench/request/tls_layers.py (plain TCP, asyncio's TLS, a MemoryBIO layer, an SSLSocket
one) and bench/otel_cost.py (llamafast.otel off, with no-op providers, with the SDK). No time or
CPU figure is asserted, only that each cell ran and gave one. Skipped where bench/ is not beside
tests/ (an installed wheel's test run)."""

from __future__ import annotations

import importlib.util
import re
import shutil

import pytest

from _scripts import ROOT, run_script

BENCH = ROOT / "bench"
FIGURE = r"\d+\.\d"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is not installed
        return False


@pytest.mark.skipif(not BENCH.is_dir(), reason="no bench/ beside tests/ (not a source tree)")
@pytest.mark.skipif(shutil.which("openssl") is None, reason="the certificate needs `openssl`")
def test_the_tls_layers_script_measures_each_layer() -> None:
    out = run_script(str(BENCH / "request" / "tls_layers.py"), "--requests", "5", "--rounds", "2")
    for kind in ("plain", "asyncio TLS", "MemoryBIO TLS", "SSLSocket TLS"):
        assert re.search(rf"^  {kind} +min +{FIGURE} +{FIGURE}, {FIGURE}$", out, re.M), out


@pytest.mark.skipif(not BENCH.is_dir(), reason="no bench/ beside tests/ (not a source tree)")
@pytest.mark.skipif(not _has("opentelemetry.sdk"), reason="no opentelemetry-sdk")
def test_the_otel_cost_script_measures_each_mode() -> None:
    out = run_script(str(BENCH / "otel_cost.py"), "--requests", "5", "--rounds", "2")
    for mode in ("off", "noop", "sdk"):
        line = rf"^  {mode} +{FIGURE} +added: +-?{FIGURE}  \(per round: -?{FIGURE}, -?{FIGURE}\)$"
        assert re.search(line, out, re.M), out
