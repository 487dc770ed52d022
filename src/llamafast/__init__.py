"""llamafast: read llama.cpp llama-server's streamed chat completions exactly, at C speed.

The three pieces: `Events` / `SseDecoder` (the SSE reader), `build_body` (the request body),
`Assembler` (chunks to events and one `Completion`); `ChatStream` fuses reader and assembler.
"""

from typing import TYPE_CHECKING

from . import pure
from ._aclient import AsyncClient
from ._body import build_body
from ._client import Client
from ._compat import IMPLEMENTATION, USE_EXTENSIONS
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

if TYPE_CHECKING or not USE_EXTENSIONS:
    from ._assemble_py import Assembler
    from ._chat_py import AsyncChatStream, ChatStream, aiter_chat
    from ._sse_py import Events, SseDecoder, aiter_events, iter_events
else:
    from ._assemble_c import Assembler
    from ._chat_c import AsyncChatStream, ChatStream, aiter_chat
    from ._sse_c import Events, SseDecoder, aiter_events, iter_events

__version__ = "0.1.0"

__all__ = [
    "DONE",
    "IMPLEMENTATION",
    "Assembler",
    "Assistant",
    "AsyncChatStream",
    "AsyncClient",
    "BusyError",
    "ChatEvent",
    "ChatMessage",
    "ChatRequest",
    "ChatStream",
    "Client",
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
