"""The fixtures every test module shares, each defined once here.

`impl` (in the manner of multidict's tests/conftest.py), `c_impl`, `py_impl`: the twins.
`drive`: the ways of running one chat request (tests/_drivers.py). `server`: the loopback
replay server (tests/_server.py). A module tunes the last two by module constants, read here:
`DRIVES` (the names of the drivers it runs, all three unless said), `SENT` (("whole",
"pieces"): every test taking `server` runs with each answer sent whole and again in pieces of at
most 97 bytes, 2 ms apart, as a remote server or a proxy might), `SERVER` (ReplayServer's
keywords).

`impl` is one twin from `llamafast._engine._twins` (`PURE` or `CYTHON`): its IMPLEMENTATION and
every twinned name (SseDecoder, Events, iter_events, aiter_events, Assembler, ChatStream,
AsyncChatStream, aiter_chat, and the transport's ResponseParser, Receiver, Sink). Every test
that takes it runs against the pure twin and, when it is built, the Cython twin.
`--no-c-extensions` or LLAMAFAST_NO_EXTENSIONS=1 skip the Cython runs; with
LLAMAFAST_REQUIRE_EXTENSIONS=1 a missing Cython twin fails instead of skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from _drivers import DRIVERS, Driver
from _examples import serve_process
from _pki import Pki, make_pki
from _server import ReplayServer
from llamafast._engine import _twins

# CI replays the same examples every run (no flaky red from a new random draw); locally each run
# explores new ones. Select with HYPOTHESIS_PROFILE=ci.
settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NAMES = _twins.PUBLIC


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-c-extensions", action="store_true", help="skip the Cython twin")


def _cython_or_skip(config: pytest.Config) -> _twins.Twin:
    if config.getoption("--no-c-extensions"):
        pytest.skip("--no-c-extensions")
    if os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0"):
        pytest.skip("LLAMAFAST_NO_EXTENSIONS is set: the pure twin only")
    if _twins.CYTHON is None:
        reason = _twins.CYTHON_MISSING or "the Cython twin is missing"
        if os.environ.get("LLAMAFAST_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            pytest.fail(reason)
        pytest.skip(reason)
    return _twins.CYTHON


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A private CA and a certificate it signed for 127.0.0.1 (tests/_pki.py)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a private CA and a certificate")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session", params=["python", "cython"])
def impl(request: pytest.FixtureRequest) -> _twins.Twin:
    if request.param == "python":
        return _twins.PURE
    return _cython_or_skip(request.config)


@pytest.fixture(scope="session")
def c_impl(request: pytest.FixtureRequest) -> _twins.Twin:
    """The Cython twin alone, for differential tests (skipped when it is not built)."""
    return _cython_or_skip(request.config)


@pytest.fixture(scope="session")
def py_impl() -> _twins.Twin:
    return _twins.PURE


# --- a chat request run every way, against the loopback server ---------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`drive` and `server` as each module's constants say (this module's docstring)."""
    module = metafunc.module
    if "drive" in metafunc.fixturenames:
        drives = getattr(module, "DRIVES", list(DRIVERS))
        metafunc.parametrize("drive", drives, indirect=True)
    if "server" in metafunc.fixturenames and hasattr(module, "SENT"):
        metafunc.parametrize("server", module.SENT, indirect=True)


@pytest.fixture
def drive(request: pytest.FixtureRequest) -> Driver:
    """The sync client, the async one iterated, or the async one's `complete`, whose events
    come from the arrival callback."""
    return DRIVERS[request.param]()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ReplayServer]:
    """The loopback replay server, sending each answer whole or in pieces (SENT)."""
    sent = getattr(request, "param", "whole")
    options = getattr(request.module, "SERVER", {})
    with ReplayServer(pieces=97 if sent == "pieces" else None, **options) as srv:
        yield srv


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """`python -m llamafast serve --slots 2` (the README's asyncio example uses slots 0 and 1),
    paced, one per test module that asks: its URL."""
    proc, url = serve_process("--slots", "2")
    try:
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    """A real llama-server with the tiny test model (tests/_llama.py), one per test module; a
    module that needs other options defines its own."""
    from _llama import serve_model

    with serve_model() as url:
        yield url
