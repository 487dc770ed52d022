"""Build the Cython twins; a pure-Python build only when it is asked for.

`LLAMAFAST_NO_EXTENSIONS=1` (or `-C pure-python=true`, read by the build backend in _build/)
builds no extension and makes a py3-none-any wheel. Otherwise the extensions are required: a
compile that fails fails the build, saying how to get the pure one instead. The assembler
compiles simdjson's amalgamated sources into itself: from the folder the builder names, or from
the pinned pysimdjson sdist, downloaded and checked by sha256 (_build/llamafast_backend.py says
how); a missing input (Cython, those sources) fails with the one message that names it.
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

HERE = Path(__file__).parent
ENGINE = HERE / "src" / "llamafast" / "_engine"  # the twins: each .pyx with its .pxd
ENGINE_DIR = "src/llamafast/_engine"  # the same, as the build names it: where the headers are
sys.path.insert(0, str(HERE / "_build"))
from llamafast_backend import (  # noqa: E402
    PURE_ENV,
    PURE_HINT,
    STRIP_ENV,
    check_cython,
    simdjson_sources,
)

NO_EXTENSIONS = os.environ.get(PURE_ENV, "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)
STRIP = os.environ.get(STRIP_ENV, "") == "1"


def cython_version():
    try:
        import Cython
    except ImportError:
        return None
    return Cython.__version__


def extensions():
    check_cython(cython_version())
    # Extracted once per tree (under build/, which the sdist leaves out), after the hash check.
    sj = simdjson_sources(HERE / "build" / "pysimdjson")
    cflags = ["-O3", "-std=c++17"] if os.name != "nt" else ["/O2", "/std:c++17"]
    # One Extension per twin module; the ones whose .pyx is in the tree are built.
    defined = {
        "_sse_c": Extension(
            "llamafast._engine._sse_c",
            ["src/llamafast/_engine/_sse_c.pyx"],
            include_dirs=[ENGINE_DIR],
            depends=[f"{ENGINE_DIR}/_sse_scan.h"],
        ),
        "_assemble_c": Extension(
            "llamafast._engine._assemble_c",
            ["src/llamafast/_engine/_assemble_c.pyx", str(sj / "simdjson.cpp")],
            include_dirs=[str(sj)],
            language="c++",
            extra_compile_args=cflags,
        ),
        "_chat_c": Extension("llamafast._engine._chat_c", ["src/llamafast/_engine/_chat_c.pyx"]),
        "_http_c": Extension("llamafast._engine._http_c", ["src/llamafast/_engine/_http_c.pyx"]),
        "_vectors_c": Extension(
            "llamafast._engine._vectors_c",
            ["src/llamafast/_engine/_vectors_c.pyx", str(sj / "simdjson.cpp")],
            include_dirs=[ENGINE_DIR, str(sj)],
            depends=[f"{ENGINE_DIR}/_vectors_parse.hpp"],
            language="c++",
            extra_compile_args=cflags,
        ),
    }
    present = [ext for name, ext in defined.items() if (ENGINE / f"{name}.pyx").exists()]
    from Cython.Build import cythonize

    return cythonize(present, include_path=[str(ENGINE)], compiler_directives={"language_level": 3})


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
