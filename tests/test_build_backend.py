"""The build backend in _build/: Cython (within the tested range) is asked for exactly when the
extensions are built, with pip to download simdjson's sources unless the builder names a folder
of them; the pysimdjson sdist is checked by sha256; every missing input fails with the one
message; and a pure build is chosen by the switch, the config setting, or an interpreter that
is not CPython. (Skipped where the tests run without the source tree, as in a wheel's own test
run.)"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
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
    monkeypatch.delenv("LLAMAFAST_SIMDJSON_DIR", raising=False)
    spec = importlib.util.spec_from_file_location("llamafast_backend_under_test", BACKEND)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_accelerated_build_asks_for_cython_in_range_and_pip(backend: types.ModuleType) -> None:
    # pip downloads the pysimdjson sdist; no pysimdjson package is installed for the build.
    assert backend.extension_requires(None) == ["Cython>=3.1.0,<=3.3.1", "pip"]


def test_a_named_simdjson_folder_needs_no_download(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert backend.extension_requires({"simdjson-dir": str(tmp_path)}) == ["Cython>=3.1.0,<=3.3.1"]
    monkeypatch.setenv("LLAMAFAST_SIMDJSON_DIR", str(tmp_path))
    assert backend.extension_requires(None) == ["Cython>=3.1.0,<=3.3.1"]
    # The setting wins over the variable.
    assert backend.named_simdjson_dir({"simdjson-dir": "/x"}) == "/x"


@pytest.mark.parametrize("version", ["3.1.0", "3.2.4", "3.3.1"])
def test_cython_in_the_tested_range_is_accepted(backend: types.ModuleType, version: str) -> None:
    backend.check_cython(version)


# The one message every missing input gives, after the part that names what is missing.
TAIL = (
    ". They need Cython>=3.1.0,<=3.3.1 and simdjson's sources (simdjson.h and simdjson.cpp), "
    "which the build takes from the pysimdjson==7.0.2 sdist (downloaded with pip, checked by "
    "sha256) or from a folder named by `-C simdjson-dir=DIR` or LLAMAFAST_SIMDJSON_DIR=DIR "
    "holding them or that sdist; for the pure-Python build instead, set "
    "LLAMAFAST_NO_EXTENSIONS=1 or pass `-C pure-python=true` to pip"
)
HEAD = "error: llamafast's extensions cannot be built: "


def failure(call: object, *args: object) -> str:
    with pytest.raises(SystemExit) as caught:
        call(*args)  # type: ignore[operator]
    message = str(caught.value.code)
    assert message.startswith(HEAD) and message.endswith(TAIL), message
    return message[len(HEAD) : -len(TAIL)]


@pytest.mark.parametrize(
    ("version", "what"),
    [
        (None, "Cython is not installed"),
        ("3.0.12", "Cython 3.0.12 is installed, outside the tested range"),
        ("3.4.0", "Cython 3.4.0 is installed, outside the tested range"),
        ("3.4.0a1", "Cython 3.4.0a1 is installed, outside the tested range"),
    ],
)
def test_cython_missing_or_out_of_range_is_the_one_message(
    backend: types.ModuleType, version: str | None, what: str
) -> None:
    assert failure(backend.check_cython, version) == what


def test_a_named_folder_with_the_sources_is_used(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("simdjson.h", "simdjson.cpp"):
        (tmp_path / name).write_text("// " + name)
    monkeypatch.setenv("LLAMAFAST_SIMDJSON_DIR", str(tmp_path))
    assert backend.simdjson_sources(tmp_path / "cache") == tmp_path.resolve()


def test_a_named_folder_without_them_is_the_one_message(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "simdjson.h").write_text("// only the header")
    monkeypatch.setenv("LLAMAFAST_SIMDJSON_DIR", str(tmp_path))
    what = failure(backend.simdjson_sources, tmp_path / "cache")
    assert str(tmp_path.resolve()) in what and "LLAMAFAST_SIMDJSON_DIR" in what
    assert "pysimdjson-7.0.2.tar.gz" in what


def fake_sdist(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name in ("simdjson.h", "simdjson.cpp"):
            data = b"// not simdjson"
            info = tarfile.TarInfo(f"pysimdjson-7.0.2/simdjson/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_sdist_with_other_bytes_is_refused(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_sdist(tmp_path / "pysimdjson-7.0.2.tar.gz")
    monkeypatch.setenv("LLAMAFAST_SIMDJSON_DIR", str(tmp_path))
    what = failure(backend.simdjson_sources, tmp_path / "cache")
    assert "not the pinned 44cf276e48912a3b9c7ca362c14da8420a7ac15a9f1a16ec95becff86db3904a" in what
    assert not (tmp_path / "_llamafast_simdjson").exists()


def test_an_sdist_with_the_pinned_hash_gives_its_two_files(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The extraction itself, on a stand-in whose hash is made the pinned one for this test.
    sdist = fake_sdist(tmp_path / "pysimdjson-7.0.2.tar.gz")
    monkeypatch.setattr(backend, "PYSIMDJSON_SHA256", backend._sha256(sdist))
    monkeypatch.setenv("LLAMAFAST_SIMDJSON_DIR", str(tmp_path))
    got = backend.simdjson_sources(tmp_path / "cache")
    assert sorted(p.name for p in got.iterdir()) == ["simdjson.cpp", "simdjson.h"]
    assert (got / "simdjson.h").read_text() == "// not simdjson"


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in for python is a shell script")
def test_a_failed_download_is_the_one_message(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # pip, offline: its last line of error is quoted.
    pip = tmp_path / "python"
    pip.write_text("#!/bin/sh\necho 'ERROR: No matching distribution found' >&2\nexit 1\n")
    pip.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(pip))
    what = failure(backend.simdjson_sources, tmp_path / "cache")
    assert what == (
        "pip could not download the pysimdjson==7.0.2 sdist (ERROR: No matching distribution found)"
    )


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in for python is a shell script")
def test_the_download_does_not_inherit_this_builds_hook_variables(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # pip prepares pysimdjson's metadata through the same hook runner, which reads these
    # variables: inherited, they name this project's backend path, and pip 26 fails the download.
    pip = tmp_path / "python"
    pip.write_text('#!/bin/sh\necho "ERROR: [$_PYPROJECT_HOOKS_BACKEND_PATH_JSON]" >&2\nexit 1\n')
    pip.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(pip))
    monkeypatch.setenv("_PYPROJECT_HOOKS_BACKEND_PATH_JSON", '["/project/_build"]')
    what = failure(backend.simdjson_sources, tmp_path / "cache")
    assert what == "pip could not download the pysimdjson==7.0.2 sdist (ERROR: [])"


def test_sources_extracted_by_an_earlier_build_are_reused(
    backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "simdjson").mkdir()
    for name in ("simdjson.h", "simdjson.cpp"):
        (tmp_path / "simdjson" / name).write_text("// " + name)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")  # no download is tried
    assert backend.simdjson_sources(tmp_path) == tmp_path / "simdjson"


@pytest.mark.skipif(
    importlib.util.find_spec("Cython") is not None, reason="Cython is installed here"
)
@pytest.mark.skipif(
    not (BACKEND.parent.parent / "setup.py").is_file(), reason="no setup.py beside tests/"
)
def test_setup_py_without_cython_is_the_one_message() -> None:
    run = subprocess.run(
        [sys.executable, "setup.py", "--name"],
        cwd=BACKEND.parent.parent,
        capture_output=True,
        text=True,
        env={**os.environ, "LLAMAFAST_NO_EXTENSIONS": "0"},
        check=False,
    )
    assert run.returncode != 0
    assert f"{HEAD}Cython is not installed{TAIL}" in run.stderr


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
    assert f"Cython=={backend.CYTHON_PINNED}" in dev
