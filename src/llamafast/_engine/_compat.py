"""Which twin runs: the Cython one whenever its extensions import, unless
`LLAMAFAST_NO_EXTENSIONS` is set (to anything but "" or "0") or this is not CPython.
Read once, at import, like multidict's `_compat.py`.

An install either has the extensions (a binary wheel, or a build that compiled them: the build
fails rather than leave them out) or is pure by choice (the py3-none-any wheel), so their
absence is silent. Extension files that are present for this interpreter but do not import mean
a broken install, and importing says so once, naming the error.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import warnings
from pathlib import Path

from ._switch import NO_EXTENSIONS as NO_EXTENSIONS

EXTENSIONS = ("_sse_c", "_assemble_c", "_chat_c", "_http_c")

USE_EXTENSIONS = False
if not NO_EXTENSIONS:  # pragma: no branch
    try:
        for _name in EXTENSIONS:
            importlib.import_module(f"{__package__}.{_name}")
    except ImportError as _err:
        _here = Path(__file__).parent
        if any(
            (_here / f"{_name}{suffix}").is_file()
            for _name in EXTENSIONS
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
        ):
            warnings.warn(
                f"llamafast: the Cython extensions are installed but do not import ({_err}); "
                "the pure-Python implementation runs (reinstall llamafast, or set "
                "LLAMAFAST_NO_EXTENSIONS=1 to choose it silently)",
                RuntimeWarning,
                stacklevel=2,
            )
    else:
        USE_EXTENSIONS = True

IMPLEMENTATION = "cython" if USE_EXTENSIONS else "python"
