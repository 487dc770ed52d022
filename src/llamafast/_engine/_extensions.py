"""The engine's compiled modules, listed once, and the switch that leaves them out.

`setup.py` builds every module of `EXTENSIONS` (it reads this file's literals without importing
the package, which is not built yet), `_twins` imports them all to decide which twin runs, and
the release checks (.ci/check_wheel.py, .ci/sanitize) look for each of them in what was built.
A module of its own that imports nothing, so each reader gets the same list; adding a compiled
module is one line here (and its `.pyx` beside this file).
"""

import os
import sys

EXTENSIONS = ("_sse_c", "_assemble_c", "_chat_c", "_http_c", "_vectors_c")
"""Every compiled module of the Cython twin, by its name in this package."""

OVER_SIMDJSON = ("_assemble_c", "_vectors_c")
"""The ones compiled as C++17 together with simdjson's amalgamated sources."""

HEADERS = {
    "_sse_c": ("_sse_scan.h",),
    "_vectors_c": ("_vectors_parse.hpp", "_vectors_skeleton.hpp"),
}
"""The C and C++ headers beside this file that each module includes (a change rebuilds it)."""

NO_EXTENSIONS = os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)
"""`LLAMAFAST_NO_EXTENSIONS` set (to anything but "" or "0"), or an interpreter that is not
CPython: the pure twin runs and no extension module is imported. Read once, at import."""
