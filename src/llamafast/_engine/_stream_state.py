# Strategy: a stream of ChatEvents shows the same state, by the same words, whoever feeds it: the
# fused streams of both twins (_chat_py, _chat_c) and the clients' streams. It is written once
# here, neither twin's, and read from four fields each stream keeps: `_assembler` (the Sink's,
# or a stand-in before it exists), `_completion`, `_error` (latched) and `_closed`. The Cython
# streams keep those fields in C and mirror `StreamView` with the words of this module. Leaving
# a `with` / `async with` block closes a stream, whichever it is: `ClosesOnExit` and
# `AsyncClosesOnExit` say so once for the pure twin's streams and the clients'.
"""What a stream of ChatEvents shows of its response: `StreamView`, and its words; the `with`
blocks that close it."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

from .._values import Completion

__all__ = [
    "CLOSED",
    "NOT_ENDED",
    "AsyncClosesOnExit",
    "ClosesOnExit",
    "StreamView",
    "not_over",
]

NOT_ENDED = "the stream has not ended yet: iterate it to the end first"
CLOSED = "the stream was closed before it ended"


def not_over(closed: bool) -> RuntimeError:
    """The error of `.completion` on a stream that has not ended cleanly: closed, or not yet
    iterated to its end."""
    return RuntimeError(CLOSED if closed else NOT_ENDED)


class StreamView:
    """The read-only state of a stream: `.completion` once iteration has ended cleanly, and
    the assembler's state as the response arrives (`.id`, `.reasoning_tokens`, ...)."""

    __slots__ = ()
    _assembler: Any
    _completion: Completion | None
    _error: BaseException | None
    _closed: bool

    @property
    def completion(self) -> Completion:
        """The Completion once iteration has ended cleanly.

        docs/assembler.md, rule STREAM-COMPLETION.
        """
        if self._completion is not None:
            return self._completion
        if self._error is not None:
            raise self._error
        raise not_over(self._closed)

    @property
    def id(self) -> str | None:
        return self._assembler.id  # type: ignore[no-any-return]

    @property
    def reasoning_tokens(self) -> int:
        return self._assembler.reasoning_tokens  # type: ignore[no-any-return]

    @property
    def in_reasoning(self) -> bool:
        return self._assembler.in_reasoning  # type: ignore[no-any-return]

    @property
    def is_finished(self) -> bool:
        return self._assembler.is_finished  # type: ignore[no-any-return]

    def partial_arguments(self, index: int) -> Any:
        """The assembler's partial_arguments: tool call `index`'s arguments parsed so far."""
        return self._assembler.partial_arguments(index)


class ClosesOnExit:
    """`with stream:` hands out the stream and closes it on leaving the block, however it is
    left (a stream that must do more on entering says so in its own `__enter__`)."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosesOnExit:
    """The same for `async with stream:`, which awaits `aclose()` on leaving the block."""

    __slots__ = ()

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
