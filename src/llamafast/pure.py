"""The pure-Python implementation under the same names as the top-level package.

Always importable (it needs only the standard library); the top-level package uses it when the
Cython extensions are not built or `LLAMAFAST_NO_EXTENSIONS=1` is set.
"""

from ._assemble_py import Assembler
from ._chat_py import AsyncChatStream, ChatStream, aiter_chat
from ._sse_py import Events, SseDecoder, aiter_events, iter_events

IMPLEMENTATION = "python"

__all__ = [
    "IMPLEMENTATION",
    "Assembler",
    "AsyncChatStream",
    "ChatStream",
    "Events",
    "SseDecoder",
    "aiter_chat",
    "aiter_events",
    "iter_events",
]
