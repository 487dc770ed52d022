"""Which twin runs: the Cython one whenever its extensions import, unless
`LLAMAFAST_NO_EXTENSIONS` is set (to anything but "" or "0") or this is not CPython.
Read once, at import, like multidict's `_compat.py`.
"""

from __future__ import annotations

import importlib
import os
import sys

NO_EXTENSIONS = os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)

USE_EXTENSIONS = False
if not NO_EXTENSIONS:  # pragma: no branch
    try:
        for _name in ("_sse_c", "_assemble_c", "_chat_c"):
            importlib.import_module(f"{__package__}.{_name}")
    except ImportError:  # not built: a pure install
        pass
    else:
        USE_EXTENSIONS = True

IMPLEMENTATION = "cython" if USE_EXTENSIONS else "python"
