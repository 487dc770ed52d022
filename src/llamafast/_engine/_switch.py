"""`LLAMAFAST_NO_EXTENSIONS`: set (to anything but "" or "0"), or on an interpreter that is not
CPython, the pure twin runs and no extension module is imported. Read once, at import.

A module of its own, importing nothing of the package: `_compat` imports the extensions to see
whether they work, and they import `_values`, which must know this before they exist.
"""

import os
import sys

NO_EXTENSIONS = os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)
