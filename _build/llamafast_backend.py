"""llamafast's PEP 517 build backend: setuptools, asking for Cython and pysimdjson only when the
extensions are built.

The Cython twin compiles simdjson's amalgamated C++ sources into itself, and those sources are
taken from the pysimdjson package at build time. A pure build (`LLAMAFAST_NO_EXTENSIONS=1`, or
`pip install -C pure-python=true`, or any interpreter that is not CPython) needs neither, so
PyPy, new CPythons and machines without a compiler can build the `py3-none-any` wheel from the
sdist with setuptools alone. Everything else is setuptools' own backend, unchanged; setup.py
reads the choice from the environment this module sets.

A wheel's extensions are built without debug information (`-g0`, and stripped on Linux);
`LLAMAFAST_DEBUG_BUILD=1` or `-C debug=true` keeps it (a sanitizer build wants it), and an
editable install always keeps it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from setuptools import build_meta as _setuptools

# The exact versions the extensions are built and tested with. pysimdjson is read for its
# bundled simdjson sources only (setup.py checks they are where this version keeps them).
CYTHON = "Cython==3.3.1"
PYSIMDJSON = "pysimdjson==7.0.2"

PURE_SETTING = "pure-python"  # pip install -C pure-python=true
PURE_ENV = "LLAMAFAST_NO_EXTENSIONS"
DEBUG_SETTING = "debug"  # -C debug=true keeps the extensions' debug information
DEBUG_ENV = "LLAMAFAST_DEBUG_BUILD"
STRIP_ENV = "_LLAMAFAST_STRIP"  # set here for a release wheel, read by setup.py

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


def _keeps_debug_info(config_settings: ConfigSettings) -> bool:
    if config_settings and DEBUG_SETTING in config_settings:
        return _truthy(config_settings[DEBUG_SETTING])
    return _env_on(DEBUG_ENV)


@contextmanager
def _environment(pure: bool, strip: bool = False) -> Iterator[None]:
    """Hand the choice to setup.py, which setuptools runs in this same process."""
    saved = {name: os.environ.get(name) for name in (PURE_ENV, STRIP_ENV)}
    os.environ[PURE_ENV] = "1" if pure else "0"
    os.environ[STRIP_ENV] = "1" if strip else "0"
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
    return [] if is_pure(config_settings) else [CYTHON, PYSIMDJSON]


# setuptools runs setup.py to answer these, before Cython or pysimdjson can be installed: it runs
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
    with _environment(pure, strip=strip and not _keeps_debug_info(config_settings)):
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
