"""Which twin runs: the Cython one whenever its extensions import, unless
`LLAMAFAST_NO_EXTENSIONS` is set (to anything but "" or "0") or this is not CPython.
Read once, at import, like multidict's `_compat.py`.
"""

from __future__ import annotations

import os
import sys

NO_EXTENSIONS = os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)

USE_EXTENSIONS = False
if not NO_EXTENSIONS:  # pragma: no branch
    try:
        from . import _assemble_c, _chat_c, _sse_c  # noqa: F401
    except ImportError:  # not built: a pure install
        pass
    else:
        USE_EXTENSIONS = True

IMPLEMENTATION = "cython" if USE_EXTENSIONS else "python"
