"""The build backend in _build/: Cython and pysimdjson are asked for exactly when the extensions
are built, pinned exactly, and a pure build is chosen by the switch, the config setting, or an
interpreter that is not CPython. (Skipped where the tests run without the source tree, as in a
wheel's own test run.)"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

BACKEND = Path(__file__).resolve().parent.parent / "_build" / "llamafast_backend.py"
if not BACKEND.is_file():
    pytest.skip("no source tree here (_build/ is not beside tests/)", allow_module_level=True)


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    pytest.importorskip("setuptools", reason="the build backend wraps setuptools")
    monkeypatch.delenv("LLAMAFAST_NO_EXTENSIONS", raising=False)
    spec = importlib.util.spec_from_file_location("llamafast_backend_under_test", BACKEND)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def names(requirements: list[str]) -> list[str]:
    return sorted(r.split("==")[0] for r in requirements)


def test_an_accelerated_build_asks_for_cython_and_pysimdjson_pinned_exactly(
    backend: types.ModuleType,
) -> None:
    wanted = backend.extension_requires(None)
    assert names(wanted) == ["Cython", "pysimdjson"]
    assert all(r.count("==") == 1 and r.split("==")[1][0].isdigit() for r in wanted)
    assert "pysimdjson==7.0.2" in wanted


@pytest.mark.parametrize("value", ["true", "1", "", None, ["yes"]])
def test_the_config_setting_asks_for_a_pure_build(backend: types.ModuleType, value: object) -> None:
    assert backend.is_pure({"pure-python": value})
    assert backend.extension_requires({"pure-python": value}) == []


@pytest.mark.parametrize("value", ["1", "yes"])
def test_the_switch_asks_for_a_pure_build(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LLAMAFAST_NO_EXTENSIONS", value)
    assert backend.is_pure(None)
    assert backend.extension_requires({}) == []


@pytest.mark.parametrize("value", ["0", ""])
def test_the_switch_off_builds_the_extensions(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LLAMAFAST_NO_EXTENSIONS", value)
    assert not backend.is_pure(None)


def test_the_config_setting_wins_over_the_switch(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMAFAST_NO_EXTENSIONS", "1")
    assert not backend.is_pure({"pure-python": "false"})
    monkeypatch.setenv("LLAMAFAST_NO_EXTENSIONS", "0")
    assert backend.is_pure({"pure-python": "true"})


def test_other_interpreters_build_pure_by_default(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "implementation", types.SimpleNamespace(name="pypy"))
    assert backend.is_pure(None)
    assert not backend.is_pure({"pure-python": "false"})


def test_the_dev_extra_pins_what_the_backend_pins(backend: types.ModuleType) -> None:
    # `python setup.py build_ext --inplace` in a dev venv builds with the same versions.
    import tomllib

    pyproject = tomllib.loads((BACKEND.parent.parent / "pyproject.toml").read_text("utf-8"))
    dev = pyproject["project"]["optional-dependencies"]["dev"]
    assert set(backend.extension_requires(None)) <= set(dev)
