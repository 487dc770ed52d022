"""Build the Cython twins; fall back to the pure install when they cannot be built.

`LLAMAFAST_NO_EXTENSIONS=1` at build time skips them. The assembler compiles simdjson's
amalgamated sources, shipped inside the exactly pinned pysimdjson wheel, into itself.
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
PKG = HERE / "src" / "llamafast"
BUILD_FAILED = "_build_failed.txt"  # read by llamafast/_compat.py
NO_EXTENSIONS = os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)


def extensions():
    import simdjson  # a build requirement, pinned exactly in pyproject.toml

    sj = Path(simdjson.__file__).parent
    cflags = ["-O3", "-std=c++17"] if os.name != "nt" else ["/O2", "/std:c++17"]
    defined = {
        "_sse_c": Extension("llamafast._sse_c", ["src/llamafast/_sse_c.pyx"]),
        "_assemble_c": Extension(
            "llamafast._assemble_c",
            ["src/llamafast/_assemble_c.pyx", str(sj / "simdjson.cpp"), str(sj / "util.cpp")],
            include_dirs=[str(sj)],
            language="c++",
            extra_compile_args=cflags,
        ),
        "_chat_c": Extension("llamafast._chat_c", ["src/llamafast/_chat_c.pyx"]),
        "_http_c": Extension("llamafast._http_c", ["src/llamafast/_http_c.pyx"]),
    }
    present = [ext for name, ext in defined.items() if (PKG / f"{name}.pyx").exists()]
    from Cython.Build import cythonize

    return cythonize(
        present,
        include_path=[str(PKG), str(sj)],
        compiler_directives={"language_level": 3},
    )


class OptionalBuildExt(build_ext):
    """A failed compile leaves a working pure install, with one line saying so."""

    def run(self):
        out = PKG if self.inplace else Path(self.build_lib) / "llamafast"
        (out / BUILD_FAILED).unlink(missing_ok=True)  # a stale one from an earlier build
        try:
            super().run()
        except Exception as err:  # no compiler, no Python headers, ...
            self._warn(err)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as err:
            self._warn(err)

    def _warn(self, err):
        print(
            f"WARNING: llamafast's Cython extensions could not be built ({err}); "
            "the pure-Python implementation will be used.",
            file=sys.stderr,
        )
        # pip hides a successful build's output, so the package says it again at import.
        out = PKG if self.inplace else Path(self.build_lib) / "llamafast"
        out.mkdir(parents=True, exist_ok=True)
        reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        if len(reason) > 100:  # a compiler's whole command line helps nobody here
            reason = reason[:100] + "... (pip install -v shows all)"
        (out / BUILD_FAILED).write_text(reason + "\n", encoding="utf-8")


setup(
    ext_modules=[] if NO_EXTENSIONS else extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
)
