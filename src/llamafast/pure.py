"""The pure-Python implementation under every public name of the top-level package.

`import llamafast.pure as llamafast` is a drop-in: the values, errors, `Config`, `build_body`
and the clients are the very objects the top-level package exports (one definition each), and
the twins (`SseDecoder`, `Events`, `Assembler`, `ChatStream`, ...) are always the pure ones. It
needs only the standard library. The clients are shared, so they read with the twin the top
level selected (`llamafast.IMPLEMENTATION`).
"""

# This module itself: `llamafast.pure.pure`, as the top level has `llamafast.pure`.
from . import pure
from ._aclient import AsyncClient, AsyncClientStream
from ._assemble_py import Assembler
from ._body import build_body
from ._chat_py import AsyncChatStream, ChatStream, aiter_chat
from ._chat_py import Sink as Sink  # the engine under the streams: not public (not in __all__)
from ._client import Client, ClientStream
from ._config import Config, InferConfig, Limits
from ._errors import (
    BusyError,
    ConnectError,
    HttpError,
    InferError,
    LineTooLongError,
    LlamafastError,
    LoadTimeoutError,
    NotUtf8Error,
    ProtocolError,
    SseError,
    SseIoError,
    SseTimeoutError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    TruncatedError,
    WaitTimeoutError,
)
from ._sse_py import Events, SseDecoder, aiter_events, iter_events
from ._values import (
    DONE,
    Assistant,
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Completion,
    Content,
    Done,
    FinishReason,
    Progress,
    Queued,
    Reasoning,
    Retrying,
    SseItem,
    System,
    ThinkingCapped,
    Timings,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolSchema,
    User,
    Waiting,
)

IMPLEMENTATION = "python"
"""Which twins these names are: "python" here; "cython" or "python" in `llamafast`."""

__all__ = [
    "DONE",
    "IMPLEMENTATION",
    "Assembler",
    "Assistant",
    "AsyncChatStream",
    "AsyncClient",
    "AsyncClientStream",
    "BusyError",
    "ChatEvent",
    "ChatMessage",
    "ChatRequest",
    "ChatStream",
    "Client",
    "ClientStream",
    "Completion",
    "Config",
    "ConnectError",
    "Content",
    "Done",
    "Events",
    "FinishReason",
    "HttpError",
    "InferConfig",
    "InferError",
    "Limits",
    "LineTooLongError",
    "LlamafastError",
    "LoadTimeoutError",
    "NotUtf8Error",
    "Progress",
    "ProtocolError",
    "Queued",
    "Reasoning",
    "Retrying",
    "SseDecoder",
    "SseError",
    "SseIoError",
    "SseItem",
    "SseTimeoutError",
    "StalledError",
    "StreamClosedEarlyError",
    "System",
    "ThinkingCapped",
    "ThinkingOverrunError",
    "Timings",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolSchema",
    "TruncatedError",
    "User",
    "WaitTimeoutError",
    "Waiting",
    "aiter_chat",
    "aiter_events",
    "build_body",
    "iter_events",
    "pure",
]
