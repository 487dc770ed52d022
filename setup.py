"""Build the Cython twins; a pure-Python build only when it is asked for.

`LLAMAFAST_NO_EXTENSIONS=1` (or `-C pure-python=true`, read by the build backend in _build/)
builds no extension and makes a py3-none-any wheel. Otherwise the extensions are required: a
compile that fails fails the build, saying how to get the pure one instead. The assembler
compiles simdjson's amalgamated sources, shipped inside the exactly pinned pysimdjson package
(a build requirement the backend adds only for this build), into itself.
"""

import importlib.metadata
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

HERE = Path(__file__).parent
PKG = HERE / "src" / "llamafast"
sys.path.insert(0, str(HERE / "_build"))
from llamafast_backend import PURE_ENV, PURE_SETTING, PYSIMDJSON, STRIP_ENV  # noqa: E402

NO_EXTENSIONS = os.environ.get(PURE_ENV, "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)
STRIP = os.environ.get(STRIP_ENV, "") == "1"
PURE_HINT = (
    f"for the pure-Python build instead, set {PURE_ENV}=1 or pass `-C {PURE_SETTING}=true` to pip"
)


def simdjson_sources() -> Path:
    """The directory holding simdjson.h and simdjson.cpp, inside the pinned pysimdjson."""
    name, _, version = PYSIMDJSON.partition("==")
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(
            f"error: llamafast's extensions compile simdjson's sources from {PYSIMDJSON}, which "
            f"is not installed (pip installs it for the build; with --no-build-isolation, "
            f"`pip install {PYSIMDJSON}` first); {PURE_HINT}"
        ) from None
    if dist.version != version:
        raise SystemExit(
            f"error: llamafast's extensions are built with simdjson's sources from {PYSIMDJSON}, "
            f"but pysimdjson {dist.version} is installed; {PURE_HINT}"
        )
    where = Path(dist.locate_file("simdjson"))
    missing = [f for f in ("simdjson.h", "simdjson.cpp") if not (where / f).is_file()]
    if missing:
        raise SystemExit(
            f"error: {PYSIMDJSON} is installed but {', '.join(missing)} is not in {where}, "
            f"where llamafast's build expects simdjson's amalgamated sources; {PURE_HINT}"
        )
    return where


def extensions():
    sj = simdjson_sources()
    cflags = ["-O3", "-std=c++17"] if os.name != "nt" else ["/O2", "/std:c++17"]
    # One Extension per twin module; the ones whose .pyx is in the tree are built.
    defined = {
        "_sse_c": Extension("llamafast._sse_c", ["src/llamafast/_sse_c.pyx"]),
        "_assemble_c": Extension(
            "llamafast._assemble_c",
            ["src/llamafast/_assemble_c.pyx", str(sj / "simdjson.cpp")],
            include_dirs=[str(sj)],
            language="c++",
            extra_compile_args=cflags,
        ),
        "_chat_c": Extension("llamafast._chat_c", ["src/llamafast/_chat_c.pyx"]),
        "_http_c": Extension("llamafast._http_c", ["src/llamafast/_http_c.pyx"]),
        "_vectors_c": Extension(
            "llamafast._vectors_c",
            ["src/llamafast/_vectors_c.pyx", str(sj / "simdjson.cpp")],
            include_dirs=[str(sj)],
            language="c++",
            extra_compile_args=cflags,
        ),
    }
    present = [ext for name, ext in defined.items() if (PKG / f"{name}.pyx").exists()]
    from Cython.Build import cythonize

    return cythonize(present, include_path=[str(PKG)], compiler_directives={"language_level": 3})


class BuildExt(build_ext):
    """A failed compile fails the build, with one line saying what to do about it."""

    def build_extensions(self):
        if STRIP and self.compiler.compiler_type == "unix":
            # Release wheels: no debug information (MSVC keeps it in a separate .pdb anyway).
            for ext in self.extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, "-g0"]
                if sys.platform.startswith("linux"):
                    ext.extra_link_args = [*ext.extra_link_args, "-s"]
        super().build_extensions()

    def run(self):
        try:
            super().run()
        except Exception as err:  # no compiler, no Python headers, a compile error, ...
            # The compiler's own output is above; its whole command line would bury the advice.
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            if len(reason) > 120:
                reason = reason[:120] + "..."
            raise CompileError(
                f"llamafast's Cython extensions could not be built ({reason}); they need a "
                f"C++17 compiler and the Python headers; {PURE_HINT}"
            ) from err


setup(
    ext_modules=[] if NO_EXTENSIONS else extensions(),
    cmdclass={"build_ext": BuildExt},
)
