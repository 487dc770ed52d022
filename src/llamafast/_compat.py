"""Which twin runs: the Cython one whenever its extensions import, unless
`LLAMAFAST_NO_EXTENSIONS` is set (to anything but "" or "0") or this is not CPython.
Read once, at import, like multidict's `_compat.py`. When the install could not compile the
extensions, setup.py left `_build_failed.txt` here, and importing says so once.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from pathlib import Path

NO_EXTENSIONS = os.environ.get("LLAMAFAST_NO_EXTENSIONS", "") not in ("", "0") or (
    sys.implementation.name != "cpython"
)

USE_EXTENSIONS = False
if not NO_EXTENSIONS:  # pragma: no branch
    try:
        for _name in ("_sse_c", "_assemble_c", "_chat_c"):
            importlib.import_module(f"{__package__}.{_name}")
    except ImportError:  # not built: a pure install
        _failed = Path(__file__).with_name("_build_failed.txt")
        if _failed.is_file():
            warnings.warn(
                "llamafast: the Cython extensions could not be built at install time "
                f"({_failed.read_text(encoding='utf-8').strip()}); the pure-Python "
                "implementation runs (set LLAMAFAST_NO_EXTENSIONS=1 to choose it silently)",
                RuntimeWarning,
                stacklevel=2,
            )
    else:
        USE_EXTENSIONS = True

IMPLEMENTATION = "cython" if USE_EXTENSIONS else "python"
