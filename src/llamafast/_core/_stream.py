# Strategy: both drivers' streams show the response as every stream of ChatEvents does
# (`StreamView`, written once beside the Sink): from the Sink's assembler once the stream has
# begun, and before that from a stand-in that says nothing has arrived. The thinking cap is the
# chat exchange's own.
"""`StreamState`: what the clients' streams show of the response as it arrives."""

from __future__ import annotations

from typing import Any

from .._engine._stream_state import StreamView
from ._chat import ChatExchange

__all__ = ["BEFORE_FIRST_CHUNK", "StreamState"]


class _BeforeFirstChunk:
    """The assembler's state before the stream has begun: nothing has arrived."""

    __slots__ = ()
    id = None
    reasoning_tokens = 0
    in_reasoning = False
    is_finished = False

    def partial_arguments(self, index: int) -> Any:
        raise IndexError(f"there is no tool call {index} yet: no chunk has arrived")


BEFORE_FIRST_CHUNK = _BeforeFirstChunk()


class StreamState(StreamView):
    """What both clients' streams show of the response: `.completion` once it has ended, and
    the assembler's state as it arrives (`.id`, `.reasoning_tokens`, ...; `_assembler` is
    BEFORE_FIRST_CHUNK until the stream begins)."""

    _core: ChatExchange

    @property
    def thinking_capped(self) -> bool:
        return self._core.capped

    @property
    def server(self) -> str:
        """The URL of the server that answered (or is to), in normal form, no password
        (docs/client.md, rule FLEET)."""
        return str(self._core.core.server)
