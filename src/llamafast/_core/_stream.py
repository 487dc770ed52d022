# Strategy: both drivers' streams show the response alike; what they show is read from the chat
# exchange (`capped`) and the Sink's assembler, once the stream has begun.
"""`StreamState`: what the clients' streams show of the response as it arrives."""

from __future__ import annotations

from typing import Any

from .._chat_py import _CLOSED, _NOT_ENDED  # ChatStream's words, for the same states
from .._values import Completion
from ._chat import ChatExchange

__all__ = ["StreamState"]


class StreamState:
    """What both clients' streams show of the response: `.completion` once it has ended, and
    the assembler's state as it arrives (`.id`, `.reasoning_tokens`, ...)."""

    _chat: Any
    _completion: Completion | None
    _error: BaseException | None
    _closed: bool
    _core: ChatExchange

    @property
    def completion(self) -> Completion:
        """The Completion once iteration has ended cleanly (as `ChatStream.completion`)."""
        if self._completion is not None:
            return self._completion
        if self._error is not None:
            raise self._error
        raise RuntimeError(_CLOSED if self._closed else _NOT_ENDED)

    @property
    def id(self) -> str | None:
        return None if self._chat is None else self._chat.id

    @property
    def reasoning_tokens(self) -> int:
        return 0 if self._chat is None else self._chat.reasoning_tokens

    @property
    def in_reasoning(self) -> bool:
        return False if self._chat is None else self._chat.in_reasoning

    @property
    def is_finished(self) -> bool:
        return False if self._chat is None else self._chat.is_finished

    @property
    def thinking_capped(self) -> bool:
        return self._core.capped

    def partial_arguments(self, index: int) -> Any:
        """The arguments of tool call `index` parsed as far as they have arrived (see
        `Assembler.partial_arguments`); IndexError before that call has begun."""
        if self._chat is None:
            raise IndexError(f"there is no tool call {index} yet: no chunk has arrived")
        return self._chat.partial_arguments(index)
