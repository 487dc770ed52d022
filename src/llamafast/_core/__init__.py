# Strategy: every rule of the two clients, once, with no I/O (h11's manner), in rooms by job. A
# request is a plain generator that yields commands (_commands: Connect, Receive, Release, Close,
# Sleep, WaitTurn, Emit) and is sent their results; the drivers (llamafast._client) only carry them
# out. The bytes that arrive are parsed into the connection (an `Arrival`, _connection) and the
# core reads what came from there: the head, the body, the end, every fault, every deadline. The
# clock is injected, so the rules run in tests against a fake clock.
#
#   _commands    the commands, and `step`, the one step of every loop that carries them out
#   _connection  what the core reads of a connection (`Arrival`, a Protocol)
#   _answers     the readers of whole answers, and the mapping of a stream's faults
#   _lines       the per-slot lines (`Ticket`, `Lines`)
#   _fleet       several servers: the rendezvous choice of one, their counts (`Fleet`)
#   _session     a client's state across requests (`Core`), the paths, a request's bytes
#   _exchange    `Exchange`: the rules of the first byte, a load's wait, reading an answer
#   _resume      `Resumable`: a broken stream resumed, a closed one stopped (rule RESUME)
#   _chat        `ChatExchange`: the chat request, from its slot's line to its stream's end
#   _calls       the whole-answer calls (`ServerCall`, `WholeCall`), embed and rerank bodies
#   _stream      `StreamState`: what the clients' streams show
"""The sans-I/O core of `Client` and `AsyncClient`: the phases of a request and their errors."""

from ._answers import (
    check_slot,
    control_accepted,
    is_loading,
    map_stream_error,
    not_served,
    read_models,
    read_props,
    read_ranked,
    read_slots,
    text_of,
)
from ._calls import EmbedPlan, ServerCall, WholeCall, rerank_body
from ._chat import ChatExchange, server_budget
from ._commands import (
    Close,
    Connect,
    Done,
    Emit,
    Phase,
    Receive,
    Release,
    Sleep,
    WaitTurn,
    step,
)
from ._connection import Arrival, ParsedResponse
from ._exchange import Exchange, backoff_ms, poll_delays
from ._fleet import Fleet, ServerState
from ._lines import Lines, Ticket
from ._resume import STREAM_PATH, Resumable, Resume
from ._session import (
    CHAT_PATH,
    CONTROL_PATH,
    EMBED_PATH,
    MAX_ERROR_BODY,
    MAX_SLOTS_BODY,
    RERANK_PATH,
    Core,
    request_bytes,
)
from ._stream import BEFORE_FIRST_CHUNK, StreamState

__all__ = [
    "BEFORE_FIRST_CHUNK",
    "CHAT_PATH",
    "CONTROL_PATH",
    "EMBED_PATH",
    "MAX_ERROR_BODY",
    "MAX_SLOTS_BODY",
    "RERANK_PATH",
    "STREAM_PATH",
    "Arrival",
    "ChatExchange",
    "Close",
    "Connect",
    "Core",
    "Done",
    "EmbedPlan",
    "Emit",
    "Exchange",
    "Fleet",
    "Lines",
    "ParsedResponse",
    "Phase",
    "Receive",
    "Release",
    "Resumable",
    "Resume",
    "ServerCall",
    "ServerState",
    "Sleep",
    "StreamState",
    "Ticket",
    "WaitTurn",
    "WholeCall",
    "backoff_ms",
    "check_slot",
    "control_accepted",
    "is_loading",
    "map_stream_error",
    "not_served",
    "poll_delays",
    "read_models",
    "read_props",
    "read_ranked",
    "read_slots",
    "request_bytes",
    "rerank_body",
    "server_budget",
    "step",
    "text_of",
]
