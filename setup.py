"""Build the Cython twins; a pure-Python build only when it is asked for.

`LLAMAFAST_NO_EXTENSIONS=1` (or `-C pure-python=true`, read by the build backend in _build/)
builds no extension and makes a py3-none-any wheel. Otherwise the extensions are required: a
compile that fails fails the build, saying how to get the pure one instead. The assembler
compiles simdjson's amalgamated sources into itself: from the folder the builder names, or from
the pinned pysimdjson sdist, downloaded and checked by sha256 (_build/llamafast_backend.py says
how); a missing input (Cython, those sources) fails with the one message that names it.
"""

import ast
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


def compiled_modules():
    """The literals of src/llamafast/_engine/_extensions.py (the one list of compiled modules),
    read without importing the package, which is not built yet."""
    tree = ast.parse((ENGINE / "_extensions.py").read_text(encoding="utf-8"))
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("EXTENSIONS", "OVER_SIMDJSON", "HEADERS")
    }


def extensions():
    check_cython(cython_version())
    # Extracted once per tree (under build/, which the sdist leaves out), after the hash check.
    sj = simdjson_sources(HERE / "build" / "pysimdjson")
    cflags = ["-O3", "-std=c++17"] if os.name != "nt" else ["/O2", "/std:c++17"]
    # One Extension per compiled module that _extensions.py lists and whose .pyx is in the tree;
    # the ones over simdjson are C++ and compile its amalgamated sources into themselves.
    listed = compiled_modules()
    present = []
    for name in listed["EXTENSIONS"]:
        if not (ENGINE / f"{name}.pyx").exists():
            continue
        cpp = name in listed["OVER_SIMDJSON"]
        present.append(
            Extension(
                f"llamafast._engine.{name}",
                [f"{ENGINE_DIR}/{name}.pyx", *([str(sj / "simdjson.cpp")] if cpp else [])],
                include_dirs=[ENGINE_DIR, *([str(sj)] if cpp else [])],
                depends=[f"{ENGINE_DIR}/{h}" for h in listed["HEADERS"].get(name, ())],
                **({"language": "c++", "extra_compile_args": cflags} if cpp else {}),
            )
        )
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
