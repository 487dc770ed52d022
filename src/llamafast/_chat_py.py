"""Events and Assembler fused: the whole response in one loop, pure twin.

SKELETON: to be written.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterator
from typing import Any

from ._sse_py import MAX_LINE
from ._values import ChatEvent, Completion


class ChatStream:
    def __init__(self, reader: Any, max_line: int = MAX_LINE) -> None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[ChatEvent]:
        raise NotImplementedError

    @property
    def completion(self) -> Completion:
        raise NotImplementedError


class AsyncChatStream:
    def __init__(self, source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> None:
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[ChatEvent]:
        raise NotImplementedError

    @property
    def completion(self) -> Completion:
        raise NotImplementedError


def aiter_chat(source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> AsyncChatStream:
    return AsyncChatStream(source, max_line)
