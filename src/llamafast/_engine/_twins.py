"""The one place that decides which twin runs, and the one boundary between the twins: every
name both define, where each lives, and which twin the top level uses (in the manner of
multidict's `_compat.py` and yarl's `_quoting.py`).

The decision, made once, at import: the Cython twin whenever every module of
`_extensions.EXTENSIONS` imports, unless `LLAMAFAST_NO_EXTENSIONS` is set (to anything but ""
or "0") or this is not CPython. An install either has the extensions (a binary wheel, or a
build that compiled them: the build fails rather than leave them out) or is pure by choice (the
py3-none-any wheel), so their absence is silent. Extension files that are present for this
interpreter but do not import mean a broken install, and importing says so once, naming the
error.

`STEMS` maps each twinned name to the stem of the module pair that defines it: the pure twin
is `<stem>_py`, the Cython twin `<stem>_c` (moving a name to another pair is a one-line change
here). `PURE` holds the pure twin of every name, always; `CYTHON` the Cython twin, or None when
it is not built or not wanted (`CYTHON_MISSING` says why); `SELECTED` is the one the top-level
package exports: `CYTHON` whenever the extensions import and were not left out, else `PURE`.
Each has `IMPLEMENTATION` ("python" / "cython") and every name of `STEMS` as an attribute.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ._extensions import EXTENSIONS, NO_EXTENSIONS

if TYPE_CHECKING:
    from . import _assemble_py, _chat_py, _http_py, _sse_py, _vectors_py

__all__ = [
    "CYTHON",
    "CYTHON_MISSING",
    "IMPLEMENTATION",
    "PUBLIC",
    "PURE",
    "SELECTED",
    "STEMS",
    "USE_EXTENSIONS",
    "Twin",
]


def _extensions_import() -> bool:
    """Whether every compiled module imports; a warning, once, when one is installed for this
    interpreter but does not import (a broken install), naming the error."""
    try:
        for name in EXTENSIONS:
            importlib.import_module(f"{__package__}.{name}")
    except ImportError as err:
        here = Path(__file__).parent
        if any(
            (here / f"{name}{suffix}").is_file()
            for name in EXTENSIONS
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
        ):
            warnings.warn(
                f"llamafast: the Cython extensions are installed but do not import ({err}); "
                "the pure-Python implementation runs (reinstall llamafast, or set "
                "LLAMAFAST_NO_EXTENSIONS=1 to choose it silently)",
                RuntimeWarning,
                stacklevel=3,
            )
        return False
    return True


USE_EXTENSIONS: Final = not NO_EXTENSIONS and _extensions_import()
"""Whether the Cython twin's modules are wanted and all import."""

STEMS: Final[dict[str, str]] = {
    "SseDecoder": "_sse",
    "Events": "_sse",
    "iter_events": "_sse",
    "aiter_events": "_sse",
    "Assembler": "_assemble",
    "ChatStream": "_chat",
    "AsyncChatStream": "_chat",
    "aiter_chat": "_chat",
    "ResponseParser": "_http",
    "Receiver": "_http",
    "Sink": "_chat",
    "Vectors": "_vectors",
}
"""Every twinned name, and the stem of the module pair that defines it."""

PUBLIC: Final = (
    "SseDecoder",
    "Events",
    "iter_events",
    "aiter_events",
    "Assembler",
    "ChatStream",
    "AsyncChatStream",
    "aiter_chat",
)
"""The twinned names the package exports (the rest are the clients' transport internals)."""

SUFFIX: Final = {"python": "_py", "cython": "_c"}


class Twin:
    """One implementation: `IMPLEMENTATION` and every name of `STEMS`, read-only."""

    __slots__ = ("IMPLEMENTATION", *STEMS)

    if TYPE_CHECKING:  # both twins offer what the pure one declares (the .pyi stubs say so)
        IMPLEMENTATION: str
        SseDecoder: type[_sse_py.SseDecoder]
        Events: type[_sse_py.Events]
        iter_events = staticmethod(_sse_py.iter_events)
        aiter_events = staticmethod(_sse_py.aiter_events)
        Assembler: type[_assemble_py.Assembler]
        ChatStream: type[_chat_py.ChatStream]
        AsyncChatStream: type[_chat_py.AsyncChatStream]
        aiter_chat = staticmethod(_chat_py.aiter_chat)
        ResponseParser: type[_http_py.ResponseParser]
        Receiver: type[_http_py.Receiver]
        Sink: type[_chat_py.Sink]
        Vectors: type[_vectors_py.Vectors]

    def __init__(self, implementation: str) -> None:
        """The twin `implementation` ("python" or "cython"); ImportError if it does not
        import."""
        suffix = SUFFIX[implementation]
        set_ = object.__setattr__
        set_(self, "IMPLEMENTATION", implementation)
        for name, stem in STEMS.items():
            module = importlib.import_module(f"{__package__}.{stem}{suffix}")
            set_(self, name, getattr(module, name))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Twin is read-only: cannot set {name!r}")

    def __iter__(self) -> Iterator[tuple[str, object]]:
        """(name, object) for every name of `STEMS`."""
        return ((name, getattr(self, name)) for name in STEMS)

    def __repr__(self) -> str:
        return f"<llamafast twin {self.IMPLEMENTATION!r}>"


PURE: Final = Twin("python")

CYTHON: Twin | None = None
CYTHON_MISSING: str | None = None
"""Why `CYTHON` is None (None when it is not)."""
if NO_EXTENSIONS:
    CYTHON_MISSING = "LLAMAFAST_NO_EXTENSIONS is set (or this is not CPython): the pure twin only"
else:
    try:
        CYTHON = Twin("cython")
    except (ImportError, AttributeError) as err:
        CYTHON_MISSING = f"the Cython twin is not built: {err}"

SELECTED: Final[Twin] = CYTHON if USE_EXTENSIONS and CYTHON is not None else PURE
"""The twin under the top-level package's names."""

IMPLEMENTATION: Final = SELECTED.IMPLEMENTATION
"""Which twin the top-level package exports: "cython" or "python"."""
