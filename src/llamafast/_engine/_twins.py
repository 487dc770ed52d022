"""The one boundary between the twins: every name both define, where each lives, and which twin
the top level uses (in the manner of yarl's `_quoting.py`).

`STEMS` maps each twinned name to the stem of the module pair that defines it: the pure twin
is `<stem>_py`, the Cython twin `<stem>_c` (moving a name to another pair is a one-line change
here). `PURE` holds the pure twin of every name, always; `CYTHON` the Cython twin, or None when
it is not built or not wanted (`CYTHON_MISSING` says why); `SELECTED` is the one the top-level
package exports: `CYTHON` whenever `_compat` found the extensions and was not told to leave them
out (`LLAMAFAST_NO_EXTENSIONS`), else `PURE`. Each has `IMPLEMENTATION` ("python" / "cython") and
every name of `STEMS` as an attribute.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from ._compat import NO_EXTENSIONS, USE_EXTENSIONS

if TYPE_CHECKING:
    from . import _assemble_py, _chat_py, _http_py, _sse_py, _vectors_py

__all__ = ["CYTHON", "CYTHON_MISSING", "PUBLIC", "PURE", "SELECTED", "STEMS", "Twin"]

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
        Sink: type[_http_py.Sink]
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
