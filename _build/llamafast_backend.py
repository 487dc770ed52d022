"""llamafast's PEP 517 build backend: setuptools, asking for Cython only when the extensions are
built, and finding simdjson's sources for them.

The Cython twin compiles simdjson's amalgamated C++ sources (simdjson.h, simdjson.cpp) into
itself. They come from one of two places, and from nowhere else:
- a folder the builder names, with `-C simdjson-dir=DIR` or `LLAMAFAST_SIMDJSON_DIR=DIR` (offline
  and distribution builds): DIR holds the two files, or the pinned pysimdjson sdist;
- otherwise the pinned pysimdjson sdist, which the build downloads with pip (the builder's own
  index and configuration) and checks by its sha256 before reading the two files from it.
No package is installed for them. Cython is asked for within the range the project builds and
tests with (its lowest and its highest, pinned, version). Whatever is missing fails the build
with one message that names it and says how to provide it.

A pure build (`LLAMAFAST_NO_EXTENSIONS=1`, or `pip install -C pure-python=true`, or any
interpreter that is not CPython) needs none of it, so PyPy, new CPythons and machines without a
compiler can build the `py3-none-any` wheel from the sdist with setuptools alone. Everything else
is setuptools' own backend, unchanged; setup.py reads the choices from the environment this
module sets.

A wheel's extensions are built without debug information (`-g0`, and stripped on Linux);
`LLAMAFAST_DEBUG_BUILD=1` or `-C debug=true` keeps it (a sanitizer build wants it), and an
editable install always keeps it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from setuptools import build_meta as _setuptools

# Cython: the range the extensions are built and tested with, both ends built by .ci/run and the
# release workflow; the highest is the one a normal build gets (and the dev extra pins).
CYTHON_LOWEST = "3.1.0"
CYTHON_PINNED = "3.3.1"
CYTHON = f"Cython>={CYTHON_LOWEST},<={CYTHON_PINNED}"
# simdjson's sources: the pysimdjson sdist of this version, exactly these bytes.
PYSIMDJSON_VERSION = "7.0.2"
PYSIMDJSON = f"pysimdjson=={PYSIMDJSON_VERSION}"
PYSIMDJSON_SDIST = f"pysimdjson-{PYSIMDJSON_VERSION}.tar.gz"
PYSIMDJSON_SHA256 = "44cf276e48912a3b9c7ca362c14da8420a7ac15a9f1a16ec95becff86db3904a"
SIMDJSON_FILES = ("simdjson.h", "simdjson.cpp")  # where the sdist keeps them: simdjson/
SIMDJSON_SETTING = "simdjson-dir"  # pip install -C simdjson-dir=DIR
SIMDJSON_ENV = "LLAMAFAST_SIMDJSON_DIR"

PURE_SETTING = "pure-python"  # pip install -C pure-python=true
PURE_ENV = "LLAMAFAST_NO_EXTENSIONS"
DEBUG_SETTING = "debug"  # -C debug=true keeps the extensions' debug information
DEBUG_ENV = "LLAMAFAST_DEBUG_BUILD"
STRIP_ENV = "_LLAMAFAST_STRIP"  # set here for a release wheel, read by setup.py
PURE_HINT = (
    f"for the pure-Python build instead, set {PURE_ENV}=1 or pass `-C {PURE_SETTING}=true` to pip"
)

ConfigSettings = Mapping[str, "str | list[str] | None"] | None


def _truthy(value: str | list[str] | None) -> bool:
    """A switch is on unless it is empty, "0", "false", "no" or "off" (a bare `-C pure-python`
    arrives as "" or None and means on)."""
    if isinstance(value, list):
        value = value[-1] if value else ""
    if value is None or value == "":
        return True
    return value.strip().lower() not in ("0", "false", "no", "off")


def _env_on(name: str) -> bool:
    # The same reading as the package's own switch at import: set to anything but "" or "0".
    return os.environ.get(name, "") not in ("", "0")


def is_pure(config_settings: ConfigSettings = None) -> bool:
    if config_settings and PURE_SETTING in config_settings:
        return _truthy(config_settings[PURE_SETTING])
    if PURE_ENV in os.environ:
        return _env_on(PURE_ENV)
    # The extensions use CPython's C API directly; elsewhere the pure twin is the only one.
    return sys.implementation.name != "cpython"


def _setting(config_settings: ConfigSettings, name: str) -> str | None:
    value = (config_settings or {}).get(name)
    if isinstance(value, list):
        value = value[-1] if value else None
    return value or None


def named_simdjson_dir(config_settings: ConfigSettings = None) -> str | None:
    """The folder the builder names for simdjson's sources: the config setting, else the
    environment variable; None when neither names one."""
    return _setting(config_settings, SIMDJSON_SETTING) or os.environ.get(SIMDJSON_ENV) or None


# --- the build's inputs: one message for whatever is missing --------------------------------------


def missing_input(what: str) -> SystemExit:
    """The one error for a missing build input: what is missing, and every way to provide it."""
    return SystemExit(
        f"error: llamafast's extensions cannot be built: {what}. They need {CYTHON} and "
        f"simdjson's sources ({' and '.join(SIMDJSON_FILES)}), which the build takes from the "
        f"{PYSIMDJSON} sdist (downloaded with pip, checked by sha256) or from a folder named by "
        f"`-C {SIMDJSON_SETTING}=DIR` or {SIMDJSON_ENV}=DIR holding them or that sdist; "
        f"{PURE_HINT}"
    )


def _version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        out.append(int(digits) if digits else 0)
    return tuple(out)


def check_cython(version: str | None) -> None:
    """Cython (its version; None when it is not importable) within the tested range."""
    if version is None:
        raise missing_input("Cython is not installed")
    lowest, highest = _version_tuple(CYTHON_LOWEST), _version_tuple(CYTHON_PINNED)
    if not lowest <= _version_tuple(version) <= highest:
        raise missing_input(f"Cython {version} is installed, outside the tested range")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract_sdist(sdist: Path, dest: Path) -> Path:
    """simdjson's two files from the pinned pysimdjson sdist, after its sha256 is checked."""
    if (got := _sha256(sdist)) != PYSIMDJSON_SHA256:
        raise missing_input(f"{sdist} has sha256 {got}, not the pinned {PYSIMDJSON_SHA256}")
    dest.mkdir(parents=True, exist_ok=True)
    prefix = f"pysimdjson-{PYSIMDJSON_VERSION}/simdjson/"
    with tarfile.open(sdist, "r:gz") as tar:
        for name in SIMDJSON_FILES:
            try:
                member = tar.extractfile(prefix + name)
            except KeyError:
                member = None
            if member is None:
                raise missing_input(f"{sdist} has no {prefix}{name}")
            (dest / name).write_bytes(member.read())
    return dest


