"""One fixture over the implementations, in the manner of multidict's tests/conftest.py.

`impl` is a namespace with the twin's SseDecoder, Events, iter_events, aiter_events, Assembler,
ChatStream, AsyncChatStream and aiter_chat. Every test that takes it runs against the pure twin
and, when it is built, the Cython twin. `--no-c-extensions` or LLAMAFAST_NO_EXTENSIONS=1 skip
the Cython runs; with LLAMAFAST_REQUIRE_EXTENSIONS=1 a missing Cython twin fails instead of
skipping.
"""

from __future__ import annotations

import importlib
import os
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import llamafast.pure

# CI replays the same examples every run (no flaky red from a new random draw); locally each run
# explores new ones. Select with HYPOTHESIS_PROFILE=ci.
settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NAMES = (
    "SseDecoder",
    "Events",
    "iter_events",
    "aiter_events",
    "Assembler",
    "ChatStream",
    "AsyncChatStream",
    "aiter_chat",
    "Sink",
)


def _cython_namespace() -> types.SimpleNamespace | str:
    try:
        mods = [
            importlib.import_module(f"llamafast.{m}")
            for m in ("_sse_c", "_assemble_c", "_chat_c", "_http_c")
        ]
    except ImportError as err:
        return f"the Cython twin is not built: {err}"
    ns = types.SimpleNamespace(IMPLEMENTATION="cython")
    for name in NAMES:
        for mod in mods:
            if hasattr(mod, name):
                setattr(ns, name, getattr(mod, name))
                break
    return ns


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-c-extensions", action="store_true", help="skip the Cython twin")


def _python_namespace() -> types.SimpleNamespace:
    ns = types.SimpleNamespace(IMPLEMENTATION="python")
    for name in NAMES:
        setattr(ns, name, getattr(llamafast.pure, name))
    return ns


def _cython_or_skip(config: pytest.Config) -> types.SimpleNamespace:
    if config.getoption("--no-c-extensions"):
        pytest.skip("--no-c-extensions")
    if os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0"):
        pytest.skip("LLAMAFAST_NO_EXTENSIONS is set: the pure twin only")
    found = _cython_namespace()
    if isinstance(found, str):
        if os.environ.get("LLAMAFAST_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            pytest.fail(found)
        pytest.skip(found)
    return found


@pytest.fixture(scope="session", params=["python", "cython"])
def impl(request: pytest.FixtureRequest) -> types.SimpleNamespace:
    if request.param == "python":
        return _python_namespace()
    return _cython_or_skip(request.config)


@pytest.fixture(scope="session")
def c_impl(request: pytest.FixtureRequest) -> types.SimpleNamespace:
    """The Cython twin alone, for differential tests (skipped when it is not built)."""
    return _cython_or_skip(request.config)


@pytest.fixture(scope="session")
def py_impl() -> types.SimpleNamespace:
    return _python_namespace()
