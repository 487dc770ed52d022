"""The pure-Python implementation under every public name of the top-level package.

`import llamafast.pure as llamafast` is a drop-in: the values, errors, `Config`, `build_body`
and the clients are the very objects the top-level package exports (one definition each), and
the twins (`SseDecoder`, `Events`, `Assembler`, `ChatStream`, ...) are always the pure ones. It
needs only the standard library. Its `Client` and `AsyncClient` are the top level's run on the
pure twins only (the response parser, the arrival path and the Sink).
"""

from typing import TYPE_CHECKING

# This module itself: `llamafast.pure.pure`, as the top level has `llamafast.pure`.
from . import pure
from ._body import build_body
from ._client import _async, _sync
from ._client._transport import PURE as _PURE
from ._config import Config, InferConfig, Limits
from ._core._fleet import ServerState
from ._engine import _twins
from ._engine._embeddings import Embeddings
from ._errors import (
    BusyError,
    CancelledReadError,
    ConnectError,
    ContextOverflowError,
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
from ._messages import ChatFields
from ._values import (
    DONE,
    Assistant,
    Audio,
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Completion,
    Content,
    Done,
    FinishReason,
    Image,
    ModelInfo,
    Part,
    Progress,
    Queued,
    Ranked,
    Reasoning,
    Retrying,
    ServerProps,
    SseItem,
    System,
    Text,
    ThinkingCapped,
    Timings,
    TokenLogprob,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolSchema,
    Usage,
    User,
    Waiting,
)

# The twins: the pure one of every public twinned name, as `_twins` lists them (a type checker
# reads the same objects from their modules).
if TYPE_CHECKING:
    from ._engine._assemble_py import Assembler
    from ._engine._chat_py import AsyncChatStream, ChatStream, aiter_chat
    from ._engine._sse_py import Events, SseDecoder, aiter_events, iter_events
else:
    globals().update((name, getattr(_twins.PURE, name)) for name in _twins.PUBLIC)


class Client(_sync.Client):
    __doc__ = _sync.Client.__doc__
    _engine = _PURE


class AsyncClient(_async.AsyncClient):
    __doc__ = _async.AsyncClient.__doc__
    _engine = _PURE


ClientStream = _sync.ClientStream
AsyncClientStream = _async.AsyncClientStream

IMPLEMENTATION = _twins.PURE.IMPLEMENTATION
"""Which twins these names are: "python" here; "cython" or "python" in `llamafast`."""

__all__ = [
    "DONE",
    "IMPLEMENTATION",
    "Assembler",
    "Assistant",
    "AsyncChatStream",
    "AsyncClient",
    "AsyncClientStream",
    "Audio",
    "BusyError",
    "CancelledReadError",
    "ChatEvent",
    "ChatFields",
    "ChatMessage",
    "ChatRequest",
    "ChatStream",
    "Client",
    "ClientStream",
    "Completion",
    "Config",
    "ConnectError",
    "Content",
    "ContextOverflowError",
    "Done",
    "Embeddings",
    "Events",
    "FinishReason",
    "HttpError",
    "Image",
    "InferConfig",
    "InferError",
    "Limits",
    "LineTooLongError",
    "LlamafastError",
    "LoadTimeoutError",
    "ModelInfo",
    "NotUtf8Error",
    "Part",
    "Progress",
    "ProtocolError",
    "Queued",
    "Ranked",
    "Reasoning",
    "Retrying",
    "ServerProps",
    "ServerState",
    "SseDecoder",
    "SseError",
    "SseIoError",
    "SseItem",
    "SseTimeoutError",
    "StalledError",
    "StreamClosedEarlyError",
    "System",
    "Text",
    "ThinkingCapped",
    "ThinkingOverrunError",
    "Timings",
    "TokenLogprob",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolSchema",
    "TruncatedError",
    "Usage",
    "User",
    "WaitTimeoutError",
    "Waiting",
    "aiter_chat",
    "aiter_events",
    "build_body",
    "iter_events",
    "pure",
]