def _sources_in(folder: Path, where: str) -> Path:
    if all((folder / name).is_file() for name in SIMDJSON_FILES):
        return folder
    if (folder / PYSIMDJSON_SDIST).is_file():
        return extract_sdist(folder / PYSIMDJSON_SDIST, folder / "_llamafast_simdjson")
    raise missing_input(
        f"the folder {where} names, {folder}, holds neither {' nor '.join(SIMDJSON_FILES)} "
        f"nor {PYSIMDJSON_SDIST}"
    )


def download_sdist(dest: Path) -> Path:
    """The pinned sdist, fetched by pip from the builder's configured index (not built)."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "pysimdjson"]
    run = subprocess.run(
        [*command, "--disable-pip-version-check", "-q", "-d", str(dest), PYSIMDJSON],
        capture_output=True,
        text=True,
        check=False,
        # Not this build's hook variables: pip prepares pysimdjson's metadata through the same
        # hook runner, which would look for pysimdjson's backend in this project's backend-path.
        env={k: v for k, v in os.environ.items() if not k.startswith("_PYPROJECT_HOOKS_")},
    )
    if run.returncode != 0 or not (dest / PYSIMDJSON_SDIST).is_file():
        lines = [ln for ln in (run.stderr or run.stdout).splitlines() if ln.strip()]
        reason = lines[-1].strip() if lines else f"exit status {run.returncode}"
        raise missing_input(f"pip could not download the {PYSIMDJSON} sdist ({reason[:200]})")
    return dest / PYSIMDJSON_SDIST


def simdjson_sources(cache: Path) -> Path:
    """The folder holding simdjson.h and simdjson.cpp: the one the builder named, else `cache`,
    filled from the downloaded, checked sdist when it is not filled yet."""
    if named := os.environ.get(SIMDJSON_ENV):
        return _sources_in(Path(named).resolve(), f"{SIMDJSON_ENV} (or -C {SIMDJSON_SETTING})")
    sources = cache / "simdjson"
    if all((sources / name).is_file() for name in SIMDJSON_FILES):
        return sources  # extracted, after the hash check, by an earlier build in this tree
    return extract_sdist(download_sdist(cache), sources)


def _keeps_debug_info(config_settings: ConfigSettings) -> bool:
    if config_settings and DEBUG_SETTING in config_settings:
        return _truthy(config_settings[DEBUG_SETTING])
    return _env_on(DEBUG_ENV)


@contextmanager
def _environment(
    pure: bool, strip: bool = False, simdjson_dir: str | None = None
) -> Iterator[None]:
    """Hand the choices to setup.py, which setuptools runs in this same process."""
    saved = {name: os.environ.get(name) for name in (PURE_ENV, STRIP_ENV, SIMDJSON_ENV)}
    os.environ[PURE_ENV] = "1" if pure else "0"
    os.environ[STRIP_ENV] = "1" if strip else "0"
    if simdjson_dir:
        os.environ[SIMDJSON_ENV] = simdjson_dir
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _announce(pure: bool) -> None:
    what = (
        "pure-Python build: no extensions, a py3-none-any wheel"
        if pure
        else "accelerated build: the Cython extensions over simdjson are required "
        f"(set {PURE_ENV}=1 or pass -C {PURE_SETTING}=true for the pure-Python wheel)"
    )
    print(f"llamafast: {what}", file=sys.stderr)


def extension_requires(config_settings: ConfigSettings) -> list[str]:
    """Cython for the extensions, and pip to download simdjson's sources unless a folder of
    them is named; nothing for a pure build."""
    if is_pure(config_settings):
        return []
    return [CYTHON] if named_simdjson_dir(config_settings) else [CYTHON, "pip"]


# setuptools runs setup.py to answer these, before Cython can be installed: it runs
# in pure mode here (and wherever nothing is compiled), and the extensions are only declared by
# the hooks that build them.


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    extra = extension_requires(config_settings)
    with _environment(pure=True):
        return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    extra = extension_requires(config_settings)
    with _environment(pure=True):
        return [*_setuptools.get_requires_for_build_editable(config_settings), *extra]


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    with _environment(pure=True):
        return _setuptools.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: ConfigSettings = None
) -> str:
    # The metadata is the same for both builds; no extension is compiled to write it.
    with _environment(pure=True):
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: ConfigSettings = None
) -> str:
    with _environment(pure=True):
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def _build(
    hook: Callable[..., str],
    wheel_directory: str,
    config_settings: ConfigSettings,
    metadata_directory: str | None,
    strip: bool,
) -> str:
    pure = is_pure(config_settings)
    _announce(pure)
    strip = strip and not _keeps_debug_info(config_settings)
    with _environment(pure, strip, named_simdjson_dir(config_settings)):
        return hook(wheel_directory, config_settings, metadata_directory)


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    # A release wheel carries no debug information (it is most of an unstripped .so's size).
    return _build(
        _setuptools.build_wheel, wheel_directory, config_settings, metadata_directory, strip=True
    )


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    # A development build keeps its debug information.
    return _build(
        _setuptools.build_editable, wheel_directory, config_settings, metadata_directory, False
    )


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    # The sdist holds the .pyx sources, not the compiled ones: nothing to build here.
    with _environment(pure=True):
        return _setuptools.build_sdist(sdist_directory, config_settings)
